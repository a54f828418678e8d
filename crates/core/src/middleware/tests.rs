//! Layer tests: each layer over a fake core with `ServiceBuilder`, on paused time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::json;
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};

use super::*;
use crate::tools::{ToolSource, builtin_tools};

/// The tool `name` as a call resolves it: the built-in of that name, or one that echoes.
fn resolved(name: &str) -> Arc<Registered> {
    let tool = builtin_tools(&[])
        .into_iter()
        .find(|t| t.name() == name)
        .unwrap_or_else(|| {
            Arc::new(crate::tools::FnTool::new(
                name,
                "a test tool",
                |input, _ctx| Box::pin(async move { Ok(ToolOutput::Json(input)) }),
            ))
        });
    Arc::new(Registered::new(tool, ToolSource::Builtin, None))
}

fn invocation(tool: &str, input: Value) -> Invocation {
    Invocation {
        tool: resolved(tool),
        input: Arc::new(input),
        canonical: None,
        ctx: ToolContext::new("s1", "c1", 0, std::env::temp_dir()),
        turn: 1,
        requested_timeout: None,
        deadline: None,
        budget: None,
        approved: None,
    }
}

/// A core that counts its calls and echoes its input (or sleeps `ms`).
fn fake(
    calls: Arc<AtomicU32>,
) -> impl Service<Invocation, Response = Invoked, Error = Infallible, Future: Send + 'static>
+ Clone
+ Send
+ 'static {
    service_fn(move |inv: Invocation| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move {
            if let Some(ms) = inv.input.get("ms").and_then(Value::as_u64) {
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
            Ok::<_, Infallible>(Invoked::reply(Reply::Output(ToolOutput::Json(
                Arc::unwrap_or_clone(inv.input),
            ))))
        }
    })
}

fn class_of(invoked: &Invoked) -> Option<(ErrorClass, &str)> {
    match &invoked.reply {
        Reply::Error { class, message, .. } => Some((*class, message.as_str())),
        Reply::Output(_) => None,
    }
}

#[tokio::test(start_paused = true)]
async fn timeout_cuts_the_call_fires_the_token_and_reads_well() {
    let calls = Arc::new(AtomicU32::new(0));
    let svc = ServiceBuilder::new()
        .layer(TimeoutLayer::new(
            Duration::from_secs(60),
            [("slow".to_owned(), Duration::from_millis(250))].into(),
        ))
        .service(fake(calls));
    let inv = invocation("slow", json!({"ms": 10_000}));
    let token = inv.ctx.cancel.clone();
    let invoked = svc.clone().oneshot(inv).await.unwrap();
    assert_eq!(
        class_of(&invoked),
        Some((ErrorClass::Timeout, "Tool 'slow' timed out after 250ms"))
    );
    assert!(token.is_cancelled());
    // The request's own timeout wins over the tool's; the deadline caps both.
    let mut inv = invocation("slow", json!({"ms": 10_000}));
    inv.requested_timeout = Some(Duration::from_millis(1500));
    let invoked = svc.clone().oneshot(inv).await.unwrap();
    assert_eq!(
        class_of(&invoked).unwrap().1,
        "Tool 'slow' timed out after 1.5s"
    );
    let mut inv = invocation("other", json!({"ms": 10_000}));
    inv.deadline = Some(Instant::now() + Duration::from_millis(100));
    let invoked = svc.oneshot(inv).await.unwrap();
    assert_eq!(
        class_of(&invoked).unwrap().1,
        "Tool 'other' timed out after 100ms"
    );
}

#[test]
fn permission_rules_can_be_about_some_callers_only() {
    use crate::identity::{Caller, Method, Role};
    let rule = PermissionRule {
        id: "acme-no-pay".into(),
        tools: "pay*".into(),
        identities: vec!["token:bot-*".into()],
        tenants: vec!["acme".into()],
        roles: vec!["agent".into()],
        verdict: PermissionVerdict::Deny,
        reason: "no".into(),
    };
    let caller = |id: &str, tenant: &str, roles: Vec<Role>| Caller {
        id: id.into(),
        tenant: tenant.into(),
        roles,
        method: Method::Token,
    };
    assert!(rule.matches("pay", &caller("bot-1", "acme", vec![Role::Agent])));
    assert!(!rule.matches("pay", &caller("bot-1", "globex", vec![Role::Agent])));
    assert!(!rule.matches("pay", &caller("human", "acme", vec![Role::Agent])));
    assert!(!rule.matches("pay", &caller("bot-1", "acme", vec![Role::Admin])));
    let jwt = Caller {
        method: Method::Jwt,
        ..caller("bot-1", "acme", vec![Role::Agent])
    };
    assert!(
        !rule.matches("pay", &jwt),
        "a JWT subject is not a token's id"
    );
    assert!(!rule.matches("echo", &caller("bot-1", "acme", vec![Role::Agent])));
    let everyone = PermissionRule {
        identities: Vec::new(),
        tenants: Vec::new(),
        roles: Vec::new(),
        ..rule
    };
    assert!(everyone.matches("pay", &Caller::local()));
}

