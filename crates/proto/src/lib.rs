//! toolgate's public protocol in Rust: the code generated from `proto/` (`pb`: `toolgate.v1`'s
//! messages, the `ToolGate` server and the `ToolWorker` and `ToolHooks` clients),
//! `google.protobuf.Value` and `Struct` read and written as JSON (`protojson`), and the codec
//! that bounds what a request may make the server decode (`codec`).

pub mod codec;
pub mod pb;
pub mod protojson;
