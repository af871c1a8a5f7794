//! The flags `simulate` and `lab` share: a scenario file, and the application pattern and
//! socket options that override it.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use tcpstall_sim::scenario::{ScenarioFile, SocketOptions};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Side {
    Client,
    Server,
    Both,
}

#[derive(Args)]
pub struct WorkloadArgs {
    /// Scenario file (TOML, see docs/scenario-format.md); flags override its values
    pub scenario: Option<PathBuf>,
    /// Application pattern (`tcpstall simulate --patterns` lists them) [default: two-writes]
    #[arg(long, value_name = "NAME")]
    pub pattern: Option<String>,
    /// Request write sizes in bytes, comma-separated (e.g. 96,656) [default: the pattern's]
    #[arg(long, value_name = "BYTES,..", value_delimiter = ',')]
    pub request: Vec<u32>,
    /// Response write sizes in bytes, comma-separated [default: the pattern's]
    #[arg(long, value_name = "BYTES,..", value_delimiter = ',')]
    pub response: Vec<u32>,
    /// Requests kept in flight (2 = double buffering) [default: the pattern's, 1 or 2]
    #[arg(long)]
    pub depth: Option<u32>,
    /// Number of transactions (for a lab suite: per scenario) [default: the pattern's or suite's]
    #[arg(long, short = 'n')]
    pub transactions: Option<u32>,
    /// Connections running the workload at once over one link [default: 1]
    #[arg(long, value_name = "N")]
    pub connections: Option<u32>,
    /// Server think time before each response, ms [default: 0]
    #[arg(long, value_name = "MS")]
    pub server_think: Option<f64>,
    /// Client think time before each request, ms [default: 0]
    #[arg(long, value_name = "MS")]
    pub client_think: Option<f64>,
    /// Set TCP_NODELAY on this side
    #[arg(long, value_name = "SIDE")]
    pub nodelay: Option<Side>,
    /// Set TCP_QUICKACK after every read on this side
    #[arg(long, value_name = "SIDE")]
    pub quickack: Option<Side>,
    /// Wrap each message in TCP_CORK on this side
    #[arg(long, value_name = "SIDE")]
    pub cork: Option<Side>,
    /// Send MSG_MORE on all writes of a message but the last, on this side
    #[arg(long, value_name = "SIDE")]
    pub msg_more: Option<Side>,
}

fn set_side(file: &mut ScenarioFile, side: Option<Side>, set: impl Fn(&mut SocketOptions)) {
    match side {
        Some(Side::Client) => set(&mut file.client.options),
        Some(Side::Server) => set(&mut file.server.options),
        Some(Side::Both) => {
            set(&mut file.client.options);
            set(&mut file.server.options);
        }
        None => {}
    }
}

impl WorkloadArgs {
    /// The scenario file (or the defaults), with these flags applied.
    pub fn scenario_file(&self) -> Result<ScenarioFile, String> {
        let file = match &self.scenario {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                ScenarioFile::from_toml(&text).map_err(|e| format!("{}: {e}", path.display()))?
            }
            None => ScenarioFile::default(),
        };
        Ok(self.apply(file))
    }

    /// `file` with these flags applied.
    pub fn apply(&self, mut file: ScenarioFile) -> ScenarioFile {
        if let Some(pattern) = &self.pattern {
            file.workload.pattern = pattern.clone();
        }
        if !self.request.is_empty() {
            file.workload.request = self.request.clone();
        }
        if !self.response.is_empty() {
            file.workload.response = self.response.clone();
        }
        if let Some(depth) = self.depth {
            file.workload.depth = depth;
        }
        if let Some(n) = self.transactions {
            file.workload.transactions = n;
        }
        if let Some(n) = self.connections {
            file.workload.connections = n;
        }
        if let Some(ms) = self.server_think {
            file.workload.server_think_ms = ms;
        }
        if let Some(ms) = self.client_think {
            file.workload.client_think_ms = ms;
        }
        set_side(&mut file, self.nodelay, |o| o.nodelay = true);
        set_side(&mut file, self.quickack, |o| o.quickack = true);
        set_side(&mut file, self.cork, |o| o.cork = true);
        set_side(&mut file, self.msg_more, |o| o.msg_more = true);
        file
    }
}
