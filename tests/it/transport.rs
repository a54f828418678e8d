//! The transport's promises on the wire, pinned so that a hyper, h2 or tonic upgrade that
//! changes one fails here rather than in production (docs/design/transport-audit.md lists what
//! each hand-built piece relies on).

use std::io::{Read, Write};
use std::time::Duration;

use crate::peers::Binary;

/// HTTP/2's connection preface and an empty SETTINGS frame, as a client opens.
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// The parameters of the first non-ACK SETTINGS frame the server sends, in the order sent.
fn server_settings(addr: &str) -> Vec<(u16, u32)> {
    let mut socket = std::net::TcpStream::connect(addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    socket.write_all(PREFACE).unwrap();
    loop {
        let mut header = [0u8; 9];
        socket.read_exact(&mut header).unwrap();
        let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
        let (kind, flags) = (header[3], header[4]);
        let mut payload = vec![0u8; length];
        socket.read_exact(&mut payload).unwrap();
        // SETTINGS (type 4) without ACK (flag 1).
        if kind == 4 && flags & 1 == 0 {
            return payload
                .chunks_exact(6)
                .map(|p| {
                    let id = u16::from_be_bytes([p[0], p[1]]);
                    (id, u32::from_be_bytes([p[2], p[3], p[4], p[5]]))
                })
                .collect();
        }
    }
}

/// What the server advertises when a connection opens: the stream bound the config sets
/// (`server.max_streams_per_connection`), and what hyper's defaults give: each stream's window
/// (what a client may send before the server reads, which the request byte budgets count
/// against), the largest frame and the header list limit. An upgrade that changes any of them,
/// or adds one, fails here.
#[test]
fn a_connection_is_offered_the_settings_the_budgets_assume() {
    crate::peers::require_peers!(TestEnv);
    let dir = std::env::temp_dir().join(format!("toolgate-it-settings-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("toolgate.toml");
    std::fs::write(&config, "[server]\nmax_streams_per_connection = 7\n").unwrap();
    let server = Binary::start(&["--config", config.to_str().unwrap()]);
    const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    const INITIAL_WINDOW_SIZE: u16 = 0x4;
    const MAX_FRAME_SIZE: u16 = 0x5;
    const MAX_HEADER_LIST_SIZE: u16 = 0x6;
    assert_eq!(
        server_settings(&server.addr),
        [
            (MAX_CONCURRENT_STREAMS, 7),
            (INITIAL_WINDOW_SIZE, 1 << 20),
            (MAX_FRAME_SIZE, 16 << 10),
            (MAX_HEADER_LIST_SIZE, 16 << 10),
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A server with `toml` as its config, in a folder of its own named after `name`.
fn serve(name: &str, toml: &str) -> (Binary, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("toolgate-it-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("toolgate.toml");
    std::fs::write(&config, toml).unwrap();
    (Binary::start(&["--config", config.to_str().unwrap()]), dir)
}

/// A new HTTP/2 connection to `addr`.
async fn connect(addr: &str) -> h2::client::SendRequest<bytes::Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (send, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    send
}

/// Opens a `Dispatch` on `send`'s connection and sends `bytes` of its request body, leaving
/// the stream open (the client has more to send, as far as the server knows).
async fn send_part(
    send: &h2::client::SendRequest<bytes::Bytes>,
    bytes: Vec<u8>,
) -> (h2::client::ResponseFuture, h2::SendStream<bytes::Bytes>) {
    let head = http::Request::builder()
        .method("POST")
        .uri("http://toolgate/toolgate.v1.ToolGate/Dispatch")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let mut send = send.clone().ready().await.unwrap();
    let (response, mut body) = send.send_request(head, false).unwrap();
    body.send_data(bytes.into(), false).unwrap();
    (response, body)
}

/// The start of a gRPC message that says it is `length` bytes long, with `sent` of them.
fn incomplete_message(length: u32, sent: usize) -> Vec<u8> {
    let mut bytes = vec![0u8];
    bytes.extend_from_slice(&length.to_be_bytes());
    bytes.extend(std::iter::repeat_n(b'x', sent));
    bytes
}

/// The status a call ended with (from its headers, or its trailers), code and message.
async fn status_of(response: h2::client::ResponseFuture) -> (String, String) {
    let response = tokio::time::timeout(Duration::from_secs(20), response)
        .await
        .expect("the server answers")
        .unwrap();
    let (head, mut body) = response.into_parts();
    let read = |headers: &http::HeaderMap| {
        let get = |name| {
            headers
                .get(name)
                .map(|v: &http::HeaderValue| v.to_str().unwrap().to_owned())
        };
        get("grpc-status").map(|code| (code, get("grpc-message").unwrap_or_default()))
    };
    if let Some(status) = read(&head.headers) {
        return status;
    }
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let trailers = body.trailers().await.unwrap().expect("trailers");
    read(&trailers).expect("a grpc-status")
}

/// The request byte budgets, through the port: bytes of a message the client has not finished
/// sending are held against the connection's share (`limits.max_buffered_request_bytes_per_connection`),
/// and a connection that sends more than its share of an incomplete message is refused
/// `RESOURCE_EXHAUSTED` and counted; one that stops mid-message is failed `DEADLINE_EXCEEDED`
/// after `server.stall_timeout`. Depends on h2 handing data frames on as they arrive (its
/// stream window, pinned above, lets 1 MiB through before the server reads).
#[tokio::test(flavor = "multi_thread")]
async fn incomplete_request_messages_are_bounded_by_bytes_and_by_time() {
    crate::peers::require_peers!(TestEnv);
    let (server, dir) = serve(
        "request-bytes",
        "[server]\nstall_timeout = \"3s\"\nmax_message_bytes = 65536\n\
         [limits]\nmax_buffered_request_bytes_per_connection = 65536\n",
    );
    // Two requests on one connection, each 40 KB into a 60 KB message: each fits the 64 KiB
    // share alone, not both.
    let send = connect(&server.addr).await;
    let (first, _first_body) = send_part(&send, incomplete_message(60_000, 40_000)).await;
    // Counted well before the second arrives, and well before the first stalls.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (second, _second_body) = send_part(&send, incomplete_message(60_000, 40_000)).await;
    let (code, message) = status_of(second).await;
    assert_eq!(code, "8", "RESOURCE_EXHAUSTED: {message}");
    assert!(message.contains("65536"), "names the bound: {message}");
    let refused = crate::hardening::counter(
        &server,
        "toolgate_admission_refusals_total{toolgate_capacity=\"request_bytes_connection\"}",
    )
    .await;
    assert!(refused >= 1, "counted: {refused}");

    // The first, under the share but never finished, fails once it has stalled past the
    // timeout; so does one sent now, 10 bytes into 100, on a connection of its own.
    let (code, message) = status_of(first).await;
    assert_eq!(code, "4", "DEADLINE_EXCEEDED: {message}");
    let started = std::time::Instant::now();
    let alone = connect(&server.addr).await;
    let (response, _body) = send_part(&alone, incomplete_message(100, 10)).await;
    let (code, message) = status_of(response).await;
    assert_eq!(code, "4", "DEADLINE_EXCEEDED: {message}");
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "not before the stall timeout"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Keep-alive through the port: with `server.keepalive_interval` on, the server PINGs a quiet
/// connection, and one whose client never answers is closed once `server.keepalive_timeout`
/// has passed after the PING. Both are set explicitly on hyper's builder (hyper's own default
/// timeout, 20 s, "may change"); an upgrade that changes how hyper uses them fails here.
#[test]
fn a_client_that_never_answers_ping_is_closed_after_the_keepalive_timeout() {
    crate::peers::require_peers!(TestEnv);
    let (server, dir) = serve(
        "keepalive",
        "[server]\nkeepalive_interval = \"1s\"\nkeepalive_timeout = \"2s\"\nidle_timeout = \"10m\"\n",
    );
    let mut socket = std::net::TcpStream::connect(&server.addr).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    socket.write_all(PREFACE).unwrap();
    let opened = std::time::Instant::now();
    let mut pinged = None;
    let closed = loop {
        let mut header = [0u8; 9];
        if socket.read_exact(&mut header).is_err() {
            break opened.elapsed();
        }
        let length = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
        let (kind, flags) = (header[3], header[4]);
        let mut payload = vec![0u8; length];
        if socket.read_exact(&mut payload).is_err() {
            break opened.elapsed();
        }
        match (kind, flags & 1) {
            // The server's SETTINGS, acknowledged as a client must.
            (4, 0) => socket.write_all(&[0, 0, 0, 4, 1, 0, 0, 0, 0]).unwrap(),
            // A PING (not an acknowledgement of ours): never answered.
            (6, 0) => {
                pinged.get_or_insert(opened.elapsed());
            }
            _ => {}
        }
    };
    let pinged = pinged.expect("the server pinged the quiet connection");
    assert!(
        pinged >= Duration::from_millis(500),
        "the first PING waits for the interval: {pinged:?}"
    );
    assert!(
        // hyper starts the timeout when it queues the PING, before this client reads it.
        closed >= pinged + Duration::from_millis(1500),
        "closed {closed:?}, only {:?} after the PING",
        closed - pinged
    );
    assert!(
        closed < pinged + Duration::from_secs(15),
        "closed {closed:?}: the keep-alive timeout was not applied"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
