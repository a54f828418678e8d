//! Sessions shared through a real Redis (Debian's `redis-server`): three replicas, any of which
//! serves any batch of a session, called directly and behind a real nginx `grpc_pass` balancer
//! with plain round robin; and what a batch gets while Redis is down and once it is back.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use toolgate::config::Config;
use toolgate::pb;
use toolgate::pb::ErrorClass;
use toolgate::pb::tool_gate_client::ToolGateClient;

use crate::peers::{Binary, require_peers};
use crate::support::*;

/// A `redis-server` on a free loopback port, no persistence; killed on drop.
pub struct Redis {
    child: Child,
    pub port: u16,
    dir: PathBuf,
}

impl Redis {
    pub fn start() -> Redis {
        Redis::start_on(free_port())
    }

    /// On `port` (a restart keeps the address the replicas were given).
    pub fn start_on(port: u16) -> Redis {
        Redis::spawn(port, &[])
    }

    /// With TLS only (on `port`, verified against `ca`'s certificate `cert`/`key`) and a
    /// password; ready once it accepts connections.
    pub fn start_tls(port: u16, files: &[&std::path::Path; 3], password: &str) -> Redis {
        let [cert, key, ca] = files.map(|f| f.to_str().unwrap().to_owned());
        let args = [
            "--tls-port",
            &port.to_string(),
            "--tls-cert-file",
            &cert,
            "--tls-key-file",
            &key,
            "--tls-ca-cert-file",
            &ca,
            "--tls-auth-clients",
            "no",
            "--requirepass",
            password,
        ];
        let mut redis = Redis::spawn_without_wait(0, &args);
        redis.port = port;
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        redis
    }

    fn spawn(port: u16, extra: &[&str]) -> Redis {
        let redis = Redis::spawn_without_wait(port, extra);
        redis.wait_ready();
        redis
    }

    fn spawn_without_wait(port: u16, extra: &[&str]) -> Redis {
        let dir = folder(&format!("redis-{port}-{}", extra.len()));
        let child = crate::processes::own_group(&mut Command::new("redis-server"))
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .args(extra)
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        Redis { child, port, dir }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Answers PING within 10 s.
    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) {
                let mut reply = [0u8; 7];
                if stream.write_all(b"PING\r\n").is_ok()
                    && stream.read_exact(&mut reply).is_ok()
                    && &reply == b"+PONG\r\n"
                {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server did not answer PING on {}", self.port);
    }

    /// Sends it `signal` (`STOP`, `CONT`): a stopped server holds its connections open and
    /// answers nothing, as a stalled host or a long command would have it.
    pub fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(sent.success(), "kill -{signal}");
    }

