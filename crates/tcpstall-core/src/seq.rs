//! Sequence numbers: 32 bits that wrap, compared by their signed distance, and the one
//! way they are placed in a 64-bit space that does not wrap.

use std::fmt;
use std::ops::{Add, Sub};

/// A TCP sequence or acknowledgement number. Two numbers compare by the signed 32-bit
/// distance between them, so comparisons hold across the wrap while the numbers are
/// within 2^31 of each other (RFC 9293 3.4). TCP timestamps compare the same way (RFC
/// 7323 5.2), so a TSval or TSecr is compared as one too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SeqNumber(pub u32);

/// Where a space's first number is placed in the 64-bit space: numbers up to 2^31
/// before it stay positive.
pub const ORIGIN: u64 = 1 << 32;

impl SeqNumber {
    /// How far after `other` this number is (negative: before it).
    pub fn distance_from(self, other: SeqNumber) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }

    /// This number comes after `other`.
    pub fn is_after(self, other: SeqNumber) -> bool {
        self.distance_from(other) > 0
    }

    /// This number is `other` or comes after it.
    pub fn is_at_or_after(self, other: SeqNumber) -> bool {
        self.distance_from(other) >= 0
    }

    /// This number's position in the 64-bit space in which `base` is at [`ORIGIN`]: of
    /// the positions it could be, the one nearest `near` (a position already placed, such
    /// as the highest so far). Never below 0.
    pub fn unwrap(self, base: SeqNumber, near: u64) -> u64 {
        let relative = SeqNumber(self.0.wrapping_sub(base.0));
        // ORIGIN is a multiple of 2^32: a position's low 32 bits are its number's
        // distance from the base.
        let delta = relative.distance_from(SeqNumber(near as u32));
        near.saturating_add_signed(i64::from(delta))
    }
}

/// The number `n` after this one, wrapping.
impl Add<u32> for SeqNumber {
    type Output = SeqNumber;
    fn add(self, n: u32) -> SeqNumber {
        SeqNumber(self.0.wrapping_add(n))
    }
}

/// The number `n` before this one, wrapping.
impl Sub<u32> for SeqNumber {
    type Output = SeqNumber;
    fn sub(self, n: u32) -> SeqNumber {
        SeqNumber(self.0.wrapping_sub(n))
    }
}

impl fmt::Display for SeqNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<u32> for SeqNumber {
    fn from(n: u32) -> SeqNumber {
        SeqNumber(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_hold_across_the_wrap() {
        let before = SeqNumber(u32::MAX - 10);
        let after = before + 20;
        assert_eq!(after, SeqNumber(9));
        assert!(after.is_after(before));
        assert!(!before.is_after(after));
        assert_eq!(after.distance_from(before), 20);
        assert_eq!(before.distance_from(after), -20);
        assert!(before.is_at_or_after(before));
        assert!(!before.is_after(before));
        assert_eq!(after - 20, before);
    }

    #[test]
    fn unwrap_follows_sequence_numbers_across_the_32_bit_wrap() {
        let base = SeqNumber(0);
        let near = ORIGIN + u64::from(u32::MAX) - 10;
        let after_wrap = SeqNumber(near as u32) + 20;
        assert_eq!(after_wrap.unwrap(base, near), near + 20);
        let before = SeqNumber(near as u32) - 5;
        assert_eq!(before.unwrap(base, near), near - 5);
    }

    #[test]
    fn positions_are_relative_to_the_base() {
        let base = SeqNumber(u32::MAX - 2);
        assert_eq!(base.unwrap(base, ORIGIN), ORIGIN);
        assert_eq!(SeqNumber(5).unwrap(base, ORIGIN), ORIGIN + 8);
        assert_eq!(SeqNumber(5).unwrap(SeqNumber(10), ORIGIN), ORIGIN - 5);
        // Nothing is placed below 0.
        assert_eq!(SeqNumber(5).unwrap(SeqNumber(10), 0), 0);
    }
}
