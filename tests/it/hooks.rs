//! Hooks of all three kinds through the API: config rules, a command hook (the repository's
//! Python example) and a real gRPC ToolHooks service; each decision visible as a gate_decision.

use std::sync::{Arc, Mutex};

use serde_json::json;
use tokio_stream::wrappers::TcpListenerStream;
use toolgate::config::Config;
use toolgate::pb;
use toolgate::pb::ErrorClass;
use toolgate::pb::dispatch_event::Event;
use toolgate::pb::pre_tool_use_response::Decision;
use toolgate::pb::tool_hooks_server::{ToolHooks, ToolHooksServer};
use toolgate::protojson;

use crate::support::*;

fn gates(events: &[Event]) -> Vec<(String, i32, String)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::GateDecision(g) => Some((g.id.clone(), g.verdict, g.source.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn config_rules_block_matching_calls_and_report_each_decision() {
    let config = Config::from_toml(
        r#"
        [[hooks.rules]]
        id = "no-secrets"
        tools = "scratch_*"
        action = "block"
        reason = "the secrets/ directory is off limits"
        [[hooks.rules.when]]
        pointer = "/path"
        regex = "^secrets/"
        "#,
    )
    .unwrap();
    let ts = start_with(config).await;
    let (events, result) = dispatch_stream(
        &ts,
        request(json!([
            {"id": "bad", "name": "scratch_write", "arguments": {"path": "secrets/key", "content": "x"}},
            {"id": "good", "name": "scratch_write", "arguments": {"path": "notes/a", "content": "x"}},
            {"id": "other", "name": "echo"},
        ])),
    )
    .await;
    assert_eq!(class(&result.results[0]), ErrorClass::Blocked);
    assert_eq!(
        result.results[0].error,
        "the secrets/ directory is off limits"
    );
    assert!(result.results[1].success && result.results[2].success);
    let verdicts = gates(&events);
    assert_eq!(
        verdicts,
        [
            (
                "bad".to_owned(),
                pb::gate_decision::Verdict::Block as i32,
                "no-secrets".to_owned()
            ),
            (
                "good".to_owned(),
                pb::gate_decision::Verdict::Allow as i32,
                "no-secrets".to_owned()
            ),
        ],
        "only tools matching the rule's glob are gated"
    );
    let Some(Event::GateDecision(g)) = events.iter().find(|e| matches!(e, Event::GateDecision(_)))
    else {
        unreachable!()
    };
    assert_eq!(g.args_digest.len(), 16);
    // Between the attempt's pre and post.
    let order: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolPre(p) if p.id == "bad" => Some("pre"),
            Event::GateDecision(g) if g.id == "bad" => Some("gate"),
            Event::ToolPost(p) if p.id == "bad" => Some("post"),
            _ => None,
        })
        .collect();
    assert_eq!(order, ["pre", "gate", "post"]);
}

#[tokio::test]
async fn a_command_hook_blocks_modifies_and_asks() {
    let script = format!("{}/examples/hooks/guard.py", env!("CARGO_MANIFEST_DIR"));
    let config = Config::from_toml(&format!(
        "[[hooks.command]]\nname = \"guard\"\ncommand = [\"python3\", \"{script}\"]\ntimeout = \"10s\""
    ))
    .unwrap();
    let ts = start_with(config).await;
    let (events, result) = dispatch_stream(
        &ts,
        request(json!([
            {"id": "w", "name": "scratch_write", "arguments": {"path": "secrets/a", "content": "x"}},
            {"id": "s", "name": "sleep", "arguments": {"ms": 3_600_000}},
            {"id": "n", "name": "now"},
            {"id": "e", "name": "echo", "arguments": {"fine": true}},
        ])),
    )
    .await;
    let r = &result.results;
    assert_eq!(class(&r[0]), ErrorClass::Blocked);
    assert_eq!(
        r[0].error,
        "writing under secrets/ is not allowed; use another directory"
    );
    assert!(r[1].success, "{:?}", r[1]);
    assert_eq!(
        r[1].content, r#"{"slept_ms":1000}"#,
        "the hook's updated input ran"
    );
    assert_eq!(class(&r[2]), ErrorClass::Blocked);
    assert_eq!(
        r[2].error,
        "Hook requested confirmation (reading the clock needs a human) but the session is not interactive"
    );
    assert!(r[3].success);
    let verdicts: Vec<i32> = gates(&events).into_iter().map(|g| g.1).collect();
    use pb::gate_decision::Verdict;
    assert_eq!(
        verdicts,
        [
            Verdict::Block as i32,
            Verdict::Modify as i32,
            Verdict::Ask as i32,
            Verdict::Allow as i32
        ]
    );
}

