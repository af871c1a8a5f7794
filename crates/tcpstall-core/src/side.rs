//! The two sides of a connection, and what each of them has.

use std::ops::{Index, IndexMut};

use serde::{Serialize, Serializer};

/// One of a connection's two endpoints, in the order the connection lists them
/// (`Connection::endpoints`; in the simulator, the client first). Shown as 0 and 1.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Side {
    #[default]
    First = 0,
    Second = 1,
}

impl Side {
    /// Both sides, the first first.
    pub const BOTH: [Side; 2] = [Side::First, Side::Second];

    /// The side at the other end.
    pub fn other(self) -> Side {
        match self {
            Side::First => Side::Second,
            Side::Second => Side::First,
        }
    }

    /// [`Side::Second`] when `second` holds, else [`Side::First`].
    pub fn second_if(second: bool) -> Side {
        if second { Side::Second } else { Side::First }
    }

    /// 0 for the first side, 1 for the second: its number in output, its index in a pair.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Serialized as its number, 0 or 1.
impl Serialize for Side {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(self.index() as u64)
    }
}

/// One value for each side, indexed by [`Side`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct PerSide<T>(pub [T; 2]);

impl<T> PerSide<T> {
    pub fn new(first: T, second: T) -> PerSide<T> {
        PerSide([first, second])
    }

    /// The value `f` gives for each side.
    pub fn from_fn(mut f: impl FnMut(Side) -> T) -> PerSide<T> {
        PerSide(Side::BOTH.map(&mut f))
    }

    pub fn map<U>(self, mut f: impl FnMut(T) -> U) -> PerSide<U> {
        PerSide(self.0.map(&mut f))
    }

    /// Swaps the two sides' values.
    pub fn swap(&mut self) {
        self.0.swap(0, 1);
    }
}

impl<T> Index<Side> for PerSide<T> {
    type Output = T;
    fn index(&self, side: Side) -> &T {
        &self.0[side.index()]
    }
}

impl<T> IndexMut<Side> for PerSide<T> {
    fn index_mut(&mut self, side: Side) -> &mut T {
        &mut self.0[side.index()]
    }
}

impl<'a, T> IntoIterator for &'a PerSide<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<'a, T> IntoIterator for &'a mut PerSide<T> {
    type Item = &'a mut T;
    type IntoIter = std::slice::IterMut<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_side_has_its_own_value_and_the_other_side() {
        let mut pair = PerSide::new("a", "b");
        assert_eq!(pair[Side::First], "a");
        pair[Side::Second] = "c";
        assert_eq!(pair.0, ["a", "c"]);
        assert_eq!(Side::First.other(), Side::Second);
        assert_eq!(Side::Second.other().other(), Side::Second);
        assert_eq!(Side::second_if(true).index(), 1);
        assert_eq!(PerSide::from_fn(Side::index).0, [0, 1]);
    }
}
