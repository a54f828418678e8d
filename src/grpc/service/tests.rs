//! The service's refusals, called directly with `tonic::Request`s: no server, no socket. Each
//! refusal is a status with a stable code and message, and takes no batch slot. Requests carry
//! the caller the access layer (`access.rs`, not in front here) would have put in them.

use serde_json::{Value, json};
use tonic::Code;

use super::*;
use crate::config::Config;
use toolgate_proto::protojson;

/// The service as `Server::start_on` wires it for `config` (TOML), and its state.
fn wire(config: &str) -> (ToolGateService, Arc<ServiceState>) {
    let config = Config::from_toml(config).unwrap();
    let dispatcher = crate::Server::new(config.clone()).dispatcher().unwrap();
    let remotes = Remotes::new(dispatcher.catalog().clone(), Arc::default());
    let state = Arc::new(ServiceState {
        dispatcher,
        rules: RequestRules {
            limits: config.limits,
            dispatch: config.dispatch,
        },
        entry: Arc::new(crate::front::entry::Entry::new(
            crate::front::admission::Admission::new((&config.server).into()),
            crate::front::decoded::DecodedBudget::new((&config.limits).into()),
            Arc::default(),
        )),
        stalls: StallWatch::new(config.server.stall_timeout),
        connections: crate::grpc::transport::Connections::new(
            crate::grpc::transport::TransportSettings::from_config(&config.server),
            Arc::default(),
        ),
        metrics: Arc::default(),
        tracer: toolgate_core::trace::Tracer::off(),
        auth: Arc::new(crate::front::auth::Authenticator::open()),
        remotes,
        allow_registration: config.remote_registration.enabled,
        registration: Arc::new(config.remote_registration.policy().unwrap()),
    });
    (ToolGateService::new(state.clone()), state)
}

/// A request from the local caller, as the access layer hands it on.
fn local<T>(message: T) -> Request<T> {
    let mut request = Request::new(message);
    request
        .extensions_mut()
        .insert(Arc::new(toolgate_core::identity::Caller::local()));
    request
}

/// A request with these calls (any JSON shapes) and default options.
fn request(calls: Value) -> pb::DispatchBatchRequest {
    let Value::Array(calls) = calls else {
        panic!("calls must be an array")
    };
    pb::DispatchBatchRequest {
        calls: calls.into_iter().map(protojson::Value::from).collect(),
        ..Default::default()
    }
}

/// A request of these calls, changed by `edit`.
fn edited(
    calls: Value,
    edit: impl FnOnce(&mut pb::DispatchBatchRequest),
) -> pb::DispatchBatchRequest {
    let mut request = request(calls);
    edit(&mut request);
    request
}

/// One `echo` call with its options changed by `edit`.
fn with_options(edit: impl FnOnce(&mut pb::DispatchOptions)) -> pb::DispatchBatchRequest {
    edited(json!([{"name": "echo"}]), |r| {
        edit(r.options.get_or_insert_default())
    })
}

fn seconds(seconds: i64) -> Option<prost_types::Duration> {
    Some(prost_types::Duration { seconds, nanos: 0 })
}

/// The status `Dispatch` refuses `request` with; `DispatchBatch` shares its admission, so it
/// must refuse with the same code and message.
async fn refusal(service: &ToolGateService, request: pb::DispatchBatchRequest) -> Status {
    let unary = match service.dispatch(local(request.clone())).await {
        Ok(response) => panic!("Dispatch ran the batch: {:?}", response.into_inner()),
        Err(status) => status,
    };
    let Err(streaming) = service.dispatch_batch(local(request)).await else {
        panic!("DispatchBatch opened a stream for {unary:?}");
    };
    assert_eq!(
        (streaming.code(), streaming.message()),
        (unary.code(), unary.message())
    );
    unary
}

#[test]
fn grpc_timeout_header_is_parsed() {
    let mut m = MetadataMap::new();
    assert_eq!(grpc_timeout(&m), None);
    m.insert("grpc-timeout", "250m".parse().unwrap());
    assert_eq!(grpc_timeout(&m), Some(Duration::from_millis(250)));
    m.insert("grpc-timeout", "3S".parse().unwrap());
    assert_eq!(grpc_timeout(&m), Some(Duration::from_secs(3)));
    m.insert("grpc-timeout", "bad".parse().unwrap());
    assert_eq!(grpc_timeout(&m), None);
    // The spec's limit is eight digits, as tonic's clients and server read it.
    m.insert("grpc-timeout", "99999999S".parse().unwrap());
    assert_eq!(grpc_timeout(&m), Some(Duration::from_secs(99_999_999)));
    for refused in ["123456789m", "+5S", "S", "-1m"] {
        m.insert("grpc-timeout", refused.parse().unwrap());
        assert_eq!(grpc_timeout(&m), None, "{refused}");
    }
}

