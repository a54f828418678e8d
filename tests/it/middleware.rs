//! The middleware stack through the API: permissions, validation, output caps, the cache,
//! redaction and unknown-tool suggestions.

use serde_json::json;
use toolgate::config::Config;
use toolgate::pb;
use toolgate::pb::ErrorClass;
use toolgate::pb::dispatch_event::Event;

use crate::support::*;

#[tokio::test]
async fn permission_rules_deny_with_a_gate_decision_and_are_never_retried() {
    let config = Config::from_toml(
        r#"
        [[permissions.rules]]
        id = "no-writes"
        tools = "scratch_write"
        decision = "deny"
        reason = "this agent is read-only"
        [[permissions.rules]]
        id = "clock"
        tools = "now"
        decision = "ask"
        reason = "time is sensitive"
        [per_tool.scratch_write.retry]
        enabled = true
        "#,
    )
    .unwrap();
    let ts = start_with(config).await;
    let (events, result) = dispatch_stream(
        &ts,
        request(json!([
            {"id": "w", "name": "scratch_write", "arguments": {"path": "a", "content": "x"}},
            {"id": "n", "name": "now"},
            {"id": "e", "name": "echo"},
        ])),
    )
    .await;
    let w = &result.results[0];
    assert_eq!(class(w), ErrorClass::PermissionDenied);
    assert_eq!(
        w.error,
        "Permission denied for tool 'scratch_write': this agent is read-only"
    );
    assert_eq!(
        (w.tool.as_str(), w.attempts),
        ("", 0),
        "a refusal is never retried, and the tool never ran"
    );
    assert!(
        result.results[1]
            .error
            .contains("approval required (time is sensitive)"),
        "{}",
        result.results[1].error
    );
    assert!(result.results[2].success);
    let gates: Vec<(&str, i32, &str)> = events
        .iter()
        .filter_map(|e| match e {
            Event::GateDecision(g) => Some((g.id.as_str(), g.verdict, g.source.as_str())),
            _ => None,
        })
        .collect();
    use pb::gate_decision::Verdict;
    assert_eq!(
        gates,
        [
            ("w", Verdict::Block as i32, "permissions[no-writes]"),
            ("n", Verdict::Ask as i32, "permissions[clock]")
        ]
    );
}

#[tokio::test]
async fn invalid_arguments_list_each_violation_and_never_open_the_breaker() {
    let config = Config::from_toml("[breaker]\nfailure_threshold = 1").unwrap();
    let ts = start_with(config).await;
    let bad = |id: &str| json!({"id": id, "name": "scratch_write", "arguments": {"path": 7, "extra": true}});
    let result = dispatch(&ts, request(json!([bad("a"), bad("b"), bad("c")]))).await;
    for r in &result.results {
        assert_eq!(class(r), ErrorClass::InvalidArguments, "{r:?}");
    }
    let e = &result.results[0].error;
    assert!(
        e.starts_with("arguments do not match the input schema of 'scratch_write': "),
        "{e}"
    );
    assert!(e.contains("/path: 7 is not of type \"string\""), "{e}");
    assert!(e.contains("\"content\" is a required property"), "{e}");
    assert!(e.contains("Additional properties are not allowed"), "{e}");
}

#[tokio::test]
async fn output_is_capped_with_a_visible_marker() {
    let config = Config::from_toml("[output]\nmax_chars = 60").unwrap();
    let ts = start_with(config).await;
    let long = "z".repeat(500);
    let result = dispatch(
        &ts,
        request(json!([{"id": "big", "name": "echo", "arguments": {"t": long}}])),
    )
    .await;
    let r = &result.results[0];
    assert!(r.truncated && r.success);
    assert_eq!(r.content.chars().count(), 60);
    assert!(r.content.starts_with("{\"t\":\"zzz"), "{}", r.content);
    assert!(r.content.contains("characters cut]"), "{}", r.content);
    assert_eq!(messages_json(&result)[0]["content"], json!(r.content));
}

#[tokio::test]
async fn cached_reads_skip_the_tool_until_a_write_invalidates_them() {
    let config = Config::from_toml(
        "[per_tool.scratch_read.cache]\nenabled = true\nttl = \"60s\"\npath = \"/path\"\n\
         [per_tool.scratch_write]\ninvalidates_path = \"/path\"",
    )
    .unwrap();
    let ts = start_with(config).await;
    let in_session = |calls: serde_json::Value| {
        let mut req = request(calls);
        req.session_id = "cache".into();
        req
    };
    let write = |id: &str, text: &str| json!({"id": id, "name": "scratch_write", "arguments": {"path": "n.txt", "content": text}});
    let read = |id: &str| json!({"id": id, "name": "scratch_read", "arguments": {"path": "n.txt"}});
    let (events, result) = dispatch_stream(
        &ts,
        in_session(json!([write("w1", "first"), read("r1"), read("r2")])),
    )
    .await;
    assert_eq!(
        (result.results[1].cached, result.results[2].cached),
        (false, true)
    );
    assert_eq!(result.results[2].content, "first");
    let cached_posts: Vec<bool> = events
        .iter()
        .filter_map(|e| match e {
            Event::ToolPost(p) if p.tool == "scratch_read" => Some(p.cached),
            _ => None,
        })
        .collect();
    assert_eq!(cached_posts, [false, true]);
    let result = dispatch(&ts, in_session(json!([write("w2", "second"), read("r3")]))).await;
    assert!(!result.results[1].cached, "the write evicted the entry");
    assert_eq!(result.results[1].content, "second");
    // Cache hits are not tool health: one real read per miss.
    let health = ts
        .client
        .clone()
        .get_tool_health(pb::GetToolHealthRequest {
            tool: "scratch_read".into(),
        })
        .await
        .unwrap();
    assert_eq!(health.into_inner().tools[0].calls, 2);
}

