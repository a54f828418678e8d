//! The web console in a real headless Chromium (Debian's `chromium`, driven by Playwright for
//! Python: tests/console/browser.py) against the real server, while batches run through gRPC:
//! the approvals inbox live, Approve, Deny with a reason, Edit checked in the page and run,
//! hostile arguments inert, an agent's token refused, tenants apart, CSRF refused.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use toolgate::config::Config;

use crate::support::*;

/// The config of a server whose `echo` and `scratch_write` calls need an approver, with the
/// tokens `agent-secret` (acme's agent), `approver-secret` (acme's approver) and `other-secret`
/// (an approver of another tenant), the admin listener (and the console) on a free port, and
/// `extra` after it.
fn console_config(extra: &str) -> Config {
    Config::from_toml(&format!(
        r#"{extra}
        [admin]
        listen = "127.0.0.1:0"
        [approvals]
        timeout = "60s"
        [auth]
        anonymous = "none"
        [[auth.tokens]]
        id = "agent"
        tenant = "acme"
        sha256 = "{}"
        [[auth.tokens]]
        id = "ada"
        tenant = "acme"
        roles = ["approver"]
        sha256 = "{}"
        [[auth.tokens]]
        id = "root"
        tenant = "acme"
        roles = ["admin"]
        sha256 = "{}"
        [[auth.tokens]]
        id = "bob"
        tenant = "beta"
        roles = ["approver"]
        sha256 = "{}"
        [[permissions.rules]]
        id = "ask-echo"
        tools = "echo"
        decision = "ask"
        reason = "a person looks first"
        [[permissions.rules]]
        id = "ask-scratch"
        tools = "scratch_write"
        decision = "ask"
        reason = "a person looks first"
        "#,
        sha256_hex("agent-secret"),
        sha256_hex("approver-secret"),
        sha256_hex("admin-secret"),
        sha256_hex("other-secret"),
    ))
    .unwrap()
}

/// The console's base URL on `ts`.
fn console_url(ts: &TestServer) -> String {
    let admin = ts.server.admin_addr().expect("the admin listener is on");
    format!("http://{admin}")
}

/// An HTTP client that does not follow redirects: a page's 303 is what the tests look at.
fn no_redirects() -> reqwest::Client {
    toolgate_remotes::tls::client_builder(None, std::time::Duration::from_secs(10))
        .unwrap()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// Signs in on the console at `base` with `token`: the sign-in's `Set-Cookie` value.
async fn sign_in(client: &reqwest::Client, base: &str, token: &str) -> String {
    let signed = client
        .post(format!("{base}/console/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}"))
        .send()
        .await
        .unwrap();
    // The answer hands the page its proof (for changes) and sets the cookie.
    assert_eq!(signed.status(), 200);
    let cookie = signed.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(signed.text().await.unwrap().contains("data-proof="));
    cookie
}

/// The status of the inbox at `base` asked for with `cookie`: 200, or 303 to sign in.
async fn inbox_status(client: &reqwest::Client, base: &str, cookie: &str) -> u16 {
    client
        .get(format!("{base}/console/"))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Runs tests/console/browser.py against the console at `base` and the gRPC port `grpc`, with
/// `flags` after the tokens, and returns what it printed.
async fn drive(base: &str, grpc: &str, flags: &[&str]) -> Value {
    let python = crate::peers::testenv().join("venv/bin/python");
    let mut command = Command::new(python);
    command
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/console/browser.py"
        ))
        .args([base, grpc])
        .args(["--agent", "agent-secret", "--approver", "approver-secret"])
        .args(flags)
        .env(
            "PYTHONPATH",
            concat!(env!("CARGO_MANIFEST_DIR"), "/clients/python/src"),
        );
    run_json_driver(command, "the console's browser driver").await
}

