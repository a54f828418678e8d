//! Generated protobuf and gRPC code for `toolgate.v1`; nothing hand-written lives here.
#![allow(clippy::all, clippy::pedantic, missing_docs)]

tonic::include_proto!("toolgate.v1");

/// Encoded file descriptor set of the public API, served by gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("toolgate_descriptor");
