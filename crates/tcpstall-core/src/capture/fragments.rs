//! IPv4 and IPv6 fragments joined back into datagrams, within a fixed bound.
//!
//! Only the first bytes of each datagram's payload are kept (enough for tunnel and TCP
//! headers), with the byte ranges its fragments declare, so a fragment cut by the snap
//! length still counts for its whole length, and a pending datagram costs a few hundred
//! bytes however large it is. (etherparse's `IpDefragBuf` keeps every payload byte, and
//! a cut fragment leaves a hole in it that never fills.) Datagrams that do not complete
//! in time, or that do not fit the bound, are given up and their fragments counted.

use std::collections::VecDeque;
use std::net::IpAddr;

use rustc_hash::FxHashMap;

use crate::segment::{NANOS_PER_SEC, Nanos};

/// Payload bytes kept of each datagram: tunnel headers and inner IP and TCP headers fit.
pub(crate) const HEAD_BYTES: usize = 256;
/// Datagrams being reassembled at once; beyond this the oldest is given up.
const MAX_PENDING: usize = 8192;
/// Fragments of one datagram: a 64 KiB datagram in 1280-byte fragments needs 52.
const MAX_PIECES: usize = 64;
/// The largest datagram payload a fragment may reach (IPv4's 16-bit total length, and
/// IPv6 without jumbograms).
const MAX_DATAGRAM: u32 = 65_535;

/// How long a datagram may take to complete: Linux gives IPv4 30 s
/// (include/net/ip.h `IP_FRAG_TIME`) and IPv6 60 s (include/net/ipv6.h
/// `IPV6_FRAG_TIMEOUT`, RFC 8200 4.5).
fn reassembly_timeout(v6: bool) -> Nanos {
    if v6 {
        60 * NANOS_PER_SEC
    } else {
        30 * NANOS_PER_SEC
    }
}

/// What tells the fragments of one datagram from another's (RFC 791 3.2: source,
/// destination, protocol and identification; RFC 8200 4.5: source, destination and
/// identification), within one overlay network.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct FragmentKey {
    pub source: IpAddr,
    pub destination: IpAddr,
    pub identification: u32,
    pub protocol: u8,
    pub overlay: u32,
}

/// One fragment: where its payload goes, whether more follow, its captured bytes and
/// the length its header declares.
pub(crate) struct Fragment<'a> {
    pub offset: u32,
    pub more: bool,
    pub captured: &'a [u8],
    pub declared: usize,
}

/// A datagram whose fragments have all arrived: its first bytes and whole length.
pub(crate) struct Whole {
    pub head: Vec<u8>,
    pub len: usize,
}

struct Pending {
    started: Nanos,
    /// Declared byte ranges of the fragments so far, in arrival order.
    pieces: Vec<(u32, u32)>,
    /// The datagram's length, once its last fragment has arrived.
    end: Option<u32>,
    head: [u8; HEAD_BYTES],
    /// The first payload bytes captured without a gap (up to [`HEAD_BYTES`]).
    head_captured: [bool; HEAD_BYTES],
    fragments: u64,
}

/// Fragment counts over a capture.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FragmentCounts {
    /// Fragments seen.
    pub fragments: u64,
    /// Fragments that became whole datagrams, and those datagrams.
    pub reassembled_fragments: u64,
    pub datagrams: u64,
}

impl FragmentCounts {
    /// Fragments of datagrams that never completed (lost pieces, overlaps, time-outs).
    pub fn incomplete(&self) -> u64 {
        self.fragments - self.reassembled_fragments
    }
}

/// Datagrams being reassembled.
#[derive(Default)]
pub(crate) struct Fragments {
    pending: FxHashMap<FragmentKey, Pending>,
    /// (start time, key) in order of start, to give up the oldest first.
    started: VecDeque<(Nanos, FragmentKey)>,
    counts: FragmentCounts,
}

/// How a fragment fits the pieces already there (Linux `inet_frag_queue_insert`,
/// net/ipv4/inet_fragment.c: an exact duplicate is dropped, an overlap discards the
/// whole datagram, as RFC 5722 requires for IPv6).
#[derive(PartialEq, Eq)]
enum Fit {
    New,
    Duplicate,
    Overlap,
}