#[tokio::test]
async fn a_draining_server_refuses_batches_as_unavailable_before_reading_them() {
    let (service, state) = wire("");
    // What the server's drain does first when shutdown starts.
    state.entry.tracker.close();
    let status = refusal(&service, request(json!([{"name": "echo"}]))).await;
    assert_eq!(
        (status.code(), status.message()),
        (Code::Unavailable, "the server is shutting down")
    );
    // Draining wins over a request that would be invalid: it is not even parsed.
    let status = refusal(&service, with_options(|o| o.mode = 7)).await;
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(state.entry.admission.in_use(), (0, 0));
}

#[tokio::test]
async fn a_server_at_its_batch_limit_refuses_more_as_resource_exhausted() {
    let (service, state) = wire(
        "[server]\nmax_concurrent_batches = 1\nmax_batches_per_connection = 1\n\
         max_batches_per_tenant = 1\nmax_batches_per_identity = 1",
    );
    // An open stream holds its slot until it is dropped, read or not.
    let long = request(json!([{"name": "sleep", "arguments": {"ms": 3_600_000}}]));
    let Ok(running) = service.dispatch_batch(local(long)).await else {
        panic!("the first batch is admitted");
    };
    assert_eq!(state.entry.admission.in_use(), (1, 1));
    let status = refusal(&service, request(json!([{"name": "echo"}]))).await;
    assert_eq!(
        (status.code(), status.message()),
        (
            Code::ResourceExhausted,
            "too many batches are running (1 at once); retry later"
        )
    );
    drop(running);
    let result = service
        .dispatch(local(request(json!([{"name": "echo"}]))))
        .await
        .unwrap()
        .into_inner();
    assert!(result.all_succeeded, "the freed slot admits the next batch");
}

#[tokio::test]
async fn malformed_requests_are_invalid_argument_with_the_field_named() {
    use pb::dispatch_options::Mode;
    let (service, state) = wire("[limits]\nmax_json_depth = 3");
    let echo = json!({"name": "echo"});
    let cases = [
        (
            with_options(|o| o.mode = 7),
            "options.mode 7 is not a known value",
        ),
        (
            with_options(|o| o.message_format = 9),
            "options.message_format 9 is not a known value",
        ),
        (
            with_options(|o| o.on_error = 5),
            "options.on_error 5 is not a known value",
        ),
        (
            with_options(|o| {
                o.mode = Mode::Parallel.into();
                o.max_concurrency = 65;
            }),
            "options.max_concurrency 65 is above this server's ceiling of 64",
        ),
        (
            with_options(|o| o.max_calls = 1025),
            "options.max_calls 1025 is above this server's ceiling of 1024",
        ),
        (
            with_options(|o| o.call_timeout = seconds(-1)),
            "options.call_timeout must be a positive duration",
        ),
        (
            with_options(|o| o.call_timeout = seconds(3601)),
            "options.call_timeout 3601s is above this server's maximum of 3600s",
        ),
        (
            edited(json!([echo, echo, echo]), |r| {
                r.options.get_or_insert_default().max_calls = 2;
            }),
            "the batch has 3 calls; the limit is 2",
        ),
        (
            request(json!([{"name": "echo", "arguments": {"a": {"b": {"c": 1}}}}])),
            "calls[0] nests deeper than 3 levels",
        ),
        (
            edited(json!([echo]), |r| {
                r.assistant_message = Some(protojson::Value::from(json!({"role": "assistant"})));
            }),
            "set either calls or assistant_message, not both",
        ),
        (
            edited(json!([echo]), |r| r.session_id = "../x".into()),
            "session_id '../x' is invalid: use 1 to 128 ASCII letters, digits, '-', '_' or '.'",
        ),
        (
            edited(json!([{"name": "lookup"}]), |r| {
                let ghost = pb::Binding {
                    tool: "ghost".into(),
                    input: None,
                };
                r.bindings.insert("lookup".into(), ghost);
            }),
            "binding 'lookup': tool 'ghost' is not registered",
        ),
        (
            edited(json!([echo]), |r| {
                let shadow = pb::Binding {
                    tool: "now".into(),
                    input: None,
                };
                r.bindings.insert("echo".into(), shadow);
            }),
            "binding 'echo': 'echo' is a registered tool's name, which a binding to another tool ('now') may not shadow",
        ),
    ];
    for (request, message) in cases {
        let status = refusal(&service, request).await;
        assert_eq!(
            (status.code(), status.message()),
            (Code::InvalidArgument, message)
        );
    }
    let unrecognised = edited(json!([]), |r| {
        r.assistant_message = Some(protojson::Value::from(json!({"hello": "world"})));
    });
    let status = refusal(&service, unrecognised).await;
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status
            .message()
            .starts_with("assistant_message is not a recognised assistant message"),
        "{}",
        status.message()
    );
    assert_eq!(
        state.entry.admission.in_use(),
        (0, 0),
        "a refused request holds no slot"
    );
}

