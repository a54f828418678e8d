//! Interactive approvals through the port: a call a hook or permission rule asks about waits for
//! a second client's ResolveApproval; approve, edit, deny, expire, remember, and the client
//! leaving. (The Python and CLI end-to-end runs are `tests/approvals/`, from `peers.rs`.)

use std::time::Duration;

use futures::StreamExt;
use serde_json::json;
use toolgate::config::Config;
use toolgate_proto::pb;
use toolgate_proto::pb::dispatch_event::Event;
use toolgate_proto::pb::resolve_approval_request::{Decision, Remember};

use crate::support::*;

/// The opt-in setup (a person at the agent's own terminal): the anonymous caller that sends the
/// batches answers them. `the_agent_may_not_answer_its_own_ask_unless_its_rule_lets_it` covers
/// the default.
const CONFIG: &str = r#"
[approvals]
timeout = "3s"
requester_may_answer = true
[[hooks.rules]]
id = "no-forbidden"
tools = "*"
action = "block"
reason = "forbidden input"
[[hooks.rules.when]]
pointer = "/forbidden"
regex = "."
[[hooks.rules]]
id = "risky"
tools = "echo"
action = "ask"
reason = "risky echo"
[[hooks.rules.when]]
pointer = "/q"
regex = "^risky"
[[permissions.rules]]
id = "clock"
tools = "now"
decision = "ask"
reason = "reading the clock needs a human"
"#;

async fn server() -> TestServer {
    start_with(Config::from_toml(CONFIG).unwrap()).await
}

fn interactive(
    session: &str,
    calls: serde_json::Value,
    parallel: bool,
) -> pb::DispatchBatchRequest {
    let mut req = request(calls);
    req.session_id = session.into();
    let mut options = pb::DispatchOptions {
        interactive_approvals: true,
        ..Default::default()
    };
    if parallel {
        options.mode = pb::dispatch_options::Mode::Parallel as i32;
    }
    req.options = Some(options);
    req
}

/// Runs `req` as a stream; returns the receiver of its events and the task's result.
fn spawn_batch(
    ts: &TestServer,
    req: pb::DispatchBatchRequest,
) -> (
    tokio::sync::mpsc::UnboundedReceiver<Event>,
    tokio::task::JoinHandle<pb::BatchResult>,
) {
    spawn_batch_as(ts, None, req)
}

/// `spawn_batch`, sent with `token`.
fn spawn_batch_as(
    ts: &TestServer,
    token: Option<&str>,
    req: pb::DispatchBatchRequest,
) -> (
    tokio::sync::mpsc::UnboundedReceiver<Event>,
    tokio::task::JoinHandle<pb::BatchResult>,
) {
    let mut client = ts.client.clone();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let req = as_caller(token, req);
    let task = tokio::spawn(async move {
        let mut stream = client.dispatch_batch(req).await.unwrap().into_inner();
        while let Some(message) = stream.next().await {
            match message.unwrap().event.unwrap() {
                Event::Result(result) => return result,
                other => {
                    let _ = tx.send(other);
                }
            }
        }
        panic!("no result")
    });
    (rx, task)
}

async fn next_request(events: &mut tokio::sync::mpsc::UnboundedReceiver<Event>) -> pb::Approval {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), events.recv()).await {
            Ok(Some(Event::ApprovalRequested(approval))) => return approval,
            Ok(Some(_)) => continue,
            other => panic!("no approval requested: {other:?}"),
        }
    }
}

/// The next update a watcher is sent, which must be a requested approval.
async fn next_watched_request(
    watch: &mut tonic::Streaming<pb::WatchApprovalsResponse>,
) -> pb::Approval {
    let update = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .unwrap();
    match update.unwrap().unwrap().update.unwrap() {
        pb::watch_approvals_response::Update::Requested(approval) => approval,
        other => panic!("a request first, not {other:?}"),
    }
}

async fn resolve(
    ts: &TestServer,
    id: &str,
    decision: Decision,
    reason: &str,
) -> Result<pb::ResolveApprovalResponse, tonic::Status> {
    let req = pb::ResolveApprovalRequest {
        approval_id: id.into(),
        decision: decision as i32,
        reason: reason.into(),
        ..Default::default()
    };
    Ok(ts.client.clone().resolve_approval(req).await?.into_inner())
}

