//! The only module that speaks the public API: service adapter, conversions, status mapping,
//! codec, the server with health, reflection and graceful shutdown, and the health probe.

pub mod access;
mod approvals;
mod batch_stream;
mod bodies;
pub mod cli;
pub mod convert;
pub mod probe;
pub mod reply;
mod rpc_span;
pub(crate) mod server;
mod service;
mod stall;
mod status;
pub(crate) mod transport;
mod wire;

pub(crate) use convert::RequestRules;
pub use server::{ServeError, serve};
pub(crate) use service::ServiceState;
pub(crate) use stall::StallWatch;
pub use status::RequestError;
