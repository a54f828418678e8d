//! Remote tools through the API, against the repository's Python worker (a real process):
//! discovery, success, tool errors, progress, deadlines seen cancelled on the worker side,
//! parallel calls, transport failures opening the breaker, and run-time registration.

use std::process::Stdio;

use serde_json::json;
use tokio::io::AsyncBufReadExt;
use toolgate::config::Config;
use toolgate::pb;
use toolgate::pb::ErrorClass;
use toolgate::pb::dispatch_event::Event;
use toolgate::protojson;

use crate::support::*;

/// The Python worker on a free port; killed on drop.
struct PyWorker {
    child: Option<tokio::process::Child>,
    addr: String,
}

impl PyWorker {
    async fn start() -> PyWorker {
        PyWorker::start_with(&[]).await
    }

    async fn start_with(args: &[&str]) -> PyWorker {
        let env = crate::peers::testenv();
        let mut child = tokio::process::Command::new(env.join("venv/bin/python"))
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/examples/python/worker.py"
            ))
            .args(["--port", "0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("the worker starts");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        tokio::io::BufReader::new(stdout)
            .read_line(&mut line)
            .await
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .expect("listening line")
            .to_owned();
        PyWorker {
            child: Some(child),
            addr,
        }
    }

    fn config(&self, extra: &str) -> Config {
        Config::from_toml(&format!(
            "[[remotes]]\nname = \"py\"\nkind = \"worker\"\nendpoint = \"http://{}\"\nprefix = \"py.\"\n{extra}",
            self.addr
        ))
        .unwrap()
    }

    async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }
}

#[tokio::test]
async fn worker_tools_are_discovered_and_run_with_progress() {
    crate::peers::require_peers!(TestEnv);
    let worker = PyWorker::start().await;
    let ts = start_with(worker.config("")).await;
    let tools = list_tools(&ts).await;
    let remote: Vec<(&str, i32)> = tools
        .iter()
        .filter(|t| t.name.starts_with("py."))
        .map(|t| (t.name.as_str(), t.source))
        .collect();
    let worker_source = pb::tool_definition::Source::Worker as i32;
    assert_eq!(
        remote,
        [
            ("py.bump_description", worker_source),
            ("py.cancellations", worker_source),
            ("py.fail_on_purpose", worker_source),
            ("py.slow_count", worker_source),
            ("py.whoami", worker_source),
            ("py.word_count", worker_source)
        ]
    );
    let (events, result) = dispatch_stream(
        &ts,
        request(json!([
            {"id": "w", "name": "py.word_count", "arguments": {"text": "to be or not"}},
            {"id": "f", "name": "py.fail_on_purpose", "arguments": {"message": "no such user"}},
            {"id": "s", "name": "py.slow_count", "arguments": {"to": 3, "delay_ms": 20}},
            {"id": "v", "name": "py.word_count", "arguments": {"text": 5}},
        ])),
    )
    .await;
    let r = &result.results;
    assert_eq!(json_of(&r[0].result), json!({"words": 4, "chars": 12}));
    assert_eq!(
        (class(&r[1]), r[1].error.as_str()),
        (ErrorClass::ToolError, "no such user")
    );
    assert_eq!(r[2].content, "counted to 3");
    assert_eq!(
        class(&r[3]),
        ErrorClass::InvalidArguments,
        "the worker's schema is enforced"
    );
    let progress: Vec<(String, f64, f64)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Progress(p) => Some((p.id.clone(), p.progress, p.total)),
            _ => None,
        })
        .collect();
    assert_eq!(
        progress,
        [
            ("s".into(), 1.0, 3.0),
            ("s".into(), 2.0, 3.0),
            ("s".into(), 3.0, 3.0)
        ]
    );
}

#[tokio::test]
async fn a_worker_error_in_several_parts_reads_as_the_parts_text() {
    crate::peers::require_peers!(TestEnv);
    let worker = PyWorker::start().await;
    let ts = start_with(worker.config("")).await;
    let result = dispatch(
        &ts,
        request(
            json!([{"id": "f", "name": "py.fail_on_purpose", "arguments": {
                "message": "no such user", "details": ["tried alice", "tried bob"]
            }}]),
        ),
    )
    .await;
    let r = &result.results[0];
    assert_eq!(
        (class(r), r.error.as_str(), r.content.as_str()),
        (
            ErrorClass::ToolError,
            "no such user\ntried alice\ntried bob",
            "no such user\ntried alice\ntried bob"
        )
    );
}