/// A ToolHooks service: blocks `now`, asks about `sleep`, stamps `echo` input, allows the rest,
/// and records every PostToolUse notification.
#[derive(Clone, Default)]
struct TestHooks {
    posts: Arc<Mutex<Vec<String>>>,
}

#[tonic::async_trait]
impl ToolHooks for TestHooks {
    async fn pre_tool_use(
        &self,
        request: tonic::Request<pb::PreToolUseRequest>,
    ) -> Result<tonic::Response<pb::PreToolUseResponse>, tonic::Status> {
        let req = request.into_inner();
        let mut response = pb::PreToolUseResponse::default();
        match req.tool.as_str() {
            "now" => {
                response.decision = Decision::Block.into();
                response.reason = "no clocks today".into();
            }
            "sleep" => {
                response.decision = Decision::Ask.into();
                response.reason = "long nap?".into();
            }
            "echo" => {
                let mut input =
                    serde_json::Value::Object(req.input.unwrap_or_default().into_json());
                input["stamped_by"] = json!("hook");
                response.decision = Decision::Modify.into();
                response.modified_input = input.as_object().cloned().map(protojson::Struct::from);
            }
            _ => {}
        }
        Ok(tonic::Response::new(response))
    }

    async fn post_tool_use(
        &self,
        request: tonic::Request<pb::PostToolUseRequest>,
    ) -> Result<tonic::Response<pb::PostToolUseResponse>, tonic::Status> {
        let req = request.into_inner();
        self.posts
            .lock()
            .unwrap()
            .push(format!("{}:{}:{}", req.tool, req.call_id, req.error_class));
        Ok(tonic::Response::new(pb::PostToolUseResponse {}))
    }
}

async fn serve_hooks(hooks: TestHooks) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(ToolHooksServer::new(hooks))
            .serve_with_incoming(TcpListenerStream::new(listener)),
    );
    addr
}

#[tokio::test]
async fn a_grpc_hook_service_decides_and_is_told_of_every_executed_attempt() {
    let hooks = TestHooks::default();
    let addr = serve_hooks(hooks.clone()).await;
    let config = Config::from_toml(&format!(
        "[[hooks.grpc]]\nname = \"policy\"\nendpoint = \"http://{addr}\"\ntimeout = \"5s\""
    ))
    .unwrap();
    let ts = start_with(config).await;
    let (events, result) = dispatch_stream(
        &ts,
        request(json!([
            {"id": "n", "name": "now"},
            {"id": "s", "name": "sleep", "arguments": {"ms": 1}},
            {"id": "e", "name": "echo", "arguments": {"x": 1}},
            {"id": "f", "name": "fail"},
        ])),
    )
    .await;
    let r = &result.results;
    assert_eq!(
        (class(&r[0]), r[0].error.as_str()),
        (ErrorClass::Blocked, "no clocks today")
    );
    assert_eq!(
        r[1].error,
        "Hook requested confirmation (long nap?) but the session is not interactive"
    );
    assert_eq!(json_of(&r[2].result), json!({"x": 1, "stamped_by": "hook"}));
    assert_eq!(class(&r[3]), ErrorClass::ToolError);
    // Every call is gated, each decision by the one hook.
    use pb::gate_decision::Verdict;
    let gate = |id: &str, verdict: Verdict| (id.to_owned(), verdict as i32, "policy".to_owned());
    assert_eq!(
        gates(&events),
        [
            gate("n", Verdict::Block),
            gate("s", Verdict::Ask),
            gate("e", Verdict::Modify),
            gate("f", Verdict::Allow),
        ]
    );
    // Post-tool hooks hear about executed attempts only, with the wire class name.
    assert_eq!(
        *hooks.posts.lock().unwrap(),
        ["echo:e:NONE", "fail:f:TOOL_ERROR"]
    );
}

#[tokio::test]
async fn an_unreachable_grpc_hook_fails_closed_by_default_and_open_when_asked() {
    // A port nothing listens on: bind, learn the port, drop the listener.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    for (mode, blocked) in [("fail_closed", true), ("fail_open", false)] {
        let config = Config::from_toml(&format!(
            "[[hooks.grpc]]\nname = \"gone\"\nendpoint = \"http://127.0.0.1:{port}\"\ntimeout = \"1s\"\nfailure_mode = \"{mode}\""
        ))
        .unwrap();
        let ts = start_with(config).await;
        let result = dispatch(&ts, request(json!([{"id": "e", "name": "echo"}]))).await;
        let r = &result.results[0];
        assert_eq!(class(r) == ErrorClass::Blocked, blocked, "{mode}: {r:?}");
        if blocked {
            assert!(r.error.starts_with("hook 'gone' failed: "), "{}", r.error);
        }
    }
}