#[tokio::test]
async fn a_hook_ask_waits_for_an_approval_and_then_runs() {
    let ts = server().await;
    let calls = json!([{"id": "c1", "name": "echo", "arguments": {"q": "risky stuff"}}]);
    let (mut events, task) = spawn_batch(&ts, interactive("s1", calls, false));
    let approval = next_request(&mut events).await;
    assert_eq!(approval.approval_id.len(), 32);
    assert_eq!(
        (approval.id.as_str(), approval.tool.as_str()),
        ("c1", "echo")
    );
    assert_eq!(
        approval.source, "risky",
        "the hook, as gate decisions name it"
    );
    assert_eq!(approval.reason, "risky echo");
    assert_eq!(json_of(&approval.arguments), json!({"q": "risky stuff"}));
    assert!(approval.expires_at.is_some());
    let listed = ts
        .client
        .clone()
        .list_approvals(pb::ListApprovalsRequest::default())
        .await;
    assert_eq!(
        listed.unwrap().into_inner().approvals,
        std::slice::from_ref(&approval)
    );

    resolve(&ts, &approval.approval_id, Decision::Approve, "fine")
        .await
        .unwrap();
    let result = task.await.unwrap();
    assert!(result.results[0].success, "{:?}", result.results[0]);
    assert_eq!(result.results[0].content, r#"{"q":"risky stuff"}"#);
    // Answered once: a second answer is refused, and nothing is pending.
    let twice = resolve(&ts, &approval.approval_id, Decision::Deny, "").await;
    assert_eq!(twice.unwrap_err().code(), tonic::Code::FailedPrecondition);
    let unknown = resolve(&ts, "00000000000000000000000000000000", Decision::Deny, "").await;
    assert_eq!(unknown.unwrap_err().code(), tonic::Code::NotFound);
    let resolved = std::iter::from_fn(|| events.try_recv().ok()).find_map(|e| match e {
        Event::ApprovalResolved(r) => Some(r),
        _ => None,
    });
    let resolved = resolved.expect("approval_resolved");
    assert_eq!(resolved.decision, Decision::Approve as i32);
    assert_eq!(resolved.resolved_by, "anonymous");
    assert_eq!(resolved.reason, "fine");
    // Counted.
    let admin = ts
        .server
        .admin_addr()
        .expect("the admin listener is on by default");
    let metrics = http_get(format!("http://{admin}/metrics")).await.unwrap();
    let metrics = metrics.text().await.unwrap();
    let counted =
        r#"toolgate_approvals_total{gen_ai_tool_name="echo",toolgate_approval="approved"} 1"#;
    assert!(metrics.contains(counted), "{metrics}");
}

#[tokio::test]
async fn edited_arguments_run_and_a_denial_says_why() {
    let ts = server().await;
    let calls = json!([
        {"id": "a", "name": "echo", "arguments": {"q": "risky one"}},
        {"id": "b", "name": "echo", "arguments": {"q": "risky two"}},
    ]);
    let (mut events, task) = spawn_batch(&ts, interactive("s2", calls, false));
    let first = next_request(&mut events).await;
    let mut edited = pb::ResolveApprovalRequest {
        approval_id: first.approval_id.clone(),
        decision: Decision::Approve as i32,
        ..Default::default()
    };
    let updated = json!({"q": "safe one"});
    edited.updated_arguments = Some(toolgate_proto::protojson::Struct::from(
        updated.as_object().unwrap().clone(),
    ));
    ts.client.clone().resolve_approval(edited).await.unwrap();
    // SEQUENTIAL: the second call asks only after the first ran.
    let second = next_request(&mut events).await;
    assert_eq!(second.id, "b");
    resolve(&ts, &second.approval_id, Decision::Deny, "not today")
        .await
        .unwrap();
    let result = task.await.unwrap();
    assert_eq!(result.results[0].content, r#"{"q":"safe one"}"#);
    let denied = &result.results[1];
    assert_eq!(class(denied), pb::ErrorClass::ApprovalDenied);
    assert_eq!(
        denied.content,
        "A person denied the call to tool 'echo': not today"
    );
    assert_eq!((denied.tool.as_str(), denied.attempts), ("", 0));
}

#[tokio::test]
async fn a_permission_ask_waits_and_an_unanswered_one_times_out() {
    let ts = server().await;
    // PARALLEL: the clock call waits; the echo beside it is not held up.
    let calls = json!([
        {"id": "n", "name": "now"},
        {"id": "e", "name": "echo", "arguments": {"q": "plain"}},
    ]);
    let (mut events, task) = spawn_batch(&ts, interactive("s3", calls, true));
    let approval = next_request(&mut events).await;
    assert_eq!(approval.source, "permissions[clock]");
    let echo_done = loop {
        match events.recv().await.unwrap() {
            Event::ToolPost(post) if post.id == "e" => break post,
            _ => {}
        }
    };
    assert!(!echo_done.is_error);
    let result = task.await.unwrap();
    let timed_out = &result.results[0];
    assert_eq!(class(timed_out), pb::ErrorClass::ApprovalTimeout);
    assert_eq!(
        timed_out.content,
        "Nobody approved the call to tool 'now' within 3s; it did not run"
    );
    assert_eq!((timed_out.tool.as_str(), timed_out.attempts), ("", 0));
    let expired = resolve(&ts, &approval.approval_id, Decision::Approve, "").await;
    assert_eq!(expired.unwrap_err().code(), tonic::Code::NotFound);

    // Asked again and approved, the rule lets it run.
    let (mut events, task) = spawn_batch(
        &ts,
        interactive("s3", json!([{"id": "n2", "name": "now"}]), false),
    );
    let approval = next_request(&mut events).await;
    resolve(&ts, &approval.approval_id, Decision::Approve, "")
        .await
        .unwrap();
    let result = task.await.unwrap();
    assert!(result.results[0].success, "{:?}", result.results[0]);
    assert_eq!(result.results[0].tool, "now");
}

#[tokio::test]
async fn remember_session_answers_later_asks_and_says_so() {
    let ts = server().await;
    let calls = json!([{"id": "a", "name": "echo", "arguments": {"q": "risky 1"}}]);
    let (mut events, task) = spawn_batch(&ts, interactive("s4", calls, false));
    let approval = next_request(&mut events).await;
    let req = pb::ResolveApprovalRequest {
        approval_id: approval.approval_id,
        decision: Decision::Approve as i32,
        remember: Remember::Session as i32,
        ..Default::default()
    };
    ts.client.clone().resolve_approval(req).await.unwrap();
    assert!(task.await.unwrap().all_succeeded);
    let calls = json!([{"id": "b", "name": "echo", "arguments": {"q": "risky 2"}}]);
    let (events, result) = dispatch_stream(&ts, interactive("s4", calls.clone(), false)).await;
    assert!(result.all_succeeded);
    let remembered: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            Event::ApprovalResolved(r) => Some(r),
            Event::ApprovalRequested(_) => panic!("nobody is asked again"),
            _ => None,
        })
        .collect();
    assert_eq!(remembered.len(), 1);
    assert_eq!(
        remembered[0].how,
        pb::approval_resolved::How::Remembered as i32
    );
    // Another session asks again.
    let (mut events, task) = spawn_batch(&ts, interactive("s5", calls, false));
    let again = next_request(&mut events).await;
    resolve(&ts, &again.approval_id, Decision::Deny, "")
        .await
        .unwrap();
    assert!(!task.await.unwrap().all_succeeded);
}