#[tokio::test]
async fn a_slow_remote_call_is_cut_by_its_deadline_and_cancelled_on_the_worker() {
    crate::peers::require_peers!(TestEnv);
    let worker = PyWorker::start().await;
    let ts = start_with(worker.config(
        "[per_tool.\"py.slow_count\"]\ntimeout = \"800ms\"\n[per_tool.\"py.slow_count\".retry]\nenabled = false",
    ))
    .await;
    // Connect to the worker first: on a loaded machine the first call's connection can take
    // longer than the deadline, and a call cut before it reached the worker is not one the
    // worker can see cancelled. The deadline leaves the worker time to start counting; the
    // count itself would take 5 s.
    let warm = dispatch(
        &ts,
        request(json!([{"id": "w", "name": "py.cancellations"}])),
    )
    .await;
    assert!(warm.results[0].success, "{:?}", warm.results[0]);
    let result = dispatch(
        &ts,
        request(
            json!([{"id": "s", "name": "py.slow_count", "arguments": {"to": 100, "delay_ms": 50}}]),
        ),
    )
    .await;
    assert_eq!(class(&result.results[0]), ErrorClass::Timeout);
    assert_eq!(
        result.results[0].error,
        "Tool 'py.slow_count' timed out after 800ms"
    );
    eventually("the worker saw the call cancelled", async || {
        let check = dispatch(
            &ts,
            request(json!([{"id": "c", "name": "py.cancellations"}])),
        )
        .await;
        let seen = json_of(&check.results[0].result)["cancelled"]
            .as_f64()
            .unwrap_or(0.0);
        seen >= 1.0
    })
    .await;
}

#[tokio::test]
async fn parallel_calls_to_a_remote_tool_overlap() {
    crate::peers::require_peers!(TestEnv);
    let worker = PyWorker::start().await;
    let ts = start_with(worker.config("")).await;
    let calls: Vec<serde_json::Value> = (0..3)
        .map(|i| json!({"id": format!("s{i}"), "name": "py.slow_count", "arguments": {"to": 2, "delay_ms": 100 + i}}))
        .collect();
    let req = parallel(json!(calls), 0);
    let (events, result) = dispatch_stream(&ts, req).await;
    assert!(result.all_succeeded, "{result:?}");
    let first_three: Vec<bool> = events
        .iter()
        .filter(|e| matches!(e, Event::ToolPre(_) | Event::ToolPost(_)))
        .take(3)
        .map(|e| matches!(e, Event::ToolPre(_)))
        .collect();
    assert_eq!(
        first_three,
        [true, true, true],
        "all three started before any finished"
    );
}

#[tokio::test]
async fn an_unreachable_worker_is_transport_and_opens_the_breaker() {
    crate::peers::require_peers!(TestEnv);
    let mut worker = PyWorker::start().await;
    let ts =
        start_with(worker.config("[breaker]\nfailure_threshold = 2\n[retry]\nmax_retries = 0"))
            .await;
    assert!(
        dispatch(
            &ts,
            request(json!([{"id": "a", "name": "py.word_count", "arguments": {"text": "x"}}]))
        )
        .await
        .all_succeeded
    );
    worker.kill().await;
    let calls = json!([
        {"id": "1", "name": "py.word_count", "arguments": {"text": "x"}},
        {"id": "2", "name": "py.word_count", "arguments": {"text": "y"}},
        {"id": "3", "name": "py.word_count", "arguments": {"text": "z"}},
    ]);
    let result = dispatch(&ts, request(calls)).await;
    let classes: Vec<ErrorClass> = result.results.iter().map(class).collect();
    assert_eq!(
        classes,
        [
            ErrorClass::Transport,
            ErrorClass::Transport,
            ErrorClass::CircuitOpen
        ],
        "{result:?}"
    );
    assert!(
        result.results[0].error.starts_with("worker 'py': "),
        "{}",
        result.results[0].error
    );
    let health = ts
        .client
        .clone()
        .get_tool_health(pb::GetToolHealthRequest {
            tool: "py.word_count".into(),
        })
        .await
        .unwrap();
    assert_eq!(
        health.into_inner().tools[0].breaker,
        pb::BreakerState::Open as i32
    );
}

