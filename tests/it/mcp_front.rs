//! The MCP front door through the real port, with real MCP clients: the official Python SDK's
//! client in both protocol generations (the 2025-11-25 handshake and the stateless 2026-07-28
//! revision) for listing, calls, failed and unknown calls, loop detection across one session's
//! calls, progress from a remote tool, cancellation; and plain HTTP for what a client meets
//! before it is let in (401 with `resource_metadata`, the RFC 9728 document, a foreign
//! `Origin`, another identity's session).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use toolgate::config::Config;

use crate::support::*;

const MODES: [&str; 2] = ["legacy", "2026-07-28"];

fn driver() -> PathBuf {
    PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/mcp/front_client.py"
    ))
}

/// A server with the MCP front on (any free loopback port) and `extra` config after it.
async fn start_mcp(extra: &str) -> (TestServer, String) {
    let config = Config::from_toml(&format!("[mcp]\nlisten = \"127.0.0.1:0\"\n{extra}")).unwrap();
    let ts = start_with(config).await;
    let addr = ts.server.mcp_addr().expect("the MCP listener is on");
    (ts, format!("http://{addr}/mcp"))
}

/// Runs the Python SDK driver (`tests/mcp/front_client.py`) and returns what it printed.
async fn sdk(url: &str, mode: &str, scenario: &str, flags: &[&str]) -> Value {
    let python = crate::peers::testenv().join("venv/bin/python");
    let mut command = Command::new(python);
    command
        .arg(driver())
        .args([url, mode, scenario])
        .args(flags);
    run_json_driver(command, &format!("{scenario} ({mode})")).await
}

#[tokio::test]
async fn the_python_sdk_lists_and_calls_through_the_pipeline_in_both_revisions() {
    crate::peers::require_peers!(TestEnv);
    for mode in MODES {
        // A server each: the failing calls below count towards the tool's breaker.
        let (ts, url) = start_mcp("").await;
        let out = sdk(&url, mode, "calls", &[]).await;
        let expected = if mode == "legacy" { "2025-11-25" } else { mode };
        assert_eq!(out["protocol"], expected, "{out}");
        // The names ListTools uses, with the schema and the hints toolgate knows.
        let tools = out["tools"].as_object().unwrap();
        let listed: Vec<String> = list_tools(&ts).await.into_iter().map(|t| t.name).collect();
        let mut names: Vec<&String> = tools.keys().collect();
        names.sort();
        let mut grpc: Vec<&String> = listed.iter().collect();
        grpc.sort();
        assert_eq!(names, grpc, "{mode}");
        assert_eq!(tools["echo"]["schema"]["type"], "object", "{mode}");
        assert!(tools["echo"]["annotations"].is_object(), "{mode}: {out}");
        // A call that worked: its JSON as structuredContent, the run in _meta.
        let echo = &out["echo"];
        assert_eq!(echo["is_error"], false, "{mode}: {echo}");
        assert_eq!(echo["structured"], json!({"text": "hi"}), "{mode}");
        assert_eq!(echo["meta"]["error_class"], "NONE", "{mode}");
        assert_eq!(echo["meta"]["attempts"], 1, "{mode}");
        // A call that failed: isError, with the text the model reads from DispatchBatch.
        let fail = &out["fail"];
        assert_eq!(fail["is_error"], true, "{mode}: {fail}");
        assert_eq!(fail["meta"]["error_class"], "TOOL_ERROR", "{mode}: {fail}");
        let grpc = dispatch(
            &ts,
            request(json!([{"id": "f", "name": "fail", "arguments": {}}])),
        )
        .await;
        assert_eq!(fail["text"], grpc.results[0].content, "{mode}");
        // An unknown tool is a result the model can act on, with the suggestion.
        let unknown = &out["unknown"];
        assert_eq!(unknown["is_error"], true, "{mode}");
        assert_eq!(unknown["meta"]["error_class"], "UNKNOWN_TOOL", "{mode}");
        assert!(
            unknown["text"]
                .as_str()
                .unwrap()
                .contains("Did you mean 'echo'"),
            "{mode}: {unknown}"
        );
        // Arguments the schema refuses: the validation layer's answer, each violation listed.
        let invalid = &out["invalid"];
        assert_eq!(invalid["is_error"], true, "{mode}: {invalid}");
        assert_eq!(
            invalid["meta"]["error_class"], "INVALID_ARGUMENTS",
            "{mode}: {invalid}"
        );
        assert!(
            invalid["text"]
                .as_str()
                .unwrap()
                .starts_with("arguments do not match the input schema of 'scratch_write': "),
            "{mode}: {invalid}"
        );
    }
}

#[tokio::test]
async fn loop_detection_spans_the_calls_of_one_mcp_session() {
    crate::peers::require_peers!(TestEnv);
    let (_ts, url) = start_mcp("").await;
    for mode in MODES {
        // A separate session for each revision, so the second does not start on the first's
        // window: the legacy one is the MCP session, the stateless one is named.
        let session = format!("loop-{}", mode.replace('-', ""));
        let flags: &[&str] = if mode == "legacy" {
            &[]
        } else {
            &["--session", &session]
        };
        let out = sdk(&url, mode, "loop", flags).await;
        let results = out["results"].as_array().unwrap();
        let classes: Vec<&str> = results
            .iter()
            .map(|r| r["meta"]["error_class"].as_str().unwrap())
            .collect();
        // The defaults: the model is warned at the 3rd same result, and the call is refused
        // once it has repeated 10 times.
        assert_eq!(classes[..10], ["NONE"; 10], "{mode}: {out}");
        assert!(
            results[2]["text"]
                .as_str()
                .unwrap()
                .contains("[toolgate] warning"),
            "{mode}: the model is warned: {}",
            results[2]
        );
        assert_eq!(classes[10], "LOOP_STOPPED", "{mode}: {out}");
        assert!(
            results[10]["text"]
                .as_str()
                .unwrap()
                .contains("Loop detected"),
            "{mode}: {}",
            results[10]
        );
    }
}