/// The agent is the party the gate holds against: it sees its own approvals but may not answer
/// them (PERMISSION_DENIED, and the call still waits) unless the asking rule lets it; an approver
/// of its tenant answers. A rule with `remember = false` refuses a SESSION answer and asks every
/// time; a remembered answer covers only the rule that was answered, for the same tool.
#[tokio::test]
async fn the_agent_may_not_answer_its_own_ask_unless_its_rule_lets_it() {
    let config = Config::from_toml(&format!(
        r#"
        [auth]
        anonymous = "none"
        [[auth.tokens]]
        id = "bot"
        tenant = "acme"
        roles = ["agent"]
        sha256 = "{}"
        [[auth.tokens]]
        id = "alice"
        tenant = "acme"
        roles = ["approver"]
        sha256 = "{}"
        [approvals]
        timeout = "20s"
        [[hooks.rules]]
        id = "risky"
        tools = "echo"
        action = "ask"
        reason = "risky echo"
        [[hooks.rules.when]]
        pointer = "/q"
        regex = "^risky"
        [[hooks.rules]]
        id = "terminal"
        tools = "echo"
        action = "ask"
        reason = "asked at the terminal"
        requester_may_answer = true
        [[hooks.rules.when]]
        pointer = "/q"
        regex = "^terminal"
        [[permissions.rules]]
        id = "clock"
        tools = "now"
        decision = "ask"
        reason = "reading the clock needs a human"
        remember = false
        "#,
        sha256_hex("bot-secret"),
        sha256_hex("alice-secret"),
    ))
    .unwrap();
    let ts = start_with(config).await;
    let (bot, alice) = (Some("bot-secret"), Some("alice-secret"));
    let answer = |id: &str, approve: bool, remember: Remember| pb::ResolveApprovalRequest {
        approval_id: id.into(),
        decision: if approve {
            Decision::Approve
        } else {
            Decision::Deny
        } as i32,
        remember: remember as i32,
        ..Default::default()
    };
    let mut client = ts.client.clone();

    // The agent answers its own ask: refused, and the call still waits.
    let calls = json!([{"id": "a", "name": "echo", "arguments": {"q": "risky: rm -rf /"}}]);
    let (mut events, task) = spawn_batch_as(&ts, bot, interactive("own", calls, false));
    let approval = next_request(&mut events).await;
    assert!(!approval.requester_may_answer && approval.remember_allowed);
    let own = answer(&approval.approval_id, true, Remember::Session);
    let refused = client
        .resolve_approval(as_caller(bot, own))
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::PermissionDenied);
    assert_eq!(
        refused.message(),
        format!(
            "approval {} may be answered only by an approver or an admin of its tenant, not by the identity that sent its batch",
            approval.approval_id
        )
    );
    // It still sees what it waits for; nothing ran.
    let listed = client
        .list_approvals(as_caller(bot, pb::ListApprovalsRequest::default()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.approvals.len(), 1);
    assert!(!task.is_finished());
    // The approver answers, remembered for the session.
    let by_alice = answer(&approval.approval_id, true, Remember::Session);
    client
        .resolve_approval(as_caller(alice, by_alice))
        .await
        .unwrap();
    let result = task.await.unwrap();
    assert!(result.all_succeeded, "{result:?}");

    // Remembered for the rule that was answered only: another rule about the same tool asks,
    // and that one lets the agent answer (a person at its terminal).
    let calls = json!([
        {"id": "b", "name": "echo", "arguments": {"q": "risky: again"}},
        {"id": "c", "name": "echo", "arguments": {"q": "terminal: ok?"}}
    ]);
    let (mut events, task) = spawn_batch_as(&ts, bot, interactive("own", calls, false));
    let approval = next_request(&mut events).await;
    assert_eq!(
        (approval.id.as_str(), approval.source.as_str()),
        ("c", "terminal")
    );
    assert!(approval.requester_may_answer);
    let own = answer(&approval.approval_id, true, Remember::Once);
    client.resolve_approval(as_caller(bot, own)).await.unwrap();
    let result = task.await.unwrap();
    assert!(result.all_succeeded, "{result:?}");

    // A rule that forbids remembering: a SESSION answer is refused, and the next call asks again.
    for round in 0..2 {
        let calls = json!([{"id": format!("t{round}"), "name": "now", "arguments": {}}]);
        let (mut events, task) = spawn_batch_as(&ts, bot, interactive("own", calls, false));
        let approval = next_request(&mut events).await;
        assert_eq!(approval.source, "permissions[clock]");
        assert!(!approval.remember_allowed);
        let session = answer(&approval.approval_id, true, Remember::Session);
        let refused = client
            .resolve_approval(as_caller(alice, session))
            .await
            .unwrap_err();
        assert_eq!(
            refused.code(),
            tonic::Code::FailedPrecondition,
            "{refused:?}"
        );
        let own = answer(&approval.approval_id, true, Remember::Once);
        let refused = client
            .resolve_approval(as_caller(bot, own))
            .await
            .unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        let once = answer(&approval.approval_id, true, Remember::Once);
        client
            .resolve_approval(as_caller(alice, once))
            .await
            .unwrap();
        let result = task.await.unwrap();
        assert!(result.all_succeeded, "{result:?}");
    }
}

