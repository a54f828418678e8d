//! End-to-end tests: a real toolgate server on 127.0.0.1:0 and the generated client (plus real
//! grpcurl and a Python client in `peers`). One binary so the crate links once.
// Test harness helpers assert by panicking, like the tests they serve.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
// One crate of test modules: `pub` in them says "shared with the other tests", not an API.
#![allow(unreachable_pub)]

mod approvals;
mod bindings;
mod connections;
mod console;
mod dispatch;
mod docs;
mod gate;
mod hardening;
mod hooks;
mod hosted;
mod hostile;
mod http_tools;
mod intake;
mod limits;
mod mcp;
mod mcp_clients;
mod mcp_front;
mod messages;
mod middleware;
mod observability;
mod parallel;
mod peers;
mod pipeline;
mod processes;
mod remote;
mod scratch;
mod security;
mod server;
mod shared_sessions;
mod store_failures;
mod support;
mod tidy;
mod traces;
mod transport;
