//! toolgate: a gRPC tool-execution service for LLM agents.
pub mod calls;
pub mod json;
