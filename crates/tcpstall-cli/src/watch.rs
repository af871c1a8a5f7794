//! `tcpstall watch`: wires the watch crate's loader, stall assembly, summary and
//! Prometheus exporter into the command.

use std::cell::RefCell;
use std::ffi::OsString;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use tcpstall_core::escape::escaped_path;
use tcpstall_watch::cgroup::ServiceCgroup;
use tcpstall_watch::command::{CommandCgroup, remove_stale, shell_status};
use tcpstall_watch::endpoint::{Exporter, parse_listen_address};
use tcpstall_watch::event::{NagleHold, WatchEvent};
use tcpstall_watch::loader::{Fix, FixProgram, WatchConfig, Watcher};
use tcpstall_watch::owners::SocketOwners;
use tcpstall_watch::peers::LocalSockets;
use tcpstall_watch::prometheus::{DEFAULT_MAX_SERIES, Metrics, ephemeral_port_start};
use tcpstall_watch::service::ServiceNames;
use tcpstall_watch::stall::{Stall, StallAssembler};
use tcpstall_watch::summary::{Clock, FixOutcome, FixPhase, Summary, stall_json, stall_line};
use tcpstall_watch::support::Host;
use tcpstall_watch::web_config::{self, WebConfig};

/// Exit status when watching cannot start (as for unusable input).
const EXIT_CANNOT_RUN: u8 = 2;
/// Exit status when the metrics endpoint stopped serving for good, so that a service
/// manager restarts watch (systemd's Restart=on-failure).
const EXIT_ENDPOINT_FAILED: u8 = 1;
/// How long `--fix` on a running service waits, watching, before it attaches, unless
/// `--fix-after` says: long enough for a stall rate to compare with.
const DEFAULT_FIX_AFTER_S: f64 = 10.0;
/// How often the event ring buffer is drained when idle.
const POLL_INTERVAL: Duration = Duration::from_millis(100);

#[derive(Args)]
pub struct WatchArgs {
    /// Only stalls where this process is the holder or the delayer (repeatable)
    #[arg(long, value_name = "PID")]
    pid: Vec<u32>,
    /// Only stalls on connections with this local or remote port (repeatable)
    #[arg(long, value_name = "PORT")]
    port: Vec<u16>,
    /// Only stalls where a process of this name (as in /proc/PID/comm, at most 15
    /// characters) is the holder or the delayer (repeatable)
    #[arg(long, value_name = "NAME")]
    comm: Vec<String>,
    /// Stop after this many seconds [default: until Ctrl-C, or until the command exits]
    #[arg(long, value_name = "SECONDS", conflicts_with = "command")]
    duration: Option<f64>,
    /// One JSON object per line: each stall as it ends, then the summary
    #[arg(long)]
    json: bool,
    /// Count a hold as a stall from this long, ms
    #[arg(long, value_name = "MS", default_value_t = 2.0)]
    min_stall: f64,
    /// With -- CMD, --cgroup or --unit: set an option on each new TCP connection of the
    /// command or service from a sockops program on its cgroup: `nodelay` (TCP_NODELAY,
    /// the holder's fix) or `delack-max=MS` (TCP_BPF_DELACK_MAX, the delayed-ACK timer
    /// at most MS, 8 or more on a 250 Hz kernel); detached when watch ends
    #[arg(long, value_name = "FIX", value_parser = parse_fix)]
    fix: Option<Fix>,
    /// Watch only a service already running, by its cgroup v2: a directory under the
    /// cgroup mount, or its path as /proc/PID/cgroup shows it (/system.slice/x.service)
    #[arg(long, value_name = "PATH", conflicts_with_all = ["command", "unit"])]
    cgroup: Option<PathBuf>,
    /// Watch only a running systemd unit, by its cgroup (a bare NAME is NAME.service)
    #[arg(long, value_name = "NAME", conflicts_with = "command")]
    unit: Option<String>,
    /// With --fix on --cgroup or --unit: watch this long without the fix first, to
    /// compare the stall rates before and after it [default: 10]
    #[arg(long, value_name = "SECONDS", requires = "fix")]
    fix_after: Option<f64>,
    /// Serve metrics at http://ADDR/metrics (Prometheus text format; https with
    /// --web.config.file) and /healthz for probes; a bare port binds 127.0.0.1
    /// [default: off]
    #[arg(long, value_name = "ADDR")]
    prometheus: Option<String>,
    /// With --prometheus: TLS and basic authentication for the metrics, from a file in
    /// the format of Prometheus's exporter-toolkit (tls_server_config,
    /// basic_auth_users), as node_exporter reads it
    #[arg(long = "web.config.file", value_name = "FILE", requires = "prometheus")]
    web_config_file: Option<PathBuf>,
    /// Most label sets (comm, local port, role) the metrics keep; later ones are counted
    /// as comm="other"
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_SERIES)]
    max_series: usize,
    /// Run this command in a cgroup of its own, watch only it and its children, and exit
    /// with its status
    #[arg(last = true, value_name = "CMD")]
    command: Vec<OsString>,
}

