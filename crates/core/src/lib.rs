//! toolgate's engine: what happens to a batch of tool calls between the wire and the tools.
//!
//! A batch's calls are read from any provider's shape (`calls`), each call's binding resolves
//! the tool that runs and its input (`mapping`), and `dispatch` runs every call through the one
//! safety pipeline (`safety`: hooks, loop detection, breaker, recovery; `middleware`: the tower
//! stack around each invocation) against the session's state (`session`) and the registered
//! tools (`tools`). Nothing here speaks gRPC or reads the configuration file: the server crate
//! (`toolgate`) translates both into these types.

pub mod approvals;
pub mod calls;
pub mod child;
pub mod dispatch;
pub mod duration;
pub mod glob;
pub mod hash;
pub mod identity;
pub mod json;
pub mod mapping;
pub mod metrics;
pub mod middleware;
pub mod safety;
pub mod session;
pub mod tools;
pub mod trace;