#[tokio::test]
async fn permission_rules_deny_ask_and_allow_with_gate_records() {
    let calls = Arc::new(AtomicU32::new(0));
    let rules = vec![
        PermissionRule {
            id: "no-rm".into(),
            tools: "fs.rm*".into(),
            identities: Vec::new(),
            tenants: Vec::new(),
            roles: Vec::new(),
            verdict: PermissionVerdict::Deny,
            reason: "deleting is off".into(),
        },
        PermissionRule {
            id: "confirm".into(),
            tools: "pay".into(),
            identities: Vec::new(),
            tenants: Vec::new(),
            roles: Vec::new(),
            verdict: PermissionVerdict::Ask,
            reason: "charges money".into(),
        },
        PermissionRule {
            id: "ok".into(),
            tools: "*".into(),
            identities: Vec::new(),
            tenants: Vec::new(),
            roles: Vec::new(),
            verdict: PermissionVerdict::Allow,
            reason: "default".into(),
        },
    ];
    let svc = ServiceBuilder::new()
        .layer(PermissionLayer::new(Arc::new(Permissions::new(rules))))
        .service(fake(calls.clone()));
    let denied = svc
        .clone()
        .oneshot(invocation("fs.rmdir", json!({})))
        .await
        .unwrap();
    assert_eq!(
        class_of(&denied),
        Some((
            ErrorClass::PermissionDenied,
            "Permission denied for tool 'fs.rmdir': deleting is off"
        ))
    );
    assert_eq!(denied.gates[0].source, "permissions[no-rm]");
    let asked = svc
        .clone()
        .oneshot(invocation("pay", json!({})))
        .await
        .unwrap();
    assert!(
        class_of(&asked)
            .unwrap()
            .1
            .contains("approval required (charges money)")
    );
    let allowed = svc.oneshot(invocation("echo", json!({}))).await.unwrap();
    assert!(matches!(allowed.reply, Reply::Output(_)));
    assert_eq!(
        allowed.gates[0].decision,
        crate::safety::hooks::Decision::Allow
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "refused calls never reach the tool"
    );
}

#[tokio::test]
async fn validation_lists_every_violation_and_skips_the_tool() {
    let calls = Arc::new(AtomicU32::new(0));
    let svc = ServiceBuilder::new()
        .layer(ValidateLayer::new(true))
        .service(fake(calls.clone()));
    let invoked = svc
        .clone()
        .oneshot(invocation("sleep", json!({"ms": -5, "extra": 1})))
        .await
        .unwrap();
    let (class, message) = class_of(&invoked).unwrap();
    assert_eq!(class, ErrorClass::InvalidArguments);
    assert!(
        message.starts_with("arguments do not match the input schema of 'sleep': "),
        "{message}"
    );
    assert!(
        message.contains("/ms: -5 is less than the minimum of 0"),
        "{message}"
    );
    assert!(
        message.contains("(root): Additional properties are not allowed"),
        "{message}"
    );
    let missing = svc
        .clone()
        .oneshot(invocation("sleep", json!({})))
        .await
        .unwrap();
    assert!(
        class_of(&missing)
            .unwrap()
            .1
            .contains("\"ms\" is a required property")
    );
    assert!(matches!(
        svc.oneshot(invocation("sleep", json!({"ms": 5})))
            .await
            .unwrap()
            .reply,
        Reply::Output(_)
    ));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(start_paused = true)]