/// The MCP reference server (server-everything over stdio) as the remote `ev.`.
fn everything_remote() -> String {
    let everything = crate::mcp::everything_js().display().to_string();
    format!(
        "[[remotes]]\nname = \"everything\"\nkind = \"mcp\"\nprefix = \"ev.\"\ntimeout = \"30s\"\ncommand = [\"node\", {everything:?}, \"stdio\"]\n"
    )
}

#[tokio::test]
async fn progress_of_a_remote_tool_reaches_the_clients_progress_token() {
    crate::peers::require_peers!(TestEnv, Everything);
    let (_ts, url) = start_mcp(&everything_remote()).await;
    // Progress needs the request's own stream: the legacy session's POST stream carries it.
    let out = sdk(&url, "legacy", "progress", &[]).await;
    assert_eq!(out["result"]["is_error"], false, "{out}");
    let progress = out["progress"].as_array().unwrap();
    assert_eq!(
        progress.len(),
        3,
        "every progress notification arrives, before the result: {out}"
    );
    assert_eq!(progress.last().unwrap()["total"], 3.0, "{out}");
}

#[tokio::test]
async fn a_remote_tools_output_schema_is_listed_and_its_result_conforms() {
    crate::peers::require_peers!(TestEnv, Everything);
    let (_ts, url) = start_mcp(&everything_remote()).await;
    for mode in MODES {
        let out = sdk(&url, mode, "structured", &[]).await;
        let schema = &out["output_schema"];
        assert_eq!(schema["type"], "object", "{mode}: {out}");
        assert_eq!(
            schema["properties"]["temperature"]["type"], "number",
            "{mode}: {out}"
        );
        assert_eq!(out["result"]["is_error"], false, "{mode}: {out}");
        assert_eq!(
            out["result"]["structured"],
            json!({"temperature": 36, "conditions": "Light rain / drizzle", "humidity": 82}),
            "{mode}: {out}"
        );
    }
}

#[tokio::test]
async fn a_cancelled_mcp_call_cancels_the_tool() {
    crate::peers::require_peers!(TestEnv);
    let (ts, url) = start_mcp("").await;
    let out = sdk(&url, "legacy", "cancel", &[]).await;
    assert_eq!(out["cancelled"], true, "{out}");
    assert_eq!(out["after"]["is_error"], false, "{out}");
    eventually("the tool saw its cancellation", async || {
        ts.saw_cancel.load(std::sync::atomic::Ordering::SeqCst)
    })
    .await;
}

/// A POST of one JSON-RPC message, as a client sends it.
async fn post(url: &str, headers: &[(&str, &str)], body: Value) -> reqwest::Response {
    let client = toolgate_remotes::tls::client_builder(None, Duration::from_secs(10))
        .unwrap()
        .build()
        .unwrap();
    let mut request = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .timeout(Duration::from_secs(10));
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(body.to_string()).send().await.unwrap()
}

fn initialize() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}})
}

/// A stateless 2026-07-28 `tools/call` of `name` with `arguments`, as an SDK sends it.
fn stateless_call(id: Value, name: &str, arguments: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
    "name": name, "arguments": arguments, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    }}})
}

#[tokio::test]
async fn the_stateless_fast_path_answers_as_rmcp_does() {
    // The same requests, taken by the fast path and (with a header the fast path leaves to
    // rmcp, which accepts it: no tool declares `Mcp-Param-*` headers) by rmcp: the same status
    // and the same reply, but for the sealed request_state, which differs every time.
    let (_ts, url) = start_mcp(
        r#"[[permissions.rules]]
        id = "ask-scratch"
        tools = "scratch_write"
        decision = "ask"
        reason = "writes need a person"
        requester_may_answer = true"#,
    )
    .await;
    let long = "x".repeat(300);
    let cases = [
        ("echo", stateless_call(json!(1), "echo", json!({"n": 1}))),
        ("fail", stateless_call(json!("s-2"), "fail", json!({}))),
        ("unknown", stateless_call(json!(3), "ecoh", json!({"n": 1}))),
        (
            "invalid",
            stateless_call(json!(4), "scratch_write", json!({"path": 7})),
        ),
        ("long id", stateless_call(json!(long), "echo", json!({}))),
        (
            "asked",
            stateless_call(
                json!(6),
                "scratch_write",
                json!({"path": "a", "content": "b"}),
            ),
        ),
    ];
    for (case, body) in cases {
        let name = body["params"]["name"].as_str().unwrap().to_owned();
        let mut answers = Vec::new();
        for extra in [None, Some(("mcp-param-unused", "1"))] {
            let mut headers = vec![
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", "tools/call"),
                ("mcp-name", name.as_str()),
            ];
            headers.extend(extra);
            let reply = post(&url, &headers, body.clone()).await;
            let status = reply.status();
            let kind = reply.headers()["content-type"].to_str().unwrap().to_owned();
            let mut answer: Value = reply.json().await.unwrap();
            if let Some(state) = answer["result"].get_mut("requestState") {
                assert!(state.as_str().is_some_and(|s| s.len() > 20), "{case}");
                *state = json!("sealed");
            }
            answers.push((status, kind, answer));
        }
        assert_eq!(answers[0], answers[1], "{case}");
        assert_eq!(answers[0].0, 200, "{case}");
    }
}

