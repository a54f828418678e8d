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
pub mod bridge;
pub mod config;
pub mod console;
pub mod front;
pub mod grpc;
pub mod mcp;
pub mod store;
pub mod telemetry;

// The dispatcher driven with the pipeline a config makes: in this crate, where the config is.

pub use app::{RunningServer, Server, ShutdownHandle, StartError};
/// What an embedder implements to add its own tools ([`tools::Tool`], [`tools::FnTool`]).
pub use toolgate_core::tools;
/// The generated protocol (`pb`, a `ToolGate` client among it) and its JSON values, for clients
/// and tests of an embedded server.
pub use toolgate_proto::{pb, protojson};
