//! The safety pipeline's decisions: circuit breaker and health, loop detection, retry backoff
//! and recovery. Pure state machines with small glue; the per-call driver carries them out.

pub mod backoff;
pub mod breaker;
pub mod detector;
pub mod health;
pub mod hooks;
pub mod policy;
pub mod recovery;
