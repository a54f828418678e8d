//! Remote calls reuse their connections: a counting TCP proxy in front of an HTTP tool and of
//! an MCP server over streamable HTTP shows that sequential calls through toolgate do not open
//! a connection each.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Json;
use axum::routing::post;
use serde_json::{Value, json};
use toolgate::config::Config;

use crate::support::*;

/// Sequential calls each test makes after its first one.
const CALLS: usize = 20;

/// A TCP proxy on a free loopback port that counts the connections it accepts and forwards
/// each to `upstream`.
async fn counting_proxy(upstream: SocketAddr) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await else {
                    return;
                };
                // The proxy must not add Nagle delays of its own to what it measures.
                let _ = inbound.set_nodelay(true);
                let _ = outbound.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    });
    (addr, accepted)
}

async fn call(ts: &TestServer, tool: &str, arguments: Value) {
    let result = dispatch(
        ts,
        request(json!([{"id": "c", "name": tool, "arguments": arguments}])),
    )
    .await;
    assert!(result.results[0].success, "{:?}", result.results[0]);
}

#[tokio::test]
async fn sequential_http_tool_calls_share_one_connection() {
    let app = axum::Router::new().route(
        "/echo",
        post(|Json(body): Json<Value>| async move { Json(body["input"].clone()) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let (proxy, accepted) = counting_proxy(upstream).await;
    let config = format!(
        "[[remotes]]\nname = \"pooled\"\nkind = \"http\"\nurl = \"http://{proxy}/echo\"\n\
         [remotes.definition]\nname = \"pooled_echo\"\n"
    );
    let ts = start_with(Config::from_toml(&config).unwrap()).await;
    for n in 0..=CALLS {
        call(&ts, "pooled_echo", json!({"n": n})).await;
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "{} sequential calls must reuse one keep-alive connection",
        CALLS + 1
    );
}

#[tokio::test]
async fn sequential_mcp_calls_over_streamable_http_reuse_connections() {
    crate::peers::require_peers!(TestEnv, Everything);
    let (_server, port) = crate::mcp::everything_over_http().await;
    let (proxy, accepted) = counting_proxy(SocketAddr::from(([127, 0, 0, 1], port))).await;
    let config = format!(
        "[[remotes]]\nname = \"everything-http\"\nkind = \"mcp\"\nurl = \"http://{proxy}/mcp\"\n\
         prefix = \"evh.\"\ntimeout = \"30s\"\n"
    );
    let ts = start_with(Config::from_toml(&config).unwrap()).await;
    // The first call may still find discovery's connections busy; count from after it.
    call(&ts, "evh.echo", json!({"message": "first"})).await;
    let before = accepted.load(Ordering::SeqCst);
    for n in 0..CALLS {
        call(&ts, "evh.echo", json!({"message": format!("call {n}")})).await;
    }
    // rmcp drains a response's SSE stream for at most 50 ms before it gives the connection up,
    // so a very slow machine may lose one now and then; without pooling every call opens one.
    let opened = accepted.load(Ordering::SeqCst) - before;
    assert!(
        opened <= 2,
        "{CALLS} sequential tools/call POSTs opened {opened} new connections \
         ({before} were open after discovery and the first call)"
    );
}