    /// Kills it at once (SIGKILL), as a crash or a network cut would.
    pub fn kill(&mut self) {
        crate::processes::stop(&mut self.child, Duration::ZERO);
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// nginx as a gRPC balancer (`grpc_pass`, plain round robin) in front of `backends`; stopped on
/// drop.
pub struct Nginx {
    child: Child,
    pub addr: String,
    dir: PathBuf,
}

impl Nginx {
    pub fn start(backends: &[std::net::SocketAddr]) -> Nginx {
        let port = free_port();
        let dir = folder(&format!("nginx-{port}"));
        let servers: String = backends.iter().map(|b| format!("server {b};\n")).collect();
        let d = dir.display();
        let conf = format!(
            "worker_processes 1;\n\
             pid {d}/nginx.pid;\n\
             error_log {d}/error.log warn;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n\
               access_log off;\n\
               client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
               upstream toolgate {{ {servers} }}\n\
               server {{\n\
                 listen 127.0.0.1:{port} http2;\n\
                 location / {{ grpc_pass grpc://toolgate; }}\n\
               }}\n\
             }}\n"
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let child = spawn_nginx(&dir);
        let addr = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(&addr).is_err() {
            assert!(Instant::now() < deadline, "nginx did not listen on {addr}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Nginx { child, addr, dir }
    }
}

impl Drop for Nginx {
    /// A fast shutdown (SIGTERM to the master), then its whole process group: a master killed
    /// outright would leave its worker running.
    fn drop(&mut self) {
        crate::processes::stop(&mut self.child, Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// nginx in the foreground with `dir/nginx.conf`, `dir` its prefix.
pub fn spawn_nginx(dir: &std::path::Path) -> Child {
    crate::processes::own_group(&mut Command::new(nginx_binary()))
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(dir.join("nginx.conf"))
        .args(["-g", "daemon off;"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nginx starts")
}

/// Debian puts nginx in /usr/sbin, which a user's PATH may lack.
pub fn nginx_binary() -> &'static str {
    if std::path::Path::new("/usr/sbin/nginx").exists() {
        "/usr/sbin/nginx"
    } else {
        "nginx"
    }
}

/// Three `redis-server`s as a Redis Cluster of three masters (`redis-cli --cluster create`).
pub struct Cluster {
    pub nodes: Vec<Redis>,
}

impl Cluster {
    pub fn start() -> Cluster {
        // A node also listens on its port + 10000 (the cluster bus).
        let nodes: Vec<Redis> = (0..3)
            .map(|_| {
                let port = loop {
                    let port = free_port();
                    if port < 55_000
                        && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok()
                    {
                        break port;
                    }
                };
                Redis::spawn(
                    port,
                    &["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"],
                )
            })
            .collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port));
        }
        let made = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli runs");
        assert!(
            made.status.success(),
            "{}",
            String::from_utf8_lossy(&made.stdout)
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while nodes
            .iter()
            .any(|n| !redis_cli(n.port, &["CLUSTER", "INFO"]).contains("cluster_state:ok"))
        {
            assert!(Instant::now() < deadline, "the cluster did not become ok");
            std::thread::sleep(Duration::from_millis(100));
        }
        Cluster { nodes }
    }
}

/// What `redis-cli -p PORT ARGS...` prints.
pub(crate) fn redis_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A channel to a server (or the balancer) at `addr`.
fn window_slots(port: u16, session: &str) -> usize {
    let key = format!("toolgate:{{default:{session}}}:window");
    let bytes: usize = redis_cli(port, &["STRLEN", &key]).trim().parse().unwrap();
    bytes / toolgate_core::safety::detector::SLOT_BYTES
}

async fn channel_to(addr: &str) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// `n` replicas sharing `redis`; loop detection warns at 2 repeats and stops at 3.
pub(crate) async fn replicas(redis: &Redis, n: usize, extra: &str) -> Vec<TestServer> {
    replicas_of(&redis.url(), n, extra).await
}

async fn replicas_of(url: &str, n: usize, extra: &str) -> Vec<TestServer> {
    let mut servers = Vec::new();
    for _ in 0..n {
        let config = Config::from_toml(&format!(
            "[sessions]\nstore = \"{url}\"\n{extra}\n[loop_detection]\nwarn_after = 2\nstop_after = 3\n"
        ))
        .unwrap();
        servers.push(start_with(config).await);
    }
    servers
}

pub(crate) fn in_session(session: &str, calls: serde_json::Value) -> pb::DispatchBatchRequest {
    let mut req = request(calls);
    req.session_id = session.into();
    req
}

fn same(id: &str) -> serde_json::Value {
    json!({"id": id, "name": "echo", "arguments": {"q": "same"}})
}

async fn memory_of(
    client: &mut ToolGateClient<tonic::transport::Channel>,
    session: &str,
) -> Result<Vec<String>, tonic::Status> {
    let request = pb::GetSessionMemoryRequest {
        session_id: session.into(),
    };
    Ok(client
        .get_session_memory(request)
        .await?
        .into_inner()
        .entries)
}

/// Batches 1, 2, 3 and 4 of one session on replicas A, B, C and A: the second warns, the
/// fourth is stopped, as on one server.
async fn a_loop_spread_over_replicas_is_stopped(
    clients: &mut [ToolGateClient<tonic::transport::Channel>],
) {
    let n = clients.len();
    let mut results = Vec::new();
    for i in 0..4 {
        let client = &mut clients[i % n];
        let id = format!("c{i}");
        let result = client
            .dispatch(in_session("spread", json!([same(&id)])))
            .await
            .unwrap()
            .into_inner();
        results.push(result);
    }
    assert!(results[..3].iter().all(|r| r.all_succeeded));
    assert!(
        results[1].results[0].content.contains(
            "[toolgate] warning: echo({\"q\":\"same\"}) has returned the same result 2 times"
        ),
        "{}",
        results[1].results[0].content
    );
    assert!(
        !results[2].results[0].content.contains("warning"),
        "warned once"
    );
    assert_eq!(
        results[3].outcome,
        pb::batch_result::Outcome::LoopDetected as i32
    );
    assert_eq!(
        results[3].outcome_reason,
        "Loop detected: echo({\"q\":\"same\"}) repeated 3 times"
    );
    assert_eq!(class(&results[3].results[0]), ErrorClass::LoopStopped);
    // Every replica reads the whole memory: the three calls that ran.
    for client in clients.iter_mut() {
        let memory = memory_of(client, "spread").await.unwrap();
        assert_eq!(memory.len(), 3, "{memory:?}");
        assert!(memory[0].starts_with("tool=echo; input={\"q\":\"same\"}"));
    }
}

#[tokio::test]
async fn a_loop_spread_over_three_replicas_is_stopped_and_memory_is_whole_on_each() {
    require_peers!(Redis);
    let redis = Redis::start();
    let servers = replicas(&redis, 3, "").await;
    let mut clients: Vec<_> = servers.iter().map(|s| s.client.clone()).collect();
    a_loop_spread_over_replicas_is_stopped(&mut clients).await;
}

#[tokio::test]
async fn behind_nginx_round_robin_a_session_is_one_session() {
    require_peers!(Redis, Nginx);
    let redis = Redis::start();
    let servers = replicas(&redis, 3, "").await;
    let backends: Vec<_> = servers.iter().map(|s| s.server.local_addr()).collect();
    let nginx = Nginx::start(&backends);
    let channel = channel_to(&nginx.addr).await;
    let mut through = ToolGateClient::new(channel);
    let mut clients = vec![through.clone()];
    a_loop_spread_over_replicas_is_stopped(&mut clients).await;
    // EndSession through the balancer ends it on every replica.
    let ended = through
        .end_session(pb::EndSessionRequest {
            session_id: "spread".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(ended.ended);
    for server in &servers {
        let status = memory_of(&mut server.client.clone(), "spread")
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::NotFound);
    }
    // The next batch starts on a blank window: nothing is stopped.
    let again = through
        .dispatch(in_session("spread", json!([same("z")])))
        .await
        .unwrap()
        .into_inner();
    assert!(again.all_succeeded);
    // A file written through the balancer is read back through it, whichever replicas serve
    // the two batches (three reads: round robin reaches all three).
    let write = json!([{"id": "w", "name": "scratch_write", "arguments": {"path": "plan.md", "content": "v1"}}]);
    let written = through
        .dispatch(in_session("files", write))
        .await
        .unwrap()
        .into_inner();
    assert!(written.all_succeeded, "{}", written.results[0].content);
    for _ in 0..3 {
        let read = json!([{"id": "r", "name": "scratch_read", "arguments": {"path": "plan.md"}}]);
        let read = through
            .dispatch(in_session("files", read))
            .await
            .unwrap()
            .into_inner();
        // (Repeats warn from the second on: the window is shared too.)
        assert!(
            read.results[0].content.starts_with("v1"),
            "{}",
            read.results[0].content
        );
    }
}

#[tokio::test]
async fn concurrent_batches_of_one_session_on_three_replicas_all_count() {
    require_peers!(Redis);
    let redis = Redis::start();
    let servers = replicas(&redis, 3, "").await;
    // Rounds of three batches at once, one per replica, each with ten distinct calls and one
    // call they share: every call lands in memory, and the shared call's three runs count
    // toward loop detection, so the next one is stopped.
    for round in 0..8 {
        let session = format!("busy-{round}");
        let batches = servers.iter().enumerate().map(|(r, server)| {
            let mut client = server.client.clone();
            let mut calls: Vec<serde_json::Value> = (0..10)
                .map(|i| json!({"id": format!("r{r}-{i}"), "name": "echo", "arguments": {"r": r, "i": i}}))
                .collect();
            calls.push(json!({"id": format!("hot-{r}"), "name": "echo", "arguments": {"q": "hot"}}));
            let mut req = in_session(&session, serde_json::Value::Array(calls));
            req.options = Some(pb::DispatchOptions {
                mode: pb::dispatch_options::Mode::Parallel as i32,
                max_concurrency: 4,
                ..Default::default()
            });
            async move { client.dispatch(req).await.unwrap().into_inner() }
        });
        let results = futures::future::join_all(batches).await;
        assert!(results.iter().all(|r| r.all_succeeded), "round {round}");
        let memory = memory_of(&mut servers[0].client.clone(), &session)
            .await
            .unwrap();
        assert_eq!(memory.len(), 33, "round {round}: every call of every batch");
        let hot = servers[round % 3]
            .client
            .clone()
            .dispatch(in_session(
                &session,
                json!([{"id": "h", "name": "echo", "arguments": {"q": "hot"}}]),
            ))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            class(&hot.results[0]),
            ErrorClass::LoopStopped,
            "round {round}: the three concurrent runs all counted"
        );
    }
}

#[tokio::test]
async fn tenants_sharing_a_store_never_see_each_others_sessions() {
    require_peers!(Redis);
    let redis = Redis::start();
    let auth = format!(
        r#"
        [auth]
        anonymous = "none"
        [[auth.tokens]]
        id = "acme-agent"
        tenant = "acme"
        roles = ["agent"]
        sha256 = "{}"
        [[auth.tokens]]
        id = "globex-agent"
        tenant = "globex"
        roles = ["agent"]
        sha256 = "{}"
        "#,
        sha256_hex("acme-secret"),
        sha256_hex("globex-secret"),
    );
    let servers = replicas(&redis, 2, &auth).await;
    let as_tenant = |server: &TestServer, token: &'static str| {
        let header: tonic::metadata::MetadataValue<_> = format!("Bearer {token}").parse().unwrap();
        ToolGateClient::with_interceptor(server.channel.clone(), move |mut r: tonic::Request<()>| {
            r.metadata_mut().insert("authorization", header.clone());
            Ok(r)
        })
    };
    let mut acme = as_tenant(&servers[0], "acme-secret");
    let mut globex = as_tenant(&servers[1], "globex-secret");
    for i in 0..2 {
        let id = format!("a{i}");
        let r = acme
            .dispatch(in_session("shared-id", json!([same(&id)])))
            .await
            .unwrap()
            .into_inner();
        assert!(r.all_succeeded);
    }
    // The same id in another tenant is another session: no memory, and a blank loop window
    // (two repeats in acme's would stop a third in acme, not here).
    let status = globex
        .get_session_memory(pb::GetSessionMemoryRequest {
            session_id: "shared-id".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound);
    let mut ran = Vec::new();
    for i in 0..3 {
        let id = format!("g{i}");
        let r = globex
            .dispatch(in_session("shared-id", json!([same(&id)])))
            .await
            .unwrap()
            .into_inner();
        ran.push(class(&r.results[0]));
    }
    assert_eq!(ran, [ErrorClass::None, ErrorClass::None, ErrorClass::None]);
    let ended = globex
        .end_session(pb::EndSessionRequest {
            session_id: "shared-id".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(ended.ended);
    // Ending globex's left acme's alone.
    let memory = acme
        .get_session_memory(pb::GetSessionMemoryRequest {
            session_id: "shared-id".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .entries;
    assert_eq!(memory.len(), 2);
}

#[tokio::test]
async fn while_redis_is_down_named_sessions_fail_fast_and_work_again_once_it_is_back() {
    require_peers!(Redis);
    let mut redis = Redis::start();
    let port = redis.port;
    let config = Config::from_toml(&format!(
        "[sessions]\nstore = \"{}\"\nstore_timeout = \"500ms\"",
        redis.url()
    ))
    .unwrap();
    let ts = start_with(config).await;
    let mut client = ts.client.clone();
    let one = |id: &str| {
        in_session(
            "kept",
            json!([{"id": id, "name": "echo", "arguments": {"n": 1}}]),
        )
    };
    assert!(
        client
            .dispatch(one("a"))
            .await
            .unwrap()
            .into_inner()
            .all_succeeded
    );

    redis.kill();
    let status = client.dispatch(one("b")).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert_eq!(
        status.message(),
        "the session store is down: a named session's state cannot be read or written, so nothing ran; retry later, or send the batch without a session id"
    );
    // The stream says the same.
    let streamed = match client.dispatch_batch(one("c")).await {
        Ok(mut response) => response.get_mut().message().await.unwrap_err(),
        Err(status) => status,
    };
    assert_eq!(streamed.code(), tonic::Code::Unavailable);
    assert_eq!(
        memory_of(&mut client, "kept").await.unwrap_err().code(),
        tonic::Code::Unavailable
    );
    // A batch without a session has nothing to lose: it runs.
    let anonymous = client
        .dispatch(request(json!([{"id": "x", "name": "echo"}])))
        .await
        .unwrap()
        .into_inner();
    assert!(anonymous.all_succeeded);

    // Back on the same address: named sessions work again without a restart of toolgate.
    let _redis = Redis::start_on(port);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match client.dispatch(one("d")).await {
            Ok(r) => {
                assert!(r.into_inner().all_succeeded);
                break;
            }
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable);
                assert!(Instant::now() < deadline, "still down: {status:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    // This Redis kept nothing (no persistence), so the session starts over: one entry.
    assert_eq!(memory_of(&mut client, "kept").await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_scratch_file_written_on_one_replica_is_read_and_listed_on_the_others() {
    require_peers!(Redis);
    let redis = Redis::start();
    let servers = replicas(&redis, 3, "[tools.builtin]\nscratch_quota_bytes = 20000").await;
    let clients: Vec<_> = servers.iter().map(|s| s.client.clone()).collect();
    let call = |name: &str, arguments: serde_json::Value| {
        in_session(
            "files",
            json!([{"id": "f", "name": name, "arguments": arguments}]),
        )
    };
    let run = async |replica: usize, req| {
        let result = (clients[replica].clone())
            .dispatch(req)
            .await
            .unwrap()
            .into_inner();
        result.results.into_iter().next().unwrap()
    };
    let written = run(
        0,
        call(
            "scratch_write",
            json!({"path": "notes/plan.md", "content": "step 1"}),
        ),
    )
    .await;
    assert!(written.success, "{}", written.content);
    let read = run(1, call("scratch_read", json!({"path": "notes/plan.md"}))).await;
    assert_eq!((read.success, read.content.as_str()), (true, "step 1"));
    let root = run(2, call("scratch_list", json!({}))).await;
    assert!(root.success, "{}", root.content);
    assert!(
        root.content
            .contains("{\"kind\":\"dir\",\"name\":\"notes\"}"),
        "{}",
        root.content
    );
    let notes = run(0, call("scratch_list", json!({"path": "notes"}))).await;
    assert!(
        notes
            .content
            .contains("{\"kind\":\"file\",\"name\":\"plan.md\"}"),
        "{}",
        notes.content
    );
    // The model reads the same answers as on disk.
    let missing = run(1, call("scratch_read", json!({"path": "nothing.txt"}))).await;
    assert_eq!(class(&missing), ErrorClass::InvalidArguments);
    assert_eq!(missing.content, "'nothing.txt' does not exist");
    let into_file = run(
        2,
        call(
            "scratch_write",
            json!({"path": "notes/plan.md/x", "content": ""}),
        ),
    )
    .await;
    assert_eq!(class(&into_file), ErrorClass::InvalidArguments);
    assert_eq!(
        into_file.content,
        "'notes/plan.md/x': a name on its way is a file, not a directory"
    );
    let dir = run(2, call("scratch_read", json!({"path": "notes"}))).await;
    assert_eq!(dir.content, "'notes' is not a regular file");
    // The quota is the session's, across replicas: 2 entries (4096 each) and 6 bytes are used;
    // a new file of 12000 bytes (and its entry) would take 24294 > 20000.
    let big = "x".repeat(12_000);
    let over = run(
        1,
        call("scratch_write", json!({"path": "big.txt", "content": big})),
    )
    .await;
    assert_eq!(class(&over), ErrorClass::InvalidArguments);
    assert_eq!(
        over.content,
        "'big.txt' was not written: the session's scratch files would take 24294 bytes, over its quota of 20000 (overwrite files with less to make room)"
    );
    // 7000 bytes fit: 19294.
    let fits = run(
        1,
        call(
            "scratch_write",
            json!({"path": "big.txt", "content": "x".repeat(7_000)}),
        ),
    )
    .await;
    assert!(fits.success, "{}", fits.content);
    // Ending the session removes its files for every replica.
    let ended = (clients[0].clone())
        .end_session(pb::EndSessionRequest {
            session_id: "files".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(ended.ended);
    let gone = run(2, call("scratch_read", json!({"path": "notes/plan.md"}))).await;
    assert_eq!(gone.content, "'notes/plan.md' does not exist");
}

#[tokio::test]
async fn on_a_redis_cluster_each_session_lives_on_one_shard_and_sessions_spread() {
    require_peers!(Redis);
    let cluster = Cluster::start();
    let seed = format!("redis://127.0.0.1:{}/", cluster.nodes[0].port);
    let servers = replicas_of(&seed, 2, "store_cluster = true").await;
    let mut clients: Vec<_> = servers.iter().map(|s| s.client.clone()).collect();
    // Every script touches several keys of one session: a cluster refuses that (CROSSSLOT)
    // unless they share a slot, which the hash tag gives them.
    a_loop_spread_over_replicas_is_stopped(&mut clients).await;
    for i in 0..12 {
        let session = format!("spread-{i}");
        let write = json!([{"id": "w", "name": "scratch_write", "arguments": {"path": "a/b.txt", "content": "x"}}]);
        let r = clients[i % 2]
            .dispatch(in_session(&session, write))
            .await
            .unwrap()
            .into_inner();
        assert!(r.all_succeeded, "{:?}", r.results[0].content);
        let read = json!([{"id": "r", "name": "scratch_read", "arguments": {"path": "a/b.txt"}}]);
        let r = clients[(i + 1) % 2]
            .dispatch(in_session(&session, read))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(r.results[0].content, "x");
    }
    // Which shard holds each session's keys: all of one session's on one, the sessions on more
    // than one.
    let mut shards_of =
        std::collections::BTreeMap::<String, std::collections::BTreeSet<u16>>::new();
    for node in &cluster.nodes {
        for key in redis_cli(node.port, &["--scan", "--pattern", "toolgate:*"]).lines() {
            let tag = key.split(['{', '}']).nth(1).unwrap().to_owned();
            // The tenant's index of its sessions has a tag of its own.
            if !tag.starts_with("tenant:") {
                shards_of.entry(tag).or_default().insert(node.port);
            }
        }
    }
    assert_eq!(shards_of.len(), 13, "{shards_of:?}");
    assert!(
        shards_of.values().all(|shards| shards.len() == 1),
        "{shards_of:?}"
    );
    let used: std::collections::BTreeSet<u16> = shards_of.values().flatten().copied().collect();
    assert!(
        used.len() > 1,
        "sessions spread over the shards: {shards_of:?}"
    );
}

#[tokio::test]
async fn a_replica_killed_mid_batch_loses_only_its_running_batches_and_another_continues() {
    require_peers!(Redis);
    let redis = Redis::start();
    let url = redis.url();
    let env = [
        ("TOOLGATE_SESSIONS__STORE", url.as_str()),
        ("TOOLGATE_LOOP_DETECTION__STOP_AFTER", "0"),
    ];
    let doomed = Binary::start_with(&[], &env);
    let survivor = Binary::start_with(&[], &env);
    let connect = async |addr: &str| {
        let channel = channel_to(addr).await;
        ToolGateClient::new(channel)
    };
    let mut a = connect(&doomed.addr).await;
    let mut b = connect(&survivor.addr).await;
    let echo = |n: u32| {
        in_session(
            "long",
            json!([{"id": format!("e{n}"), "name": "echo", "arguments": {"n": n}}]),
        )
    };
    assert!(
        a.dispatch(echo(0))
            .await
            .unwrap()
            .into_inner()
            .all_succeeded
    );

    // Load on both: batches of the session that echo and then sleep, four on each replica.
    let slow = |n: u32| {
        in_session(
            "long",
            json!([
                {"id": format!("s{n}"), "name": "echo", "arguments": {"slow": n}},
                {"id": format!("z{n}"), "name": "sleep", "arguments": {"ms": 1500}}
            ]),
        )
    };
    let on_a: Vec<_> = (1..=4)
        .map(|n| {
            let mut a = a.clone();
            let req = slow(n);
            tokio::spawn(async move { a.dispatch_batch(req).await.map(|r| r.into_inner()) })
        })
        .collect();
    let on_b: Vec<_> = (5..=8)
        .map(|n| {
            let mut b = b.clone();
            let req = slow(n);
            tokio::spawn(async move { b.dispatch(req).await.map(|r| r.into_inner()) })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    // SIGKILL, as an OOM kill or a lost node: no drain.
    let mut doomed = doomed;
    doomed.child.kill().unwrap();
    doomed.child.wait().unwrap();

    // Every batch A was running ends with an error status at its client, none with a result
    // (a partial one or any other).
    for running in on_a {
        let outcome = match running.await.unwrap() {
            Err(status) => Err(status),
            Ok(mut stream) => loop {
                match stream.message().await {
                    Ok(Some(pb::DispatchEvent {
                        event: Some(pb::dispatch_event::Event::Result(r)),
                    })) => {
                        break Ok(r);
                    }
                    Ok(Some(_)) => continue,
                    Ok(None) => {
                        break Err(tonic::Status::unknown("the stream ended without a result"));
                    }
                    Err(status) => break Err(status),
                }
            },
        };
        let status = outcome.expect_err("a batch on the killed replica ends with an error status");
        assert_ne!(status.code(), tonic::Code::Ok);
    }
    // B's batches were untouched.
    for running in on_b {
        assert!(running.await.unwrap().unwrap().all_succeeded);
    }
    // B continues the session: it has what the batch before the kill and B's own batches saved,
    // and nothing of A's unfinished batches.
    assert!(
        b.dispatch(echo(9))
            .await
            .unwrap()
            .into_inner()
            .all_succeeded
    );
    let memory = memory_of(&mut b, "long").await.unwrap();
    assert_eq!(memory.len(), 1 + 4 * 2 + 1, "{memory:?}");
    assert!(memory.iter().any(|m| m.contains("input={\"n\":0}")));
    assert!(
        !memory
            .iter()
            .any(|m| m.contains("\"slow\":1}") || m.contains("\"slow\":4}")),
        "{memory:?}"
    );
}

#[tokio::test]
async fn metrics_and_readyz_show_the_store_down_and_back_and_readiness_holds() {
    require_peers!(Redis);
    let mut redis = Redis::start();
    let port = redis.port;
    let url = redis.url();
    let server = Binary::start_with(
        &[],
        &[
            ("TOOLGATE_SESSIONS__STORE", url.as_str()),
            ("TOOLGATE_SESSIONS__STORE_TIMEOUT", "300ms"),
        ],
    );
    let get = async |path: &str| {
        let response = http_get(format!("http://{}{path}", server.admin))
            .await
            .unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    };
    let channel = channel_to(&server.addr).await;
    let mut client = ToolGateClient::new(channel);
    let named = || in_session("watched", json!([{"id": "a", "name": "echo"}]));
    assert!(
        client
            .dispatch(named())
            .await
            .unwrap()
            .into_inner()
            .all_succeeded
    );
    assert!(
        get("/metrics")
            .await
            .1
            .contains("toolgate_session_store_up 1")
    );
    assert_eq!(get("/readyz").await, (200, "ready\n".to_owned()));

    redis.kill();
    let status = client.dispatch(named()).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    let metrics = get("/metrics").await.1;
    assert!(metrics.contains("toolgate_session_store_up 0"), "{metrics}");
    assert!(
        metrics.contains("toolgate_session_store_errors_total{toolgate_operation=\"load\"} 1"),
        "{metrics}"
    );
    // Still ready: the fleet shares the store, and batches without a session still run.
    assert_eq!(
        get("/readyz").await,
        (
            200,
            "ready; the session store is unreachable, so batches naming a session are refused\n"
                .to_owned()
        )
    );

    let _back = Redis::start_on(port);
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.dispatch(named()).await.is_err() {
        assert!(Instant::now() < deadline, "the store never came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        get("/metrics")
            .await
            .1
            .contains("toolgate_session_store_up 1")
    );
    assert_eq!(get("/readyz").await.1, "ready\n");
}

#[tokio::test]
async fn a_cached_result_is_shared_and_a_write_on_one_replica_invalidates_it_on_all() {
    require_peers!(Redis);
    let redis = Redis::start();
    let servers = replicas(
        &redis,
        2,
        "[per_tool.scratch_read.cache]\nenabled = true\nttl = \"60s\"\npath = \"/path\"\n\
         [per_tool.scratch_read.loop_detection]\nexempt = true\n\
         [per_tool.scratch_write]\ninvalidates_path = \"/path\"",
    )
    .await;
    let write = |text: &str| {
        in_session(
            "cached",
            json!([{"id": "w", "name": "scratch_write", "arguments": {"path": "n.txt", "content": text}}]),
        )
    };
    let read = || {
        in_session(
            "cached",
            json!([{"id": "r", "name": "scratch_read", "arguments": {"path": "n.txt"}}]),
        )
    };
    let run = async |replica: usize, req| {
        let result = (servers[replica].client.clone())
            .dispatch(req)
            .await
            .unwrap()
            .into_inner();
        let r = result.results.into_iter().next().unwrap();
        assert!(r.success, "{}", r.content);
        (r.cached, r.content)
    };
    run(0, write("first")).await;
    assert_eq!(run(0, read()).await, (false, "first".to_owned()));
    // B answers from what A cached.
    assert_eq!(run(1, read()).await, (true, "first".to_owned()));
    // A write on B invalidates the entry for A too.
    run(1, write("second")).await;
    assert_eq!(run(0, read()).await, (false, "second".to_owned()));
    assert_eq!(run(1, read()).await, (true, "second".to_owned()));
    // Entries stay in their session (the default scope): another session misses.
    let other = in_session(
        "elsewhere",
        json!([{"id": "r", "name": "scratch_read", "arguments": {"path": "n.txt"}}]),
    );
    let result = (servers[0].client.clone())
        .dispatch(other)
        .await
        .unwrap()
        .into_inner();
    assert!(!result.results[0].cached);
    // A batch without a session id keeps no session-scoped entry in Redis: nobody could hit it.
    let entries = || {
        redis_cli(redis.port, &["--scan", "--pattern", "toolgate:{cache}:e:*"])
            .lines()
            .count()
    };
    let before = entries();
    let anonymous = request(json!([
        {"id": "w", "name": "scratch_write", "arguments": {"path": "mine.txt", "content": "mine"}},
        {"id": "r", "name": "scratch_read", "arguments": {"path": "mine.txt"}}
    ]));
    let result = (servers[1].client.clone())
        .dispatch(anonymous)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(result.results[1].content, "mine", "the read succeeded");
    assert_eq!(entries(), before);
}

/// Echo call number `n` in `session` (distinct calls, so loop detection stays out of it).
async fn echo_n(server: &TestServer, session: &str, n: usize) {
    let req = in_session(
        session,
        json!([{"id": "e", "name": "echo", "arguments": {"n": n}}]),
    );
    let r = server.client.clone().dispatch(req).await.unwrap();
    assert!(r.into_inner().all_succeeded);
}

/// Runs one echo in `session` on `server`, a few milliseconds after the last (so each use has a
/// later time).
async fn touch(server: &TestServer, session: &str) {
    tokio::time::sleep(Duration::from_millis(5)).await;
    let req = in_session(
        session,
        json!([{"id": "a", "name": "echo", "arguments": {"s": session}}]),
    );
    let r = server.client.clone().dispatch(req).await.unwrap();
    assert!(r.into_inner().all_succeeded);
}

#[tokio::test]
async fn the_session_cap_holds_across_replicas_and_evicts_the_least_recently_used() {
    require_peers!(Redis);
    let redis = Redis::start();
    let servers = replicas(&redis, 2, "max_sessions = 3").await;
    let touch = async |replica: usize, session: &str| touch(&servers[replica], session).await;
    touch(0, "s1").await;
    touch(1, "s2").await;
    touch(0, "s3").await;
    // s1 is used again (on the other replica), so s2 is now the least recently used.
    touch(1, "s1").await;
    touch(1, "s4").await;
    let mut client = servers[0].client.clone();
    let status = memory_of(&mut client, "s2").await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::NotFound, "s2 was evicted");
    for live in ["s1", "s3", "s4"] {
        assert!(memory_of(&mut client, live).await.is_ok(), "{live} is live");
    }
    // An ended session no longer counts: ending s3 makes room for s5 without evicting.
    let ended = client
        .end_session(pb::EndSessionRequest {
            session_id: "s3".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(ended.ended);
    touch(0, "s5").await;
    for live in ["s1", "s4", "s5"] {
        assert!(memory_of(&mut client, live).await.is_ok(), "{live} is live");
    }
}

/// A CA, and a certificate it signed for 127.0.0.1 and localhost, as PEM files in `dir`:
/// [certificate, key, CA].
fn test_ca(dir: &std::path::Path) -> [std::path::PathBuf; 3] {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let files = [
        dir.join("redis.pem"),
        dir.join("redis.key"),
        dir.join("ca.pem"),
    ];
    std::fs::write(&files[0], cert.pem()).unwrap();
    std::fs::write(&files[1], key.serialize_pem()).unwrap();
    std::fs::write(&files[2], ca.pem()).unwrap();
    files
}

#[tokio::test]
async fn a_tls_store_behind_a_password_is_reached_with_a_private_ca_and_refused_without() {
    require_peers!(Redis);
    let dir = folder("redis-tls");
    let [cert, key, ca] = test_ca(&dir);
    let port = free_port();
    let _redis = Redis::start_tls(port, &[&cert, &key, &ca], "s3cret-pass");
    let password_file = write(&dir, "password", "s3cret-pass\n");
    let url = format!("rediss://127.0.0.1:{port}/0");
    let config = |ca_file: &std::path::Path| {
        Config::from_toml(&format!(
            "[sessions]\nstore = \"{url}\"\nstore_ca_file = {:?}\nstore_password_file = {password_file:?}\nstore_timeout = \"2s\"",
            ca_file.display().to_string()
        ))
        .unwrap()
    };
    let named = || in_session("secure", json!([{"id": "a", "name": "echo"}]));
    let ts = start_with(config(&ca)).await;
    let mut client = ts.client.clone();
    assert!(
        client
            .dispatch(named())
            .await
            .unwrap()
            .into_inner()
            .all_succeeded
    );
    assert_eq!(memory_of(&mut client, "secure").await.unwrap().len(), 1);

    // Another CA's certificate: the store is not trusted, so named sessions are refused.
    let other = folder("redis-tls-other");
    let [_, _, other_ca] = test_ca(&other);
    let untrusting = start_with(config(&other_ca)).await;
    let status = untrusting
        .client
        .clone()
        .dispatch(named())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);

    // The binary with a wrong password from a variable: refused, and the password it was
    // given is in no log line.
    let ca_text = ca.display().to_string();
    let binary = Binary::start_with(
        &[],
        &[
            ("TOOLGATE_SESSIONS__STORE", url.as_str()),
            ("TOOLGATE_SESSIONS__STORE_CA_FILE", ca_text.as_str()),
            ("TOOLGATE_SESSIONS__STORE_PASSWORD_ENV", "TG_REDIS_PASSWORD"),
            ("TG_REDIS_PASSWORD", "wrong-pass-4711"),
        ],
    );
    let channel = channel_to(&binary.addr).await;
    let status = ToolGateClient::new(channel)
        .dispatch(named())
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    let (_, log) = binary.terminate();
    assert!(log.contains("session store unavailable"), "{log}");
    assert!(!log.contains("wrong-pass-4711"), "{log}");
}

#[tokio::test]
async fn batches_whose_clients_leave_mid_run_still_count_toward_loop_detection() {
    require_peers!(Redis);
    let redis = Redis::start();
    let servers = replicas(&redis, 2, "").await;
    // Three batches, each a repeated echo then a long sleep, each dropped by its client while
    // it sleeps: the echoes ran, so they count, as they would on one server.
    for i in 0..3 {
        let mut client = servers[i % 2].client.clone();
        let req = in_session(
            "leaver",
            json!([same(&format!("e{i}")), {"id": format!("z{i}"), "name": "sleep", "arguments": {"ms": 5000}}]),
        );
        let left = tokio::time::timeout(Duration::from_millis(400), client.dispatch(req)).await;
        assert!(left.is_err(), "the client left before the batch ended");
    }
    // The background saves land (the echoes' three records; the cancelled sleeps record
    // nothing), and the next repeat is stopped at once.
    let deadline = Instant::now() + Duration::from_secs(10);
    while window_slots(redis.port, "leaver") != 3 {
        assert!(Instant::now() < deadline, "the left batches never saved");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = (servers[1].client.clone())
        .dispatch(in_session("leaver", json!([same("last")])))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(class(&r.results[0]), ErrorClass::LoopStopped);
}

#[tokio::test]
async fn random_interleavings_of_batches_on_three_replicas_lose_no_update() {
    require_peers!(Redis);
    let redis = Redis::start();
    // Loop detection records every call without stopping any (distinct inputs), memory keeps
    // every entry: the store must end with exactly one window slot and one memory entry per
    // call, whatever ran at once where.
    let servers = replicas(&redis, 3, "").await;
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |n: u64| {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    };
    for round in 0..4 {
        let session = format!("mixed-{round}");
        let mut calls_sent = 0;
        let mut inputs = std::collections::BTreeSet::new();
        // Waves of 1 to 6 batches at once, each on a random replica with 1 to 4 calls.
        for wave in 0..4 {
            let batches: Vec<_> = (0..1 + next(6))
                .map(|b| {
                    let calls: Vec<serde_json::Value> = (0..1 + next(4))
                        .map(|c| json!({"id": format!("w{wave}b{b}c{c}"), "name": "echo", "arguments": {"w": wave, "b": b, "c": c}}))
                        .collect();
                    calls_sent += calls.len();
                    for call in &calls {
                        inputs.insert(call["arguments"].to_string());
                    }
                    let mut client = servers[next(3) as usize].client.clone();
                    let req = in_session(&session, serde_json::Value::Array(calls));
                    async move { client.dispatch(req).await.unwrap().into_inner() }
                })
                .collect();
            for result in futures::future::join_all(batches).await {
                assert!(result.all_succeeded, "round {round} wave {wave}");
            }
        }
        let key = |part: &str| format!("toolgate:{{default:{session}}}:{part}");
        let memory = redis_cli(redis.port, &["LLEN", &key("memory")]);
        assert_eq!(
            window_slots(redis.port, &session),
            calls_sent,
            "round {round}: window slots"
        );
        assert_eq!(
            memory.trim(),
            calls_sent.to_string(),
            "round {round}: memory entries"
        );
        // And they are the calls sent, each once.
        let remembered: std::collections::BTreeSet<String> =
            memory_of(&mut servers[0].client.clone(), &session)
                .await
                .unwrap()
                .iter()
                .map(|m| {
                    let input = m.split("; input=").nth(1).unwrap();
                    input.split("; result=").next().unwrap().to_owned()
                })
                .collect();
        assert_eq!(remembered, inputs, "round {round}");
    }
}

#[tokio::test]
async fn a_session_ended_while_a_batch_runs_stays_ended_and_a_new_one_starts_blank() {
    require_peers!(Redis);
    let redis = Redis::start();
    let servers = replicas(&redis, 2, "").await;
    let mut a = servers[0].client.clone();
    let mut b = servers[1].client.clone();
    let slow = in_session(
        "ending",
        json!([
            same("e1"),
            {"id": "z", "name": "sleep", "arguments": {"ms": 800}},
            {"id": "w", "name": "scratch_write", "arguments": {"path": "late.txt", "content": "x"}}
        ]),
    );
    let running = tokio::spawn(async move { a.dispatch(slow).await.unwrap().into_inner() });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let ended = b
        .end_session(pb::EndSessionRequest {
            session_id: "ending".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(ended.ended);
    let result = running.await.unwrap();
    // The write after the end is refused, not made into a new session's file.
    assert_eq!(class(&result.results[2]), ErrorClass::ToolError);
    assert_eq!(
        result.results[2].content,
        "'late.txt' was not written: the session ended while the call ran"
    );
    // The batch's save found another generation (none): the session stays ended.
    assert_eq!(
        memory_of(&mut b, "ending").await.unwrap_err().code(),
        tonic::Code::NotFound
    );
    // Made again, it starts blank: one entry, and its window holds only the new call.
    assert!(
        b.dispatch(in_session("ending", json!([same("e2")])))
            .await
            .unwrap()
            .into_inner()
            .all_succeeded
    );
    assert_eq!(memory_of(&mut b, "ending").await.unwrap().len(), 1);
    assert_eq!(window_slots(redis.port, "ending"), 1);
}

#[tokio::test]
async fn expired_sessions_stop_counting_toward_the_cap() {
    require_peers!(Redis);
    let redis = Redis::start();
    let servers = replicas(&redis, 2, "max_sessions = 3\nidle_ttl = \"1s\"").await;
    let touch = async |replica: usize, session: &str| touch(&servers[replica], session).await;
    for (i, s) in ["old1", "old2", "old3"].iter().enumerate() {
        touch(i % 2, s).await;
    }
    // Their keys expire; the tenant's index still names them until a sample finds them gone.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    for (i, s) in ["new1", "new2", "new3"].iter().enumerate() {
        touch(i % 2, s).await;
    }
    let mut client = servers[0].client.clone();
    for live in ["new1", "new2", "new3"] {
        assert!(
            memory_of(&mut client, live).await.is_ok(),
            "{live}: not evicted for an expired one"
        );
    }
    let index = redis_cli(redis.port, &["ZCARD", "toolgate:{tenant:default}:sessions"]);
    assert_eq!(index.trim(), "3", "the expired ones were forgotten");
    // One more evicts the least recently used live one.
    touch(1, "new4").await;
    assert_eq!(
        memory_of(&mut client, "new1").await.unwrap_err().code(),
        tonic::Code::NotFound
    );
}

#[tokio::test]
async fn a_batch_whose_save_fails_still_answers_its_results_and_the_failure_is_counted() {
    require_peers!(Redis);
    let mut redis = Redis::start();
    let url = redis.url();
    let server = Binary::start_with(
        &[],
        &[
            ("TOOLGATE_SESSIONS__STORE", url.as_str()),
            ("TOOLGATE_SESSIONS__STORE_TIMEOUT", "300ms"),
        ],
    );
    let mut client = ToolGateClient::new(channel_to(&server.addr).await);
    let slow = in_session(
        "unsaved",
        json!([same("e"), {"id": "z", "name": "sleep", "arguments": {"ms": 1000}}]),
    );
    let running = tokio::spawn(async move { client.dispatch(slow).await });
    // Loaded, then the store goes while the batch sleeps: the tools ran, so their results are
    // the client's; what the batch would have saved is lost, and said so.
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.kill();
    let result = running.await.unwrap().unwrap().into_inner();
    assert!(result.all_succeeded);
    let metrics = http_get(format!("http://{}/metrics", server.admin))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("toolgate_session_store_errors_total{toolgate_operation=\"save\"} 1"),
        "{metrics}"
    );
    let (_, log) = server.terminate();
    assert!(log.contains("session state perhaps not saved"), "{log}");
}

#[tokio::test]
async fn a_live_sessions_data_outlives_its_meta_and_a_session_made_again_starts_blank() {
    require_peers!(Redis);
    let redis = Redis::start();
    let servers = replicas(
        &redis,
        2,
        "idle_ttl = \"2s\"\n[tools.builtin]\nscratch_quota_bytes = 20000",
    )
    .await;
    let pttl = |part: &str| -> i64 {
        let key = format!("toolgate:{{default:kept}}:{part}");
        redis_cli(redis.port, &["PTTL", &key])
            .trim()
            .parse()
            .unwrap()
    };
    let write = in_session(
        "kept",
        json!([{"id": "w", "name": "scratch_write", "arguments": {"path": "a.txt", "content": "x"}}]),
    );
    let written = servers[0].client.clone().dispatch(write).await.unwrap();
    assert!(written.into_inner().all_succeeded);
    // Distinct calls, so loop detection stays out of it.
    let use_it = async |replica: usize, n: usize| echo_n(&servers[replica], "kept", n).await;
    use_it(1, 0).await;
    // Every data key a batch made expires after the meta, which expires after the idle TTL.
    let meta = pttl("meta");
    assert!((1..=2000).contains(&meta), "meta {meta}");
    for part in ["window", "memory", "files"] {
        let data = pttl(part);
        assert!(data > meta + 1000, "{part} {data} against meta {meta}");
    }
    // Batches keep the meta alive well past the data keys' first expiry: they are renewed.
    for n in 1..=5 {
        tokio::time::sleep(Duration::from_millis(900)).await;
        use_it(n % 2, n).await;
        let meta = pttl("meta");
        for part in ["window", "memory", "files"] {
            let data = pttl(part);
            assert!(data > meta, "{part} {data} against meta {meta}");
        }
    }
    let mut client = servers[0].client.clone();
    assert_eq!(memory_of(&mut client, "kept").await.unwrap().len(), 7);
    // Its meta expires (here at once) while its data keys have time left: the session is gone,
    // and one made again under the same id starts blank.
    redis_cli(
        redis.port,
        &["PEXPIRE", "toolgate:{default:kept}:meta", "1"],
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(pttl("meta"), -2);
    assert!(pttl("window") > 0);
    assert_eq!(
        memory_of(&mut client, "kept").await.unwrap_err().code(),
        tonic::Code::NotFound
    );
    let read = in_session(
        "kept",
        json!([{"id": "r", "name": "scratch_read", "arguments": {"path": "a.txt"}}]),
    );
    let read = servers[1]
        .client
        .clone()
        .dispatch(read)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(read.results[0].content, "'a.txt' does not exist");
    // (Memory records successful calls: the failed read left none.)
    assert_eq!(memory_of(&mut client, "kept").await.unwrap().len(), 0);
    assert_eq!(window_slots(redis.port, "kept"), 1);
}

#[tokio::test]
async fn the_stored_window_is_trimmed_lazily_yet_only_the_newest_operations_count() {
    require_peers!(Redis);
    let redis = Redis::start();
    let mut servers = Vec::new();
    for _ in 0..2 {
        let config = Config::from_toml(&format!(
            "[sessions]\nstore = \"{}\"\n[loop_detection]\nwindow = 4\nwarn_after = 2\nstop_after = 0\n",
            redis.url()
        ))
        .unwrap();
        servers.push(start_with(config).await);
    }
    let run = async |replica: usize, q: &str| {
        let req = in_session(
            "lazy",
            json!([{"id": "c", "name": "echo", "arguments": {"q": q}}]),
        );
        let result = servers[replica].client.clone().dispatch(req).await.unwrap();
        result.into_inner().results.remove(0).content
    };
    // A, then four others push it out of a window of 4: the store still holds it (six slots,
    // under twice the window), but a second A is its first repeat in the window, no warning.
    let first = run(0, "a").await;
    for (i, q) in ["b", "c", "d", "e"].iter().enumerate() {
        run(i % 2, q).await;
    }
    assert_eq!(window_slots(redis.port, "lazy"), 5);
    assert_eq!(run(1, "a").await, first, "A aged out of the window");
    // Within the window a repeat warns as on one server.
    let warned = run(0, "a").await;
    assert!(warned.contains("[toolgate] warning"), "{warned}");
    // At twice the window (the eighth slot) the store cuts it back to the window.
    run(1, "f").await;
    assert_eq!(window_slots(redis.port, "lazy"), 4);
    run(0, "g").await;
    assert_eq!(window_slots(redis.port, "lazy"), 5);
}

#[tokio::test]
async fn the_stored_memory_is_trimmed_lazily_yet_only_the_newest_entries_are_read() {
    require_peers!(Redis);
    let redis = Redis::start();
    // Every call differs, so loop detection never steps in.
    let servers = replicas(&redis, 2, "[memory]\nmax_entries = 16").await;
    let llen = || {
        redis_cli(redis.port, &["LLEN", "toolgate:{default:trim}:memory"])
            .trim()
            .parse::<usize>()
            .unwrap()
    };
    let mut lengths = Vec::new();
    for i in 0..40 {
        let req = in_session(
            "trim",
            json!([{"id": "c", "name": "echo", "arguments": {"i": i}}]),
        );
        let result = (servers[i % 2].client.clone())
            .dispatch(req)
            .await
            .unwrap()
            .into_inner();
        assert!(result.all_succeeded);
        lengths.push(llen());
        // Whatever the store holds, a read gives the newest 16, oldest first, on either replica.
        let memory = memory_of(&mut servers[(i + 1) % 2].client.clone(), "trim")
            .await
            .unwrap();
        let newest: Vec<String> = (i.saturating_sub(15)..=i)
            .map(|n| format!("{{\"i\":{n}}}"))
            .collect();
        let inputs: Vec<String> = memory
            .iter()
            .map(|m| {
                m.split("; input=")
                    .nth(1)
                    .unwrap()
                    .split("; result=")
                    .next()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(inputs, newest, "after batch {i}");
    }
    // The list grows to an eighth over the bound (18 = 16 + 2), then is cut back to 16.
    assert_eq!(lengths.iter().max(), Some(&18), "{lengths:?}");
    assert_eq!(lengths[18], 16, "{lengths:?}");
}

#[tokio::test]
async fn a_store_that_forgot_its_scripts_is_given_them_again_and_nothing_is_lost() {
    require_peers!(Redis);
    let redis = Redis::start();
    let servers = replicas(&redis, 1, "").await;
    let mut client = servers[0].client.clone();
    let mut run = async |session: &str, id: &str, calls: usize| {
        let result = (client.clone())
            .dispatch(in_session(session, json!([same(id)])))
            .await
            .unwrap()
            .into_inner();
        assert!(result.all_succeeded, "{session}");
        assert_eq!(window_slots(redis.port, session), calls, "{session}");
        let memory = memory_of(&mut client, session).await.unwrap();
        assert_eq!(memory.len(), calls, "{session}");
    };
    run("flushed", "a", 1).await;
    // As after a failover to a replica that never saw them: the live session's save, then a new
    // session's load, meet NOSCRIPT, load their script and go on.
    assert_eq!(redis_cli(redis.port, &["SCRIPT", "FLUSH"]).trim(), "OK");
    run("flushed", "b", 2).await;
    run("made-after", "c", 1).await;
}

/// How many times Redis ran `command` (INFO commandstats; a script's own commands count too).
fn calls(port: u16, command: &str) -> u64 {
    let stats = redis_cli(port, &["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|line| line.trim().strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().unwrap())
}

#[tokio::test]
async fn a_live_session_opens_with_reads_alone_and_only_a_first_batch_or_a_renewal_runs_the_script()
{
    require_peers!(Redis);
    let redis = Redis::start();
    let servers = replicas(&redis, 2, "idle_ttl = \"60s\"").await;
    let run = async |replica: usize, n: usize| echo_n(&servers[replica], "plain", n).await;
    // Another session first, so Redis knows both scripts (an EVALSHA refused with NOSCRIPT
    // counts as a call too).
    for replica in &servers {
        let warm = in_session("warm", json!([same("w")]));
        assert!(
            replica
                .client
                .clone()
                .dispatch(warm)
                .await
                .unwrap()
                .into_inner()
                .all_succeeded
        );
    }
    let (scripts, counted) = (calls(redis.port, "evalsha"), calls(redis.port, "zadd"));
    run(0, 0).await;
    // Made by the load script, counted toward the tenant's cap, saved by the save script; its
    // first memory entry asks the tenant's ledger for an allowance (the save answers what it
    // lacks, the ledger grants a chunk, the save runs again).
    assert_eq!(calls(redis.port, "evalsha") - scripts, 4);
    assert_eq!(calls(redis.port, "zadd") - counted, 1);
    for n in 1..=4 {
        run(n % 2, n).await;
    }
    // Every later batch, on either replica: reads, and the save script alone.
    assert_eq!(calls(redis.port, "evalsha") - scripts, 4 + 4);
    assert_eq!(calls(redis.port, "zadd") - counted, 1);
    assert_eq!(
        memory_of(&mut servers[0].client.clone(), "plain")
            .await
            .unwrap()
            .len(),
        5
    );
    let meta = "toolgate:{default:plain}:meta";
    let pttl = |key: &str| -> i64 {
        redis_cli(redis.port, &["PTTL", key])
            .trim()
            .parse()
            .unwrap()
    };
    // Sets the data keys' expiry (and what the meta says of it) `ms` from now, and the meta's.
    let expire = |data_ms: u128, meta_ms: u128| {
        let until = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            + data_ms;
        redis_cli(
            redis.port,
            &["HSET", meta, "data_until", &until.to_string()],
        );
        for part in ["window", "memory"] {
            let key = format!("toolgate:{{default:plain}}:{part}");
            redis_cli(redis.port, &["PEXPIRE", &key, &data_ms.to_string()]);
        }
        redis_cli(redis.port, &["PEXPIRE", meta, &meta_ms.to_string()]);
    };
    let data_outlive_meta = || {
        for part in ["window", "memory"] {
            let data = pttl(&format!("toolgate:{{default:plain}}:{part}"));
            assert!(
                data >= pttl(meta),
                "{part} {data} against meta {}",
                pttl(meta)
            );
        }
    };
    // A meta that has used more than an eighth of its TTL is renewed as the batch loads (the
    // batch might outlast what it has left), with a command, not the script, since its data
    // keys outlive it with room to spare. (The save renews it too: one `PEXPIRE` more than a batch of a fresh meta.)
    let (scripts, renewals) = (calls(redis.port, "evalsha"), calls(redis.port, "pexpire"));
    run(1, 5).await;
    let per_batch = calls(redis.port, "pexpire") - renewals;
    expire(90_000, 20_000);
    let (scripts_before, renewals) = (calls(redis.port, "evalsha"), calls(redis.port, "pexpire"));
    run(0, 6).await;
    assert_eq!(
        calls(redis.port, "evalsha") - scripts_before,
        1,
        "the save alone"
    );
    assert_eq!(calls(redis.port, "pexpire") - renewals, per_batch + 1);
    assert!(pttl(meta) > 50_000, "renewed: {}", pttl(meta));
    data_outlive_meta();
    assert_eq!(calls(redis.port, "evalsha") - scripts, 2);
    // Data keys due for renewal (their expiry less than an idle TTL away): the next load runs
    // the script, which renews them past the meta.
    expire(10_000, 10_000);
    let scripts = calls(redis.port, "evalsha");
    run(1, 7).await;
    assert_eq!(calls(redis.port, "evalsha") - scripts, 2);
    assert_eq!(
        calls(redis.port, "zadd") - counted,
        1,
        "counted once, when made"
    );
    for part in ["window", "memory"] {
        let data = pttl(&format!("toolgate:{{default:plain}}:{part}"));
        assert!(data > pttl(meta) + 30_000, "{part} {data}");
    }
    assert_eq!(
        memory_of(&mut servers[0].client.clone(), "plain")
            .await
            .unwrap()
            .len(),
        8
    );
    assert_eq!(window_slots(redis.port, "plain"), 8);
}

#[tokio::test]
async fn a_batch_that_changes_nothing_in_its_session_still_renews_it() {
    require_peers!(Redis);
    let redis = Redis::start();
    // No loop window and no memory: a batch's calls leave nothing to save.
    let config = Config::from_toml(&format!(
        "[sessions]\nstore = \"{}\"\nidle_ttl = \"60s\"\n[loop_detection]\nenabled = false\n\
         [memory]\nmax_entries = 0\n",
        redis.url()
    ))
    .unwrap();
    let server = start_with(config).await;
    let run = async || {
        let req = in_session("quiet", json!([same("q")]));
        let r = server.client.clone().dispatch(req).await.unwrap();
        assert!(r.into_inner().all_succeeded);
    };
    run().await;
    let meta = "toolgate:{default:quiet}:meta";
    // Less left than the TTL, yet not so little that the load renews it.
    redis_cli(redis.port, &["PEXPIRE", meta, "56000"]);
    run().await;
    let left: i64 = redis_cli(redis.port, &["PTTL", meta])
        .trim()
        .parse()
        .unwrap();
    assert!(left > 57_000, "the save renewed the idle TTL: {left}");
}