#[tokio::test]
async fn empty_and_junk_call_lists_are_answered_not_refused() {
    let (service, _state) = wire("");
    let empty = service
        .dispatch(local(request(json!([]))))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((empty.count, empty.results.len()), (0, 0));
    // A call the intake cannot read is that call's soft error; the batch still runs.
    let junk = service
        .dispatch(local(request(json!(["junk", {"name": "echo"}]))))
        .await
        .unwrap()
        .into_inner();
    let answered: Vec<(&str, bool)> = junk
        .results
        .iter()
        .map(|r| (r.id.as_str(), r.success))
        .collect();
    assert_eq!(answered, [("call_0", false), ("call_1", true)]);
}

#[tokio::test]
async fn session_rpcs_refuse_missing_malformed_and_unknown_ids() {
    let (service, _state) = wire("");
    let memory = |id: &str| {
        service.get_session_memory(local(pb::GetSessionMemoryRequest {
            session_id: id.into(),
        }))
    };
    let status = memory("").await.unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (Code::InvalidArgument, "session_id is required")
    );
    let status = memory("nobody").await.unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (Code::NotFound, "no live session 'nobody'")
    );
    let status = service
        .end_session(local(pb::EndSessionRequest {
            session_id: "../x".into(),
        }))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().starts_with("session_id '../x' is invalid"),
        "{}",
        status.message()
    );
}

#[tokio::test]
async fn remote_registration_is_permission_denied_unless_enabled_and_allowlisted() {
    let off = "registering remotes at run time is off: set [remote_registration] enabled = true";
    let (service, _state) = wire("");
    let statuses = [
        service
            .register_remote(local(pb::RegisterRemoteRequest::default()))
            .await
            .unwrap_err(),
        service
            .unregister_remote(local(pb::UnregisterRemoteRequest { name: "x".into() }))
            .await
            .unwrap_err(),
        service
            .refresh_remote(local(pb::RefreshRemoteRequest { name: "x".into() }))
            .await
            .unwrap_err(),
        service
            .accept_tool_change(local(pb::AcceptToolChangeRequest {
                tool: "x".into(),
                ..Default::default()
            }))
            .await
            .unwrap_err(),
    ];
    for status in statuses {
        assert_eq!(
            (status.code(), status.message()),
            (Code::PermissionDenied, off)
        );
    }

    let (service, _state) = wire(
        "[remote_registration]\nenabled = true\n[[remote_registration.commands]]\nargv = [\"python3\", \"server.py\"]",
    );
    let definition = |value: Value| pb::RegisterRemoteRequest {
        definition: value.as_object().cloned().map(protojson::Struct::from),
    };
    let shell = json!({"name": "sh", "kind": "mcp", "command": ["/bin/sh", "-c", "true"]});
    let status = service
        .register_remote(local(definition(shell)))
        .await
        .unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (
            Code::PermissionDenied,
            "the command [\"/bin/sh\", \"-c\", \"true\"] matches no [[remote_registration.commands]] entry"
        )
    );
    let status = service
        .register_remote(local(definition(json!({"kind": 3}))))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().starts_with("definition: "),
        "{}",
        status.message()
    );
    let status = service
        .unregister_remote(local(pb::UnregisterRemoteRequest {
            name: "ghost".into(),
        }))
        .await
        .unwrap_err();
    assert_eq!(
        (status.code(), status.message()),
        (Code::NotFound, "no remote 'ghost' is registered")
    );
}