#[tokio::test]
async fn a_client_without_credentials_is_sent_to_the_protected_resource_metadata() {
    let key = crate::security::JwtKey::new("k1");
    let dir = folder("mcp-auth");
    let jwks = write(&dir, "jwks.json", &json!({"keys": [key.jwk]}).to_string());
    let (_ts, url) = start_mcp(&format!(
        r#"resource = "https://tools.example.test/mcp"
        authorization_servers = ["https://idp.test"]
        [auth]
        anonymous = "none"
        [[auth.tokens]]
        id = "acme-agent"
        tenant = "acme"
        sha256 = "{}"
        [[auth.tokens]]
        id = "globex-agent"
        tenant = "globex"
        sha256 = "{}"
        [auth.jwt]
        jwks_file = "{jwks}"
        issuer = "https://idp.test"
        audience = "toolgate"
        "#,
        sha256_hex("acme-secret"),
        sha256_hex("globex-secret"),
    ))
    .await;
    let metadata_url = "https://tools.example.test/.well-known/oauth-protected-resource/mcp";
    // No credentials: 401, and where to learn how to get a token.
    let reply = post(&url, &[], initialize()).await;
    assert_eq!(reply.status(), 401);
    let challenge = reply.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        challenge,
        format!("Bearer resource_metadata=\"{metadata_url}\"")
    );
    // A token that is not known: 401 invalid_token.
    let reply = post(&url, &[("authorization", "Bearer guess")], initialize()).await;
    assert_eq!(reply.status(), 401);
    assert!(
        reply.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .contains("error=\"invalid_token\""),
    );
    // The metadata document, at the path the challenge names (and at the bare well-known path).
    let base = url.trim_end_matches("/mcp");
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let document: Value = http_get(format!("{base}{path}"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            document["resource"], "https://tools.example.test/mcp",
            "{path}"
        );
        assert_eq!(
            document["authorization_servers"],
            json!(["https://idp.test"])
        );
        assert_eq!(document["bearer_methods_supported"], json!(["header"]));
    }
    // A JWT for this resource (RFC 8707: its audience is the endpoint's URL) is let in; one
    // for the gRPC audience, or another resource, is not.
    let jwt = |aud: &str| {
        key.token(
            "k1",
            json!({"iss": "https://idp.test", "aud": aud, "sub": "alice", "tenant": "acme",
                   "exp": crate::security::now() + 600}),
        )
    };
    for (aud, status) in [
        ("https://tools.example.test/mcp", 200),
        ("toolgate", 401),
        ("https://other.example.test/mcp", 401),
    ] {
        let bearer = format!("Bearer {}", jwt(aud));
        let reply = post(&url, &[("authorization", &bearer)], initialize()).await;
        assert_eq!(reply.status(), status, "aud {aud}");
    }
    // A session opened by one identity does not exist for another (even of another tenant
    // that learnt its id); its owner goes on using it.
    let reply = post(
        &url,
        &[("authorization", "Bearer acme-secret")],
        initialize(),
    )
    .await;
    assert_eq!(reply.status(), 200);
    let session = reply.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let as_other = [
        ("authorization", "Bearer globex-secret"),
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    assert_eq!(post(&url, &as_other, list.clone()).await.status(), 404);
    let as_owner = [
        ("authorization", "Bearer acme-secret"),
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    assert_eq!(post(&url, &as_owner, initialized).await.status(), 202);
    assert_eq!(post(&url, &as_owner, list).await.status(), 200);
}

#[tokio::test]
async fn a_foreign_origin_and_a_foreign_host_are_refused() {
    let (_ts, url) = start_mcp("allowed_origins = [\"http://localhost:*\"]\n").await;
    let reply = post(&url, &[("origin", "https://evil.example")], initialize()).await;
    assert_eq!(reply.status(), 403, "a page on another site cannot call");
    let reply = post(&url, &[("origin", "http://localhost:3000")], initialize()).await;
    assert_eq!(reply.status(), 200, "an allowed origin can");
    // DNS rebinding: a name that resolves here but is not this server's.
    let reply = post(&url, &[("host", "evil.example")], initialize()).await;
    assert_eq!(reply.status(), 403);
}

/// A server whose `echo` asks a person first, with tokens for two agents and an approver of
/// tenant acme; the agents may answer their own asks when `own` says so.
async fn start_asking(own: bool) -> (TestServer, String) {
    start_mcp(&format!(
        r#"[approvals]
        timeout = "30s"
        [auth]
        anonymous = "none"
        [[auth.tokens]]
        id = "agent"
        tenant = "acme"
        sha256 = "{}"
        [[auth.tokens]]
        id = "agent2"
        tenant = "acme"
        sha256 = "{}"
        [[auth.tokens]]
        id = "approver"
        tenant = "acme"
        roles = ["approver"]
        sha256 = "{}"
        [[permissions.rules]]
        id = "ask-echo"
        tools = "echo"
        decision = "ask"
        reason = "echo needs a person"
        requester_may_answer = {own}
        "#,
        sha256_hex("agent-secret"),
        sha256_hex("agent2-secret"),
        sha256_hex("approver-secret"),
    ))
    .await
}

#[tokio::test]
async fn the_person_at_the_client_approves_with_edits_or_denies_in_both_revisions() {
    crate::peers::require_peers!(TestEnv);
    let (_ts, url) = start_asking(true).await;
    for mode in MODES {
        let out = sdk(&url, mode, "approve", &["--token", "agent-secret"]).await;
        assert_eq!(out["asked"].as_array().unwrap().len(), 1, "{mode}: {out}");
        let asked = out["asked"][0].as_str().unwrap();
        assert!(
            asked.contains("'echo'") && asked.contains("echo needs a person"),
            "{asked}"
        );
        let result = &out["result"];
        assert_eq!(result["is_error"], false, "{mode}: {out}");
        // The edited arguments ran (checked again against the schema and the rules).
        assert_eq!(
            result["structured"],
            json!({"text": "edited"}),
            "{mode}: {out}"
        );

        let out = sdk(&url, mode, "deny", &["--token", "agent-secret"]).await;
        let result = &out["result"];
        assert_eq!(result["is_error"], true, "{mode}: {out}");
        assert_eq!(
            result["meta"]["error_class"], "APPROVAL_DENIED",
            "{mode}: {out}"
        );
        assert!(
            result["text"].as_str().unwrap().contains("not today"),
            "{mode}: {out}"
        );
    }
}

#[tokio::test]
async fn an_agent_that_may_not_answer_its_own_ask_waits_for_an_approver() {
    crate::peers::require_peers!(TestEnv);
    let (ts, url) = start_asking(false).await;
    for mode in MODES {
        let url = url.clone();
        let client =
            tokio::spawn(
                async move { sdk(&url, mode, "approver", &["--token", "agent-secret"]).await },
            );
        // The approver finds the call waiting and approves it over gRPC.
        let mut approvals = Vec::new();
        eventually("the call waits for approval", async || {
            approvals = ts
                .client
                .clone()
                .list_approvals(as_caller(
                    Some("approver-secret"),
                    toolgate::pb::ListApprovalsRequest::default(),
                ))
                .await
                .unwrap()
                .into_inner()
                .approvals;
            !approvals.is_empty()
        })
        .await;
        let resolve = toolgate::pb::ResolveApprovalRequest {
            approval_id: approvals[0].approval_id.clone(),
            decision: toolgate::pb::resolve_approval_request::Decision::Approve as i32,
            ..Default::default()
        };
        ts.client
            .clone()
            .resolve_approval(as_caller(Some("approver-secret"), resolve))
            .await
            .unwrap();
        let out = client.await.unwrap();
        // The agent was never asked: only an approver may answer.
        assert_eq!(out["asked"], json!([]), "{mode}: {out}");
        assert_eq!(out["result"]["is_error"], false, "{mode}: {out}");
        assert_eq!(
            out["result"]["structured"],
            json!({"text": "original"}),
            "{mode}"
        );
        let progress = out["progress"].as_array().unwrap();
        assert!(
            progress.iter().any(|m| m
                .as_str()
                .unwrap_or_default()
                .contains("waiting for an approver")),
            "{mode}: the client hears why it waits: {out}"
        );
    }
}

#[tokio::test]
async fn a_request_state_is_good_once_for_its_own_caller_and_cannot_be_forged() {
    crate::peers::require_peers!(TestEnv);
    let (_ts, url) = start_asking(true).await;
    let out = sdk(
        &url,
        "2026-07-28",
        "state-abuse",
        &["--token", "agent-secret", "--token2", "agent2-secret"],
    )
    .await;
    assert_request_state_abuse_refused(&out);
}

/// What the `state-abuse` scenario must see: a forged `request_state`, another identity's, and
/// a replay refused; the owner's one redemption taken.
fn assert_request_state_abuse_refused(out: &Value) {
    assert_eq!(out["input_required"], true, "{out}");
    assert_eq!(
        out["forged"]["ok"], false,
        "a tampered request_state: {out}"
    );
    assert_eq!(
        out["other_caller"]["ok"], false,
        "another identity's: {out}"
    );
    assert_eq!(out["owner"]["ok"], true, "{out}");
    assert_eq!(out["owner"]["is_error"], false, "{out}");
    assert_eq!(out["replayed"]["ok"], false, "redeemed twice: {out}");
}

/// The binary under test.
fn toolgate() -> String {
    env!("CARGO_BIN_EXE_toolgate").to_owned()
}

#[tokio::test]
async fn toolgate_mcp_serves_stdio_with_an_engine_in_the_process() {
    crate::peers::require_peers!(TestEnv);
    let dir = folder("mcp-stdio");
    let config = write(&dir, "toolgate.toml", "[loop_detection]\nstop_after = 4\n");
    for mode in MODES {
        let command = [toolgate(), "mcp".into(), "--config".into(), config.clone()];
        let mut flags: Vec<&str> = vec!["--"];
        flags.extend(command.iter().map(String::as_str));
        let out = sdk("stdio", mode, "basic", &flags).await;
        assert!(
            out["tools"].as_array().unwrap().contains(&json!("echo")),
            "{mode}: {out}"
        );
        assert_eq!(
            out["echo"]["structured"],
            json!({"text": "hi"}),
            "{mode}: {out}"
        );
        assert_eq!(
            out["unknown"]["meta"]["error_class"], "UNKNOWN_TOOL",
            "{mode}: {out}"
        );
        // The config is the engine's: the loop stops at its 4th repeat.
        let out = sdk("stdio", mode, "loop", &flags).await;
        let classes: Vec<&str> = out["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["meta"]["error_class"].as_str().unwrap())
            .collect();
        assert_eq!(classes[4], "LOOP_STOPPED", "{mode}: {classes:?}");
    }
}

#[tokio::test]
async fn the_stdio_bridge_takes_the_servers_sessions_identities_and_approvals() {
    crate::peers::require_peers!(TestEnv);
    let (ts, _url) = start_asking(true).await;
    let addr = ts.server.local_addr().to_string();
    let bridge = |token: &str| {
        vec![
            "--env".to_owned(),
            format!("TG_BRIDGE_TOKEN={token}"),
            "--".to_owned(),
            toolgate(),
            "mcp".into(),
            "--connect".into(),
            addr.clone(),
            "--token-env".into(),
            "TG_BRIDGE_TOKEN".into(),
        ]
    };
    let flags = bridge("agent-secret");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    // The approval the server lets this identity answer is put to the person at the client.
    let out = sdk("stdio", "legacy", "approve", &flags).await;
    assert_eq!(out["asked"].as_array().unwrap().len(), 1, "{out}");
    assert_eq!(
        out["result"]["structured"],
        json!({"text": "edited"}),
        "{out}"
    );
    // Loop detection runs in the server's session for the bridge run.
    let out = sdk("stdio", "legacy", "basic", &flags).await;
    assert_eq!(
        out["unknown"]["meta"]["error_class"], "UNKNOWN_TOOL",
        "{out}"
    );
    // A token the server does not know: the client is told.
    let wrong = bridge("guess");
    let wrong: Vec<&str> = wrong.iter().map(String::as_str).collect();
    let python = crate::peers::testenv().join("venv/bin/python");
    let mut command = Command::new(python);
    command
        .arg(driver())
        .args(["stdio", "legacy", "basic"])
        .args(&wrong);
    crate::processes::own_group(&mut command);
    // Off the runtime: the server under test answers the bridge on it.
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "{text}");
    assert!(text.contains("Unauthenticated"), "{text}");
}

#[tokio::test]
async fn a_remote_registered_at_run_time_reaches_listening_clients_as_list_changed() {
    crate::peers::require_peers!(TestEnv);
    let (ts, url) =
        start_mcp("[remote_registration]\nenabled = true\negress_allow = [\"127.0.0.0/8\"]\n")
            .await;
    for (n, mode) in MODES.into_iter().enumerate() {
        let python = crate::peers::testenv().join("venv/bin/python");
        let mut command = Command::new(python);
        command
            .arg(driver())
            .args([url.as_str(), mode, "list-changed"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        crate::processes::own_group(&mut command);
        let mut child = command.spawn().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (lines, mut heard) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let _ = lines.send(line);
            }
        });
        let ready = tokio::time::timeout(Duration::from_secs(20), heard.recv()).await;
        assert_eq!(ready.unwrap().as_deref(), Some("ready"), "{mode}");
        let name = format!("weather_{n}");
        ts.client
            .clone()
            .register_remote(toolgate::pb::RegisterRemoteRequest {
                definition: Some(toolgate_proto::protojson::Struct::from(
                    json!({
                        "name": format!("rt-{n}"), "kind": "http", "url": "http://127.0.0.1:9/weather",
                        "definition": {"name": name, "description": "current weather"}
                    })
                    .as_object()
                    .unwrap()
                    .clone(),
                )),
            })
            .await
            .unwrap();
        let last = tokio::time::timeout(Duration::from_secs(30), heard.recv())
            .await
            .unwrap()
            .unwrap();
        let out: Value = serde_json::from_str(&last).unwrap();
        let _ = tokio::task::spawn_blocking(move || child.wait()).await;
        assert_eq!(out["added"], json!([name]), "{mode}: {out}");
    }
}

