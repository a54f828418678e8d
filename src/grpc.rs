//! The only module that speaks the public API: service adapter, conversions, status mapping,
//! codec, the server with health, reflection and graceful shutdown, and the health probe.

pub mod access;
pub(crate) mod admission;
mod approvals;
pub mod auth;
mod batch_stream;
mod bodies;
pub(crate) mod budget;
pub mod cli;
pub mod convert;
pub(crate) mod decoded;
pub(crate) mod per_address;
pub mod probe;
pub mod reply;
mod rpc_span;
pub(crate) mod server;
mod service;
mod stall;
mod status;
pub mod tls;
pub(crate) mod transport;
mod wire;

pub(crate) use convert::RequestRules;
pub use server::{ServeError, serve};
pub(crate) use service::ServiceState;
pub(crate) use stall::StallWatch;
pub use status::RequestError;