fn fit(pieces: &[(u32, u32)], start: u32, end: u32) -> Fit {
    for &(s, e) in pieces {
        if (s, e) == (start, end) {
            return Fit::Duplicate;
        }
        if start < e && s < end {
            return Fit::Overlap;
        }
    }
    Fit::New
}

impl Fragments {
    /// Adds a fragment arriving at `now`; returns the datagram it completes, if any.
    pub fn add(&mut self, key: FragmentKey, fragment: Fragment<'_>, now: Nanos) -> Option<Whole> {
        self.counts.fragments += 1;
        self.give_up_older_than(now, key.source.is_ipv6());
        let start = fragment.offset;
        let end = start.saturating_add(u32::try_from(fragment.declared).unwrap_or(u32::MAX));
        // RFC 791 3.2 and RFC 8200 4.5: every fragment but the last carries a multiple
        // of 8 bytes; no datagram is longer than its length field allows.
        let well_formed =
            end <= MAX_DATAGRAM && (!fragment.more || fragment.declared.is_multiple_of(8));
        if !self.pending.contains_key(&key) {
            if !well_formed {
                return None;
            }
            if self.pending.len() >= MAX_PENDING {
                self.give_up_oldest();
            }
            // Completed and given-up datagrams leave their entries behind; dropping them
            // now and then keeps the queue within twice the table.
            if self.started.len() >= 2 * MAX_PENDING {
                let pending = &self.pending;
                self.started
                    .retain(|(time, key)| pending.get(key).is_some_and(|p| p.started == *time));
            }
            self.started.push_back((now, key));
            self.pending.insert(
                key,
                Pending {
                    started: now,
                    pieces: Vec::new(),
                    end: None,
                    head: [0; HEAD_BYTES],
                    head_captured: [false; HEAD_BYTES],
                    fragments: 0,
                },
            );
        }
        let pending = self.pending.get_mut(&key)?;
        pending.fragments += 1;
        let fits = match fit(&pending.pieces, start, end) {
            Fit::Duplicate => return None,
            Fit::Overlap => false,
            Fit::New => true,
        };
        let end_agrees = match (pending.end, fragment.more) {
            (Some(known), false) => known == end,
            (Some(known), true) => end <= known,
            (None, false) => pending.pieces.iter().all(|&(_, e)| e <= end),
            (None, true) => true,
        };
        if !(well_formed && fits && end_agrees && pending.pieces.len() < MAX_PIECES) {
            self.give_up(&key);
            return None;
        }
        pending.pieces.push((start, end));
        if !fragment.more {
            pending.end = Some(end);
        }
        for (i, &byte) in fragment.captured.iter().enumerate() {
            let Some(at) = (start as usize)
                .checked_add(i)
                .filter(|&at| at < HEAD_BYTES)
            else {
                break;
            };
            pending.head[at] = byte;
            pending.head_captured[at] = true;
        }
        let whole_len = pending
            .end
            .filter(|&len| covers(&mut pending.pieces, len))?;
        let done = self.pending.remove(&key)?;
        self.counts.reassembled_fragments += done.fragments;
        self.counts.datagrams += 1;
        let captured = done.head_captured.iter().take_while(|&&c| c).count();
        Some(Whole {
            head: done.head[..captured.min(whole_len as usize)].to_vec(),
            len: whole_len as usize,
        })
    }

    /// Counts so far; fragments still pending count as incomplete.
    pub fn counts(&self) -> FragmentCounts {
        self.counts
    }

    fn give_up(&mut self, key: &FragmentKey) {
        // Its fragments stay counted as seen and not reassembled.
        self.pending.remove(key);
    }

    /// Gives up the datagram that started first.
    fn give_up_oldest(&mut self) {
        while let Some((time, key)) = self.started.pop_front() {
            if self.pending.get(&key).is_some_and(|p| p.started == time) {
                self.give_up(&key);
                return;
            }
        }
    }

    /// Gives up the datagrams that started longer ago than the reassembly time-out.
    fn give_up_older_than(&mut self, now: Nanos, v6: bool) {
        let limit = now.saturating_sub(reassembly_timeout(v6));
        // Each turn removes an entry of a finite queue.
        while let Some(&(time, key)) = self.started.front() {
            let live = self.pending.get(&key).is_some_and(|p| p.started == time);
            if live && time >= limit {
                break;
            }
            self.started.pop_front();
            if live {
                self.give_up(&key);
            }
        }
    }
}