#[tokio::test]
async fn an_approver_answers_in_the_console_and_hostile_arguments_stay_text() {
    crate::peers::require_peers!(TestEnv, Chromium);
    let ts = start_with(console_config("")).await;
    let base = console_url(&ts);
    let grpc = ts.server.local_addr().to_string();
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let axe = crate::peers::testenv().join("node/node_modules/axe-core/axe.min.js");
    let (shots, axe) = (shots.display().to_string(), axe.display().to_string());
    let flags = [
        "--other",
        "other-secret",
        "--admin",
        "admin-secret",
        "--shots",
        &shots,
        "--axe",
        &axe,
    ];
    let out = drive(&base, &grpc, &flags).await;

    // The agent's credential gets 403, by header and on the sign-in page.
    assert_eq!(out["agent_header_status"], 403, "{out}");
    // A rebound name is refused; an approver has the inbox alone.
    assert_eq!(out["rebound_status"], 403, "{out}");
    assert_eq!(out["approver_batches_status"], 403, "{out}");
    assert_eq!(
        out["approver_nav"],
        serde_json::json!(["Approvals"]),
        "{out}"
    );
    let refused = out["agent_sign_in_error"].as_str().unwrap();
    assert!(refused.contains("approver"), "{out}");
    // Every page carries the strict policy.
    let csp = out["headers"]["content-security-policy"].as_str().unwrap();
    assert!(
        csp.contains("default-src 'self'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    assert_eq!(out["headers"]["x-frame-options"], "DENY", "{out}");

    // The call asked about appeared within a second; Approve ran it.
    let appeared = out["appeared_after_s"].as_f64().unwrap();
    assert!(appeared < 1.0, "the approval took {appeared} s to appear");
    assert_eq!(out["approve"]["success"], true, "{out}");
    assert_eq!(out["approve"]["result"]["text"], "hi", "{out}");
    // Deny ended it APPROVAL_DENIED, the reason in the tool message.
    assert_eq!(out["deny"]["success"], false, "{out}");
    assert!(
        out["deny"]["error_class"]
            .as_str()
            .unwrap()
            .contains("APPROVAL_DENIED"),
        "{out}"
    );
    assert!(
        out["deny"]["content"]
            .as_str()
            .unwrap()
            .contains("not today"),
        "{out}"
    );
    let decisions = out["decisions"].to_string();
    assert!(
        decisions.contains("denied") && decisions.contains("by ada"),
        "{out}"
    );
    // Edit: the schema's complaint shown, nothing sent; then the valid arguments ran.
    assert!(
        out["edit_error"].as_str().unwrap().contains("path"),
        "{out}"
    );
    assert_eq!(out["edit_posts_after_invalid"], 0, "{out}");
    assert_eq!(out["edit"]["success"], true, "{out}");
    assert_eq!(out["edit"]["result"]["path"], "b.txt", "{out}");

    // Hostile arguments: text, live and served; no dialog, no request, no element made.
    let hostile = &out["hostile"];
    assert_eq!(hostile["dialogs"], serde_json::json!([]), "{out}");
    assert_eq!(hostile["requests"], serde_json::json!([]), "{out}");
    for text in [&hostile["live_text"], &hostile["served_text"]] {
        let text = text.as_str().unwrap();
        assert!(text.contains("<img src=x onerror=alert(1)>"), "{text}");
        assert!(
            text.contains("</script><script>alert(2)</script>"),
            "{text}"
        );
        assert!(text.contains("<U+202E>"), "bidi controls shown: {text}");
        assert!(
            text.contains("<U+E006D><U+E0061>") && text.contains("12<U+061C>-34"),
            "invisible characters shown: {text}"
        );
    }
    assert_eq!(hostile["bidi_style"], "bidi-override", "{out}");
    let edit_box = hostile["edit_box"].as_str().unwrap();
    assert!(
        edit_box.contains("abc\\u202edcba") && edit_box.contains("\\udb40\\udc6d"),
        "{edit_box}"
    );
    assert_eq!(hostile["images"], 0, "{out}");
    assert_eq!(hostile["links"], 0, "{out}");
    assert_eq!(hostile["scripts"], 0, "{out}");
    assert!(
        !hostile["console_requests"]
            .to_string()
            .contains("/console/x"),
        "the image's src was fetched: {out}"
    );
    // The recent batches: the tenant's, each a timeline of its events from received to result.
    let rows = out["batch_rows"].to_string();
    assert!(
        rows.contains("agent") && rows.contains("console-edit"),
        "{out}"
    );
    let kinds = out["timeline_kinds"].to_string();
    for kind in ["received", "approval", "pre", "post", "result"] {
        assert!(kinds.contains(kind), "{kind} in {out}");
    }
    assert!(
        out["timeline"]
            .to_string()
            .contains("denied by ada: not today"),
        "{out}"
    );
    assert_eq!(
        hostile["dialogs_after_pages"],
        serde_json::json!([]),
        "{out}"
    );
    // A session's trajectory and, for the admin, End session.
    assert!(out["session_trajectory"].as_u64().unwrap() >= 1, "{out}");
    assert_eq!(out["session_end_buttons"], 1, "{out}");
    // At a phone's width every page fits the screen.
    assert_eq!(
        out["phone_overflow_px"],
        serde_json::json!({"inbox": 0, "login": 0, "batches": 0, "batch": 0, "session": 0,
                           "approval": 0}),
        "{out}"
    );
    // By keyboard alone: a batch's timeline opened, the approval's own page approved.
    assert_eq!(out["batch_link_focused"], true, "{out}");
    assert_eq!(out["cut_approve_focused"], true, "{out}");
    // Another tenant's approver saw none of it.
    assert_eq!(out["other_tenant_cards"], 0, "{out}");
    // A process on another port of the host got the sign-in's cookie from the browser and
    // replayed it: it read the inbox, which carries no proof, and its Approve was refused.
    assert_eq!(out["stolen_cookie_sent"], true, "{out}");
    assert_eq!(out["proof_kept"], true, "{out}");
    assert_eq!(out["replayed_read_status"], 200, "{out}");
    assert_eq!(out["proof_in_served_page"], false, "{out}");
    assert_eq!(
        out["replayed_scraped_csrf"],
        serde_json::json!([""]),
        "{out}"
    );
    assert_eq!(out["replayed_approve_status"], 403, "{out}");
    // A change without the CSRF token was refused, and the call kept waiting.
    assert_eq!(out["csrf_missing_status"], 403, "{out}");
    assert_eq!(out["server_edit_status"], 422, "{out}");
    assert!(
        out["server_edit_text"]
            .as_str()
            .unwrap()
            .contains("must be a JSON object"),
        "{out}"
    );
    assert_eq!(out["still_pending_after_csrf"], 1, "{out}");
    // Answered over gRPC, it left the list saying by whom.
    let said = out["resolved_elsewhere"].as_str().unwrap();
    assert!(said.contains("by ada"), "{out}");
    assert_eq!(out["hostile_outcome"]["success"], false, "{out}");
    // Arguments too long for a card are read whole on their own page before Approve.
    assert_eq!(out["cut_card_approve_buttons"], 0, "{out}");
    assert_eq!(out["whole_text_shown"], true, "{out}");
    assert_eq!(out["cut_outcome"]["success"], true, "{out}");
    // A card's buttons came disabled, and took the click a moment later.
    assert_eq!(out["approve_held_at_first"], true, "{out}");
    // Folded arguments: Approve only below the rest, once it is open.
    assert_eq!(out["folded_approve_visible"], false, "{out}");
    assert_eq!(out["unfolded_approve_visible"], true, "{out}");
    assert_eq!(out["folded_outcome"]["success"], true, "{out}");
    assert_eq!(out["signed_in_again"], true, "{out}");
    // axe-core finds nothing serious on the inbox or the sign-in page.
    assert_eq!(out["axe_inbox"], serde_json::json!([]), "{out}");
    assert_eq!(out["axe_login"], serde_json::json!([]), "{out}");
    for page in ["axe_batches", "axe_batch", "axe_session"] {
        assert_eq!(out[page], serde_json::json!([]), "{page}: {out}");
    }
}

#[tokio::test]
async fn an_approval_raised_on_one_replica_is_answered_in_the_console_of_another() {
    crate::peers::require_peers!(TestEnv, Chromium, Redis);
    let redis = crate::shared_sessions::Redis::start();
    let store = format!("[sessions]\nstore = \"{}\"", redis.url());
    let first = start_with(console_config(&store)).await;
    let second = start_with(console_config(&store)).await;
    // The batch through the first replica's gRPC port, the answer in the second's console.
    let out = drive(
        &console_url(&second),
        &first.server.local_addr().to_string(),
        &["--fleet"],
    )
    .await;
    // Approved by keyboard alone.
    assert_eq!(out["focused"], "Approve", "{out}");
    assert_eq!(out["approve"]["success"], true, "{out}");
    assert_eq!(out["approve"]["result"]["text"], "across", "{out}");
}

#[tokio::test]
async fn an_admin_sees_a_quarantined_change_side_by_side_and_accepts_it() {
    crate::peers::require_peers!(TestEnv, Chromium);
    let remote = crate::mcp::stdio_remote("pymcp", "pm.", &crate::mcp::python_server());
    let ts = start_with(console_config(&format!(
        "{remote}[loop_detection]\nenabled = false\n[remote_registration]\nenabled = true\n"
    )))
    .await;
    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let shots = shots.display().to_string();
    let grpc = ts.server.local_addr().to_string();
    let axe = crate::peers::testenv().join("node/node_modules/axe-core/axe.min.js");
    let axe = axe.display().to_string();
    let out = drive(
        &console_url(&ts),
        &grpc,
        &["--tools", "admin-secret", "--shots", &shots, "--axe", &axe],
    )
    .await;
    assert_eq!(out["axe_tools"], serde_json::json!([]), "{out}");
    // The tools page is an admin's: an approver is refused it.
    assert_eq!(out["approver_tools_status"], 403, "{out}");
    // The admin sees both descriptions, the changed field marked, the new text as text.
    assert!(
        out["changed_fields"].to_string().contains("Description"),
        "{out}"
    );
    let new = out["new_description"].as_str().unwrap();
    assert!(
        new.contains("~/.ssh/id_rsa") && new.contains("<b>now</b>"),
        "{out}"
    );
    assert!(
        !out["pinned_description"]
            .as_str()
            .unwrap()
            .contains("id_rsa"),
        "{out}"
    );
    assert_eq!(out["bold_elements"], 0, "{out}");
    // The tools page and a session's fit a phone's width; Accept and End session by keyboard.
    assert_eq!(
        out["phone_overflow_px"],
        serde_json::json!({"tools": 0, "session": 0}),
        "{out}"
    );
    assert_eq!(out["accept_focused"], true, "{out}");
    assert_eq!(out["end_focused"], true, "{out}");
    // Accept pinned the new definition: the tool runs again.
    assert_eq!(out["after_accept"], 0, "{out}");
    assert_eq!(out["greet_after"]["success"], true, "{out}");
    // The admin ended the session its calls ran in.
    assert!(
        out["end_notice"].as_str().unwrap().contains("ended"),
        "{out}"
    );
}

#[tokio::test]
async fn over_tls_the_sign_in_cookie_is_secure_and_host_bound() {
    let dir = folder("console-tls");
    let ca = Ca::new();
    let (cert, key) = ca.sign(&["localhost"]);
    let ca_file = write(&dir, "ca.pem", &ca.pem);
    let tls = format!(
        "[tls]\ncert_file = {:?}\nkey_file = {:?}\n",
        write(&dir, "server.pem", &cert),
        write(&dir, "server.key", &key),
    );
    let mut config = console_config(&tls);
    config.admin.tls = true;
    let ts = start_with(config).await;
    let port = ts.server.admin_addr().unwrap().port();
    let spec: toolgate_remotes::TlsSpec =
        serde_json::from_value(serde_json::json!({"ca_file": ca_file})).unwrap();
    let client =
        toolgate_remotes::tls::client_builder(Some(&spec), std::time::Duration::from_secs(10))
            .unwrap()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
    let base = format!("https://localhost:{port}");
    // The probes and the console are served over TLS; plaintext gets nothing.
    let live = client.get(format!("{base}/livez")).send().await.unwrap();
    assert_eq!(live.status(), 200);
    assert!(
        http_get(format!("http://127.0.0.1:{port}/livez"))
            .await
            .is_err()
    );
    let signed = client
        .post(format!("{base}/console/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", &base)
        .body("token=approver-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(signed.status(), 200);
    let cookie = signed.headers()["set-cookie"].to_str().unwrap().to_owned();
    for part in [
        "__Host-toolgate_console=",
        "Path=/;",
        "HttpOnly",
        "SameSite=Strict",
        "Secure",
    ] {
        assert!(cookie.contains(part), "{part} in {cookie}");
    }
    // The cookie lets its holder in; without it, the inbox sends people to sign in.
    let value = cookie.split(';').next().unwrap();
    let inbox = client
        .get(format!("{base}/console/"))
        .header("cookie", value)
        .send()
        .await
        .unwrap();
    assert_eq!(inbox.status(), 200);
    let anonymous = client.get(format!("{base}/console/")).send().await.unwrap();
    assert_eq!(anonymous.status(), 303);
    // A sign-in from another site's page is refused.
    let foreign = client
        .post(format!("{base}/console/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .header("origin", "https://evil.example")
        .body("token=approver-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), 403);
}

#[tokio::test]
async fn a_caller_without_the_role_and_no_credential_of_its_own_is_sent_to_sign_in() {
    // Anonymous loopback callers with no role (as `[auth]` may leave them): the inbox sends
    // them to the sign-in page, rather than refusing them with nowhere to go.
    let mut config = Config::from_toml("[admin]\nlisten = \"127.0.0.1:0\"").unwrap();
    config.auth.anonymous_roles = Vec::new();
    let ts = start_with(config).await;
    let client = no_redirects();
    let inbox = client
        .get(format!("{}/console/", console_url(&ts)))
        .send()
        .await
        .unwrap();
    assert_eq!(inbox.status(), 303);
    assert_eq!(inbox.headers()["location"], "/console/login");
}

#[tokio::test]
async fn a_sign_in_made_from_a_jwt_ends_when_the_jwt_does() {
    let key = crate::security::JwtKey::new("k1");
    let dir = folder("console-jwt");
    let jwks = write(
        &dir,
        "jwks.json",
        &serde_json::json!({"keys": [key.jwk]}).to_string(),
    );
    let ts = start_with(console_config(&format!(
        "[auth.jwt]\njwks_file = \"{jwks}\"\nissuer = \"https://idp.test\"\naudience = \"toolgate\"\n"
    )))
    .await;
    let base = console_url(&ts);
    let token = key.token(
        "k1",
        serde_json::json!({"iss": "https://idp.test", "aud": "toolgate", "sub": "carol",
               "tenant": "acme", "roles": ["approver"], "exp": crate::security::now() + 2}),
    );
    let client = no_redirects();
    let cookie = sign_in(&client, &base, &token).await;
    assert!(!cookie.contains("Max-Age=28800"), "{cookie}");
    let value = cookie.split(';').next().unwrap().to_owned();
    let inbox = async || inbox_status(&client, &base, &value).await;
    assert_eq!(inbox().await, 200);
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    // Past the JWT's `exp`, the sign-in is gone: the person signs in again.
    assert_eq!(inbox().await, 303);
}

#[tokio::test]
async fn a_sign_in_and_its_live_stream_end_when_its_jwt_is_no_longer_accepted() {
    use futures::StreamExt;
    // The JWKS, served here: rotated mid-test to a key that did not sign the sign-in's JWT.
    let old = crate::security::JwtKey::new("k1");
    let new = crate::security::JwtKey::new("k2");
    let served = std::sync::Arc::new(parking_lot::Mutex::new(
        serde_json::json!({"keys": [old.jwk]}).to_string(),
    ));
    let jwks = served.clone();
    let app = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(async move || {
            (
                [(http::header::CONTENT_TYPE, "application/json")],
                jwks.lock().clone(),
            )
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let jwks_at = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let ts = start_with(console_config(&format!(
        "[auth.jwt]\njwks_url = \"http://{jwks_at}/jwks.json\"\nissuer = \"https://idp.test\"\naudience = \"toolgate\"\n"
    )))
    .await;
    let base = console_url(&ts);
    let claims = serde_json::json!({"iss": "https://idp.test", "aud": "toolgate", "sub": "carol",
           "tenant": "acme", "roles": ["approver"], "exp": crate::security::now() + 3600});
    let client = no_redirects();
    let cookie = sign_in(&client, &base, &old.token("k1", claims.clone())).await;
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let inbox = async || inbox_status(&client, &base, &cookie).await;
    assert_eq!(inbox().await, 200);

    // The live inbox, open, carries an approval the agent's batch raises.
    let events = client
        .get(format!("{base}/console/events"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    let mut events = events.bytes_stream();
    let mut seen = String::new();
    let raise = |text: &str| {
        let mut req = request(serde_json::json!([
            {"id": "c1", "name": "echo", "arguments": {"text": text}}
        ]));
        req.options = Some(toolgate_proto::pb::DispatchOptions {
            interactive_approvals: true,
            ..Default::default()
        });
        let mut client = ts.client.clone();
        let req = as_caller(Some("agent-secret"), req);
        tokio::spawn(async move {
            let mut stream = client.dispatch_batch(req).await.unwrap().into_inner();
            while stream.next().await.is_some() {}
        })
    };
    let first = raise("before the rotation");
    while !seen.contains("before the rotation") {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), events.next())
            .await
            .expect("the first approval reaches the open stream")
            .expect("the stream stays open")
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }

    // The identity provider drops the key. A token naming the new key makes the server fetch
    // the JWKS again; from then on the sign-in's JWT no longer verifies.
    *served.lock() = serde_json::json!({"keys": [new.jwk]}).to_string();
    let fresh = new.token("k2", claims);
    eventually("the server took the rotated JWKS", async || {
        client
            .get(format!("{base}/console/"))
            .bearer_auth(&fresh)
            .send()
            .await
            .unwrap()
            .status()
            == 200
    })
    .await;
    // The sign-in ended with its credential: the person signs in again.
    assert_eq!(inbox().await, 303);
    // The open stream ends rather than carry the next approval.
    let second = raise("after the rotation");
    let mut rest = String::new();
    loop {
        match tokio::time::timeout(std::time::Duration::from_secs(10), events.next()).await {
            Ok(Some(Ok(chunk))) => rest.push_str(&String::from_utf8_lossy(&chunk)),
            Ok(None | Some(Err(_))) => break,
            Err(_) => panic!("the stream stayed open after its sign-in ended: {rest}"),
        }
    }
    assert!(!rest.contains("after the rotation"), "{rest}");
    first.abort();
    second.abort();
}

#[tokio::test]
async fn what_a_client_sends_the_console_is_bounded() {
    use futures::StreamExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ts = start_with(console_config("[remote_registration]\nenabled = true\n")).await;
    let base = console_url(&ts);
    let admin = ts.server.admin_addr().unwrap();
    let client = no_redirects();
    let post = |path: &str, token: &str, content_type: &str, body: String| {
        client
            .post(format!("{base}{path}"))
            .bearer_auth(token)
            .header("content-type", content_type)
            .body(body)
            .send()
    };
    // A change is a form: a text/plain body (what a cross-site form may send) is refused.
    let plain = post("/console/login", "", "text/plain", "token=x".into())
        .await
        .unwrap();
    assert_eq!(plain.status(), 415);
    // A form promised larger than a change can be is refused before it is read.
    let mut raw = tokio::net::TcpStream::connect(admin).await.unwrap();
    raw.write_all(
        b"POST /console/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100000000\r\n\r\n",
    )
    .await
    .unwrap();
    let mut answer = vec![0; 64];
    let n = raw.read(&mut answer).await.unwrap();
    assert!(String::from_utf8_lossy(&answer[..n]).starts_with("HTTP/1.1 413"));
    // A form that does not arrive whole within 10 s is given up (its connection with it).
    let mut slow = tokio::net::TcpStream::connect(admin).await.unwrap();
    slow.write_all(
        b"POST /console/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\ntoken=",
    )
    .await
    .unwrap();
    let mut answer = vec![0; 64];
    let n = tokio::time::timeout(std::time::Duration::from_secs(20), slow.read(&mut answer))
        .await
        .expect("answered before 20 s")
        .unwrap();
    assert!(String::from_utf8_lossy(&answer[..n]).starts_with("HTTP/1.1 408"));

    // A reason longer than 1,000 characters is refused, in the console and over gRPC.
    let mut req = request(serde_json::json!([
        {"id": "c1", "name": "echo", "arguments": {"text": "bounded"}}
    ]));
    req.options = Some(toolgate_proto::pb::DispatchOptions {
        interactive_approvals: true,
        ..Default::default()
    });
    let mut agent = ts.client.clone();
    let batch = tokio::spawn(async move {
        let mut stream = agent
            .dispatch_batch(as_caller(Some("agent-secret"), req))
            .await
            .unwrap()
            .into_inner();
        while stream.next().await.is_some() {}
    });
    let mut approvals = Vec::new();
    eventually("the approval is pending", async || {
        let listed = ts
            .client
            .clone()
            .list_approvals(as_caller(
                Some("approver-secret"),
                toolgate_proto::pb::ListApprovalsRequest::default(),
            ))
            .await
            .unwrap()
            .into_inner();
        approvals = listed.approvals;
        !approvals.is_empty()
    })
    .await;
    let id = approvals[0].approval_id.clone();
    // The agent that raised it cannot answer it here, nor hold a live stream of its tenant's
    // approvals, whatever it sends.
    let own = post(
        &format!("/console/approvals/{id}"),
        "agent-secret",
        "application/x-www-form-urlencoded",
        "decision=approve&remember=session".into(),
    )
    .await
    .unwrap();
    assert_eq!(own.status(), 403);
    let agent_stream = client
        .get(format!("{base}/console/events"))
        .bearer_auth("agent-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(agent_stream.status(), 403);
    let long = "x".repeat(1001);
    let denied = post(
        &format!("/console/approvals/{id}"),
        "approver-secret",
        "application/x-www-form-urlencoded",
        format!("decision=deny&reason={long}"),
    )
    .await
    .unwrap();
    assert_eq!(denied.status(), 422, "{:?}", denied.headers());
    let over_grpc = ts
        .client
        .clone()
        .resolve_approval(as_caller(
            Some("approver-secret"),
            toolgate_proto::pb::ResolveApprovalRequest {
                approval_id: id.clone(),
                decision: toolgate_proto::pb::resolve_approval_request::Decision::Deny as i32,
                reason: long,
                ..Default::default()
            },
        ))
        .await
        .unwrap_err();
    assert_eq!(
        over_grpc.code(),
        tonic::Code::InvalidArgument,
        "{over_grpc}"
    );
    batch.abort();

    // Accept takes the digest of the change reviewed, never whatever is current.
    let accept = post(
        "/console/tools/pm.greet/accept",
        "admin-secret",
        "application/x-www-form-urlencoded",
        String::new(),
    )
    .await
    .unwrap();
    assert_eq!(accept.status(), 400);

    // One identity holds at most 4 live streams; another still gets one.
    let mut streams = Vec::new();
    for _ in 0..4 {
        let stream = client
            .get(format!("{base}/console/events"))
            .bearer_auth("approver-secret")
            .send()
            .await
            .unwrap();
        assert_eq!(stream.status(), 200);
        streams.push(stream);
    }
    let fifth = client
        .get(format!("{base}/console/events"))
        .bearer_auth("approver-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(fifth.status(), 503);
    let other = client
        .get(format!("{base}/console/events"))
        .bearer_auth("other-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 200);

    // On loopback, the metrics answer this machine's names only (DNS rebinding).
    let port = admin.port();
    for (host, status) in [
        (format!("127.0.0.1:{port}"), 200),
        (format!("localhost:{port}"), 200),
        (format!("rebound.example:{port}"), 403),
    ] {
        let metrics = client
            .get(format!("{base}/metrics"))
            .header("host", &host)
            .send()
            .await
            .unwrap();
        assert_eq!(metrics.status(), status, "{host}");
    }
}

#[tokio::test]
async fn with_record_batches_off_the_console_keeps_no_batches() {
    let ts = start_with(console_config("[console]\nrecord_batches = false\n")).await;
    let page = no_redirects()
        .get(format!("{}/console/batches", console_url(&ts)))
        .bearer_auth("admin-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    let text = page.text().await.unwrap();
    assert!(text.contains("console.record_batches = false"), "{text}");
}
