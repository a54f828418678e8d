//! toolgate: a gRPC tool-execution service for LLM agents.
//!
//! An agent sends a batch of model-requested tool calls (OpenAI chat or Responses, Anthropic,
//! Gemini, or a normalized shape) to `DispatchBatch`; toolgate runs each call through one safety
//! pipeline and answers with one result per call plus tool messages ready for the conversation.
//!
//! Embedding: build a [`Server`] from a [`config::Config`], add your own [`tools::Tool`]s, and
//! start it; [`RunningServer`] gives the address and a shutdown handle.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let server = toolgate::Server::new(toolgate::config::Config::default())
//!     .start_local()
//!     .await?;
//! println!("toolgate on {}", server.local_addr());
//! server.shutdown().await?;
//! # Ok(()) }
//! ```

pub mod app;
pub mod calls;
pub mod child;
pub mod config;
pub mod dispatch;
pub mod duration;
pub mod glob;
pub mod grpc;
pub mod hash;
pub mod identity;
pub mod json;
pub mod mapping;
pub mod metrics;
pub mod middleware;
pub mod pb;
pub mod protojson;
pub mod safety;
pub mod session;
pub mod telemetry;
pub mod tools;
pub mod trace;

pub use app::{RunningServer, Server, ShutdownHandle, StartError};