#[tokio::test]
async fn mcp_requests_are_spans_under_the_clients_trace_and_counted_by_method() {
    crate::peers::require_peers!(TestEnv);
    let mut receiver = crate::observability::Receiver::start().await;
    let (ts, url) = start_mcp(&format!(
        "[telemetry]\notlp_endpoint = \"http://{}\"\nservice_name = \"toolgate-mcp\"\n",
        receiver.addr
    ))
    .await;
    let out = sdk(&url, "legacy", "traced", &[]).await;
    assert_eq!(out["result"]["is_error"], false, "{out}");
    let spans = receiver
        .spans_until(|s| s.iter().any(|span| span["name"] == "tools/call echo") && s.len() >= 4)
        .await;
    let call = spans
        .iter()
        .find(|s| s["name"] == "tools/call echo")
        .expect("the tools/call span");
    let attr = |span: &Value, key: &str| {
        span["attributes"]
            .as_array()
            .and_then(|a| a.iter().find(|kv| kv["key"] == key))
            .map(|kv| kv["value"]["stringValue"].clone())
            .unwrap_or(Value::Null)
    };
    // Under the traceparent the request's _meta carried (OpenTelemetry's MCP conventions).
    assert_eq!(
        call["traceId"], "0af7651916cd43dd8448eb211c80319c",
        "{call:#}"
    );
    assert_eq!(call["parentSpanId"], "b7ad6b7169203331");
    assert_eq!(call["kind"], "SPAN_KIND_SERVER");
    assert_eq!(attr(call, "mcp.method.name"), "tools/call");
    assert_eq!(attr(call, "mcp.protocol.version"), "2025-11-25");
    assert_eq!(attr(call, "gen_ai.tool.name"), "echo");
    assert_eq!(attr(call, "gen_ai.operation.name"), "execute_tool");
    assert!(
        attr(call, "mcp.session.id")
            .as_str()
            .is_some_and(|s| !s.is_empty()),
        "{call:#}"
    );
    // The batch runs under it, as under a DispatchBatch's RPC span.
    let batch = spans
        .iter()
        .find(|s| s["name"] == "toolgate.batch")
        .unwrap();
    assert_eq!(batch["parentSpanId"], call["spanId"]);
    // An unregistered name never names a span.
    assert!(
        spans.iter().any(|s| s["name"] == "tools/call"),
        "{spans:#?}"
    );
    assert!(!spans.iter().any(|s| s["name"] == "tools/call ecoh"));

    let metrics = metrics_text(&ts).await;
    for line in [
        "toolgate_mcp_requests_total{mcp_method_name=\"tools/call\",toolgate_outcome=\"ok\"",
        "toolgate_mcp_requests_total{mcp_method_name=\"tools/call\",toolgate_outcome=\"tool_error\"",
        "toolgate_mcp_requests_total{mcp_method_name=\"initialize\",toolgate_outcome=\"ok\"",
    ] {
        assert!(metrics.contains(line), "{line} in:\n{metrics}");
    }
}