fn parse_fix(text: &str) -> Result<Fix, String> {
    if text == "nodelay" {
        return Ok(Fix::NoDelay);
    }
    if let Some(ms) = text.strip_prefix("delack-max=") {
        let ms: f64 = ms
            .parse()
            .map_err(|_| format!("delack-max={ms}: not a number of milliseconds"))?;
        if !(ms.is_finite() && ms > 0.0 && ms <= 1000.0) {
            return Err("delack-max takes 0 < MS <= 1000".into());
        }
        return Ok(Fix::DelayedAckMax(Duration::from_secs_f64(ms / 1e3)));
    }
    Err(format!("unknown fix {text:?}: nodelay or delack-max=MS"))
}

/// A fix tried on a running service: when it was attached, and the stalls on either side
/// (by when they ended).
struct FixTrial {
    name: String,
    watching_since_ns: u64,
    attached_ns: Option<u64>,
    before: FixPhase,
    after: FixPhase,
}

impl FixTrial {
    fn add(&mut self, stall: &Stall) {
        let end = stall.start_ns + stall.duration_ns;
        let phase = match self.attached_ns {
            Some(at) if end >= at => &mut self.after,
            _ => &mut self.before,
        };
        phase.stalls += 1;
        phase.stalled_ns += stall.duration_ns;
    }

    /// Both phases with how long each was watched, up to `now_ns`.
    fn phases(&self, now_ns: u64) -> (FixPhase, Option<FixPhase>) {
        let switch = self.attached_ns.unwrap_or(now_ns);
        let before = FixPhase {
            watched_ns: switch.saturating_sub(self.watching_since_ns),
            ..self.before
        };
        let after = self.attached_ns.map(|at| FixPhase {
            watched_ns: now_ns.saturating_sub(at),
            ..self.after
        });
        (before, after)
    }
}

/// What a stall must match to be reported.
struct Filters<'a> {
    args: &'a WatchArgs,
}

impl Filters<'_> {
    fn keep(&self, stall: &Stall) -> bool {
        let processes = stall.holder.iter().chain(stall.delayer.process.as_ref());
        let pid_ok =
            self.args.pid.is_empty() || processes.clone().any(|p| self.args.pid.contains(&p.pid));
        let comm_ok = self.args.comm.is_empty()
            || processes.clone().any(|p| self.args.comm.contains(&p.comm));
        let port_ok = self.args.port.is_empty()
            || [stall.local.port(), stall.remote.port()]
                .iter()
                .any(|p| self.args.port.contains(p));
        pid_ok && comm_ok && port_ok
    }

    /// A Nagle hold is its holder's: kept when its process or socket matches.
    fn keep_hold(&self, hold: &NagleHold) -> bool {
        let a = self.args;
        (a.pid.is_empty() || a.pid.contains(&hold.holder.pid))
            && (a.comm.is_empty() || a.comm.contains(&hold.holder.comm))
            && (a.port.is_empty()
                || [hold.socket.local.port(), hold.socket.remote.port()]
                    .iter()
                    .any(|p| a.port.contains(p)))
    }
}

