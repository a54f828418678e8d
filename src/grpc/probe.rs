//! The health probe behind `toolgate health`: one `grpc.health.v1.Health/Check` against a
//! running server, so a container health check needs no binary besides toolgate itself.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use tonic::transport::Endpoint;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use toolgate_core::duration::readable;

/// What one health check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probed {
    /// The server answered `SERVING` for the service.
    Serving,
    /// The server answered, with anything but `SERVING` (the status's name, or why not).
    NotServing(String),
    /// No answer within the timeout: nothing listens, the connection failed, or the call did.
    Unreachable(String),
}

impl Probed {
    /// Whether the server said `SERVING`.
    pub fn is_serving(&self) -> bool {
        matches!(self, Probed::Serving)
    }
}

impl fmt::Display for Probed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Probed::Serving => f.write_str("SERVING"),
            Probed::NotServing(status) => f.write_str(status),
            Probed::Unreachable(reason) => write!(f, "unreachable: {reason}"),
        }
    }
}

/// The address a probe on the same host asks for a server listening on `listen`: a server bound
/// to every interface (`0.0.0.0`, `[::]`, as in a container) is asked on loopback.
pub fn local_target(listen: SocketAddr) -> SocketAddr {
    match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), listen.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), listen.port())
        }
        _ => listen,
    }
}

/// Asks `addr` (`host:port`, plaintext) for the status of `service` (`""`: the whole server),
/// giving up after `timeout` in all.
pub async fn check(addr: &str, service: &str, timeout: Duration) -> Probed {
    match tokio::time::timeout(timeout, ask(addr, service, timeout)).await {
        Ok(health) => health,
        Err(_) => Probed::Unreachable(format!("no answer within {}", readable(timeout))),
    }
}

async fn ask(addr: &str, service: &str, timeout: Duration) -> Probed {
    let endpoint = match Endpoint::from_shared(format!("http://{addr}")) {
        Ok(endpoint) => endpoint.connect_timeout(timeout),
        Err(e) => return Probed::Unreachable(format!("'{addr}' is not an address: {e}")),
    };
    let channel = match endpoint.connect().await {
        Ok(channel) => channel,
        Err(e) => return Probed::Unreachable(crate::telemetry::error_chain(&e)),
    };
    let request = HealthCheckRequest {
        service: service.to_owned(),
    };
    match HealthClient::new(channel).check(request).await {
        Ok(response) => match ServingStatus::try_from(response.into_inner().status) {
            Ok(ServingStatus::Serving) => Probed::Serving,
            Ok(other) => Probed::NotServing(other.as_str_name().to_owned()),
            Err(e) => Probed::NotServing(e.to_string()),
        },
        // The health service answers NOT_FOUND for a service name it does not know.
        Err(status) if status.code() == tonic::Code::NotFound => {
            Probed::NotServing(format!("SERVICE_UNKNOWN ('{service}')"))
        }
        Err(status) => Probed::Unreachable(format!("{:?}: {}", status.code(), status.message())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check_target(listen: &str, expected: &str) {
        let target = local_target(listen.parse().unwrap());
        assert_eq!(target, expected.parse::<SocketAddr>().unwrap());
    }

    #[test]
    fn every_interface_is_asked_on_loopback() {
        check_target("0.0.0.0:50051", "127.0.0.1:50051");
        check_target("[::]:7", "[::1]:7");
        check_target("10.1.2.3:50051", "10.1.2.3:50051");
        check_target("127.0.0.1:1", "127.0.0.1:1");
        check_target("[fe80::1]:9", "[fe80::1]:9");
    }
}
