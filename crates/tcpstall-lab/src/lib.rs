//! The lab: real sockets on this kernel, driven by the simulator's scenarios.
