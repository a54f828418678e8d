//! Bindings through the API: config and request bindings, input references into the context,
//! call metadata, result selection, FAIL_FAST, bounded errors, and the private-sibling test.

use serde_json::json;
use toolgate::config::Config;
use toolgate::pb;
use toolgate::pb::ErrorClass;
use toolgate::pb::dispatch_event::Event;
use toolgate::protojson;

use crate::support::*;

fn context(value: serde_json::Value) -> Option<protojson::Struct> {
    value.as_object().cloned().map(protojson::Struct::from)
}

fn binding(tool: &str, input: serde_json::Value) -> pb::Binding {
    pb::Binding {
        tool: tool.into(),
        input: input.as_object().cloned().map(protojson::Struct::from),
    }
}

#[tokio::test]
async fn a_config_binding_maps_arguments_and_context_into_the_tool_input() {
    let config = Config::from_toml(
        r#"
        [bindings.get_weather]
        tool = "echo"
        input = { city = "arguments.city", user = "ctx.user.id", units = { "$literal" = "arguments.units" }, region = "region" }
        "#,
    )
    .unwrap();
    let ts = start_with(config).await;
    let mut req = request(
        json!([{"id": "w1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Berlin\"}"}}]),
    );
    req.context = context(json!({"user": {"id": "u-42"}, "region": "eu"}));
    let result = dispatch(&ts, req).await;
    let r = &result.results[0];
    assert!(r.success, "{r:?}");
    assert_eq!(
        (r.name.as_str(), r.tool.as_str()),
        ("get_weather", "echo"),
        "the result names the bound tool"
    );
    assert_eq!(
        json_of(&r.result),
        json!({"city": "Berlin", "user": "u-42", "units": "arguments.units", "region": "eu"})
    );
    assert_eq!(
        json_of(&r.arguments),
        json!({"city": "Berlin"}),
        "arguments stay the model's"
    );
    assert_eq!(messages_json(&result)[0]["tool_call_id"], json!("w1"));
}

#[tokio::test]
async fn a_request_binding_overrides_the_config_and_is_checked_on_receipt() {
    let config = Config::from_toml(
        "[bindings.lookup]\ntool = \"echo\"\ninput = { from = { \"$literal\" = \"config\" } }",
    )
    .unwrap();
    let ts = start_with(config).await;
    let mut req = request(json!([{"id": "a", "name": "lookup", "arguments": {"q": 1}}]));
    req.bindings.insert(
        "lookup".into(),
        binding(
            "echo",
            json!({"from": {"$literal": "request"}, "q": "arguments.q"}),
        ),
    );
    let result = dispatch(&ts, req).await;
    assert_eq!(
        json_of(&result.results[0].result),
        json!({"from": "request", "q": 1})
    );

    let mut bad = request(json!([{"id": "a", "name": "lookup"}]));
    bad.bindings
        .insert("lookup".into(), binding("no_such_tool", json!({})));
    bad.bindings
        .insert("other".into(), binding("echo", json!({"x": "ctx.user."})));
    let status = ts.client.clone().dispatch(bad).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status
            .message()
            .contains("tool 'no_such_tool' is not registered"),
        "{}",
        status.message()
    );
    assert!(
        !status.message().contains("ctx.user."),
        "a malformed reference is not a reason to refuse: {}",
        status.message()
    );
}

#[tokio::test]
async fn malformed_references_resolve_to_null_instead_of_refusing_the_request() {
    let ts = start().await;
    let mut req = request(json!([{"id": "a", "name": "lookup", "arguments": {"city": "Paris"}}]));
    req.bindings.insert(
        "lookup".into(),
        binding(
            "echo",
            json!({"user": "ctx.user.", "city": "arguments..city", "call": "call.", "all": "ctx.",
                   "ok": "arguments.city"}),
        ),
    );
    let result = dispatch(&ts, req).await;
    assert!(result.results[0].success, "{:?}", result.results[0]);
    assert_eq!(
        json_of(&result.results[0].result),
        json!({"user": null, "city": null, "call": null, "all": null, "ok": "Paris"})
    );
}

#[tokio::test]
async fn a_binding_to_a_missing_tool_in_the_config_stops_the_server_from_starting() {
    let config = Config::from_toml("[bindings.x]\ntool = \"ghost\"").unwrap();
    let err = toolgate::Server::new(config)
        .start_local()
        .await
        .err()
        .expect("refused");
    assert!(
        err.to_string()
            .contains("binding 'x': tool 'ghost' is not registered"),
        "{err}"
    );
}

#[tokio::test]
async fn tools_receive_the_call_metadata_and_results_are_selected() {
    let ts = start().await;
    let mut req = request(json!([
        {"id": "m0", "name": "echo"},
        {"id": "m1", "type": "function", "function": {"name": "meta", "arguments": "{\"k\":\"v\"}"}},
    ]));
    req.bindings.insert(
        "echo".into(),
        binding(
            "echo",
            json!({"tool_result_text": "selected text", "other": 1}),
        ),
    );
    let result = dispatch(&ts, req).await;
    // Selection: tool_result_text wins over the rest of the object.
    assert_eq!(result.results[0].content, "selected text");
    let meta = json_of(&result.results[1].result);
    assert_eq!(meta["tool_name"], json!("meta"));
    assert_eq!(meta["tool_call_id"], json!("m1"));
    assert_eq!(meta["tool_call_index"], json!(1));
    assert_eq!(meta["tool_arguments"], json!({"k": "v"}));
    assert_eq!(
        meta["tool_call"],
        json!({"id": "m1", "index": 1, "name": "meta", "arguments": {"k": "v"}, "raw_arguments": "{\"k\":\"v\"}"})
    );
    assert!(
        meta.get("_internal").is_none(),
        "top-level _ keys are dropped"
    );
}

