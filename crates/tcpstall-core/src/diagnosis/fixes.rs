//! The fixes for a stalled direction, ranked, with what each would save: estimated from
//! the stalls, or simulated on the scenario inferred from the capture.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

use super::timer::TimerGuess;
use super::{DirectionDiagnosis, Role};
use crate::detect::Pattern;
use crate::segment::Nanos;

/// Which change a fix makes, so that a simulation of the connection can apply it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FixKind {
    /// Each message written in one call.
    OneWrite,
    /// Two requests in flight (pipelining, double buffering).
    TwoInFlight,
    /// TCP_NODELAY on the holder.
    NoDelay,
    /// One write per block and TCP_NODELAY on the holder.
    OneWriteNoDelay,
    /// A stack with Minshall's Nagle variant on the holder.
    Minshall,
    /// TCP_CORK (TCP_NOPUSH on BSD and macOS) around each message on the holder.
    Cork,
    /// No delayed ACKs on the delayer (TCP_QUICKACK after every read, a route's
    /// quickack, TcpAckFrequency=1).
    AckAtOnce,
    /// More data in flight: no simulated counterpart.
    MoreInFlight,
}

impl FixKind {
    /// A short name for reports that list fixes without their full text (`watch`).
    pub fn name(self) -> &'static str {
        match self {
            FixKind::OneWrite => "one-write",
            FixKind::TwoInFlight => "two-in-flight",
            FixKind::NoDelay => "tcp-nodelay",
            FixKind::OneWriteNoDelay => "one-write-tcp-nodelay",
            FixKind::Minshall => "minshall-nagle",
            FixKind::Cork => "cork",
            FixKind::AckAtOnce => "ack-at-once",
            FixKind::MoreInFlight => "more-in-flight",
        }
    }
}

/// What a simulation of the connection's inferred scenario gives with a fix applied.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prediction {
    /// The connection's duration with the fix: its duration over the simulated speed-up.
    pub time: Nanos,
    /// Transactions per second with the fix over those of the scenario as inferred.
    pub speedup: f64,
    /// Share of the simulated transactions that still stall with the fix.
    pub stalled_share: f64,
}

/// One change that removes the stalls, with what it would save.
#[derive(Clone, Debug, PartialEq)]
pub struct Fix {
    pub role: Role,
    pub endpoint: SocketAddr,
    pub action: FixAction,
    pub note: &'static str,
    pub kind: FixKind,
    /// Time the connection would not have lost: the simulated saving when `predicted`
    /// is set, otherwise an estimate (every stall, or every ACK delay, removed); never
    /// more than the time the connection lost to its stalls.
    pub saves: Nanos,
    /// The simulated outcome, when the connection's scenario was inferred and run.
    pub predicted: Option<Prediction>,
}

/// What a fix asks to change: constant text, or a route to the peer on which the
/// receiver ACKs at once (its text names the peer, and is written only when shown).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FixAction {
    Text(&'static str),
    /// `local`: the peer is an address of the receiver's own host (loopback, or both
    /// ends on one address), reached through the `local` routing table.
    RouteQuickack {
        peer: IpAddr,
        local: bool,
    },
}

impl FixAction {
    /// The route fix for a receiver at `receiver` whose peer is `peer`.
    pub fn route_quickack(peer: IpAddr, receiver: IpAddr) -> FixAction {
        FixAction::RouteQuickack {
            peer,
            local: peer.is_loopback() || peer == receiver,
        }
    }

    /// The shell command that makes the change, for the fixes that are one.
    ///
    /// A peer on another host gets a host route of its own in the main table, through
    /// the gateway and device `ip route get` finds for it (none for a directly connected
    /// peer), with `quickack 1`. A peer on the receiver's own host is reached through
    /// the `local` table, which `ip rule` looks up before `main` (priority 0 against
    /// 32766): a route added to `main` is never used for it, so its own local route is
    /// replaced by the same route with `quickack 1`.
    pub fn command(&self) -> Option<String> {
        match *self {
            FixAction::Text(_) => None,
            FixAction::RouteQuickack {
                peer: IpAddr::V4(peer),
                local: true,
            } => Some(format!(
                "ip route replace $(ip route show table local {peer}) table local quickack 1"
            )),
            // IPv6 replaces a route only of the same metric, and one given as 0 (the
            // kernel's own local routes) is taken as 1024: the route is made again.
            FixAction::RouteQuickack {
                peer: IpAddr::V6(peer),
                local: true,
            } => Some(format!(
                "dev=$(ip -6 route show table local {peer} | grep -o 'dev [^ ]*') && ip -6 route del local {peer} table local && ip -6 route add local {peer} $dev table local quickack 1"
            )),
            FixAction::RouteQuickack { peer, local: false } => Some(format!(
                "ip {family}route add {peer}/{bits} $(ip {family}route get {peer} | sed -En '1s/^[^ ]+ (from [^ ]+ )?((via [^ ]+ )?dev [^ ]+).*/\\2/p') quickack 1",
                family = if peer.is_ipv4() { "" } else { "-6 " },
                bits = if peer.is_ipv4() { 32 } else { 128 },
            )),
        }
    }
}