/// nginx as a plain HTTP round-robin balancer in front of `backends` (no stickiness: each
/// request may go to another replica), with SSE passed through unbuffered.
struct HttpBalancer {
    child: std::process::Child,
    addr: String,
    dir: PathBuf,
}

impl HttpBalancer {
    fn start(backends: &[std::net::SocketAddr]) -> HttpBalancer {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = folder(&format!("nginx-mcp-{port}"));
        let servers: String = backends.iter().map(|b| format!("server {b};\n")).collect();
        let d = dir.display();
        let conf = format!(
            "worker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 256; }}\n\
             http {{\n access_log off;\n\
               client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
               upstream toolgate {{ {servers} keepalive 8; }}\n\
               server {{\n listen 127.0.0.1:{port};\n\
                 location / {{ proxy_pass http://toolgate; proxy_http_version 1.1;\n\
                   proxy_set_header Connection \"\"; proxy_buffering off; proxy_read_timeout 60s; }}\n\
               }}\n}}\n"
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let child = crate::shared_sessions::spawn_nginx(&dir);
        let addr = format!("127.0.0.1:{port}");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(&addr).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "nginx did not listen on {addr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        HttpBalancer { child, addr, dir }
    }
}

impl Drop for HttpBalancer {
    fn drop(&mut self) {
        crate::processes::stop(&mut self.child, Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Three replicas sharing a Redis store, behind a round-robin nginx, each with `extra` config
/// and the tokens `agent-secret` and `other-secret` (tenant acme).
async fn replicas(
    extra: &str,
) -> (
    crate::shared_sessions::Redis,
    Vec<TestServer>,
    HttpBalancer,
    String,
) {
    let redis = crate::shared_sessions::Redis::start();
    let mut replicas = Vec::new();
    for _ in 0..3 {
        let config = Config::from_toml(&format!(
            r#"[mcp]
            listen = "127.0.0.1:0"
            allowed_hosts = ["*"]
            [sessions]
            store = "{}"
            [auth]
            anonymous = "none"
            [[auth.tokens]]
            id = "agent"
            tenant = "acme"
            sha256 = "{}"
            [[auth.tokens]]
            id = "other"
            tenant = "acme"
            sha256 = "{}"
            {extra}
            "#,
            redis.url(),
            sha256_hex("agent-secret"),
            sha256_hex("other-secret"),
        ))
        .unwrap();
        replicas.push(start_with(config).await);
    }
    let backends: Vec<_> = replicas
        .iter()
        .map(|r| r.server.mcp_addr().unwrap())
        .collect();
    let nginx = HttpBalancer::start(&backends);
    let url = format!("http://{}/mcp", nginx.addr);
    (redis, replicas, nginx, url)
}

#[tokio::test]
async fn a_2025_session_spread_over_replicas_behind_round_robin_keeps_its_loop_window() {
    crate::peers::require_peers!(TestEnv, Redis, Nginx);
    let (_redis, replicas, _nginx, url) = replicas(
        r#"[loop_detection]
        warn_after = 2
        stop_after = 3"#,
    )
    .await;
    let out = sdk(&url, "legacy", "loop", &["--token", "agent-secret"]).await;
    let classes: Vec<&str> = out["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["meta"]["error_class"].as_str().unwrap())
        .collect();
    // One window across the replicas: stopped at the 4th repeat, as on one server.
    assert_eq!(classes[..3], ["NONE"; 3], "{out}");
    assert_eq!(classes[3], "LOOP_STOPPED", "{out}");
    // The calls were spread: every replica answered some.
    for replica in &replicas {
        let metrics = metrics_text(replica).await;
        assert!(
            metrics.contains("toolgate_mcp_requests_total{mcp_method_name=\"tools/call\""),
            "every replica served calls of the session"
        );
    }
    // Another identity that learnt the session id is refused on every replica, including
    // those that never saw the session open.
    let reply = post(
        &url,
        &[("authorization", "Bearer agent-secret")],
        initialize(),
    )
    .await;
    let session = reply.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    for replica in replicas.iter().map(|r| r.server.mcp_addr().unwrap()) {
        let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
        let as_other = [
            ("authorization", "Bearer other-secret"),
            ("mcp-session-id", session.as_str()),
            ("mcp-protocol-version", "2025-11-25"),
        ];
        let direct = format!("http://{replica}/mcp");
        assert_eq!(
            post(&direct, &as_other, list).await.status(),
            404,
            "{replica}"
        );
    }
}

/// How many `tools/call` requests each replica served so far.
async fn calls_served(replicas: &[TestServer]) -> Vec<u64> {
    let mut served = Vec::new();
    for replica in replicas {
        let metrics = metrics_text(replica).await;
        let count = metrics
            .lines()
            .filter(|l| l.starts_with("toolgate_mcp_requests_total{mcp_method_name=\"tools/call\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum();
        served.push(count);
    }
    served
}

#[tokio::test]
async fn the_person_at_the_client_answers_through_any_replica_in_both_revisions() {
    crate::peers::require_peers!(TestEnv, Redis, Nginx);
    let (_redis, replicas, _nginx, url) = replicas(
        r#"[approvals]
        timeout = "30s"
        [[permissions.rules]]
        id = "ask-echo"
        tools = "echo"
        decision = "ask"
        reason = "echo needs a person"
        requester_may_answer = true"#,
    )
    .await;
    for mode in MODES {
        let before = calls_served(&replicas).await;
        let out = sdk(&url, mode, "approve", &["--token", "agent-secret"]).await;
        assert_eq!(out["asked"].as_array().unwrap().len(), 1, "{mode}: {out}");
        // The edited arguments ran, on the replica the call waited on, whichever replica the
        // answer reached.
        assert_eq!(out["result"]["is_error"], false, "{mode}: {out}");
        assert_eq!(
            out["result"]["structured"],
            json!({"text": "edited"}),
            "{mode}: {out}"
        );
        if mode != "legacy" {
            // The call and its retry (the person's answer) reached two replicas.
            let after = calls_served(&replicas).await;
            let grew = before.iter().zip(&after).filter(|(b, a)| a > b).count();
            assert_eq!(grew, 2, "{before:?} -> {after:?}");
        }
        let out = sdk(&url, mode, "deny", &["--token", "agent-secret"]).await;
        assert_eq!(
            out["result"]["meta"]["error_class"], "APPROVAL_DENIED",
            "{mode}: {out}"
        );
        assert!(
            out["result"]["text"]
                .as_str()
                .unwrap()
                .contains("not today"),
            "{mode}: {out}"
        );
    }
    // Three calls of one session at once, asked on whichever replicas they landed: each
    // person's answer (its own call's arguments, edited) reaches its own call.
    for mode in MODES {
        let out = sdk(&url, mode, "approve-parallel", &["--token", "agent-secret"]).await;
        assert_eq!(out["asked"].as_array().unwrap().len(), 3, "{mode}: {out}");
        let texts: Vec<&Value> = out["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| &r["structured"]["text"])
            .collect();
        assert_eq!(
            texts,
            [&json!("edited-a"), &json!("edited-b"), &json!("edited-c")],
            "{mode}: {out}"
        );
    }
    // Every replica seals with the fleet's key and marks a redemption in the store: a forged
    // or foreign request_state, or a replay reaching another replica, is refused there too.
    let out = sdk(
        &url,
        "2026-07-28",
        "state-abuse",
        &["--token", "agent-secret", "--token2", "other-secret"],
    )
    .await;
    assert_request_state_abuse_refused(&out);
}

#[tokio::test]
async fn over_tls_a_client_certificate_is_an_identity_and_a_denied_tool_is_not_listed() {
    let dir = folder("mcp-tls");
    let (server_ca, client_ca) = (Ca::new(), Ca::new());
    let (cert, key) = server_ca.sign(&["localhost"]);
    let ca_file = write(&dir, "ca.pem", &server_ca.pem);
    let (agent_cert, agent_key) = client_ca.sign(&["agent-7.clients.test"]);
    let config = Config::from_toml(&format!(
        r#"[mcp]
        listen = "127.0.0.1:0"
        [tls]
        cert_file = "{}"
        key_file = "{}"
        client_ca_file = "{}"
        [auth]
        anonymous = "none"
        [[auth.certificates]]
        name = "agent-7.clients.test"
        tenant = "acme"
        roles = ["agent"]
        [[permissions.rules]]
        id = "no-clock-for-acme"
        tools = "now"
        tenants = ["acme"]
        decision = "deny"
        reason = "not for acme"
        "#,
        write(&dir, "server.pem", &cert),
        write(&dir, "server.key", &key),
        write(&dir, "client-ca.pem", &client_ca.pem),
    ))
    .unwrap();
    let server = toolgate::Server::new(config).start_local().await.unwrap();
    let url = format!(
        "https://localhost:{}/mcp",
        server.mcp_addr().unwrap().port()
    );
    let client = |identity: bool| {
        let mut tls = json!({"ca_file": ca_file});
        if identity {
            tls["cert_file"] = json!(write(&dir, "agent.pem", &agent_cert));
            tls["key_file"] = json!(write(&dir, "agent.key", &agent_key));
        }
        let tls: toolgate_remotes::TlsSpec = serde_json::from_value(tls).unwrap();
        toolgate_remotes::tls::client_builder(Some(&tls), Duration::from_secs(10))
            .unwrap()
            .build()
            .unwrap()
    };
    let stateless = |method: &str, id: u32| {
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}}})
    };
    let send = async |client: &reqwest::Client, body: Value| {
        client
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", body["method"].as_str().unwrap())
            .body(body.to_string())
            .send()
            .await
    };
    // Without a certificate the handshake is refused (tls.client_ca_file asks for one). With the
    // agent's: its tools, without the one denied to acme.
    let refused = send(&client(false), stateless("tools/list", 1)).await;
    assert!(refused.is_err(), "{refused:?}");
    let reply = send(&client(true), stateless("tools/list", 2))
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let text = reply.text().await.unwrap();
    let data = text
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("data:").filter(|d| d.contains("jsonrpc")))
        .map_or(text.as_str(), str::trim);
    let listed: Value = serde_json::from_str(data).unwrap();
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"echo"), "{names:?}");
    assert!(
        !names.contains(&"now"),
        "a tool denied to the caller is not listed: {names:?}"
    );
    server.shutdown_handle().shutdown();
    let _ = server.wait().await;
}

#[tokio::test]
async fn an_identity_opens_at_most_its_share_of_mcp_sessions_whatever_its_headers_say() {
    let (_ts, url) = start_mcp(&format!(
        r#"max_sessions = 8
        [auth]
        anonymous = "none"
        [[auth.tokens]]
        id = "greedy"
        tenant = "acme"
        sha256 = "{}"
        [[auth.tokens]]
        id = "modest"
        tenant = "acme"
        sha256 = "{}"
        "#,
        sha256_hex("greedy-secret"),
        sha256_hex("modest-secret"),
    ))
    .await;
    let greedy = [("authorization", "Bearer greedy-secret")];
    // A quarter of 8 each; the third is closed at once and refused, also when the request
    // claims the stateless revision (an initialize opens a session whatever it claims).
    for _ in 0..2 {
        assert_eq!(post(&url, &greedy, initialize()).await.status(), 200);
    }
    let mut claimed = initialize();
    claimed["params"]["protocolVersion"] = json!("2026-07-28");
    for (body, header) in [(initialize(), None), (claimed, Some("2026-07-28"))] {
        let mut headers = vec![("authorization", "Bearer greedy-secret")];
        if let Some(version) = header {
            headers.push(("mcp-protocol-version", version));
        }
        let reply = post(&url, &headers, body).await;
        assert_eq!(reply.status(), 503, "{:?}", reply.headers());
        let text = reply.text().await.unwrap();
        assert!(
            text.contains("mcp.max_sessions"),
            "the refusal names its knob: {text}"
        );
    }
    // Another identity still gets its own.
    let modest = [("authorization", "Bearer modest-secret")];
    assert_eq!(post(&url, &modest, initialize()).await.status(), 200);
}

#[tokio::test]
async fn a_form_the_person_never_answers_ends_with_the_approval() {
    crate::peers::require_peers!(TestEnv);
    let (_ts, url) = start_mcp(
        r#"[approvals]
        timeout = "2s"
        requester_may_answer = true
        [[permissions.rules]]
        id = "ask-echo"
        tools = "echo"
        decision = "ask"
        reason = "echo needs a person"
        "#,
    )
    .await;
    let started = std::time::Instant::now();
    let out = sdk(&url, "legacy", "stall-form", &[]).await;
    assert_eq!(out["asked"].as_array().unwrap().len(), 1, "{out}");
    assert_eq!(
        out["result"]["meta"]["error_class"], "APPROVAL_TIMEOUT",
        "{out}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the call answered when its approval expired, not when the form did"
    );
}

#[tokio::test]
async fn bodies_are_bounded_in_size_time_and_weight_and_front_sessions_cannot_be_named() {
    let (_ts, url) = start_mcp(
        "[server]\nmax_message_bytes = 65536\nstall_timeout = \"1s\"\n\
         [limits]\nmax_decoded_bytes_per_connection = 200000\n",
    )
    .await;
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    // Declared over server.max_message_bytes: 413 at once.
    let client = toolgate_remotes::tls::client_builder(None, Duration::from_secs(10))
        .unwrap()
        .build()
        .unwrap();
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"pad\":\"{}\"}}",
        "x".repeat(70_000)
    );
    let reply = client
        .post(&url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 413);
    // A body that stops arriving: 408 after server.stall_timeout.
    let slow = tokio::task::spawn_blocking(move || {
        use std::io::{Read as _, Write as _};
        let mut stream = std::net::TcpStream::connect(&addr).unwrap();
        stream
            .write_all(
                format!(
                    "POST /mcp HTTP/1.1\r\nHost: {addr}\r\ncontent-type: application/json\r\n\
                     accept: application/json, text/event-stream\r\ncontent-length: 1000\r\n\r\n{{\"jsonrpc\""
                )
                .as_bytes(),
            )
            .unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut answer = [0u8; 64];
        let n = stream.read(&mut answer).unwrap_or(0);
        String::from_utf8_lossy(&answer[..n]).into_owned()
    })
    .await
    .unwrap();
    assert!(slow.starts_with("HTTP/1.1 408"), "{slow}");
    // A small body that would hold much more once parsed is weighed before it is: 503.
    let amplifying = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{{\"name\":\"echo\",\"arguments\":{{\"a\":[{}[]]}}}}}}",
        "[],".repeat(15_000)
    );
    let reply = post(&url, &[], serde_json::from_str(&amplifying).unwrap()).await;
    assert_eq!(reply.status(), 503);
    let text = reply.text().await.unwrap();
    assert!(
        text.contains("limits.max_decoded_bytes_per_connection"),
        "{text}"
    );
    // The sessions the front derives cannot be named by a client.
    let stateless = |session: &str| {
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "echo", "arguments": {},
            "_meta": {
                "dev.toolgate/session": session,
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
                "io.modelcontextprotocol/clientCapabilities": {}}}})
    };
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "echo"),
    ];
    let reply = post(&url, &headers, stateless("mcp-caller-0123456789abcdef")).await;
    let text = reply.text().await.unwrap();
    assert!(
        text.contains("name the sessions the MCP front door keeps"),
        "{text}"
    );
    // A request id over 256 bytes is refused, not echoed.
    let mut long = stateless("mine");
    long["id"] = json!("i".repeat(300));
    let text = post(&url, &headers, long).await.text().await.unwrap();
    assert!(
        text.contains("the request id is 300 bytes; the limit is 256"),
        "{text}"
    );
    // A Host this server does not go by is refused before anything is built from it.
    let reply = http_get(url.replace("/mcp", "/.well-known/oauth-protected-resource"))
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);
    let client = toolgate_remotes::tls::client_builder(None, Duration::from_secs(10))
        .unwrap()
        .build()
        .unwrap();
    let reply = client
        .get(url.replace("/mcp", "/.well-known/oauth-protected-resource"))
        .header("host", "attacker.example")
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 403);
}

#[tokio::test]
async fn tools_list_pages_through_every_tool_and_refuses_a_made_up_cursor() {
    let (ts, url) = start_mcp("page_size = 4\n").await;
    let stateless = |cursor: Option<&str>| {
        let mut params = json!({"_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}}});
        if let Some(cursor) = cursor {
            params["cursor"] = json!(cursor);
        }
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": params})
    };
    let headers = [
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/list"),
    ];
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let page: Value = post(&url, &headers, stateless(cursor.as_deref()))
            .await
            .json()
            .await
            .unwrap();
        let tools = page["result"]["tools"].as_array().unwrap();
        assert!(tools.len() <= 4, "{page}");
        names.extend(tools.iter().map(|t| t["name"].as_str().unwrap().to_owned()));
        pages += 1;
        match page["result"]["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    let mut listed: Vec<String> = list_tools(&ts).await.into_iter().map(|t| t.name).collect();
    listed.sort();
    names.sort();
    assert_eq!(names, listed);
    assert!(pages >= 3, "{pages} pages of at most 4");
    let page: Value = post(&url, &headers, stateless(Some("not-a-cursor")))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(page["error"]["code"], -32602, "{page}");
}