fn cannot_run(what: &str) -> ExitCode {
    eprintln!(
        "tcpstall watch: cannot run here: {what}; use `tcpstall analyze` on a capture instead (tcpdump -w capture.pcap)"
    );
    ExitCode::from(EXIT_CANNOT_RUN)
}

pub fn run(args: &WatchArgs) -> ExitCode {
    if let Some(d) = args.duration
        && !(d.is_finite() && d > 0.0)
    {
        eprintln!("tcpstall watch: --duration must be a positive number of seconds");
        return ExitCode::from(EXIT_CANNOT_RUN);
    }
    let service_target = args.cgroup.is_some() || args.unit.is_some();
    if args.fix.is_some() && args.command.is_empty() && !service_target {
        eprintln!("tcpstall watch: --fix needs what to fix: -- CMD, --cgroup PATH or --unit NAME");
        return ExitCode::from(EXIT_CANNOT_RUN);
    }
    let fix_after = match args.fix_after {
        Some(_) if !service_target => {
            eprintln!("tcpstall watch: --fix-after is for a running service (--cgroup, --unit)");
            return ExitCode::from(EXIT_CANNOT_RUN);
        }
        Some(s) if !(s.is_finite() && s >= 0.0) => {
            eprintln!("tcpstall watch: --fix-after must be a number of seconds, 0 or more");
            return ExitCode::from(EXIT_CANNOT_RUN);
        }
        Some(s) => Duration::from_secs_f64(s),
        None => Duration::from_secs_f64(DEFAULT_FIX_AFTER_S),
    };
    // A fix on a running service attaches only after `fix_after`: a shorter watch would
    // end without trying it.
    if let (Some(fix), Some(d)) = (args.fix, args.duration)
        && service_target
        && d <= fix_after.as_secs_f64()
    {
        eprintln!(
            "tcpstall watch: --duration {d} ends before --fix {} attaches (--fix-after {} s); give a longer --duration or a shorter --fix-after",
            fix.name(),
            fix_after.as_secs_f64()
        );
        return ExitCode::from(EXIT_CANNOT_RUN);
    }
    if !(args.min_stall.is_finite() && args.min_stall >= 0.0) {
        eprintln!("tcpstall watch: --min-stall must be a number of milliseconds, 0 or more");
        return ExitCode::from(EXIT_CANNOT_RUN);
    }
    let listen = match args.prometheus.as_deref().map(parse_listen_address) {
        Some(Err(e)) => {
            eprintln!("tcpstall watch: --prometheus {e}");
            return ExitCode::from(EXIT_CANNOT_RUN);
        }
        Some(Ok(address)) => Some(address),
        None => None,
    };
    let web_config = match args.web_config_file.as_deref().map(web_config::load) {
        Some(Err(e)) => {
            eprintln!("tcpstall watch: --web.config.file {e}");
            return ExitCode::from(EXIT_CANNOT_RUN);
        }
        Some(Ok(config)) => config,
        None => WebConfig::default(),
    };
    if web_config.tls.is_none() && !web_config.users.is_empty() {
        eprintln!(
            "tcpstall watch: warning: --web.config.file has basic_auth_users but no tls_server_config: passwords cross the network in clear"
        );
    }
    // From here on a signal ends watching with its summary and cleanup; one that comes
    // while the programs load is acted on once they run.
    if let Err(e) = stop_signals::catch() {
        eprintln!("tcpstall watch: warning: cannot handle SIGTERM, SIGINT and SIGHUP: {e}");
    }
    let run_command = !args.command.is_empty();
    let host = Host::detect();
    if let Some(missing) = host.missing(run_command || service_target) {
        return cannot_run(&missing);
    }
    // A watch killed before it could clean up left its command's cgroup behind.
    if let Some(root) = &host.cgroup2_root {
        for stale in remove_stale(root, STOP_GRACE) {
            let ended = match stale.ended {
                0 => String::new(),
                n => format!(
                    ", ended {n} process{} still in it",
                    if n == 1 { "" } else { "es" }
                ),
            };
            match stale.error {
                None => eprintln!(
                    "tcpstall watch: removed {}, left by watch {} that did not end cleanly{ended}",
                    escaped_path(&stale.path),
                    stale.owner
                ),
                Some(e) => eprintln!(
                    "tcpstall watch: warning: cannot remove {}, left by watch {}: {e}",
                    escaped_path(&stale.path),
                    stale.owner
                ),
            }
        }
    }
    let cgroup = match (run_command, &host.cgroup2_root) {
        (true, Some(root)) => match CommandCgroup::create(root) {
            Ok(cgroup) => Some(cgroup),
            Err(e) => {
                return cannot_run(&format!(
                    "cannot create a cgroup under {}: {e}",
                    escaped_path(root)
                ));
            }
        },
        _ => None,
    };
    let service = match (&args.cgroup, &args.unit, &host.cgroup2_root) {
        (Some(path), _, Some(root)) => Some(ServiceCgroup::open(root, path)),
        (None, Some(unit), Some(root)) => Some(ServiceCgroup::unit(root, unit)),
        _ => None,
    };
    let service = match service.transpose() {
        Ok(service) => service,
        Err(e) => {
            let option = if args.cgroup.is_some() {
                "--cgroup"
            } else {
                "--unit"
            };
            eprintln!("tcpstall watch: {option}: {e}");
            return ExitCode::from(EXIT_CANNOT_RUN);
        }
    };
    let min_stall = Duration::from_secs_f64(args.min_stall / 1e3);
    let mut watcher = match Watcher::attach(WatchConfig {
        cgroup: cgroup
            .as_ref()
            .map(CommandCgroup::id)
            .or(service.as_ref().map(ServiceCgroup::id)),
        delack_timer_address: host.delack_timer_address.unwrap_or(0),
        min_hold: min_stall.min(Duration::from_millis(1)),
    }) {
        Ok(w) => w,
        Err(e) => return cannot_run(&e.to_string()),
    };
    let mut fix_program = match (args.fix, &cgroup) {
        (Some(fix), Some(cgroup)) => match FixProgram::attach(fix, cgroup.directory()) {
            Ok(p) => Some((fix, p)),
            Err(e) => return cannot_run(&format!("the sockops fix: {e}")),
        },
        _ => None,
    };
    // A fix on a running service attaches once `fix_after` has been watched without it.
    let mut trial = match (args.fix, &service) {
        (Some(fix), Some(_)) => Some(FixTrial {
            name: fix.name(),
            watching_since_ns: Clock::monotonic_now_ns(),
            attached_ns: None,
            before: FixPhase::default(),
            after: FixPhase::default(),
        }),
        _ => None,
    };
    // With --fix-after 0 the fix is on before the metrics answer.
    if let (Some(trial), Some(service), Some(fix)) = (trial.as_mut(), &service, args.fix)
        && fix_after.is_zero()
    {
        match FixProgram::attach(fix, service.directory()) {
            Ok(program) => {
                trial.attached_ns = Some(Clock::monotonic_now_ns());
                trial.watching_since_ns = trial.attached_ns.unwrap_or(0);
                fix_program = Some((fix, program));
                announce_fix(fix, service, args.json, trial.attached_ns.unwrap_or(0));
            }
            Err(e) => return cannot_run(&format!("the sockops fix: {e}")),
        }
    }
    let metrics = Arc::new(Mutex::new(Metrics::new(
        args.max_series,
        ephemeral_port_start(),
    )));
    let watch_programs = watcher.programs();
    let programs_attached = |fix_program: &Option<(Fix, FixProgram)>| {
        watch_programs + usize::from(fix_program.is_some())
    };
    if let Ok(mut m) = metrics.lock() {
        m.set_programs_attached(programs_attached(&fix_program));
    }
    let exporter = match listen {
        Some(address) => match Exporter::start(address, Arc::clone(&metrics), web_config) {
            Ok(exporter) => {
                eprintln!(
                    "tcpstall watch: metrics at {}://{}/metrics",
                    if exporter.https { "https" } else { "http" },
                    exporter.address
                );
                Some(exporter)
            }
            Err(e) => {
                eprintln!("tcpstall watch: --prometheus: cannot listen on {e}");
                return ExitCode::from(EXIT_CANNOT_RUN);
            }
        },
        None => None,
    };

    // Told to stop while the programs loaded: the command is not started at all.
    if cgroup.is_some()
        && let Some(signal) = stop_signals::take().first()
    {
        eprintln!("tcpstall watch: stopped by a signal before the command started");
        return ExitCode::from((128 + signal.number) as u8);
    }
    let mut child = match &cgroup {
        Some(cgroup) => match cgroup.spawn(&args.command) {
            Ok(child) => Some(child),
            Err(e) => {
                eprintln!(
                    "tcpstall watch: cannot run {}: {e}",
                    args.command[0].to_string_lossy()
                );
                return ExitCode::from(127);
            }
        },
        None => {
            if !args.json {
                let what = match &service {
                    Some(service) => format!(
                        "the TCP connections of the processes in {}",
                        escaped_path(service.path())
                    ),
                    None => "every TCP connection on this host".into(),
                };
                let fix = match (args.fix, &trial) {
                    (Some(fix), Some(_)) => format!(
                        "; --fix {} attaches after {} s",
                        fix.name(),
                        fix_after.as_secs_f64()
                    ),
                    _ => String::new(),
                };
                eprintln!(
                    "tcpstall watch: watching {what}{}{fix} (Ctrl-C to stop)",
                    args.duration
                        .map_or(String::new(), |d| format!(" for {d} s"))
                );
            }
            None
        }
    };

    let clock = Clock::new();
    let started = Instant::now();
    let mut names = ServiceNames::default();
    let deadline = args.duration.map(|d| started + Duration::from_secs_f64(d));
    let filters = Filters { args };
    let owners = Rc::new(RefCell::new(SocketOwners::default()));
    let peer_owners = Rc::clone(&owners);
    let mut local_sockets = LocalSockets::default();
    let mut assembler = StallAssembler::new(
        min_stall.as_nanos() as u64,
        Box::new(move |inode| owners.borrow_mut().owner(inode)),
        Box::new(move |local, remote| {
            let inode = local_sockets.inode(local, remote)?;
            peer_owners.borrow_mut().owner(inode)
        }),
    );
    let mut summary = Summary::default();
    let mut undecodable = 0u64;
    let stdout = std::io::stdout();
    let mut exit_status = None;
    // Standard output was closed (the reader of a pipe exited): nothing more is written
    // there, and watching ends.
    let mut output_closed = false;
    // When the command was asked to stop (a signal, or standard output closed).
    let mut stopping: Option<Instant> = None;
    let mut killed = false;
    let publish = |stalls: Vec<Stall>,
                   summary: &mut Summary,
                   output_closed: &mut bool,
                   names: &mut ServiceNames,
                   trial: &mut Option<FixTrial>| {
        let mut out = stdout.lock();
        for mut stall in stalls.into_iter().filter(|s| filters.keep(s)) {
            let stall = &mut stall;
            stall.holder_service = stall
                .holder
                .as_ref()
                .and_then(|p| names.service(p.pid, &p.comm));
            stall.delayer.service = stall
                .delayer
                .process
                .as_ref()
                .and_then(|p| names.service(p.pid, &p.comm));
            summary.add(stall);
            if let Some(trial) = trial.as_mut() {
                trial.add(stall);
            }
            if let Ok(mut m) = metrics.lock() {
                m.record(stall);
            }
            if *output_closed {
                continue;
            }
            let line = if args.json {
                stall_json(stall, &clock).to_string()
            } else {
                stall_line(stall, &clock)
            };
            if let Err(e) = writeln!(out, "{line}") {
                *output_closed |= e.kind() == io::ErrorKind::BrokenPipe;
            }
        }
        if !*output_closed && let Err(e) = out.flush() {
            *output_closed |= e.kind() == io::ErrorKind::BrokenPipe;
        }
    };
    loop {
        if let Err(e) = watcher.poll(POLL_INTERVAL, |event| match event {
            Ok(event) => {
                count_hold(&event, &filters, &mut summary, &metrics);
                assembler.push(event)
            }
            Err(_) => undecodable += 1,
        }) {
            eprintln!("tcpstall watch: {e}");
            // Watching stops; the command still runs to its end and gives the status.
            if let Some(child) = child.as_mut() {
                exit_status = Some(child.wait().map_or(1, shell_status));
            }
            break;
        }
        publish(
            assembler.ready(Clock::monotonic_now_ns()),
            &mut summary,
            &mut output_closed,
            &mut names,
            &mut trial,
        );
        if let (Some(trial), Some(service), Some(fix)) = (trial.as_mut(), &service, args.fix)
            && trial.attached_ns.is_none()
            && started.elapsed() >= fix_after
        {
            match FixProgram::attach(fix, service.directory()) {
                Ok(program) => {
                    let now = Clock::monotonic_now_ns();
                    trial.attached_ns = Some(now);
                    fix_program = Some((fix, program));
                    if !output_closed {
                        announce_fix(fix, service, args.json, now);
                    }
                }
                Err(e) => {
                    eprintln!("tcpstall watch: cannot attach the sockops fix: {e}");
                    exit_status = Some(EXIT_CANNOT_RUN);
                    break;
                }
            }
        }
        if let Ok(mut m) = metrics.lock() {
            m.set_events_lost(watcher.lost_events());
            m.set_programs_attached(programs_attached(&fix_program));
            if let Some(trial) = &trial {
                let (before, after) = trial.phases(Clock::monotonic_now_ns());
                let sockets = fix_program.as_ref().map_or(0, |(_, p)| p.counts().0);
                m.set_fix(&trial.name, before, after, sockets);
            }
        }
        if let Some(exporter) = &exporter {
            exporter.heartbeat();
            if let Some(e) = exporter.failure() {
                eprintln!("tcpstall watch: --prometheus: the metrics endpoint stopped: {e}");
                exit_status = Some(EXIT_ENDPOINT_FAILED);
                if let Some(child) = &child {
                    send(child.id(), libc::SIGTERM);
                    stopping = Some(Instant::now());
                }
                break;
            }
        }
        output_closed |= stdout_closed();
        let signals = stop_signals::take();
        let Some(child) = child.as_mut() else {
            if !signals.is_empty() || output_closed || deadline.is_some_and(|d| Instant::now() >= d)
            {
                break;
            }
            continue;
        };
        // The command is told what watch was told, unless it heard it already: a
        // terminal's Ctrl-C or hangup reaches the whole foreground process group.
        for signal in &signals {
            if signal.sent_by_process || !in_our_process_group(child.id()) {
                send(child.id(), signal.number);
            }
        }
        if stopping.is_none() && (!signals.is_empty() || output_closed) {
            if signals.is_empty() {
                send(child.id(), libc::SIGTERM);
            }
            stopping = Some(Instant::now());
        }
        if let (Some(since), Some(cgroup)) = (stopping, &cgroup)
            && !killed
            && since.elapsed() >= STOP_GRACE
        {
            cgroup.kill_processes();
            killed = true;
        }
        match child.try_wait() {
            Ok(Some(status)) => {
                exit_status = Some(shell_status(status));
                break;
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("tcpstall watch: waiting for the command: {e}");
                exit_status = Some(1);
                break;
            }
        }
    }
    // Asked to stop: what the command left in its cgroup goes too, so that the cgroup
    // can be removed.
    if let (Some(since), Some(cgroup)) = (stopping, &cgroup) {
        cgroup.end_processes(STOP_GRACE.saturating_sub(since.elapsed()));
    }
    // The last ACKs of the command's connections may still be in the ring buffer.
    let _ = watcher.poll(Duration::ZERO, |event| {
        if let Ok(event) = event {
            count_hold(&event, &filters, &mut summary, &metrics);
            assembler.push(event)
        }
    });
    publish(
        assembler.finish(),
        &mut summary,
        &mut output_closed,
        &mut names,
        &mut trial,
    );
    summary.seen_from_both_sides = assembler.seen_from_both_sides;
    let (before, after) = match &trial {
        Some(trial) => {
            let (before, after) = trial.phases(Clock::monotonic_now_ns());
            (Some(before), after)
        }
        None => (None, None),
    };
    let counts = fix_program.as_ref().map(|(_, program)| program.counts());
    // Detached here, before the report, whatever ended watching.
    drop(fix_program);
    let fix = args
        .fix
        .filter(|_| counts.is_some() || trial.is_some())
        .map(|fix| {
            let (sockets, refused) = counts.unwrap_or((0, 0));
            FixOutcome {
                name: fix.name(),
                option: fix.describe(),
                sockets,
                refused,
                cgroup: service
                    .as_ref()
                    .filter(|_| trial.is_some())
                    .map(|s| s.path().display().to_string()),
                before,
                after,
            }
        });
    let watched = started.elapsed().as_nanos() as u64;
    let lost = watcher.lost_events();
    let mut err = io::stderr().lock();
    if undecodable > 0 {
        let _ = writeln!(
            err,
            "tcpstall watch: warning: {undecodable} kernel records could not be decoded"
        );
    }
    let command_pid = child.as_ref().map(|c| c.id());
    if args.json {
        let mut report = summary.json(watched, assembler.short_holds, lost, fix.as_ref());
        if let (Some(pid), Some(status)) = (command_pid, exit_status) {
            report["command"] = serde_json::json!({"pid": pid, "exit_status": status});
        }
        if !output_closed {
            let mut out = stdout.lock();
            let _ = writeln!(out, "{report}").and_then(|()| out.flush());
        }
    } else {
        // After the command's own output, on the terminal.
        let _ = write!(
            err,
            "\n{}",
            summary.text(watched, assembler.short_holds, lost, fix.as_ref())
        );
        if let (Some(pid), Some(status)) = (command_pid, exit_status) {
            let _ = writeln!(err, "command (pid {pid}) exited with status {status}");
        }
    }
    drop(err);
    drop(watcher);
    drop(cgroup);
    ExitCode::from(exit_status.unwrap_or(0))
}

