//! What every front door shares, whatever protocol it speaks: who the caller is (`auth`), the
//! capacity a request may take (`admission`'s batch and call slots, `decoded`'s bytes, `budget`'s
//! request and reply bytes held per connection and server-wide), server
//! TLS, counts per client address, and the HTTP/1.1 listener the MCP front and the admin
//! endpoints are served on (`http1`). The gRPC service and the MCP front both admit through
//! these, so neither is a way around the other's bounds.

pub mod admission;
pub mod auth;
pub mod budget;
pub mod decoded;
pub mod entry;
pub(crate) mod hosts;
pub(crate) mod http1;
pub(crate) mod per_address;
pub mod tls;