impl fmt::Display for FixAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FixAction::Text(text) => f.write_str(text),
            FixAction::RouteQuickack { peer, .. } => write!(
                f,
                "route to {peer} with quickack 1: {}",
                self.command().unwrap_or_default()
            ),
        }
    }
}

/// A simulated speed-up made a prediction for the captured connection: its time with
/// the fix (its duration over the speed-up) and the speed-up, saving at most `lost`,
/// the time the connection lost to its stalls (a fix cannot give back more than was
/// lost; when the simulation promised more, the time and speed-up are those of the
/// saving kept). Every place that shows a fix's gain reads it through this.
pub fn predicted_gain(duration: Nanos, speedup: f64, lost: Nanos) -> (Nanos, f64) {
    let duration = duration.max(0);
    let mut speedup = if speedup.is_finite() && speedup > 0.0 {
        speedup
    } else {
        1.0
    };
    let mut time = (duration as f64 / speedup).round() as Nanos;
    let lost = lost.clamp(0, duration);
    if duration - time > lost {
        time = duration - lost;
        speedup = if time > 0 {
            duration as f64 / time as f64
        } else {
            1.0
        };
    }
    (time, speedup)
}

impl Fix {
    /// Whether its simulation showed it saving nothing, or leaving as large a share of
    /// transactions stalled as the scenario without a fix (`stalled_as_given`).
    pub fn simulated_as_no_help(&self, stalled_as_given: f64) -> bool {
        self.predicted
            .is_some_and(|p| self.saves == 0 || p.stalled_share >= stalled_as_given)
    }

    /// Records a simulated outcome: `saves` becomes the simulated saving, at most `lost`
    /// ([`predicted_gain`]).
    pub fn set_prediction(
        &mut self,
        duration: Nanos,
        speedup: f64,
        stalled_share: f64,
        lost: Nanos,
    ) {
        let (time, speedup) = predicted_gain(duration, speedup, lost);
        self.saves = (duration.max(0) - time).max(0);
        self.predicted = Some(Prediction {
            time,
            speedup,
            stalled_share,
        });
    }
}

/// Lists the fixes the simulation showed saving nothing, or leaving the stalls as they
/// were (as large a share of transactions stalled as the scenario without a fix,
/// `stalled_as_given`), after the others, in their order otherwise: the fix offered
/// first is one that helps this connection.
pub fn helpful_first(fixes: &mut [Fix], stalled_as_given: f64) {
    fixes.sort_by_key(|f| f.simulated_as_no_help(stalled_as_given));
}

/// One value of an inferred scenario, and where in the capture it comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct InferredValue {
    /// The scenario key (`client.stack`, `link.rtt_ms`, `workload.request`, ...).
    pub key: String,
    /// Its value, as JSON.
    pub value: serde_json::Value,
    /// Where it comes from.
    pub source: String,
}

/// The scenario a stalled direction points to (inferred by the simulator crate), and
/// how the simulation of it compares with the capture.
#[derive(Clone, Debug, PartialEq)]
pub struct InferredScenario {
    /// The side that held the data in the direction modelled.
    pub holder: Role,
    pub values: Vec<InferredValue>,
    /// The scenario file, to edit and run again with `tcpstall simulate`.
    pub toml: String,
    /// Transactions simulated (at most a bound, whatever the capture holds).
    pub transactions_simulated: u32,
    /// The scenario as inferred: mean time per transaction and share stalled.
    pub simulated_transaction_time: Nanos,
    pub simulated_stalled_share: f64,
    /// The simulation stalled as the capture did; when not, the fixes keep their
    /// estimates.
    pub reproduced: bool,
    /// Every variant run: its name, simulated time per transaction, the speed-up it
    /// predicts for the captured connection (as its fix shows it, [`predicted_gain`])
    /// and share stalled.
    pub variants: Vec<(String, Nanos, f64, f64)>,
}