/// Says that the fix is attached to a running service: on standard error, and with
/// --json as a `{"type": "fix"}` object between the stalls.
fn announce_fix(fix: Fix, service: &ServiceCgroup, json: bool, monotonic_ns: u64) {
    eprintln!(
        "tcpstall watch: --fix {} attached to {}: new connections get {}",
        fix.name(),
        escaped_path(service.path()),
        fix.describe()
    );
    if json {
        let marker = serde_json::json!({
            "type": "fix",
            "fix": fix.name(),
            "option": fix.describe(),
            "cgroup": service.path().display().to_string(),
            "time_unix_ns": Clock::new().unix_ns(monotonic_ns) as i64,
        });
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{marker}").and_then(|()| out.flush());
    }
}

/// Counts a Nagle hold (every one, stall or not) in the summary and the metrics.
fn count_hold(
    event: &WatchEvent,
    filters: &Filters,
    summary: &mut Summary,
    metrics: &Mutex<Metrics>,
) {
    if let WatchEvent::NagleHold(hold) = event
        && filters.keep_hold(hold)
    {
        summary.nagle_holds.add(hold);
        if let Ok(mut m) = metrics.lock() {
            m.record_nagle_hold(hold);
        }
    }
}

/// How long a command asked to stop has before it and what it started are killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

