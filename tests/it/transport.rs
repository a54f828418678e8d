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