#[tokio::test]
async fn secrets_are_redacted_from_results_events_and_memory() {
    let ts = start().await;
    let token = format!("ghp_{}", "A".repeat(36));
    let mut req = request(
        json!([{"id": "s", "name": "echo", "arguments": {"note": format!("token {token}"), "auth": "Bearer abcdefghijklmnopqrst"}}]),
    );
    req.session_id = "redact".into();
    let (events, result) = dispatch_stream(&ts, req).await;
    let r = &result.results[0];
    assert!(
        !r.content.contains(&token) && !r.content.contains("abcdefghijklmnopqrst"),
        "{}",
        r.content
    );
    assert!(
        r.content.contains("[REDACTED:github_token]") && r.content.contains("[REDACTED:bearer]"),
        "{}",
        r.content
    );
    let Some(Event::CallReceived(received)) = events.first() else {
        panic!("call_received first")
    };
    let announced = json_of(&received.arguments).to_string();
    assert!(!announced.contains(&token), "{announced}");
    let memory = ts
        .client
        .clone()
        .get_session_memory(pb::GetSessionMemoryRequest {
            session_id: "redact".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .entries;
    assert!(!memory[0].contains(&token), "{}", memory[0]);
}

#[tokio::test]
async fn unknown_names_get_a_suggestion_when_one_is_close() {
    let ts = start().await;
    let result = dispatch(&ts, request(json!([{"id": "a", "name": "slep", "arguments": {"ms": 1}}, {"id": "b", "name": "get_weather"}]))).await;
    assert_eq!(
        result.results[0].error,
        "tool 'slep' is not available. Did you mean 'sleep'?"
    );
    assert_eq!(
        result.results[1].error,
        "tool 'get_weather' is not available"
    );
}

#[tokio::test]
async fn provider_keys_never_come_back_in_a_result() {
    let ts = start().await;
    let secrets = json!({
        "openai": "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z_Ab3dEf6hIj9kL",
        "anthropic": "sk-ant-api03-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb3dEf6hIj9kLm2n-AA",
        "db": "postgres://admin:hunter2secret@db.internal:5432/app",
        "id": "550e8400-e29b-41d4-a716-446655440000",
        "client_secret": "plain words here",
        "env": [{"name": "STRIPE_API_KEY", "value": "whatever it is"}],
    });
    let result = dispatch(
        &ts,
        request(json!([{"id": "e", "name": "echo", "arguments": secrets}])),
    )
    .await;
    let content = &result.results[0].content;
    for leaked in [
        "Ab3dEf6hIj9kLm2n",
        "hunter2secret",
        "plain words here",
        "whatever it is",
    ] {
        assert!(!content.contains(leaked), "{content}");
    }
    for kept in [
        "[REDACTED:openai_key]",
        "[REDACTED:anthropic_key]",
        "postgres://[REDACTED:url_credentials]@db.internal:5432/app",
        "550e8400-e29b-41d4-a716-446655440000",
    ] {
        assert!(content.contains(kept), "{kept} missing in {content}");
    }
}

#[tokio::test]
async fn registry_passwords_dsns_vault_tokens_and_encoded_keys_never_come_back() {
    let ts = start().await;
    let text = "docker login -u ci -p Hunt3r registry.example.com\n\
        SENTRY_DSN=https://0123456789abcdef0123456789abcdef@o123456.ingest.sentry.io/4504\n\
        VAULT_TOKEN=hvs.Q2hBU0lHc1p2VjNrb1pNd0pUc2xWdUxkc3V3S0doakJuSUY0a0JrQmpy\n\
        client-key-data: LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0tCk1IY0NBUUVFSUJrZzRMVldNOW51d05TazN5Qnl4WnBZUlRCblZKazVBRHlpOE1sM21QeitvQW9HQ0NxR1NNNDkKLS0tLS1FTkQgRUMgUFJJVkFURSBLRVktLS0tLQo=\n\
        certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUJrVENCK3dJSkFLSEJmcGVnUGpNQ01BMEdDU3FHU0liM0RRRUJDd1VBTUJFeER6QU5CZ05WQkFNTUJuUmwKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo=\n\
        docker login -u ci registry.example.com; git clone https://alice@git.example.com/x.git";
    let result = dispatch(
        &ts,
        request(json!([{"id": "e", "name": "echo", "arguments": {"text": text}}])),
    )
    .await;
    let content = &result.results[0].content;
    for leaked in [
        "Hunt3r",
        "0123456789abcdef0123456789abcdef",
        "hvs.Q2hBU0lH",
        "LS0tLS1CRUdJTiBFQyBQUklWQVRF",
    ] {
        assert!(!content.contains(leaked), "{leaked} in {content}");
    }
    for kept in [
        "-p [REDACTED:docker_password] registry.example.com",
        "https://[REDACTED:sentry_dsn]@o123456.ingest.sentry.io/4504",
        "VAULT_TOKEN=[REDACTED:vault_token]",
        "client-key-data: [REDACTED:pem_private_key]",
        "certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t",
        "docker login -u ci registry.example.com; git clone https://alice@git.example.com/x.git",
    ] {
        assert!(content.contains(kept), "{kept} missing in {content}");
    }
}
