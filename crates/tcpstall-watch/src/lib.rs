//! `tcpstall watch`: live detection of Nagle x delayed-ACK stalls on this Linux host.
//!
//! The data flow, one module per step:
//! - [`objects`]: the eBPF programs (C sources and compiled CO-RE objects in `bpf/`);
//! - [`support`]: what the host must offer (privilege, BTF, tracepoints, cgroup v2);
//! - [`loader`]: loads and attaches them, and the sockops fix on a cgroup;
//! - [`event`]: decodes the records the programs write to their ring buffer;
//! - [`stall`]: joins a Nagle hold with the peer's delayed-ACK timer into a stall;
//! - [`owners`]: names the delayer's process from its socket, by /proc;
//! - [`service`]: names a process's service (systemd unit or container) from its cgroup;
//! - [`peers`]: finds the socket at the other end of a connection on this host;
//! - [`summary`]: totals per process and per connection, as text or JSON;
//! - [`prometheus`]: the metrics and their text format;
//! - [`web_config`]: the endpoint's TLS and basic-auth file (Prometheus exporter-toolkit's);
//! - [`basic_auth`]: checks a request's basic-auth credentials;
//! - [`endpoint`]: the HTTP(S) endpoint serving the metrics, bounded against its peers;
//! - [`command`]: runs a command in a cgroup of its own;
//! - [`cgroup`]: opens a running service's cgroup (`--cgroup`, `--unit`).

pub mod basic_auth;
pub mod cgroup;
pub mod command;
pub mod endpoint;
pub mod event;
pub mod loader;
pub mod objects;
pub mod owners;
pub mod peers;
pub mod prometheus;
pub mod service;
pub mod stall;
pub mod summary;
pub mod support;
pub mod web_config;