fn send(pid: u32, signal: libc::c_int) {
    // SAFETY: kill(2) on the command's pid; it is not reaped before this (try_wait and
    // wait are the only reapers, and they run after).
    unsafe { libc::kill(pid as libc::pid_t, signal) };
}

/// Whether the process is in this process's group (a terminal's signals reach both).
fn in_our_process_group(pid: u32) -> bool {
    // SAFETY: plain system calls on a pid.
    unsafe { libc::getpgid(pid as libc::pid_t) == libc::getpgrp() }
}

/// Whether standard output is a pipe or socket whose reader is gone (as `rg | head`
/// ends when head has what it wanted).
fn stdout_closed() -> bool {
    let mut fd = libc::pollfd {
        fd: libc::STDOUT_FILENO,
        events: 0,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    let ready = unsafe { libc::poll(&mut fd, 1, 0) };
    ready == 1 && fd.revents & (libc::POLLERR | libc::POLLHUP) != 0
}

/// SIGTERM, SIGINT and SIGHUP, caught so that watching ends with its summary and its
/// cleanup, and passed on to the command.
mod stop_signals {
    use std::sync::atomic::{AtomicU8, Ordering};

    const SIGNALS: [libc::c_int; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];
    const RECEIVED: u8 = 1;
    const FROM_PROCESS: u8 = 2;
    /// Per signal of [`SIGNALS`]: received since last taken, and sent by a process
    /// (kill(2)) rather than by the kernel (a terminal's Ctrl-C or hangup).
    static STATE: [AtomicU8; 3] = [AtomicU8::new(0), AtomicU8::new(0), AtomicU8::new(0)];

    /// One signal received.
    #[derive(Clone, Copy, Debug)]
    pub struct Received {
        pub number: libc::c_int,
        pub sent_by_process: bool,
    }

    pub fn catch() -> std::io::Result<()> {
        for (i, &signal) in SIGNALS.iter().enumerate() {
            // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
            unsafe {
                signal_hook_registry::register_sigaction(signal, move |info| {
                    // si_code <= 0: SI_USER, SI_QUEUE, SI_TKILL (a process sent it);
                    // SI_KERNEL (0x80) for a terminal's signals.
                    let from = if info.si_code <= 0 { FROM_PROCESS } else { 0 };
                    STATE[i].fetch_or(RECEIVED | from, Ordering::SeqCst);
                })?;
            }
        }
        Ok(())
    }

    /// The signals received since the last call.
    pub fn take() -> Vec<Received> {
        SIGNALS
            .iter()
            .zip(&STATE)
            .filter_map(|(&number, state)| {
                let bits = state.swap(0, Ordering::SeqCst);
                (bits & RECEIVED != 0).then_some(Received {
                    number,
                    sent_by_process: bits & FROM_PROCESS != 0,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixes_as_typed() {
        assert_eq!(parse_fix("nodelay"), Ok(Fix::NoDelay));
        assert_eq!(
            parse_fix("delack-max=8"),
            Ok(Fix::DelayedAckMax(Duration::from_millis(8)))
        );
        assert!(parse_fix("delack-max=0").is_err());
        assert!(parse_fix("delack-max=x").is_err());
        assert!(parse_fix("quickack").is_err());
    }
}