#[tokio::test]
async fn a_client_that_leaves_takes_its_pending_approvals_with_it() {
    let ts = server().await;
    let calls = json!([{"id": "a", "name": "echo", "arguments": {"q": "risky"}}]);
    let (mut events, task) = spawn_batch(&ts, interactive("s6", calls, false));
    let approval = next_request(&mut events).await;
    task.abort();
    let mut client = ts.client.clone();
    for _ in 0..100 {
        let listed = client
            .list_approvals(pb::ListApprovalsRequest::default())
            .await;
        if listed.unwrap().into_inner().approvals.is_empty() {
            let gone = resolve(&ts, &approval.approval_id, Decision::Approve, "").await;
            assert_eq!(gone.unwrap_err().code(), tonic::Code::NotFound);
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the approval outlived its client");
}

#[tokio::test]
async fn without_the_option_an_ask_refuses_as_before_and_unary_dispatch_waits_too() {
    let ts = server().await;
    let calls = json!([{"id": "a", "name": "echo", "arguments": {"q": "risky"}}]);
    let mut plain = interactive("s7", calls.clone(), false);
    plain.options = None;
    let result = ts
        .client
        .clone()
        .dispatch(plain)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(class(&result.results[0]), pb::ErrorClass::Blocked);
    assert_eq!(
        result.results[0].content,
        "Hook requested confirmation (risky echo) but the session is not interactive"
    );
    // Unary: resolved out of band by a watcher.
    let mut watch = ts
        .client
        .clone()
        .watch_approvals(pb::WatchApprovalsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let mut client = ts.client.clone();
    let unary = tokio::spawn(async move { client.dispatch(interactive("s7", calls, false)).await });
    let update = watch.next().await.unwrap().unwrap().update.unwrap();
    let pb::watch_approvals_response::Update::Requested(approval) = update else {
        panic!("a request first")
    };
    resolve(&ts, &approval.approval_id, Decision::Approve, "")
        .await
        .unwrap();
    let update = watch.next().await.unwrap().unwrap().update.unwrap();
    assert!(
        matches!(update, pb::watch_approvals_response::Update::Resolved(r) if r.approval_id == approval.approval_id)
    );
    assert!(unary.await.unwrap().unwrap().into_inner().all_succeeded);
}

/// The end-to-end run of `tests/approvals/e2e.py`: a Python grpcio agent streams batches against
/// the binary while another grpcio client or the `toolgate approvals` CLI answers; a rules hook,
/// a command hook, a gRPC hook (served by the script) and a permission rule ask; then two
/// binaries sharing a real Redis, answered across them with the CLI.
#[test]
fn python_agents_and_the_cli_answer_approvals_end_to_end() {
    crate::peers::require_peers!(TestEnv, Redis);
    let python = crate::peers::testenv().join("venv/bin/python");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/approvals/e2e.py");
    let output = crate::peers::run(
        std::process::Command::new(python)
            .arg(script)
            .args(["--toolgate", env!("CARGO_BIN_EXE_toolgate")])
            .args(["--redis-server", "redis-server"]),
    );
    for scenario in [
        "approve_by_cli",
        "the_agent_cannot_answer_its_own",
        "the_agent_answers_where_its_rule_lets_it",
        "a_rule_can_forbid_remembering",
        "edited_arguments",
        "edited_arguments_are_validated",
        "deny_by_cli",
        "timeout",
        "remember_session",
        "other_tenant",
        "client_leaves",
        "parallel_is_not_held_up",
        "sequential_waits",
        "every_kind_of_asker",
        "watch_and_unary",
        "not_interactive",
        "cross_replica",
    ] {
        assert!(
            output.lines().any(|line| line == format!("ok {scenario}")),
            "{scenario}:\n{output}"
        );
    }
}

/// The README's example: the agent asks its user on the terminal (here, a pipe) and answers.
#[test]
fn the_readme_example_asks_the_user_on_the_terminal() {
    use std::io::Write;
    crate::peers::require_peers!(TestEnv);
    let dir = std::env::temp_dir().join(format!("toolgate-it-ask-user-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("toolgate.toml");
    std::fs::write(
        &config,
        "[[hooks.rules]]\nid = \"risky\"\ntools = \"echo\"\naction = \"ask\"\nreason = \"it deletes\"\n\
         requester_may_answer = true\n[[hooks.rules.when]]\npointer = \"/q\"\nregex = \"^risky\"\n",
    )
    .unwrap();
    let server = crate::peers::Binary::start(&["--config", config.to_str().unwrap()]);
    let python = crate::peers::testenv().join("venv/bin/python");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/python/ask_user.py");
    for (answer, expected) in [
        ("y\n", r#""content": "{\"q\":\"risky: delete the draft\"}""#),
        (
            "n\n",
            r#""content": "A person denied the call to tool 'echo': the user said no""#,
        ),
    ] {
        let mut child = std::process::Command::new(&python)
            .arg(script)
            .args(["--addr", &server.addr])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(answer.as_bytes())
            .unwrap();
        let output = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            stdout.contains("echo {\"q\": \"risky: delete the draft\"}: it deletes. Run it? [y/N]"),
            "{stdout}"
        );
        assert!(stdout.contains(expected), "{stdout}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// With the Redis store, an approval waiting on one replica is listed, watched and answered
/// through another; a remembered answer holds on every replica; an expired one is gone on all.
#[tokio::test]
async fn an_approval_waiting_on_one_replica_is_answered_through_another() {
    crate::peers::require_peers!(Redis);
    let redis = crate::shared_sessions::Redis::start();
    let extra = r#"
[approvals]
timeout = "3s"
[[hooks.rules]]
id = "risky"
tools = "echo"
action = "ask"
reason = "risky echo"
[[hooks.rules.when]]
pointer = "/q"
regex = "^risky"
"#;
    let servers = crate::shared_sessions::replicas(&redis, 2, extra).await;
    let (a, b) = (&servers[0], &servers[1]);
    let mut watch = b
        .client
        .clone()
        .watch_approvals(pb::WatchApprovalsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let calls = json!([{"id": "c1", "name": "echo", "arguments": {"q": "risky 1"}}]);
    let (mut events, task) = spawn_batch(a, interactive("shared", calls, false));
    let approval = next_request(&mut events).await;
    // B lists it and its watcher saw it arrive.
    let listed = b
        .client
        .clone()
        .list_approvals(pb::ListApprovalsRequest::default())
        .await;
    assert_eq!(
        listed.unwrap().into_inner().approvals,
        std::slice::from_ref(&approval)
    );
    // And by id, read alone from the store.
    for (id, expected) in [(approval.approval_id.clone(), 1), ("0".repeat(32), 0)] {
        let by_id = pb::ListApprovalsRequest {
            approval_id: id,
            ..Default::default()
        };
        let listed = b.client.clone().list_approvals(by_id).await.unwrap();
        assert_eq!(listed.into_inner().approvals.len(), expected);
    }
    let odd = pb::ListApprovalsRequest {
        approval_id: "../pending:*".into(),
        ..Default::default()
    };
    let refused = b.client.clone().list_approvals(odd).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    let seen = next_watched_request(&mut watch).await;
    assert_eq!(seen.approval_id, approval.approval_id);
    // Answered through B, with remember = SESSION; A's call runs.
    let req = pb::ResolveApprovalRequest {
        approval_id: approval.approval_id.clone(),
        decision: Decision::Approve as i32,
        remember: Remember::Session as i32,
        ..Default::default()
    };
    b.client.clone().resolve_approval(req).await.unwrap();
    let result = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    assert!(result.all_succeeded, "{:?}", result.results);
    let ended = tokio::time::timeout(Duration::from_secs(5), watch.next())
        .await
        .unwrap();
    assert!(matches!(ended.unwrap().unwrap().update.unwrap(),
        pb::watch_approvals_response::Update::Resolved(r) if r.approval_id == approval.approval_id));
    // Once, on either replica.
    for server in [a, b] {
        let twice = resolve(server, &approval.approval_id, Decision::Deny, "").await;
        assert_eq!(twice.unwrap_err().code(), tonic::Code::FailedPrecondition);
    }
    // The session's remembered answer holds on B.
    let calls = json!([{"id": "c2", "name": "echo", "arguments": {"q": "risky 2"}}]);
    let (events, result) = dispatch_stream(b, interactive("shared", calls, false)).await;
    assert!(result.all_succeeded);
    assert!(events.iter().any(|e| matches!(e, Event::ApprovalResolved(r)
        if r.how == pb::approval_resolved::How::Remembered as i32)));
    // A replica whose rule under that name is configured otherwise (an edit, or rules
    // reordered so a position names another) does not take the remembered answer: it asks.
    let edited = extra.replace("^risky", "^(risky|danger)");
    let c = crate::shared_sessions::replicas(&redis, 1, &edited)
        .await
        .remove(0);
    let calls = json!([{"id": "c2b", "name": "echo", "arguments": {"q": "risky 2b"}}]);
    let (mut events, task) = spawn_batch(&c, interactive("shared", calls, false));
    let asked = next_request(&mut events).await;
    resolve(&c, &asked.approval_id, Decision::Deny, "asked again")
        .await
        .unwrap();
    assert!(!task.await.unwrap().all_succeeded);
    // Large arguments waiting on A: B's watcher is sent their preview from the store, and
    // its listing reads them whole.
    let big = format!("risky {}", "x".repeat(20_000));
    let calls = json!([{"id": "c4", "name": "echo", "arguments": {"q": big}}]);
    let (mut events, task) = spawn_batch(a, interactive("big", calls, false));
    let approval = next_request(&mut events).await;
    let mut watch = b
        .client
        .clone()
        .watch_approvals(pb::WatchApprovalsRequest::default())
        .await
        .unwrap()
        .into_inner();
    let previewed = next_watched_request(&mut watch).await;
    assert_eq!(previewed.approval_id, approval.approval_id);
    assert!(previewed.arguments_cut);
    let listed = b
        .client
        .clone()
        .list_approvals(pb::ListApprovalsRequest::default())
        .await;
    let listed = listed.unwrap().into_inner().approvals;
    assert_eq!(listed.len(), 1);
    assert!(!listed[0].arguments_cut);
    assert_eq!(listed[0].arguments, approval.arguments);
    resolve(b, &approval.approval_id, Decision::Deny, "too big")
        .await
        .unwrap();
    assert!(!task.await.unwrap().all_succeeded);
    // Unanswered, it expires everywhere.
    let calls = json!([{"id": "c3", "name": "echo", "arguments": {"q": "risky 3"}}]);
    let (mut events, task) = spawn_batch(b, interactive("other", calls, false));
    let approval = next_request(&mut events).await;
    let result = task.await.unwrap();
    assert_eq!(class(&result.results[0]), pb::ErrorClass::ApprovalTimeout);
    for server in [a, b] {
        let gone = resolve(server, &approval.approval_id, Decision::Approve, "").await;
        assert_eq!(gone.unwrap_err().code(), tonic::Code::NotFound);
        let listed = server
            .client
            .clone()
            .list_approvals(pb::ListApprovalsRequest::default())
            .await;
        assert!(listed.unwrap().into_inner().approvals.is_empty());
    }
}

/// With the Redis store down, the approval RPCs say so (`UNAVAILABLE`) rather than answer from
/// half the picture, and an interactive batch naming a session fails as every named one does.
#[tokio::test]
async fn with_the_store_down_the_approval_rpcs_are_unavailable() {
    crate::peers::require_peers!(Redis);
    let mut redis = crate::shared_sessions::Redis::start();
    let config = Config::from_toml(&format!(
        "[sessions]\nstore = \"{}\"\nstore_timeout = \"500ms\"",
        redis.url()
    ))
    .unwrap();
    let ts = start_with(config).await;
    redis.kill();
    let mut client = ts.client.clone();
    let listed = client
        .list_approvals(pb::ListApprovalsRequest::default())
        .await;
    let status = listed.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert_eq!(
        status.message(),
        "the session store is down: approvals of other servers cannot be reached; retry later"
    );
    let answered = resolve(
        &ts,
        "00000000000000000000000000000000",
        Decision::Approve,
        "",
    )
    .await;
    assert_eq!(answered.unwrap_err().code(), tonic::Code::Unavailable);
}

/// An edit is a new input: every pre-tool hook sees it again, on the hook path and the
/// permission path, so a person (or the batch's own identity) cannot approve past a Block.
#[tokio::test]
async fn edited_arguments_go_through_every_hook_again() {
    let ts = server().await;
    for (call, asked_by) in [
        (
            json!({"id": "h", "name": "echo", "arguments": {"q": "risky"}}),
            "risky",
        ),
        (json!({"id": "p", "name": "now"}), "permissions[clock]"),
    ] {
        let (mut events, task) = spawn_batch(&ts, interactive("edits", json!([call]), false));
        let approval = next_request(&mut events).await;
        assert_eq!(approval.source, asked_by);
        let edited = json!({"q": "risky", "forbidden": "yes"});
        let req = pb::ResolveApprovalRequest {
            approval_id: approval.approval_id,
            decision: Decision::Approve as i32,
            updated_arguments: Some(toolgate_proto::protojson::Struct::from(
                edited.as_object().unwrap().clone(),
            )),
            ..Default::default()
        };
        ts.client.clone().resolve_approval(req).await.unwrap();
        let result = task.await.unwrap();
        let r = &result.results[0];
        assert_eq!(class(r), pb::ErrorClass::Blocked, "{asked_by}: {r:?}");
        assert_eq!(r.content, "forbidden input");
        assert_eq!((r.tool.as_str(), r.attempts), ("", 0), "{asked_by}");
    }
    // Not a well-formed id: refused before anything is looked up.
    let odd = resolve(&ts, "../../etc", Decision::Approve, "").await;
    assert_eq!(odd.unwrap_err().code(), tonic::Code::InvalidArgument);
}

/// A call that waits for a person at a permission rule gives the half-open breaker's probe
/// back while it waits (another caller of the tool is admitted meanwhile), and is admitted
/// again once approved.
#[tokio::test]
async fn a_call_waiting_at_a_permission_rule_holds_no_probe_slot() {
    let config = Config::from_toml(
        r#"
        [breaker]
        failure_threshold = 1
        cooldown = "200ms"
        [retry]
        max_retries = 0
        [[permissions.rules]]
        id = "switches"
        tools = "switch"
        decision = "ask"
        reason = "flipping switches needs a person"
        "#,
    )
    .unwrap();
    let ts = start_with(config).await;
    let switch = |id: &str| json!([{"id": id, "name": "switch"}]);
    // Open the breaker with one failure (the rule asks for every call, so it is approved).
    let (mut events, task) = spawn_batch(&ts, interactive("probe", switch("fail"), false));
    let approval = next_request(&mut events).await;
    resolve(&ts, &approval.approval_id, Decision::Approve, "")
        .await
        .unwrap();
    assert_eq!(
        class(&task.await.unwrap().results[0]),
        pb::ErrorClass::ToolError
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Half-open: this call takes the probe, then waits for a person.
    ts.switch_ok
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let (mut events, task) = spawn_batch(&ts, interactive("probe", switch("wait"), false));
    let approval = next_request(&mut events).await;
    // Meanwhile another caller is admitted (and refused by the rule, not by the breaker).
    let mut other = request(switch("other"));
    other.session_id = "probe-2".into();
    let result = ts
        .client
        .clone()
        .dispatch(other)
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        class(&result.results[0]),
        pb::ErrorClass::PermissionDenied,
        "{:?}",
        result.results[0]
    );
    resolve(&ts, &approval.approval_id, Decision::Approve, "")
        .await
        .unwrap();
    let result = task.await.unwrap();
    assert!(result.results[0].success, "{:?}", result.results[0]);
}