/// Whether `pieces` (which do not overlap) cover every byte of `0..len`.
fn covers(pieces: &mut [(u32, u32)], len: u32) -> bool {
    pieces.sort_unstable();
    let mut reached = 0;
    for &(start, end) in pieces.iter() {
        if start > reached {
            return false;
        }
        reached = reached.max(end);
    }
    reached >= len
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn key(id: u32) -> FragmentKey {
        FragmentKey {
            source: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            destination: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            identification: id,
            protocol: 6,
            overlay: 0,
        }
    }

    fn piece(offset: u32, more: bool, captured: &[u8], declared: usize) -> Fragment<'_> {
        Fragment {
            offset,
            more,
            captured,
            declared,
        }
    }

    #[test]
    fn out_of_order_fragments_make_one_datagram_with_its_head() {
        let mut table = Fragments::default();
        let first: Vec<u8> = (0..16).collect();
        assert!(
            table
                .add(key(1), piece(16, false, &[99; 4], 4), 0)
                .is_none()
        );
        let whole = table
            .add(key(1), piece(0, true, &first, 16), 1)
            .expect("whole");
        assert_eq!(whole.len, 20);
        let mut expected = first.clone();
        expected.extend([99; 4]);
        assert_eq!(whole.head, expected);
        let counts = table.counts();
        assert_eq!(
            (counts.fragments, counts.datagrams, counts.incomplete()),
            (2, 1, 0)
        );
    }

    #[test]
    fn a_cut_middle_fragment_counts_for_its_declared_length() {
        let mut table = Fragments::default();
        let header = [1u8; 40];
        assert!(
            table
                .add(key(2), piece(0, true, &header, 1480), 0)
                .is_none()
        );
        // Only 8 of 1480 bytes captured.
        assert!(
            table
                .add(key(2), piece(1480, true, &[2; 8], 1480), 0)
                .is_none()
        );
        let whole = table
            .add(key(2), piece(2960, false, &[], 100), 0)
            .expect("whole");
        assert_eq!(whole.len, 3060);
        assert_eq!(whole.head, header);
    }

    #[test]
    fn duplicates_are_dropped_and_overlaps_discard_the_datagram() {
        let mut table = Fragments::default();
        table.add(key(3), piece(0, true, &[0; 8], 8), 0);
        assert!(table.add(key(3), piece(0, true, &[0; 8], 8), 0).is_none());
        assert!(table.add(key(3), piece(8, false, &[0; 8], 8), 0).is_some());
        table.add(key(4), piece(0, true, &[0; 16], 16), 0);
        table.add(key(4), piece(8, false, &[0; 16], 16), 0);
        assert!(table.add(key(4), piece(16, false, &[0; 8], 8), 0).is_none());
        let counts = table.counts();
        assert_eq!(counts.datagrams, 1);
        assert_eq!(counts.reassembled_fragments, 3);
        assert_eq!(counts.incomplete(), 3);
    }

    #[test]
    fn old_datagrams_time_out_and_the_table_stays_bounded() {
        let mut table = Fragments::default();
        table.add(key(5), piece(0, true, &[0; 8], 8), 0);
        let later = 31 * NANOS_PER_SEC;
        assert!(
            table
                .add(key(5), piece(8, false, &[0; 8], 8), later)
                .is_none()
        );
        for id in 0..(MAX_PENDING as u32 + 100) {
            table.add(key(100 + id), piece(0, true, &[0; 8], 8), later);
        }
        assert!(table.pending.len() <= MAX_PENDING);
        assert!(table.started.len() <= 2 * MAX_PENDING + 1);
        // A misaligned middle fragment, and one beyond 64 KiB, start nothing.
        assert!(
            table
                .add(key(9), piece(0, true, &[0; 7], 7), later)
                .is_none()
        );
        assert!(
            table
                .add(key(9), piece(65_528, false, &[0; 16], 16), later)
                .is_none()
        );
        assert!(!table.pending.contains_key(&key(9)));
    }
}
