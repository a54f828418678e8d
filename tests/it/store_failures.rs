//! What a call is told when the shared session store (a real `redis-server`) fails under it: a
//! store that refuses writes is its own outcome, which opens no breaker that other tenants'
//! calls go through; a write whose answer never came is said to be of unknown outcome, when
//! the store timeout runs out.

use std::time::{Duration, Instant};

use serde_json::json;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use toolgate::config::Config;
use toolgate::pb;
use toolgate::pb::ErrorClass;
use toolgate::pb::tool_gate_client::ToolGateClient;

use crate::peers::{Binary, require_peers};
use crate::shared_sessions::{Redis, in_session, redis_cli};
use crate::support::*;

type Tenant = ToolGateClient<
    InterceptedService<
        Channel,
        Box<dyn FnMut(tonic::Request<()>) -> tonic::Result<tonic::Request<()>> + Send>,
    >,
>;

/// Two tenants, `acme` and `globex`, each with an agent token (`<tenant>-secret`).
fn two_tenants() -> String {
    format!(
        "[auth]\nanonymous = \"none\"\n\
         [[auth.tokens]]\nid = \"acme-agent\"\ntenant = \"acme\"\nroles = [\"agent\"]\nsha256 = \"{}\"\n\
         [[auth.tokens]]\nid = \"globex-agent\"\ntenant = \"globex\"\nroles = [\"agent\"]\nsha256 = \"{}\"\n",
        sha256_hex("acme-secret"),
        sha256_hex("globex-secret"),
    )
}

