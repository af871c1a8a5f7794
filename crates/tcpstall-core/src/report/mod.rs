//! Renderers over an [`Analysis`](crate::analyze::Analysis): they never detect anything.

pub mod annotations;
pub mod groups;
pub mod json;
pub mod text;
pub mod worst;