/// The fixes, best first, as docs/architecture.md ("The fixes, ranked") ranks them:
/// change how the application writes, then keep more than one request in flight, then
/// TCP_NODELAY on the sender, then immediate ACKs on the receiver.
pub(super) fn rank_fixes(d: &DirectionDiagnosis) -> Vec<Fix> {
    let mut fixes = Vec::new();
    let holder_fix = |kind: FixKind, action: &'static str, note: &'static str| {
        Some(Fix {
            role: d.holder,
            endpoint: d.holder_endpoint,
            action: FixAction::Text(action),
            note,
            kind,
            saves: d.time_lost,
            predicted: None,
        })
    };
    let quickack = {
        // Windows' switch serves whichever of its timers the delays fit.
        let windows = d.delayed_ack.as_ref().is_some_and(|p| {
            p.reading.timer.is_windows()
                || p.reading.timer == TimerGuess::Other
                    && !p.reading.could_be.is_empty()
                    && p.reading.could_be.iter().all(|t| t.is_windows())
        });
        let timer = d.delayed_ack.as_ref().map(|p| p.reading.timer);
        let (action, note) = match timer {
            _ if windows => (
                "acknowledge at once: TcpAckFrequency=1 (Windows)",
                "host-wide; more ACK packets",
            ),
            // The stacks whose delayed ACKs wait for a 200 ms tick switch them off for
            // the whole host.
            Some(TimerGuess::PhasedTick200) => (
                "acknowledge at once: tcp_nodelayack=1 (AIX) or net.inet.tcp.delayed_ack=0 (BSD, macOS)",
                "host-wide; more ACK packets",
            ),
            Some(TimerGuess::Linux40) => (
                "set TCP_QUICKACK again after every read",
                "Linux clears it after use; more ACK packets",
            ),
            _ => (
                "turn delayed ACKs off for this socket (TCP_QUICKACK on Linux)",
                "more ACK packets",
            ),
        };
        Some(Fix {
            role: d.delayer,
            endpoint: d.delayer_endpoint,
            action: FixAction::Text(action),
            note,
            kind: FixKind::AckAtOnce,
            // The ACK delays behind the stalls, but never more than the stalls took.
            saves: d.ack_delay_time.min(d.time_lost),
            predicted: None,
        })
    };
    // Linux 3.11+: RTAX_QUICKACK, a per-route metric that keeps the receiver out of
    // delayed-ACK mode for every connection on that route (tcp_in_quickack_mode).
    let route_quickack = matches!(
        d.delayed_ack.as_ref().map(|p| p.reading.timer),
        Some(TimerGuess::Linux40)
    )
    .then(|| Fix {
        role: d.delayer,
        endpoint: d.delayer_endpoint,
        action: FixAction::route_quickack(d.holder_endpoint.ip(), d.delayer_endpoint.ip()),
        note: "root, no code change; every connection to that host ACKs at once; more ACK packets",
        kind: FixKind::AckAtOnce,
        saves: d.ack_delay_time.min(d.time_lost),
        predicted: None,
    });
    // Only the side that sends the requests can keep two in flight: a server answers
    // the requests its client sends, one response each.
    let holder_sends_requests = d.holder == Role::Client;
    if d.nagle_stalls > 0 {
        {
            match d.pattern {
                Some(Pattern::BulkOddTail { .. }) => {
                    if holder_sends_requests {
                        fixes.extend(holder_fix(
                            FixKind::TwoInFlight,
                            "send the next block before waiting for the reply (double buffering)",
                            "keeps data behind the last segment, so the ACK is never waited for",
                        ));
                    }
                    fixes.extend(holder_fix(
                        FixKind::OneWriteNoDelay,
                        "write each block in one call and set TCP_NODELAY",
                        "the sub-MSS tail leaves at once",
                    ));
                    if d.classic_nagle_evidence {
                        fixes.extend(holder_fix(
                        FixKind::Minshall,
                            "use a stack with Minshall's Nagle variant (Linux, macOS 10.5 and later)",
                            "a tail behind full-sized segments is then not held",
                        ));
                    }
                }
                // A server holds a response written in pieces: the fixes are its own
                // writes, never pipelining (see holder_sends_requests).
                _ if !holder_sends_requests => {
                    fixes.extend(holder_fix(
                        FixKind::OneWrite,
                        "write each response in one call (headers and body in one buffer, or writev/sendmsg)",
                        "nothing is left for Nagle to hold",
                    ));
                    // TCP_CORK holds partial segments until uncorked (Linux tcp(7)): the
                    // response leaves as one write would.
                    fixes.extend(holder_fix(
                        FixKind::Cork,
                        "cork each response: TCP_CORK on Linux (TCP_NOPUSH on BSD, macOS) before its first write, off after its last",
                        "its pieces leave together when uncorked; a cork left on flushes only after 200 ms",
                    ));
                    fixes.extend(holder_fix(
                        FixKind::NoDelay,
                        "set TCP_NODELAY",
                        "every small write leaves at once; more small packets; on Linux, try it on the unchanged program first: tcpstall watch --fix nodelay -- PROGRAM",
                    ));
                }
                _ => {
                    fixes.extend(holder_fix(
                        FixKind::OneWrite,
                        "write each request in one call (one buffer, or writev/sendmsg)",
                        "nothing is left for Nagle to hold",
                    ));
                    fixes.extend(holder_fix(
                        FixKind::TwoInFlight,
                        "keep two requests in flight (pipelining, double buffering)",
                        "the next request follows the one waiting for its ACK; with requests still written in pieces some stalls remain",
                    ));
                    fixes.extend(holder_fix(
                        FixKind::NoDelay,
                        "set TCP_NODELAY",
                        "every small write leaves at once; more small packets; on Linux, try it on the unchanged program first: tcpstall watch --fix nodelay -- PROGRAM",
                    ));
                }
            }
            fixes.extend(quickack);
            fixes.extend(route_quickack);
        }
    } else {
        fixes.extend(quickack);
        fixes.extend(route_quickack);
        fixes.extend(holder_fix(
            FixKind::MoreInFlight,
            if holder_sends_requests {
                "keep more data in flight (larger writes, or the next request before the reply)"
            } else {
                "keep more data in flight (larger writes)"
            },
            "ACKs then come for every second segment, with no timer",
        ));
    }
    // Kept until the report: without the room their growth left.
    fixes.shrink_to_fit();
    fixes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::NANOS_PER_MILLI;

    fn route_fix() -> Fix {
        Fix {
            role: Role::Server,
            endpoint: "127.0.0.1:6379".parse().expect("address"),
            action: FixAction::Text("set TCP_QUICKACK again after every read"),
            note: "",
            kind: FixKind::AckAtOnce,
            saves: 0,
            predicted: None,
        }
    }

    fn stalled(holder: Role, pattern: Pattern) -> DirectionDiagnosis {
        let (client, server) = ("10.0.0.1:40000", "10.0.0.2:80");
        let (holder_at, delayer_at) = if holder == Role::Client {
            (client, server)
        } else {
            (server, client)
        };
        DirectionDiagnosis {
            holder,
            holder_endpoint: holder_at.parse().expect("address"),
            delayer: if holder == Role::Client {
                Role::Server
            } else {
                Role::Client
            },
            delayer_endpoint: delayer_at.parse().expect("address"),
            stall_count: 9,
            time_lost: 360 * NANOS_PER_MILLI,
            ack_delay_time: 360 * NANOS_PER_MILLI,
            nagle_stalls: 9,
            delayed_ack: None,
            pattern: Some(pattern),
            classic_nagle_evidence: false,
            fixes: Vec::new(),
        }
    }

    #[test]
    fn only_the_side_that_sends_requests_is_offered_pipelining() {
        let kinds = |d: &DirectionDiagnosis| -> Vec<FixKind> {
            rank_fixes(d).iter().map(|f| f.kind).collect()
        };
        // A server writing headers and body apart: one write per response, TCP_CORK
        // around it, TCP_NODELAY; no pipelining, which only its client could do.
        let server = stalled(Role::Server, Pattern::WriteWriteRead);
        let fixes = rank_fixes(&server);
        assert!(!kinds(&server).contains(&FixKind::TwoInFlight));
        let texts: Vec<String> = fixes.iter().map(|f| f.action.to_string()).collect();
        assert!(
            texts[0].starts_with("write each response in one call"),
            "{texts:?}"
        );
        assert!(texts.iter().any(|t| t.contains("TCP_CORK")), "{texts:?}");
        assert!(texts.iter().any(|t| t == "set TCP_NODELAY"), "{texts:?}");
        assert!(fixes.iter().take(3).all(|f| f.role == Role::Server));
        // A client writing its requests in pieces may keep two in flight.
        let client = stalled(Role::Client, Pattern::WriteWriteRead);
        assert!(kinds(&client).contains(&FixKind::TwoInFlight));
        let bulk = Pattern::BulkOddTail { full_segments: 69 };
        assert!(!kinds(&stalled(Role::Server, bulk)).contains(&FixKind::TwoInFlight));
        assert!(kinds(&stalled(Role::Client, bulk)).contains(&FixKind::TwoInFlight));
    }

    #[test]
    fn a_simulated_saving_is_at_most_the_time_lost() {
        let mut fix = route_fix();
        // The simulation says 157x faster on a 1 s connection that lost 88 ms.
        fix.set_prediction(1_000 * NANOS_PER_MILLI, 157.0, 0.0, 88 * NANOS_PER_MILLI);
        assert_eq!(fix.saves, 88 * NANOS_PER_MILLI);
        let p = fix.predicted.expect("prediction");
        assert_eq!(p.time, 912 * NANOS_PER_MILLI);
        assert!((p.speedup - 1000.0 / 912.0).abs() < 1e-9, "{}", p.speedup);
        // A saving within the time lost is the simulation's own.
        let mut fix = route_fix();
        fix.set_prediction(1_000 * NANOS_PER_MILLI, 2.0, 0.0, 800 * NANOS_PER_MILLI);
        assert_eq!(fix.saves, 500 * NANOS_PER_MILLI);
        assert_eq!(fix.predicted.map(|p| p.speedup), Some(2.0));
    }

    #[test]
    fn a_fix_the_simulation_shows_saving_nothing_or_leaving_the_stalls_comes_last() {
        let second = NANOS_PER_MILLI;
        let mut fixes: Vec<Fix> = (0..4).map(|_| route_fix()).collect();
        // One write saves nothing for a sender its window held; TCP_CORK saves a little
        // but every transaction still stalls; TCP_NODELAY and immediate ACKs help; the
        // last was not simulated.
        for (fix, (speedup, stalled)) in fixes.iter_mut().zip([(1.0, 1.0), (1.02, 1.0), (1.5, 0.0)])
        {
            fix.set_prediction(1_000 * second, speedup, stalled, 400 * second);
        }
        for (i, fix) in fixes.iter_mut().enumerate() {
            fix.note = ["one write", "cork", "nodelay", "acks"][i];
        }
        helpful_first(&mut fixes, 1.0);
        let order: Vec<&str> = fixes.iter().map(|f| f.note).collect();
        assert_eq!(order, ["nodelay", "acks", "one write", "cork"]);
    }

    #[test]
    fn a_peer_on_the_same_host_gets_its_local_route_changed() {
        let ip = |s: &str| -> IpAddr { s.parse().expect("address") };
        let loopback = FixAction::route_quickack(ip("127.0.0.1"), ip("127.0.0.1"));
        assert_eq!(
            loopback.command().as_deref(),
            Some("ip route replace $(ip route show table local 127.0.0.1) table local quickack 1")
        );
        let same = FixAction::route_quickack(ip("10.1.2.3"), ip("10.1.2.3"));
        assert!(same.command().is_some_and(|c| c.contains("table local")));
        let v6 = FixAction::route_quickack(ip("::1"), ip("::1"));
        assert!(
            v6.command()
                .is_some_and(|c| c.starts_with("dev=$(ip -6 route show table local ::1"))
        );
        let remote = FixAction::route_quickack(ip("10.1.2.4"), ip("10.1.2.3"));
        let command = remote.command().expect("a command");
        assert!(
            command.starts_with("ip route add 10.1.2.4/32 $(ip route get 10.1.2.4 |"),
            "{command}"
        );
        assert!(!command.contains("table local") && !command.contains("GATEWAY"));
        assert_eq!(FixAction::Text("x").command(), None);
    }
}