fn definition(value: serde_json::Value) -> Option<protojson::Struct> {
    value.as_object().cloned().map(protojson::Struct::from)
}

#[tokio::test]
async fn remotes_are_registered_and_removed_at_run_time_when_allowed() {
    crate::peers::require_peers!(TestEnv);
    let worker = PyWorker::start().await;
    let ts = start_with(
        Config::from_toml(
            "[remote_registration]\nenabled = true\negress_allow = [\"127.0.0.0/8\"]",
        )
        .unwrap(),
    )
    .await;
    let mut client = ts.client.clone();
    let def = json!({"name": "rt", "kind": "worker", "endpoint": format!("http://{}", worker.addr), "prefix": "rt.", "tools": ["word_*"]});
    let added = client
        .register_remote(pb::RegisterRemoteRequest {
            definition: definition(def.clone()),
        })
        .await
        .unwrap()
        .into_inner()
        .tools;
    let names: Vec<&str> = added.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["rt.word_count"], "the tool filter applies");
    let result = dispatch(
        &ts,
        request(json!([{"id": "a", "name": "rt.word_count", "arguments": {"text": "a b"}}])),
    )
    .await;
    assert_eq!(json_of(&result.results[0].result)["words"], json!(2));
    let again = client
        .register_remote(pb::RegisterRemoteRequest {
            definition: definition(def),
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::AlreadyExists);

    let removed = client
        .unregister_remote(pb::UnregisterRemoteRequest { name: "rt".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(removed.tools, ["rt.word_count"]);
    let result = dispatch(
        &ts,
        request(json!([{"id": "a", "name": "rt.word_count", "arguments": {"text": "a b"}}])),
    )
    .await;
    assert_eq!(class(&result.results[0]), ErrorClass::UnknownTool);

    // An unreachable remote is a clear error and leaves nothing behind.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gone = json!({"name": "gone", "kind": "worker", "endpoint": format!("http://127.0.0.1:{port}"), "timeout": "1s"});
    let status = client
        .register_remote(pb::RegisterRemoteRequest {
            definition: definition(gone),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    let bad = json!({"name": "bad", "kind": "carrier-pigeon"});
    let status = client
        .register_remote(pb::RegisterRemoteRequest {
            definition: definition(bad),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    let tools = list_tools(&ts).await;
    assert!(
        tools
            .iter()
            .all(|t| !t.name.starts_with("rt.") && !t.name.starts_with("gone"))
    );
}

#[tokio::test]
async fn registration_is_off_by_default() {
    let ts = start().await;
    let status = ts
        .client
        .clone()
        .register_remote(pb::RegisterRemoteRequest {
            definition: definition(json!({"name": "x", "kind": "worker"})),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::PermissionDenied);
}

#[tokio::test]
async fn the_trace_context_and_call_metadata_reach_the_worker() {
    crate::peers::require_peers!(TestEnv);
    let worker = PyWorker::start().await;
    let ts = start_with(worker.config("")).await;
    let mut req = tonic::Request::new(request(json!([{"id": "t1", "name": "py.whoami"}])));
    req.metadata_mut().insert(
        "traceparent",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
            .parse()
            .unwrap(),
    );
    let result = ts.client.clone().dispatch(req).await.unwrap().into_inner();
    let seen = json_of(&result.results[0].result);
    let traceparent = seen["traceparent"].as_str().expect("a traceparent arrived");
    assert!(
        traceparent.starts_with("00-0af7651916cd43dd8448eb211c80319c-"),
        "{traceparent}"
    );
    assert!(
        !traceparent.contains("b7ad6b7169203331"),
        "the call is a new span of the trace"
    );
    assert_eq!(
        (seen["tool_name"].as_str(), seen["tool_call_id"].as_str()),
        (Some("py.whoami"), Some("t1"))
    );
}

async fn tool(ts: &TestServer, name: &str) -> pb::ToolDefinition {
    let tools = list_tools(ts).await;
    tools.into_iter().find(|t| t.name == name).expect("listed")
}

#[tokio::test]
async fn a_changed_definition_is_quarantined_until_accepted() {
    crate::peers::require_peers!(TestEnv);
    use pb::tool_definition::Status;
    let worker = PyWorker::start().await;
    let ts = start_with(
        worker.config("[remote_registration]\nenabled = true\negress_allow = [\"127.0.0.0/8\"]"),
    )
    .await;
    let before = tool(&ts, "py.word_count").await;
    assert_eq!(
        (before.status, before.remote.as_str()),
        (Status::Pinned as i32, "py")
    );
    assert_eq!(before.digest.len(), 64, "SHA-256 in hex");
    let local = tool(&ts, "echo").await;
    assert_eq!(local.status, Status::Local as i32);

    // The worker changes the definition; a refresh notices and quarantines the tool.
    dispatch(
        &ts,
        request(json!([{"id": "b", "name": "py.bump_description"}])),
    )
    .await;
    let mut client = ts.client.clone();
    client
        .refresh_remote(pb::RefreshRemoteRequest { name: "py".into() })
        .await
        .unwrap();
    let changed = tool(&ts, "py.word_count").await;
    assert_eq!(changed.status, Status::Quarantined as i32);
    assert_eq!(
        changed.digest, before.digest,
        "the pinned digest stays until accepted"
    );
    assert_ne!(changed.changed_digest, before.digest);
    assert_eq!(
        tool(&ts, "py.whoami").await.status,
        Status::Pinned as i32,
        "unchanged tools keep running"
    );
    let result = dispatch(
        &ts,
        request(json!([{"id": "w", "name": "py.word_count", "arguments": {"text": "a"}}])),
    )
    .await;
    assert_eq!(class(&result.results[0]), ErrorClass::Quarantined);
    assert!(
        result.results[0]
            .error
            .starts_with("tool 'py.word_count' is quarantined: its definition changed"),
        "{}",
        result.results[0].error
    );

    // An operator accepts; the new definition is pinned and runs.
    let accepted = client
        .accept_tool_change(pb::AcceptToolChangeRequest {
            tool: "py.word_count".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (accepted.status, accepted.digest.clone()),
        (Status::Pinned as i32, changed.changed_digest.clone())
    );
    assert!(accepted.description.ends_with("(revision 1)"));
    let result = dispatch(
        &ts,
        request(json!([{"id": "w", "name": "py.word_count", "arguments": {"text": "a"}}])),
    )
    .await;
    assert!(result.all_succeeded);
    let again = client
        .accept_tool_change(pb::AcceptToolChangeRequest {
            tool: "py.word_count".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::FailedPrecondition);
}

#[tokio::test]
async fn a_remote_can_accept_changes_by_configuration() {
    crate::peers::require_peers!(TestEnv);
    use pb::tool_definition::Status;
    let worker = PyWorker::start().await;
    let ts =
        start_with(worker.config("accept_changes = true\n[remote_registration]\nenabled = true\negress_allow = [\"127.0.0.0/8\"]"))
            .await;
    let before = tool(&ts, "py.word_count").await;
    dispatch(
        &ts,
        request(json!([{"id": "b", "name": "py.bump_description"}])),
    )
    .await;
    ts.client
        .clone()
        .refresh_remote(pb::RefreshRemoteRequest { name: "py".into() })
        .await
        .unwrap();
    let after = tool(&ts, "py.word_count").await;
    assert_eq!(after.status, Status::Pinned as i32);
    assert_ne!(after.digest, before.digest);
}

#[tokio::test]
async fn a_worker_is_reached_over_tls_verified_by_the_configured_ca() {
    crate::peers::require_peers!(TestEnv);
    // A CA and a certificate for "worker.test", made for this test.
    let dir = std::env::temp_dir().join(format!("toolgate-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["worker.test".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let (ca_file, cert_file, key_file) = (
        dir.join("ca.pem"),
        dir.join("worker.pem"),
        dir.join("worker.key"),
    );
    std::fs::write(&ca_file, ca.pem()).unwrap();
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, key.serialize_pem()).unwrap();

    let worker = PyWorker::start_with(&[
        "--tls-cert",
        cert_file.to_str().unwrap(),
        "--tls-key",
        key_file.to_str().unwrap(),
    ])
    .await;
    let remote = |ca: &std::path::Path| {
        format!(
            "[[remotes]]\nname = \"tls\"\nkind = \"worker\"\nendpoint = \"https://{}\"\nprefix = \"py.\"\n\
             required = true\n[remotes.tls]\nca_file = {:?}\ndomain = \"worker.test\"\n",
            worker.addr,
            ca.display().to_string()
        )
    };
    let ts = start_with(Config::from_toml(&remote(&ca_file)).unwrap()).await;
    let result = dispatch(
        &ts,
        request(
            json!([{"id": "w", "name": "py.word_count", "arguments": {"text": "over tls now"}}]),
        ),
    )
    .await;
    assert!(result.all_succeeded, "{:?}", result.results[0]);
    assert!(
        result.results[0].content.contains('3'),
        "{:?}",
        result.results[0]
    );

    // A CA that did not sign the worker's certificate: the required worker stops the start.
    let other_key = rcgen::KeyPair::generate().unwrap();
    let mut other = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    other.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let other_file = dir.join("other.pem");
    std::fs::write(&other_file, other.self_signed(&other_key).unwrap().pem()).unwrap();
    let refused = toolgate::Server::new(Config::from_toml(&remote(&other_file)).unwrap())
        .start_local()
        .await;
    let error = match refused {
        Ok(_) => panic!("an unverified worker must not be registered"),
        Err(error) => error.to_string(),
    };
    assert!(error.contains("invalid peer certificate"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_worker_that_starts_after_toolgate_is_connected_in_the_background() {
    crate::peers::require_peers!(TestEnv);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = format!(
        "[[remotes]]\nname = \"late\"\nkind = \"worker\"\nendpoint = \"http://127.0.0.1:{port}\"\nprefix = \"py.\"\ntimeout = \"1s\"\n"
    );
    let ts = start_with(Config::from_toml(&config).unwrap()).await;
    let result = dispatch(
        &ts,
        request(json!([{"id": "u", "name": "py.word_count", "arguments": {"text": "a b"}}])),
    )
    .await;
    assert_eq!(class(&result.results[0]), ErrorClass::UnknownTool);

    let _worker = PyWorker::start_with(&["--port", &port.to_string()]).await;
    eventually("the late worker's tools arrived", async || {
        dispatch(
            &ts,
            request(json!([{"id": "w", "name": "py.word_count", "arguments": {"text": "a b"}}])),
        )
        .await
        .all_succeeded
    })
    .await;
}

#[tokio::test]
async fn a_restarted_worker_is_reconnected_and_its_tools_listed_again() {
    crate::peers::require_peers!(TestEnv);
    // The first worker leaves whoami out; the restarted one (a new version) offers it.
    let mut worker = PyWorker::start_with(&["--without", "whoami"]).await;
    let port = worker.addr.rsplit_once(':').unwrap().1.to_owned();
    let ts = start_with(worker.config(
        "[breaker]\ncooldown = \"200ms\"\n[retry]\nmax_retries = 0\n[loop_detection]\nenabled = false\n",
    ))
    .await;
    let call =
        || request(json!([{"id": "w", "name": "py.word_count", "arguments": {"text": "x y"}}]));
    assert!(dispatch(&ts, call()).await.all_succeeded);
    worker.kill().await;
    let down = dispatch(&ts, call()).await;
    assert_eq!(class(&down.results[0]), ErrorClass::Transport);

    let _again = PyWorker::start_with(&["--port", &port]).await;
    eventually("calls work again once the worker is back", async || {
        dispatch(&ts, call()).await.all_succeeded
    })
    .await;
    eventually(
        "the restarted worker's tools were listed again",
        async || list_tools(&ts).await.iter().any(|t| t.name == "py.whoami"),
    )
    .await;
}
