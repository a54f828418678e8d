//! Session tests: id validation, scratch lifecycle, TTL, LRU, ending in use, memory, bounds.

use super::*;

fn base(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("toolgate-sessions-{name}-{}", std::process::id()))
}

#[test]
fn session_ids_cannot_name_paths() {
    for ok in ["abc", "user-1_x.y", &"a".repeat(128)] {
        assert!(validate_session_id(ok).is_ok(), "{ok}");
    }
    for bad in [".", "..", "a/b", "../x", "a b", "é", &"a".repeat(129)] {
        assert!(validate_session_id(bad).is_err(), "{bad}");
    }
}

#[tokio::test]
async fn scratch_directories_are_per_session_and_removed() {
    let base = base("scratch");
    let sessions = Sessions::new(base.clone(), true, SessionLimits::default());
    let named = sessions.open("default", "alpha");
    assert!(Arc::ptr_eq(&named, &sessions.open("default", "alpha")));
    let dir = named.scratch().create().await.unwrap().to_path_buf();
    // Named by 128 random bits, never by the id.
    let name = dir.file_name().unwrap().to_str().unwrap();
    assert!(
        name.starts_with("toolgate-") && name.len() == 9 + 32,
        "{name}"
    );
    assert_eq!(dir.parent(), Some(base.as_path()));
    assert!(dir.is_dir());
    let once = sessions.open("default", "");
    let once_dir = once.scratch().create().await.unwrap().to_path_buf();
    assert_ne!(once.id, sessions.open("default", "").id);
    sessions.release(&once);
    assert!(!once_dir.exists());
    sessions.release(&named);
    sessions.release(&named);
    assert!(dir.exists(), "named sessions outlive a batch");
    sessions.remove_all();
    assert!(!base.exists());
}

#[tokio::test]
async fn tenants_never_share_a_session_and_batch_sessions_cannot_be_named() {
    let sessions = Sessions::new(base("tenants"), true, SessionLimits::default());
    let a = sessions.open("acme", "shared");
    let b = sessions.open("globex", "shared");
    assert!(!Arc::ptr_eq(&a, &b));
    a.remember("echo", "{}", "acme's secret");
    assert!(b.memory().is_empty());
    let (dir_a, dir_b) = (
        a.scratch().create().await.unwrap().to_path_buf(),
        b.scratch().create().await.unwrap().to_path_buf(),
    );
    assert_ne!(dir_a, dir_b);
    assert!(
        sessions
            .get("globex", "shared")
            .is_some_and(|s| Arc::ptr_eq(&s, &b))
    );
    assert!(sessions.end("acme", "shared"));
    assert!(
        sessions.get("globex", "shared").is_some(),
        "ending one tenant's session leaves the other's"
    );
    let once = sessions.open("acme", "");
    assert!(
        once.id.starts_with("batch-") && once.id.len() == 6 + 32,
        "{}",
        once.id
    );
    assert!(
        validate_session_id(&once.id).is_err(),
        "a batch's session cannot be named"
    );
    assert!(sessions.get("acme", &once.id).is_none());
    for s in [&a, &b, &once] {
        sessions.release(s);
    }
}

#[tokio::test]
async fn opening_and_releasing_sessions_touches_no_disk() {
    let base = base("lazy");
    let sessions = Sessions::new(base.clone(), true, SessionLimits::default());
    let named = sessions.open("default", "delta");
    let once = sessions.open("default", "");
    assert!(!base.exists(), "nothing made before a scratch tool asks");
    sessions.release(&once);
    sessions.release(&named);
    assert!(sessions.end("default", "delta"));
    assert!(!base.exists());
    sessions.remove_all();
}

#[tokio::test]
async fn an_operator_base_directory_is_kept() {
    let base = base("kept");
    std::fs::create_dir_all(&base).unwrap();
    std::fs::write(base.join("keep.txt"), "x").unwrap();
    let sessions = Sessions::new(base.clone(), false, SessionLimits::default());
    let session = sessions.open("default", "beta");
    let dir = session.scratch().create().await.unwrap().to_path_buf();
    sessions.release(&session);
    sessions.remove_all();
    assert!(!dir.exists());
    assert!(base.join("keep.txt").exists());
    std::fs::remove_dir_all(&base).unwrap();
}