async fn cache_hits_skip_the_tool_expire_and_are_invalidated_by_writes() {
    let calls = Arc::new(AtomicU32::new(0));
    let store = Arc::new(ResultCache::new(2, 0, Arc::default()));
    let rules: BTreeMap<String, CacheRule> = [(
        "read".to_owned(),
        CacheRule {
            ttl: Some(Duration::from_secs(60)),
            ttl_turns: None,
            scope: CacheScope::Session,
            path: Some("/path".into()),
        },
    )]
    .into();
    let invalidators: BTreeMap<String, String> = [("write".to_owned(), "/path".to_owned())].into();
    let svc = ServiceBuilder::new()
        .layer(CacheLayer::new(store.clone(), None, rules, invalidators))
        .service(fake(calls.clone()));
    let read = |p: &str| invocation("read", json!({"path": p}));
    assert!(!svc.clone().oneshot(read("a")).await.unwrap().cached);
    let hit = svc.clone().oneshot(read("a")).await.unwrap();
    assert!(hit.cached);
    assert_eq!(
        hit.reply,
        Reply::Output(ToolOutput::Json(json!({"path": "a"})))
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // Keys compare the input exactly; key order does not matter (canonical), values do.
    assert!(
        !svc.clone()
            .oneshot(invocation("read", json!({"path": "a", "x": 1})))
            .await
            .unwrap()
            .cached
    );
    // Another session does not see the entry.
    let mut other = read("a");
    other.ctx.session_id = "s2".into();
    assert!(!svc.clone().oneshot(other).await.unwrap().cached);
    // A write to the path evicts it.
    svc.clone()
        .oneshot(invocation("write", json!({"path": "a"})))
        .await
        .unwrap();
    assert!(!svc.clone().oneshot(read("a")).await.unwrap().cached);
    // Entries expire.
    tokio::time::advance(Duration::from_secs(61)).await;
    assert!(!svc.clone().oneshot(read("a")).await.unwrap().cached);
    assert!(store.len() <= 2, "the store is bounded");
}

#[tokio::test]
async fn the_least_recently_used_entry_is_evicted() {
    let calls = Arc::new(AtomicU32::new(0));
    let store = Arc::new(ResultCache::new(2, 0, Arc::default()));
    let rules: BTreeMap<String, CacheRule> = [("read".to_owned(), CacheRule::default())].into();
    let svc = ServiceBuilder::new()
        .layer(CacheLayer::new(store.clone(), None, rules, BTreeMap::new()))
        .service(fake(calls.clone()));
    let read = |p: &str| invocation("read", json!({"path": p}));
    for p in ["a", "b", "a", "c"] {
        svc.clone().oneshot(read(p)).await.unwrap();
    }
    // "b" was least recently used when "c" arrived.
    assert!(svc.clone().oneshot(read("a")).await.unwrap().cached);
    assert!(svc.clone().oneshot(read("c")).await.unwrap().cached);
    assert!(!svc.oneshot(read("b")).await.unwrap().cached);
    assert_eq!(store.len(), 2);
}

#[tokio::test]
async fn output_caps_apply_per_tool_and_per_batch() {
    let calls = Arc::new(AtomicU32::new(0));
    let svc = ServiceBuilder::new()
        .layer(OutputCapLayer::new(100, [("tiny".to_owned(), 40)].into()))
        .service(fake(calls));
    let big = json!({"text": "x".repeat(300)});
    let capped = svc
        .clone()
        .oneshot(invocation("tiny", big.clone()))
        .await
        .unwrap();
    assert!(capped.truncated);
    let Reply::Output(ToolOutput::Text(text)) = &capped.reply else {
        panic!("cut JSON is text")
    };
    assert_eq!(text.chars().count(), 40);
    let mut inv = invocation("other", json!({"t": "y".repeat(80)}));
    let budget = Arc::new(CharBudget::new(120));
    inv.budget = Some(budget.clone());
    let first = svc.clone().oneshot(inv).await.unwrap();
    assert!(!first.truncated);
    let mut inv = invocation("other", json!({"t": "z".repeat(80)}));
    inv.budget = Some(budget.clone());
    let second = svc.oneshot(inv).await.unwrap();
    assert!(second.truncated, "the batch budget ran out");
    assert_eq!(budget.remaining(), 0);
}

#[tokio::test]
async fn the_stack_redacts_even_cached_replays() {
    let config = MiddlewareConfig {
        default_timeout: Duration::from_secs(5),
        validate: true,
        max_output_chars: 1000,
        redactor: Arc::new(Redactor::new(&[], false).unwrap()),
        cache_rules: [("echo".to_owned(), CacheRule::default())].into(),
        cache_max_entries: 10,
        suggestion_threshold: 0.4,
        ..MiddlewareConfig::default()
    };
    let svc = stack(&config, Arc::default());
    let secret = json!({"note": "api_key=abcdefghijklmnop12345"});
    for cached in [false, true] {
        let invoked = svc
            .clone()
            .oneshot(invocation("echo", secret.clone()))
            .await
            .unwrap();
        assert_eq!(invoked.cached, cached);
        assert_eq!(
            invoked.reply,
            Reply::Output(ToolOutput::Json(
                json!({"note": "api_key=[REDACTED:api_key_kv]"})
            ))
        );
    }
}

#[tokio::test]
async fn the_cache_is_bounded_by_bytes_and_keeps_no_giant() {
    let calls = Arc::new(AtomicU32::new(0));
    let store = Arc::new(ResultCache::new(1000, 64 * 1024, Arc::default()));
    let rules: BTreeMap<String, CacheRule> = [("read".to_owned(), CacheRule::default())].into();
    let svc = ServiceBuilder::new()
        .layer(CacheLayer::new(store.clone(), None, rules, BTreeMap::new()))
        .service(fake(calls.clone()));
    // The fake tool echoes its input: each output is about as large as the input.
    let read = |n: usize, size: usize| invocation("read", json!({"n": n, "pad": "x".repeat(size)}));
    for n in 0..100 {
        svc.clone().oneshot(read(n, 2000)).await.unwrap();
        assert!(store.bytes() <= 64 * 1024, "{} bytes", store.bytes());
    }
    assert!(
        store.len() < 100 && store.len() > 5,
        "{} entries",
        store.len()
    );
    assert!(svc.clone().oneshot(read(99, 2000)).await.unwrap().cached);
    assert!(
        !svc.clone().oneshot(read(0, 2000)).await.unwrap().cached,
        "the oldest went"
    );
    // An output over an eighth of the bound is answered, never kept.
    let before = store.len();
    svc.clone().oneshot(read(1000, 9000)).await.unwrap();
    assert!(!svc.clone().oneshot(read(1000, 9000)).await.unwrap().cached);
    assert!(store.len() <= before + 1);
}