#[tokio::test]
async fn fail_fast_stops_after_the_first_failure_and_names_it() {
    let ts = start().await;
    let mut req = request(json!([
        {"id": "ok", "name": "echo"},
        {"id": "bad", "name": "fail"},
        {"id": "never", "name": "echo"},
    ]));
    req.options = Some(pb::DispatchOptions {
        on_error: pb::dispatch_options::OnError::FailFast.into(),
        ..Default::default()
    });
    let result = dispatch(&ts, req).await;
    let classes: Vec<ErrorClass> = result.results.iter().map(class).collect();
    assert_eq!(
        classes,
        [ErrorClass::None, ErrorClass::ToolError, ErrorClass::Skipped]
    );
    assert_eq!(result.outcome, pb::batch_result::Outcome::FailedFast as i32);
    assert_eq!(
        result.outcome_reason,
        "call 1 (id 'bad', tool 'fail') failed: disk on fire"
    );
    assert_eq!(result.messages.len(), 3, "every call still has its message");
    // An unknown tool is a failure too.
    let mut req = request(json!([{"id": "u", "name": "nope"}, {"id": "n", "name": "echo"}]));
    req.options = Some(pb::DispatchOptions {
        on_error: pb::dispatch_options::OnError::FailFast.into(),
        ..Default::default()
    });
    let result = dispatch(&ts, req).await;
    assert_eq!(class(&result.results[1]), ErrorClass::Skipped);
}

#[tokio::test]
async fn error_texts_are_bounded_and_redacted() {
    let config = Config::from_toml("[output]\nmax_error_chars = 40").unwrap();
    let ts = start_with(config).await;
    let long_name = format!("tool_{}", "x".repeat(60));
    let result = dispatch(&ts, request(json!([{"id": "a", "name": long_name}]))).await;
    let e = &result.results[0].error;
    assert!(e.ends_with("characters cut]"), "{e}");
    assert!(e.starts_with("tool 'tool_xxxx"), "{e}");
    assert_eq!(result.results[0].content, *e);
}

#[tokio::test]
async fn a_private_sibling_never_reaches_the_tool_results_messages_or_events() {
    let ts = start().await;
    let mut req = request(json!([{"id": "p", "name": "profile", "arguments": {}}]));
    req.bindings.insert(
        "profile".into(),
        binding(
            "meta",
            json!({"name": "ctx.user.profile.name", "id": "ctx.user.id"}),
        ),
    );
    req.context = context(
        json!({"user": {"profile": {"name": "Ada"}, "private_note": "internal-secret-note"}}),
    );
    let (events, result) = dispatch_stream(&ts, req).await;
    let r = &result.results[0];
    assert!(r.success, "{r:?}");
    assert_eq!(
        json_of(&r.result)["input"],
        json!({"name": "Ada", "id": null})
    );
    let everywhere = format!("{events:?} {result:?}");
    assert!(
        !everywhere.contains("internal-secret-note"),
        "the private field leaked"
    );
    assert!(everywhere.contains("Ada"));
    let posts = events
        .iter()
        .filter(|e| matches!(e, Event::ToolPost(p) if p.result_preview.contains("Ada")))
        .count();
    assert_eq!(posts, 1, "tool_post carries a preview of the result");
}

#[tokio::test]
async fn a_binding_cannot_shadow_a_registered_tool() {
    let ts = start().await;
    // The model calls `echo`; a request binding `echo → now` would run `now` in its place.
    let mut req = request(json!([{"id": "a", "name": "echo", "arguments": {"x": 1}}]));
    req.bindings
        .insert("echo".into(), binding("now", json!({})));
    let status = ts.client.clone().dispatch(req).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "binding 'echo': 'echo' is a registered tool's name, which a binding to another tool ('now') may not shadow"
    );
    // In the config, a built-in's name is a load error, and any other tool's a start error.
    let built_in = Config::from_toml("[bindings.echo]\ntool = \"now\"").unwrap_err();
    assert!(
        built_in.to_string().contains("may not shadow"),
        "{built_in}"
    );
    let config = Config::from_toml("[bindings.clock]\ntool = \"echo\"").unwrap();
    let clock = toolgate::tools::FnTool::new("clock", "an embedded tool", |_input, _ctx| async {
        Ok(toolgate::tools::ToolOutput::Text("noon".into()))
    });
    let Err(error) = toolgate::Server::new(config)
        .tool(clock)
        .start_local()
        .await
    else {
        panic!("a config binding named after the embedded tool `clock` must not start");
    };
    assert!(
        error
            .to_string()
            .contains("binding 'clock': 'clock' is a registered tool's name"),
        "{error}"
    );
}
