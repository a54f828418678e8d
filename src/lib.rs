//! toolgate: a gRPC tool-execution service for LLM agents.
pub mod calls;
pub mod dispatch;
pub mod json;
pub mod session;
pub mod tools;
