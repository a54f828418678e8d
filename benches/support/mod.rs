//! What the load drivers among the benches share (`grpc_driver`, `soak`): their two output
//! streams and a plaintext connection to toolgate.

use std::time::Duration;

use tonic::transport::{Channel, Endpoint};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A line of the report, on stdout (the scripts keep it).
#[allow(clippy::print_stdout)]
pub(crate) fn report(line: &str) {
    println!("{line}");
}

/// Progress and errors, on stderr, so stdout stays a clean report.
#[allow(clippy::print_stderr)]
pub(crate) fn progress(line: &str) {
    eprintln!("{line}");
}

/// One HTTP/2 connection to `addr` (host:port), with `TCP_NODELAY` as toolgate's own clients.
pub(crate) async fn connect(addr: &str) -> Result<Channel, BoxError> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .connect()
        .await?;
    Ok(channel)
}