/// The binary serving on a free port, and a channel to it.
struct Replica {
    binary: Binary,
    channel: Channel,
    dir: std::path::PathBuf,
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The binary on `redis` with `sessions` lines in its `[sessions]` and `extra` config.
async fn server_on(redis: &Redis, sessions: &str, extra: &str) -> Replica {
    let config = format!(
        "[sessions]\nstore = \"{}\"\n{sessions}\n{}{extra}",
        redis.url(),
        two_tenants()
    );
    // Checked here, so a mistake reads as a config error rather than a binary that exits.
    Config::from_toml(&config).unwrap();
    let dir = std::env::temp_dir().join(format!(
        "toolgate-it-store-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("toolgate.toml");
    std::fs::write(&path, config).unwrap();
    let binary = Binary::start(&["--config", path.to_str().unwrap()]);
    let channel = connect(binary.addr.parse().unwrap()).await;
    Replica {
        binary,
        channel,
        dir,
    }
}

static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The `/metrics` text of `server`'s admin listener.
async fn metrics_of(server: &Replica) -> String {
    http_get(format!("http://{}/metrics", server.binary.admin))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// A client of `server` presenting `tenant`'s token.
fn as_tenant(server: &Replica, tenant: &str) -> Tenant {
    let header: tonic::metadata::MetadataValue<_> =
        format!("Bearer {tenant}-secret").parse().unwrap();
    let add: Box<dyn FnMut(tonic::Request<()>) -> tonic::Result<tonic::Request<()>> + Send> =
        Box::new(move |mut r: tonic::Request<()>| {
            r.metadata_mut().insert("authorization", header.clone());
            Ok(r)
        });
    ToolGateClient::with_interceptor(server.channel.clone(), add)
}

/// One `scratch_write` of `path` in `session`: its result.
async fn write(client: &mut Tenant, session: &str, path: &str, content: &str) -> pb::CallResult {
    let call = json!([{"id": "w", "name": "scratch_write",
                       "arguments": {"path": path, "content": content}}]);
    let result = client.dispatch(in_session(session, call)).await.unwrap();
    result.into_inner().results.into_iter().next().unwrap()
}

#[tokio::test]
async fn a_store_that_refuses_one_tenants_writes_opens_no_breaker_for_another_tenant() {
    require_peers!(Redis);
    let redis = Redis::start();
    let server = server_on(
        &redis,
        "",
        "[breaker]\nfailure_threshold = 2\ncooldown = \"10m\"\n",
    )
    .await;
    let (mut acme, mut globex) = (as_tenant(&server, "acme"), as_tenant(&server, "globex"));
    let first = write(&mut acme, "filling", "a.txt", "a").await;
    assert!(first.success, "{first:?}");

    // The store is full (maxmemory reached, no eviction, as the shipped manifests run it): it
    // refuses acme's writes, more of them than the breaker's threshold.
    redis_cli(
        redis.port,
        &["CONFIG", "SET", "maxmemory-policy", "noeviction"],
    );
    redis_cli(redis.port, &["CONFIG", "SET", "maxmemory", "1"]);
    for i in 0..4 {
        let refused = write(&mut acme, "filling", &format!("b{i}.txt"), "b").await;
        assert_eq!(class(&refused), ErrorClass::StoreUnavailable, "{refused:?}");
        assert_eq!(
            refused.content,
            "the session store is unavailable: the scratch files cannot be reached; retry later"
        );
    }

    // Room again: globex's tiny write runs; the store's failures were not the tool's.
    redis_cli(redis.port, &["CONFIG", "SET", "maxmemory", "0"]);
    let tiny = write(&mut globex, "tiny", "t.txt", "t").await;
    assert!(tiny.success, "{tiny:?}");
    assert_ne!(class(&tiny), ErrorClass::CircuitOpen);
}

#[tokio::test]
async fn a_write_the_frozen_store_may_have_applied_is_answered_outcome_unknown_when_the_store_timeout_ends()
 {
    require_peers!(Redis);
    let redis = Redis::start();
    let store_timeout = Duration::from_secs(2);
    // No tenant bound: the write is the call's one store operation (with a bound, a
    // reservation comes first, and one frozen is answered STORE_UNAVAILABLE: nothing was sent).
    let sessions = "store_timeout = \"2s\"\ntenant_scratch_bytes = 0";
    let server = server_on(&redis, sessions, "").await;
    let mut acme = as_tenant(&server, "acme");
    let first = write(&mut acme, "frozen", "plan.md", "first").await;
    assert!(first.success, "{first:?}");

    // The batch loads its session, then Redis freezes while the first call sleeps: the write
    // reaches a server that answers nothing until it wakes.
    let sleep = Duration::from_millis(500);
    let batch = in_session(
        "frozen",
        json!([
            {"id": "s", "name": "sleep", "arguments": {"ms": sleep.as_millis() as u64}},
            {"id": "w", "name": "scratch_write", "arguments": {"path": "plan.md", "content": "second"}},
        ]),
    );
    let mut running = as_tenant(&server, "acme");
    let started = Instant::now();
    let running = tokio::spawn(async move { running.dispatch(batch).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    redis.signal("STOP");
    let result = running.await.unwrap();
    let answered = started.elapsed();
    redis.signal("CONT");
    let result = result.unwrap().into_inner();
    let written = &result.results[1];
    assert_eq!(class(written), ErrorClass::OutcomeUnknown, "{written:?}");
    assert_eq!(
        written.content,
        "'plan.md' may or may not have been written: the session store did not answer in time; check before retrying (read it back with scratch_read)"
    );
    // Answered when the write's store timeout ran out, not after another one for the batch's
    // save (the margin is generous: the bug it guards against adds a whole store timeout).
    let bound = sleep + store_timeout + Duration::from_millis(1500);
    assert!(
        answered < bound,
        "answered after {answered:?}, not within {bound:?}"
    );

    // Awake, the store ran the write it had been sent: "check before retrying" was the truth.
    let read = json!([{"id": "r", "name": "scratch_read", "arguments": {"path": "plan.md"}}]);
    let read = acme.dispatch(in_session("frozen", read)).await.unwrap();
    let read = read.into_inner().results.into_iter().next().unwrap();
    assert_eq!(
        (read.success, read.content.as_str()),
        (true, "second"),
        "{read:?}"
    );
}

#[tokio::test]
async fn a_tenants_sessions_together_hold_no_more_scratch_bytes_than_its_bound_across_replicas() {
    require_peers!(Redis);
    let redis = Redis::start();
    // Each write below charges 8000 bytes and a file's 4096: four fit in 50000, a fifth does not.
    let sessions = "tenant_scratch_bytes = 50000";
    let extra = "[tools.builtin]\nscratch_quota_bytes = 1000000\n";
    let (a, b) = (
        server_on(&redis, sessions, extra).await,
        server_on(&redis, sessions, extra).await,
    );
    let content = "x".repeat(8000);
    // Ten sessions of one tenant write at once on two replicas: the bound holds across them.
    let writes = (0..10).map(|i| {
        let mut client = as_tenant(if i % 2 == 0 { &a } else { &b }, "acme");
        let content = content.clone();
        async move { write(&mut client, &format!("s{i}"), "big.txt", &content).await }
    });
    let results = futures::future::join_all(writes).await;
    let (written, refused): (Vec<_>, Vec<_>) = results.iter().partition(|r| r.success);
    assert_eq!(written.len(), 4, "{results:?}");
    for r in &refused {
        assert_eq!(class(r), ErrorClass::InvalidArguments, "{r:?}");
        assert_eq!(
            r.content,
            "'big.txt' was not written: the scratch files of this tenant's sessions would take more than 50000 bytes (overwrite files with less, or end sessions no longer needed)"
        );
    }
    let full: Vec<usize> = (0..10).filter(|i| results[*i].success).collect();

    // Another tenant's bound is its own.
    let mut globex = as_tenant(&a, "globex");
    let theirs = write(&mut globex, "g", "big.txt", &content).await;
    assert!(theirs.success, "{theirs:?}");

    // Full, acme may still replace a file with less.
    let mut acme = as_tenant(&b, "acme");
    let first = format!("s{}", full[0]);
    let smaller = write(&mut acme, &first, "big.txt", "small now").await;
    assert!(smaller.success, "{smaller:?}");
    // What it gave back makes room for a write of that size, and no more.
    let fits = write(&mut acme, "late", "note.txt", &"y".repeat(3000)).await;
    assert!(fits.success, "{fits:?}");
    let past = write(&mut acme, "later", "big.txt", &content).await;
    assert_eq!(class(&past), ErrorClass::InvalidArguments, "{past:?}");

    // A session that went (its meta expired) gives its bytes back to the tenant.
    let gone = format!("toolgate:{{acme:s{}}}:meta", full[1]);
    redis_cli(redis.port, &["DEL", &gone]);
    let after = write(&mut acme, "later", "big.txt", &content).await;
    assert!(after.success, "{after:?}");
}

/// `tenant`'s memory entries of `session` on `server` (none when it has none or is not live).
async fn memory_of(server: &Replica, tenant: &str, session: &str) -> usize {
    let request = pb::GetSessionMemoryRequest {
        session_id: session.into(),
    };
    match as_tenant(server, tenant).get_session_memory(request).await {
        Ok(reply) => reply.into_inner().entries.len(),
        Err(status) => {
            assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
            0
        }
    }
}

#[tokio::test]
async fn a_tenants_sessions_together_keep_no_more_memory_bytes_than_its_bound() {
    require_peers!(Redis);
    let redis = Redis::start();
    // A session's allowance grows in 32 KiB chunks: one session's fits in 40000, a second's not.
    let server = server_on(&redis, "tenant_memory_bytes = 40000", "").await;
    let (mut acme, mut globex) = (as_tenant(&server, "acme"), as_tenant(&server, "globex"));
    let echo = |session: &str| {
        in_session(
            session,
            json!([{"id": "e", "name": "echo", "arguments": {"say": "remember me"}}]),
        )
    };
    for _ in 0..3 {
        let r = acme.dispatch(echo("first")).await.unwrap().into_inner();
        assert!(r.all_succeeded);
    }
    assert_eq!(memory_of(&server, "acme", "first").await, 3);
    // The second session's calls run; what they would have it remember is not kept.
    let r = acme.dispatch(echo("second")).await.unwrap().into_inner();
    assert!(r.all_succeeded);
    assert_eq!(memory_of(&server, "acme", "second").await, 0);
    let dropped = "toolgate_evictions_total{toolgate_reason=\"tenant_memory_bytes\",toolgate_store=\"session_memory\"} 1";
    let metrics = metrics_of(&server).await;
    assert!(metrics.contains(dropped), "{metrics}");
    // Another tenant's bound is its own.
    let r = globex.dispatch(echo("second")).await.unwrap().into_inner();
    assert!(r.all_succeeded);
    assert_eq!(memory_of(&server, "globex", "second").await, 1);

    // The first session ends: its allowance goes back to the tenant, and the second remembers.
    let ended = acme
        .end_session(pb::EndSessionRequest {
            session_id: "first".into(),
        })
        .await
        .unwrap();
    assert!(ended.into_inner().ended);
    let r = acme.dispatch(echo("second")).await.unwrap().into_inner();
    assert!(r.all_succeeded);
    assert_eq!(memory_of(&server, "acme", "second").await, 1);
}
