//! Connections that stall the same way: to one server port, held by the same side, with
//! the same first fix. When many do, a report leads with that group: one change fixes
//! them all, and connection #1 is only one of them.

use std::collections::HashMap;

use crate::analyze::Analysis;
use crate::diagnosis::{FixKind, Role};
use crate::segment::Nanos;

/// A group is led with when it holds at least this many connections: two or three
/// stalled connections alike are read one by one anyway; the report's table lists ten.
pub const MIN_GROUP: usize = 4;

/// Stalled connections alike: their server port, the side that held the data, the
/// first fix and what they lost.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub server_port: u16,
    pub holder: Role,
    /// The first fix: its kind, the side it changes, and its text.
    pub fix: Option<(FixKind, Role, String)>,
    pub connections: usize,
    pub stalls: usize,
    pub time_lost: Nanos,
    /// The group's most severe connection, by its place in the report (1-based).
    pub first: usize,
}

/// The group of stalled listed connections that lost the most time, when it holds at
/// least [`MIN_GROUP`] connections.
pub fn largest(analysis: &Analysis) -> Option<Group> {
    let mut groups: HashMap<(u16, Role, Option<FixKind>), Group> = HashMap::new();
    for (i, c) in analysis.connections.iter().enumerate() {
        let Some(holder) = c.holder.filter(|_| c.stall_count > 0) else {
            continue;
        };
        let fix = c.fixes().next();
        let key = (c.server.port(), holder, fix.map(|f| f.kind));
        let group = groups.entry(key).or_insert_with(|| Group {
            server_port: c.server.port(),
            holder,
            fix: fix.map(|f| (f.kind, f.role, f.action.to_string())),
            connections: 0,
            stalls: 0,
            time_lost: 0,
            first: i + 1,
        });
        group.connections += 1;
        group.stalls += c.stall_count;
        group.time_lost += c.time_lost;
    }
    groups
        .into_values()
        .filter(|g| g.connections >= MIN_GROUP)
        .max_by_key(|g| (g.time_lost, g.connections, std::cmp::Reverse(g.first)))
}

impl Group {
    /// One sentence: how many connections, which port and holder, what they lost, and
    /// the fix they share.
    pub fn describe(&self, total_lost: Nanos) -> String {
        let share = if total_lost > 0 {
            format!(
                " ({:.0}% of all time lost)",
                100.0 * self.time_lost as f64 / total_lost as f64
            )
        } else {
            String::new()
        };
        let fix = match &self.fix {
            Some((_, role, action)) => {
                format!("; the first fix of each, on the {}: {action}", role.name())
            }
            None => String::new(),
        };
        format!(
            "{} connections to port {} stall the same way, held by the {}: {} stalls, {:.3} s lost{share}{fix}; the worst is #{}",
            self.connections,
            self.server_port,
            self.holder.name(),
            self.stalls,
            crate::segment::secs(self.time_lost),
            self.first
        )
    }
}