#[tokio::test(start_paused = true)]
async fn idle_sessions_expire_but_busy_ones_do_not() {
    let limits = SessionLimits {
        idle_ttl: Duration::from_secs(60),
        ..SessionLimits::default()
    };
    let sessions = Sessions::new(base("ttl"), true, limits);
    let idle = sessions.open("default", "idle");
    let idle_dir = idle.scratch().create().await.unwrap().to_path_buf();
    sessions.release(&idle);
    let busy = sessions.open("default", "busy");
    tokio::time::advance(Duration::from_secs(61)).await;
    assert_eq!(sessions.sweep(Instant::now()), 1);
    assert!(sessions.get("default", "idle").is_none());
    assert!(!idle_dir.exists());
    assert!(sessions.get("default", "busy").is_some());
    sessions.release(&busy);
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(sessions.sweep(Instant::now()), 0, "released 30 s ago");
    sessions.remove_all();
}

#[tokio::test(start_paused = true)]
async fn the_least_recently_used_idle_session_is_evicted_at_the_limit() {
    let limits = SessionLimits {
        max_sessions: 2,
        ..SessionLimits::default()
    };
    let sessions = Sessions::new(base("lru"), true, limits);
    for id in ["a", "b"] {
        let s = sessions.open("default", id);
        sessions.release(&s);
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    let a = sessions.open("default", "a");
    sessions.release(&a);
    let c = sessions.open("default", "c");
    assert!(
        sessions.get("default", "b").is_none(),
        "b was least recently used"
    );
    assert!(sessions.get("default", "a").is_some());
    assert_eq!(sessions.len(), 2);
    sessions.release(&c);
    sessions.remove_all();
}

#[tokio::test]
async fn ending_a_session_in_use_removes_its_directory_when_the_batch_ends() {
    let sessions = Sessions::new(base("end"), true, SessionLimits::default());
    let s = sessions.open("default", "gamma");
    let dir = s.scratch().create().await.unwrap().to_path_buf();
    assert!(sessions.end("default", "gamma"));
    assert!(!sessions.end("default", "gamma"));
    assert!(dir.exists(), "still in use");
    sessions.release(&s);
    assert!(!dir.exists());
    sessions.remove_all();
}

#[tokio::test]
async fn memory_is_bounded_and_cut_by_characters() {
    let limits = SessionLimits {
        memory_entries: 2,
        ..SessionLimits::default()
    };
    let sessions = Sessions::new(base("memory"), true, limits);
    let s = sessions.open("default", "m");
    s.remember("a", "{}", "1");
    s.remember("b", "{}", "2");
    s.remember("c", &"é".repeat(600), "3");
    let memory = s.memory();
    assert_eq!(memory.len(), 2);
    assert_eq!(memory[0], "tool=b; input={}; result=2");
    assert_eq!(
        memory[1],
        format!("tool=c; input={}…; result=3", "é".repeat(500))
    );
    sessions.release(&s);
    sessions.remove_all();
}

#[test]
fn ephemeral_ids_are_distinct_and_cannot_be_requested() {
    let ids: std::collections::BTreeSet<String> = (0..1000).map(|_| ephemeral_id()).collect();
    assert_eq!(ids.len(), 1000);
    for id in &ids {
        let digits = id.strip_prefix(EPHEMERAL_PREFIX).unwrap();
        assert_eq!(digits.len(), 32, "{id}");
        assert!(digits.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        assert!(validate_session_id(id).is_err(), "{id}");
    }
}

#[tokio::test]
async fn an_ephemeral_session_keeps_no_memory() {
    let sessions = Sessions::new(base("ephemeral-memory"), true, SessionLimits::default());
    let fresh = sessions.open("default", "");
    assert!(!fresh.keeps_memory());
    fresh.remember("a", "{}", "1");
    assert!(fresh.memory().is_empty());
    let named = sessions.open("default", "n");
    assert!(named.keeps_memory());
    sessions.release(&fresh);
    sessions.release(&named);
    sessions.remove_all();
}

#[tokio::test]
async fn a_full_session_holds_its_bounds_and_no_more() {
    use crate::safety::detector::{Operation, Thresholds};
    let limits = SessionLimits::default();
    let sessions = Sessions::new(base("full"), true, limits);
    let s = sessions.open("default", "f");
    let th = Thresholds {
        warn_after: 3,
        stop_after: 10,
    };
    for n in 0..10 * limits.memory_entries.max(limits.loop_window) {
        let input = format!("{{\"n\":{n}}}");
        let op = Operation {
            tool: "echo",
            input: &input,
            result: n as u64,
        };
        s.detector().record(op, th);
        s.remember("echo", &input, &input);
    }
    assert_eq!(s.detector().len(), limits.loop_window);
    let memory = s.memory.lock();
    assert_eq!(memory.len(), limits.memory_entries);
    assert!(
        memory.capacity() <= limits.memory_entries,
        "{} slots",
        memory.capacity()
    );
    drop(memory);
    sessions.release(&s);
    sessions.remove_all();
}

#[tokio::test(start_paused = true)]
async fn eviction_skips_busy_sessions_and_the_recency_order_stays_in_step() {
    let limits = SessionLimits {
        max_sessions: 3,
        ..SessionLimits::default()
    };
    let sessions = Sessions::new(base("order"), true, limits);
    let busy = sessions.open("default", "busy");
    for id in ["a", "b"] {
        let s = sessions.open("default", id);
        sessions.release(&s);
    }
    // "busy" is the oldest but in use: "a" goes.
    let c = sessions.open("default", "c");
    assert!(sessions.get("default", "busy").is_some());
    assert!(sessions.get("default", "a").is_none());
    // An ended session released after a new one of the same id opened leaves no stale entry.
    assert!(sessions.end("default", "c"));
    let c2 = sessions.open("default", "c");
    sessions.release(&c);
    sessions.release(&c2);
    sessions.release(&busy);
    for round in 0..50 {
        let s = sessions.open("default", &format!("x{round}"));
        sessions.release(&s);
    }
    let live = sessions.lock();
    assert_eq!(live.by_id.len(), 3);
    assert_eq!(live.order.len(), 3, "one order entry per live session");
    drop(live);
    sessions.remove_all();
}

#[tokio::test(start_paused = true)]
async fn a_tenant_opening_many_sessions_evicts_its_own() {
    let limits = SessionLimits {
        max_sessions: 3,
        ..SessionLimits::default()
    };
    let sessions = Sessions::new(base("tenant-lru"), true, limits);
    let other = sessions.open("other", "kept");
    other.remember("echo", "{}", "mine");
    sessions.release(&other);
    tokio::time::advance(Duration::from_secs(1)).await;
    for n in 0..50 {
        let s = sessions.open("flood", &format!("f{n}"));
        sessions.release(&s);
    }
    assert_eq!(sessions.len(), 3);
    let kept = sessions
        .get("other", "kept")
        .expect("the other tenant's session stays");
    assert_eq!(kept.memory().len(), 1);
    assert!(sessions.get("flood", "f49").is_some());
    sessions.remove_all();
}

#[tokio::test]
async fn memory_bytes_are_bounded_and_the_heaviest_tenant_gives_way() {
    let limits = SessionLimits {
        max_memory_bytes: 64 * 1024,
        ..SessionLimits::default()
    };
    let sessions = Sessions::new(base("memory-bytes"), true, limits);
    let small = sessions.open("small", "s");
    for n in 0..5 {
        small.remember("echo", &format!("{{\"n\":{n}}}"), "ok");
    }
    sessions.release(&small);
    let big = "x".repeat(500);
    for id in 0..40 {
        let s = sessions.open("flood", &format!("f{id}"));
        for n in 0..20 {
            s.remember("echo", &format!("{n}{big}"), &big);
        }
        sessions.release(&s);
        assert!(
            sessions.memory_bytes() <= 64 * 1024,
            "{}",
            sessions.memory_bytes()
        );
    }
    assert_eq!(
        sessions.get("small", "s").unwrap().memory().len(),
        5,
        "the tenant holding less keeps its memory"
    );
    assert_eq!(
        sessions.get("flood", "f39").unwrap().memory().len(),
        20,
        "the newest session keeps its own"
    );
    assert!(
        sessions.get("flood", "f0").unwrap().memory().is_empty(),
        "the flood's oldest sessions lost theirs"
    );
    // Every byte counted is given back as sessions go.
    assert!(sessions.end("small", "s"));
    sessions.remove_all();
    assert_eq!(sessions.memory_bytes(), 0);
}
