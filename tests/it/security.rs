//! Transport security and caller identity through the real binary and real clients: TLS with
//! grpcurl (`-cacert`, `-cert/-key`, `-H authorization`) and Python grpcio
//! (`ssl_channel_credentials`, metadata), certificates made here with rcgen; bearer tokens, JWTs
//! against a JWKS, client certificates; roles per RPC; tenants that never see each other's
//! sessions; batch sessions no request can name; a certificate reloaded on SIGHUP.

use std::path::Path;
use std::process::Command;

use base64::Engine as _;
use serde_json::{Value, json};
use toolgate::pb;

use crate::peers::{Binary, testenv};
use crate::support::*;

/// grpcurl with `args`, then the address and `rest`: (succeeded, stdout + stderr).
fn grpcurl(args: &[&str], addr: &str, rest: &[&str]) -> (bool, String) {
    let output = Command::new(testenv().join("venv/bin/grpcurl"))
        .args(args)
        .arg(addr)
        .args(rest)
        .output()
        .unwrap();
    (
        output.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

/// Python grpcio over TLS with `ca` (and a client certificate when given), calling `Dispatch`
/// with one echo call and `metadata`: what it printed (the reply's content, or the error code).
fn python_tls(
    addr: &str,
    ca: &str,
    client: Option<(&str, &str)>,
    metadata: &[(&str, &str)],
) -> String {
    let script = r#"
import sys, json, grpc
sys.path.insert(0, sys.argv[1])
import toolgate_stubs
pb, pb_grpc = toolgate_stubs.load()
from google.protobuf import json_format, struct_pb2
addr, ca, cert, key, metadata = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], json.loads(sys.argv[6])
read = lambda p: open(p, "rb").read() if p else None
creds = grpc.ssl_channel_credentials(read(ca), read(key), read(cert))
channel = grpc.secure_channel(addr.replace("127.0.0.1", "localhost"), creds)
stub = pb_grpc.ToolGateStub(channel)
call = json_format.ParseDict({"id": "p", "name": "echo", "arguments": {"via": "python"}}, struct_pb2.Value())
try:
    reply = stub.Dispatch(pb.DispatchBatchRequest(calls=[call]), metadata=list(metadata.items()), timeout=10)
    print("ok", reply.results[0].content)
except grpc.RpcError as e:
    print("error", e.code().name)
"#;
    let (cert, key) = client.unwrap_or(("", ""));
    let metadata: serde_json::Map<String, Value> = metadata
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    let output = Command::new(testenv().join("venv/bin/python"))
        .args(["-c", script])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/python"))
        .args([addr, ca, cert, key])
        .arg(Value::Object(metadata).to_string())
        .output()
        .unwrap();
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn tls_and_client_certificates_with_grpcurl_and_python_and_a_reload_on_sighup() {
    crate::peers::require_peers!(TestEnv);
    let dir = folder("tls");
    let (server_ca, client_ca, stranger_ca) = (Ca::new(), Ca::new(), Ca::new());
    let (cert, key) = server_ca.sign(&["localhost"]);
    let ca_file = write(&dir, "ca.pem", &server_ca.pem);
    let cert_file = write(&dir, "server.pem", &cert);
    let key_file = write(&dir, "server.key", &key);
    let client_ca_file = write(&dir, "client-ca.pem", &client_ca.pem);
    let (agent_cert, agent_key) = client_ca.sign(&["agent-7.clients.test"]);
    let agent = (
        write(&dir, "agent.pem", &agent_cert),
        write(&dir, "agent.key", &agent_key),
    );
    let (nobody_cert, nobody_key) = client_ca.sign(&["nobody.clients.test"]);
    let nobody = (
        write(&dir, "nobody.pem", &nobody_cert),
        write(&dir, "nobody.key", &nobody_key),
    );
    let (stray_cert, stray_key) = stranger_ca.sign(&["agent-7.clients.test"]);
    let stray = (
        write(&dir, "stray.pem", &stray_cert),
        write(&dir, "stray.key", &stray_key),
    );
    let config = write(
        &dir,
        "toolgate.toml",
        &format!(
            r#"
            [tls]
            cert_file = "{cert_file}"
            key_file = "{key_file}"
            client_ca_file = "{client_ca_file}"
            reload_interval = "0s"
            [auth]
            anonymous = "none"
            [[auth.certificates]]
            name = "agent-7.clients.test"
            tenant = "acme"
            roles = ["agent"]
            "#
        ),
    );
    let server = Binary::start(&["--config", &config]);
    let addr = server.addr.replace("127.0.0.1", "localhost");
    let with_agent = [
        "-cacert",
        ca_file.as_str(),
        "-cert",
        agent.0.as_str(),
        "-key",
        agent.1.as_str(),
    ];

    // grpcurl with the CA and the agent's certificate: reflection and an agent RPC work.
    let (ok, out) = grpcurl(&with_agent, &addr, &["list"]);
    assert!(ok && out.contains("toolgate.v1.ToolGate"), "{out}");
    let (ok, out) = grpcurl(&with_agent, &addr, &["toolgate.v1.ToolGate/ListTools"]);
    assert!(ok && out.contains("\"echo\""), "{out}");
    // The agent role may not register remotes.
    let mut unregister = with_agent.to_vec();
    unregister.extend(["-d", r#"{"name": "x"}"#]);
    let (ok, out) = grpcurl(
        &unregister,
        &addr,
        &["toolgate.v1.ToolGate/UnregisterRemote"],
    );
    assert!(!ok && out.contains("PermissionDenied"), "{out}");
    // Plaintext, a wrong CA, no client certificate, or one from another CA: refused.
    let (ok, out) = grpcurl(&["-plaintext"], &addr, &["list"]);
    assert!(!ok, "plaintext must not work: {out}");
    let stranger_ca_file = write(&dir, "stranger-ca.pem", &stranger_ca.pem);
    let (ok, out) = grpcurl(
        &[
            "-cacert",
            &stranger_ca_file,
            "-cert",
            &agent.0,
            "-key",
            &agent.1,
        ],
        &addr,
        &["list"],
    );
    assert!(
        !ok,
        "a server certificate from another CA must not verify: {out}"
    );
    let (ok, out) = grpcurl(&["-cacert", &ca_file], &addr, &["list"]);
    assert!(!ok, "a client certificate is required: {out}");
    let (ok, out) = grpcurl(
        &["-cacert", &ca_file, "-cert", &stray.0, "-key", &stray.1],
        &addr,
        &["list"],
    );
    assert!(
        !ok,
        "a client certificate from another CA is refused: {out}"
    );
    // A certificate from the right CA that names no configured identity: UNAUTHENTICATED.
    let (ok, out) = grpcurl(
        &["-cacert", &ca_file, "-cert", &nobody.0, "-key", &nobody.1],
        &addr,
        &["toolgate.v1.ToolGate/ListTools"],
    );
    assert!(!ok && out.contains("Unauthenticated"), "{out}");

    // Python grpcio with ssl_channel_credentials.
    let out = python_tls(&server.addr, &ca_file, Some((&agent.0, &agent.1)), &[]);
    assert!(out.starts_with("ok") && out.contains("python"), "{out}");
    let out = python_tls(
        &server.addr,
        &stranger_ca_file,
        Some((&agent.0, &agent.1)),
        &[],
    );
    assert!(out.contains("UNAVAILABLE"), "{out}");

    // A new certificate from a new CA, picked up on SIGHUP: new connections get it.
    let next_ca = Ca::new();
    let (next_cert, next_key) = next_ca.sign(&["localhost"]);
    let next_ca_file = write(&dir, "next-ca.pem", &next_ca.pem);
    let next_with_agent = [
        "-cacert",
        next_ca_file.as_str(),
        "-cert",
        agent.0.as_str(),
        "-key",
        agent.1.as_str(),
    ];
    let (ok, _) = grpcurl(&next_with_agent, &addr, &["list"]);
    assert!(!ok, "not before the reload");
    // A connection made before the reload, trusting only the old CA.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let identity = tonic::transport::Identity::from_pem(&agent_cert, &agent_key);
    let tls = tonic::transport::ClientTlsConfig::new()
        .ca_certificate(tonic::transport::Certificate::from_pem(&server_ca.pem))
        .identity(identity)
        .domain_name("localhost");
    let channel = runtime.block_on(async {
        tonic::transport::Endpoint::from_shared(format!("https://{addr}"))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .unwrap()
    });
    let mut before = pb::tool_gate_client::ToolGateClient::new(channel);
    runtime
        .block_on(before.list_tools(pb::ListToolsRequest::default()))
        .unwrap();
    write(&dir, "server.key", &next_key);
    write(&dir, "server.pem", &next_cert);
    let pid = server.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    let mut reloaded = false;
    for _ in 0..50 {
        if grpcurl(&next_with_agent, &addr, &["list"]).0 {
            reloaded = true;
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert!(reloaded, "the new certificate is served after SIGHUP");
    // The old connection still works: a new one would not verify against the old CA.
    runtime
        .block_on(before.list_tools(pb::ListToolsRequest::default()))
        .expect("a connection made before the reload is not dropped");
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    assert!(log.contains("the TLS certificate was reloaded"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// base64url without padding, as JWKs and JWTs write it.
fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// An ES256 signing key and its JWK.
pub(crate) struct JwtKey {
    encoding: jsonwebtoken::EncodingKey,
    pub(crate) jwk: Value,
}

impl JwtKey {
    pub(crate) fn new(kid: &str) -> JwtKey {
        let key = rcgen::KeyPair::generate().unwrap();
        let point = key.public_key_raw();
        assert_eq!(point.len(), 65, "an uncompressed P-256 point");
        JwtKey {
            encoding: jsonwebtoken::EncodingKey::from_ec_der(&key.serialize_der()),
            jwk: json!({
                "kty": "EC", "crv": "P-256", "kid": kid, "alg": "ES256", "use": "sig",
                "x": b64(&point[1..33]), "y": b64(&point[33..]),
            }),
        }
    }

    pub(crate) fn token(&self, kid: &str, claims: Value) -> String {
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some(kid.to_owned());
        jsonwebtoken::encode(&header, &claims, &self.encoding).unwrap()
    }
}

pub(crate) fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A tonic client that sends `authorization: Bearer <token>` (when given) on every call.
async fn client_with(
    ts: &TestServer,
    token: Option<&str>,
) -> pb::tool_gate_client::ToolGateClient<
    tonic::service::interceptor::InterceptedService<
        tonic::transport::Channel,
        impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Clone,
    >,
> {
    let header: Option<tonic::metadata::MetadataValue<tonic::metadata::Ascii>> =
        token.map(|t| format!("Bearer {t}").parse().unwrap());
    pb::tool_gate_client::ToolGateClient::with_interceptor(
        ts.channel.clone(),
        move |mut request: tonic::Request<()>| {
            if let Some(header) = &header {
                request
                    .metadata_mut()
                    .insert("authorization", header.clone());
            }
            Ok(request)
        },
    )
}

#[tokio::test]
async fn tokens_and_jwts_are_identities_with_roles_and_tenants_stay_apart() {
    let dir = folder("auth");
    let key = JwtKey::new("k1");
    let stranger = JwtKey::new("k1");
    let jwks = write(&dir, "jwks.json", &json!({"keys": [key.jwk]}).to_string());
    let admin_file = write(&dir, "admin.token", "admin-secret\n");
    let config = toolgate::config::Config::from_toml(&format!(
        r#"
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
        [[auth.tokens]]
        id = "ops"
        roles = ["admin"]
        file = "{admin_file}"
        [auth.jwt]
        jwks_file = "{jwks}"
        issuer = "https://idp.test"
        audience = "toolgate"
        [[permissions.rules]]
        id = "globex-no-clock"
        tools = "now"
        tenants = ["globex"]
        decision = "deny"
        reason = "not for globex"
        "#,
        sha256_hex("acme-secret"),
        sha256_hex("globex-secret"),
    ))
    .unwrap();
    let ts = start_with(config).await;
    let one_echo = || request(json!([{"id": "a", "name": "echo", "arguments": {"n": 1}}]));
    let code = |r: Result<tonic::Response<pb::BatchResult>, tonic::Status>| match r {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    };

    // No credentials, an unknown token: UNAUTHENTICATED.
    assert_eq!(
        code(client_with(&ts, None).await.dispatch(one_echo()).await),
        tonic::Code::Unauthenticated
    );
    assert_eq!(
        code(
            client_with(&ts, Some("guess"))
                .await
                .dispatch(one_echo())
                .await
        ),
        tonic::Code::Unauthenticated
    );
    // An agent token dispatches, but may not read tool health or register remotes.
    let mut acme = client_with(&ts, Some("acme-secret")).await;
    assert_eq!(code(acme.dispatch(one_echo()).await), tonic::Code::Ok);
    let denied = acme
        .get_tool_health(pb::GetToolHealthRequest::default())
        .await
        .unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied);
    assert!(denied.message().contains("admin"), "{}", denied.message());
    let denied = acme
        .unregister_remote(pb::UnregisterRemoteRequest { name: "x".into() })
        .await
        .unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied);
    // The admin token (read from a file) may.
    let mut ops = client_with(&ts, Some("admin-secret")).await;
    ops.get_tool_health(pb::GetToolHealthRequest::default())
        .await
        .unwrap();

    // JWTs: valid; expired; wrong audience; wrong issuer; signed by another key; no tenant.
    let claims = |overrides: Value| {
        let mut c = json!({
            "iss": "https://idp.test", "aud": "toolgate", "sub": "user-42",
            "tenant": "acme", "roles": ["agent"], "exp": now() + 300,
        });
        for (k, v) in overrides.as_object().unwrap() {
            if v.is_null() {
                c.as_object_mut().unwrap().remove(k);
            } else {
                c[k] = v.clone();
            }
        }
        c
    };
    let valid = key.token("k1", claims(json!({})));
    assert_eq!(
        code(
            client_with(&ts, Some(&valid))
                .await
                .dispatch(one_echo())
                .await
        ),
        tonic::Code::Ok
    );
    for (why, token) in [
        (
            "expired",
            key.token("k1", claims(json!({"exp": now() - 3600}))),
        ),
        (
            "wrong audience",
            key.token("k1", claims(json!({"aud": "other"}))),
        ),
        (
            "wrong issuer",
            key.token("k1", claims(json!({"iss": "https://evil.test"}))),
        ),
        ("another key", stranger.token("k1", claims(json!({})))),
        ("unknown key id", key.token("k2", claims(json!({})))),
        (
            "no tenant",
            key.token("k1", claims(json!({"tenant": null}))),
        ),
    ] {
        let status = client_with(&ts, Some(&token))
            .await
            .dispatch(one_echo())
            .await
            .unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::Unauthenticated,
            "{why}: {status:?}"
        );
    }

    // Tenants: the same session id is two sessions; neither sees or ends the other's.
    let mut globex = client_with(&ts, Some("globex-secret")).await;
    // A permission rule about one tenant only, named in its gate decision.
    let clock = || request(json!([{"id": "t", "name": "now"}]));
    let theirs = globex.dispatch(clock()).await.unwrap().into_inner();
    assert_eq!(
        theirs.results[0].error_class,
        pb::ErrorClass::PermissionDenied as i32,
        "{:?}",
        theirs.results[0]
    );
    assert!(theirs.results[0].content.contains("not for globex"));
    let mut stream = globex.dispatch_batch(clock()).await.unwrap().into_inner();
    let mut gate = None;
    while let Some(event) = stream.message().await.unwrap() {
        if let Some(pb::dispatch_event::Event::GateDecision(g)) = event.event {
            gate = Some(g);
        }
    }
    assert_eq!(gate.unwrap().source, "permissions[globex-no-clock]");
    assert!(
        acme.dispatch(clock())
            .await
            .unwrap()
            .into_inner()
            .all_succeeded
    );
    let mut write_file = request(json!([
        {"id": "w", "name": "scratch_write", "arguments": {"path": "plan.txt", "content": "acme only"}},
        {"id": "e", "name": "echo", "arguments": {"remember": "acme"}},
    ]));
    write_file.session_id = "shared".into();
    let written = acme.dispatch(write_file).await.unwrap().into_inner();
    assert!(written.all_succeeded, "{:?}", written.results);
    let mut read_file = request(json!([
        {"id": "r", "name": "scratch_read", "arguments": {"path": "plan.txt"}},
    ]));
    read_file.session_id = "shared".into();
    let read = globex
        .dispatch(read_file.clone())
        .await
        .unwrap()
        .into_inner();
    assert!(!read.results[0].success, "globex must not read acme's file");
    assert!(!read.results[0].content.contains("acme only"));
    let read = acme.dispatch(read_file).await.unwrap().into_inner();
    assert!(read.results[0].content.contains("acme only"));
    let memory = |id: &str| pb::GetSessionMemoryRequest {
        session_id: id.into(),
    };
    assert!(
        !acme
            .get_session_memory(memory("shared"))
            .await
            .unwrap()
            .into_inner()
            .entries
            .is_empty()
    );
    let theirs = globex.get_session_memory(memory("shared")).await;
    assert!(
        theirs
            .as_ref()
            .map_or(true, |r| r.get_ref().entries.is_empty()),
        "globex sees none of acme's memory: {theirs:?}"
    );
    let ended = globex
        .end_session(pb::EndSessionRequest {
            session_id: "shared".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let still = acme.get_session_memory(memory("shared")).await.unwrap();
    assert!(
        !still.into_inner().entries.is_empty(),
        "ending globex's 'shared' ({ended:?}) left acme's"
    );

    // A batch without a session id runs in a session nobody can name.
    let fresh = acme.dispatch(one_echo()).await.unwrap().into_inner();
    assert!(fresh.session_id.starts_with("batch-") && fresh.session_id.len() == 6 + 32);
    let mut named = one_echo();
    named.session_id = fresh.session_id.clone();
    let refused = acme.dispatch(named).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn grpcurl_sends_a_bearer_token_and_refusals_are_audited() {
    crate::peers::require_peers!(TestEnv);
    let dir = folder("grpcurl-token");
    let config = write(
        &dir,
        "toolgate.toml",
        &format!(
            "[auth]\nanonymous = \"none\"\n[[auth.tokens]]\nid = \"ci\"\ntenant = \"acme\"\nsha256 = \"{}\"\n",
            sha256_hex("ci-secret")
        ),
    );
    let server = Binary::start(&["--config", &config, "--log-format", "json"]);
    let (ok, out) = grpcurl(
        &["-plaintext", "-H", "authorization: Bearer ci-secret"],
        &server.addr,
        &["toolgate.v1.ToolGate/ListTools"],
    );
    assert!(ok && out.contains("\"echo\""), "{out}");
    let (ok, out) = grpcurl(
        &["-plaintext", "-H", "authorization: Bearer wrong"],
        &server.addr,
        &["toolgate.v1.ToolGate/ListTools"],
    );
    assert!(!ok && out.contains("Unauthenticated"), "{out}");
    let (ok, out) = grpcurl(
        &["-plaintext", "-H", "authorization: Bearer ci-secret"],
        &server.addr,
        &["toolgate.v1.ToolGate/GetToolHealth"],
    );
    assert!(!ok && out.contains("PermissionDenied"), "{out}");
    // Health stays open for probes.
    let (ok, out) = grpcurl(
        &["-plaintext"],
        &server.addr,
        &["grpc.health.v1.Health/Check"],
    );
    assert!(ok && out.contains("SERVING"), "{out}");
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    assert!(!log.contains("ci-secret"), "a token reached the log: {log}");
    let audit: Vec<Value> = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["target"] == "toolgate::audit")
        .collect();
    assert!(
        audit
            .iter()
            .any(|l| l["fields"]["outcome"] == "unauthenticated"
                && l["fields"]["rpc"] == "ListTools"),
        "{audit:#?}"
    );
    assert!(
        audit
            .iter()
            .any(|l| l["fields"]["outcome"] == "permission_denied"
                && l["fields"]["identity"] == "ci"
                && l["fields"]["tenant"] == "acme"),
        "{audit:#?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_public_listener_needs_tls_or_an_explicit_insecure() {
    let output = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--listen", "0.0.0.0:0"])
        .env_remove("TOOLGATE_CONFIG")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("not a loopback address and TLS is off"),
        "{stderr}"
    );
    let dir = folder("public");
    let config = write(
        &dir,
        "public.toml",
        "[server]\nlisten = \"0.0.0.0:50051\"\ninsecure = true\n[remote_registration]\nenabled = true\n[auth]\nanonymous = \"any\"\n",
    );
    let output = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["check-config", &config])
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{said}");
    for warning in [
        "auth.anonymous = \"any\"",
        "serves plaintext",
        "remote_registration.enabled on a non-loopback address",
    ] {
        assert!(said.contains(warning), "no warning {warning:?} in {said}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_share_above_its_lowered_total_is_refused_by_check_config_and_at_start() {
    // An operator lowers the total to 8 and leaves the shares at their defaults (128 per
    // tenant): one tenant could take all 8, so the config is refused until the shares say.
    let dir = folder("shares");
    let lowered = write(
        &dir,
        "lowered.toml",
        "[server]\nmax_concurrent_batches = 8\nmax_connections = 16\n",
    );
    let run = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(args)
            .env_remove("TOOLGATE_CONFIG")
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.success(), said)
    };
    for args in [
        vec!["check-config", lowered.as_str()],
        vec![
            "serve",
            "--config",
            lowered.as_str(),
            "--listen",
            "127.0.0.1:0",
        ],
    ] {
        let (ok, said) = run(&args);
        assert!(!ok, "{args:?}: {said}");
        for problem in [
            "server.max_batches_per_tenant: 128 is above server.max_concurrent_batches (8)",
            "server.max_batches_per_connection: 64 is above server.max_concurrent_batches (8)",
            "server.max_batches_per_identity: 64 is above server.max_concurrent_batches (8)",
            "server.max_connections_per_address: 64 is above server.max_connections (16)",
        ] {
            assert!(said.contains(problem), "{args:?}: no {problem:?} in {said}");
        }
    }
    let shared = write(
        &dir,
        "shared.toml",
        "[server]\nmax_concurrent_batches = 8\nmax_batches_per_connection = 4\n\
         max_batches_per_tenant = 4\nmax_batches_per_identity = 2\n",
    );
    let (ok, said) = run(&["check-config", &shared]);
    assert!(ok, "{said}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_newline_in_a_call_id_cannot_forge_a_text_log_line() {
    let server = Binary::start_with(&[], &[("RUST_LOG", "debug")]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let channel = connect(server.addr.parse().unwrap()).await;
        let mut client = pb::tool_gate_client::ToolGateClient::new(channel);
        client
            .dispatch(request(json!([
                {"id": "a\nFORGED fake line", "name": "echo"}
            ])))
            .await
            .unwrap();
    });
    let (_, log) = server.terminate();
    assert!(log.contains("FORGED"), "the id was logged at debug: {log}");
    assert!(
        !log.lines().any(|l| l.starts_with("FORGED")),
        "a forged line: {log}"
    );
}

#[tokio::test]
async fn run_time_registration_cannot_run_other_programs_or_reach_protected_addresses() {
    let config = toolgate::config::Config::from_toml(
        r#"
        [remote_registration]
        enabled = true
        [[remote_registration.commands]]
        argv = ["python3", "/srv/mcp/server.py"]
        env_keys = ["MCP_MODE"]
        "#,
    )
    .unwrap();
    let ts = start_with(config).await;
    let register = |definition: Value| {
        let mut client = ts.client.clone();
        async move {
            client
                .register_remote(pb::RegisterRemoteRequest {
                    definition: definition
                        .as_object()
                        .cloned()
                        .map(toolgate::protojson::Struct::from),
                })
                .await
        }
    };
    for (why, definition) in [
        (
            "an allowlisted interpreter with other arguments",
            json!({"name": "x", "kind": "mcp", "command": ["python3", "-c", "import os; os.system('id')"]}),
        ),
        (
            "an env key the entry does not allow",
            json!({"name": "x", "kind": "mcp", "command": ["python3", "/srv/mcp/server.py"],
                   "env": {"PYTHONSTARTUP": "/tmp/evil.py"}}),
        ),
        (
            "a working directory",
            json!({"name": "x", "kind": "mcp", "command": ["python3", "/srv/mcp/server.py"], "cwd": "/tmp"}),
        ),
        (
            "the cloud metadata address",
            json!({"name": "x", "kind": "http", "url": "http://169.254.169.254/latest/meta-data/",
                   "definition": {"name": "meta"}}),
        ),
        (
            "another service on this host",
            json!({"name": "x", "kind": "http", "url": "http://127.0.0.1:9464/metrics",
                   "definition": {"name": "metrics"}}),
        ),
        (
            "a worker on this host by name",
            json!({"name": "x", "kind": "worker", "endpoint": "http://localhost:7001"}),
        ),
        (
            "a file path from the request",
            json!({"name": "x", "kind": "worker", "endpoint": "https://10.9.9.9:7001",
                   "tls": {"ca_file": "/etc/shadow"}}),
        ),
        (
            "redirects",
            json!({"name": "x", "kind": "http", "url": "http://10.9.9.9/", "follow_redirects": true,
                   "definition": {"name": "r"}}),
        ),
    ] {
        let status = register(definition).await.unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::PermissionDenied,
            "{why}: {status:?}"
        );
    }
    assert!(
        list_tools(&ts)
            .await
            .iter()
            .all(|t| t.name != "metrics" && t.name != "r")
    );
}

#[tokio::test]
async fn http_tools_do_not_follow_redirects_unless_told() {
    use axum::routing::post;
    // /tool redirects to /elsewhere, which would answer "followed".
    let app = axum::Router::new()
        .route(
            "/tool",
            post(|| async { axum::response::Redirect::temporary("/elsewhere") }),
        )
        .route("/elsewhere", post(|| async { "followed" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let remote = |name: &str, follow: bool| {
        format!(
            "[[remotes]]\nname = \"{name}\"\nkind = \"http\"\nurl = \"http://{addr}/tool\"\nfollow_redirects = {follow}\n[remotes.definition]\nname = \"{name}\"\n"
        )
    };
    let config = toolgate::config::Config::from_toml(&format!(
        "{}{}",
        remote("strict", false),
        remote("lenient", true)
    ))
    .unwrap();
    let ts = start_with(config).await;
    let result = dispatch(
        &ts,
        request(json!([{"id": "s", "name": "strict"}, {"id": "l", "name": "lenient"}])),
    )
    .await;
    assert!(!result.results[0].success, "{:?}", result.results[0]);
    assert!(!result.results[0].content.contains("followed"));
    assert!(
        result.results[1].success && result.results[1].content.contains("followed"),
        "{:?}",
        result.results[1]
    );
}

/// A non-loopback address of this machine, if it has one (the source address towards a
/// documentation address; nothing is sent).
fn non_loopback_ip() -> Option<std::net::IpAddr> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("192.0.2.1:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[test]
fn by_default_anonymous_callers_are_let_in_only_from_this_machine() {
    crate::peers::require_peers!(TestEnv);
    let Some(ip) = non_loopback_ip() else {
        eprintln!("skipped: this machine has no non-loopback address to connect from");
        return;
    };
    let dir = folder("loopback-only");
    let config = write(
        &dir,
        "public.toml",
        "[server]\nlisten = \"0.0.0.0:0\"\ninsecure = true\n[admin]\nlisten = \"\"\n",
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["serve", "--config", &config])
        .env_remove("TOOLGATE_CONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let port = line.trim().rsplit(':').next().unwrap().to_owned();
    let (ok, out) = grpcurl(
        &["-plaintext"],
        &format!("127.0.0.1:{port}"),
        &["toolgate.v1.ToolGate/ListTools"],
    );
    assert!(ok, "from this machine: {out}");
    let (ok, out) = grpcurl(
        &["-plaintext"],
        &format!("{ip}:{port}"),
        &["toolgate.v1.ToolGate/ListTools"],
    );
    assert!(!ok && out.contains("Unauthenticated"), "from {ip}: {out}");
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The binary serving TLS (a certificate for `localhost` from a new CA) with no bound on
/// connections per address, in folder `name`: the server, the CA file and the folder.
fn tls_binary(name: &str) -> (Binary, String, std::path::PathBuf) {
    let dir = folder(name);
    let ca = Ca::new();
    let (cert, key) = ca.sign(&["localhost"]);
    let ca_file = write(&dir, "ca.pem", &ca.pem);
    let config = write(
        &dir,
        "toolgate.toml",
        &format!(
            "[server]\nmax_connections_per_address = 0\n[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\nhandshake_timeout = \"10s\"\n",
            write(&dir, "server.pem", &cert),
            write(&dir, "server.key", &key),
        ),
    );
    let server = Binary::start(&["--config", &config]);
    (server, ca_file, dir)
}

#[test]
fn idle_sockets_cannot_starve_tls_handshakes() {
    crate::peers::require_peers!(TestEnv);
    use std::io::Read;
    let (server, ca_file, _dir) = tls_binary("tls-starve");
    // More silent sockets than the server runs handshakes at once (256).
    let mut silent: Vec<std::net::TcpStream> = (0..300)
        .map(|_| std::net::TcpStream::connect(&server.addr).unwrap())
        .collect();
    // And from 20 addresses (all of 127/8 is this host), 16 sockets each that send the first
    // byte of a TLS record and stall: as many as every handshake slot, were a byte enough.
    let target: std::net::SocketAddr = server.addr.parse().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _stalling = runtime.block_on(async {
        use tokio::io::AsyncWriteExt;
        let mut stalling = Vec::new();
        for host in 2..22u8 {
            for _ in 0..16 {
                let socket = tokio::net::TcpSocket::new_v4().unwrap();
                socket
                    .bind((std::net::Ipv4Addr::new(127, 0, 0, host), 0).into())
                    .unwrap();
                let mut stream = socket.connect(target).await.unwrap();
                stream.write_all(&[0x16]).await.unwrap();
                stalling.push(stream);
            }
        }
        stalling
    });
    let addr = server.addr.replace("127.0.0.1", "localhost");
    let (ok, out) = grpcurl(&["-cacert", &ca_file, "-max-time", "5"], &addr, &["list"]);
    assert!(ok && out.contains("toolgate.v1.ToolGate"), "{out}");
    // A socket that never starts its handshake is closed within seconds.
    let first = &mut silent[0];
    first
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 16];
    match first.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("the silent socket stayed open: {other:?}"),
    }
}

/// A whole TLS 1.3 ClientHello, as a client sends it first.
fn client_hello() -> Vec<u8> {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut client = rustls::ClientConnection::new(std::sync::Arc::new(config), name).unwrap();
    let mut hello = Vec::new();
    client.write_tls(&mut hello).unwrap();
    hello
}

/// 40 addresses x 8 sockets that send a whole ClientHello and then stall, as many as every
/// handshake slot and more: they held the slots to the handshake timeout, and legitimate
/// handshakes waited past theirs. Now slow handshakes give up their slots under pressure, and
/// legitimate clients keep connecting.
#[test]
fn stalled_tls_handshakes_cannot_keep_legitimate_ones_out() {
    crate::peers::require_peers!(TestEnv);
    let (server, ca_file, dir) = tls_binary("tls-stalled-hello");
    let target: std::net::SocketAddr = server.addr.parse().unwrap();
    let hello = client_hello();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _stalling = runtime.block_on(async {
        use tokio::io::AsyncWriteExt;
        let mut stalling = Vec::new();
        for host in 2..42u8 {
            for _ in 0..8 {
                let socket = tokio::net::TcpSocket::new_v4().unwrap();
                socket
                    .bind((std::net::Ipv4Addr::new(127, 0, 0, host), 0).into())
                    .unwrap();
                let mut stream = socket.connect(target).await.unwrap();
                stream.write_all(&hello).await.unwrap();
                stalling.push(stream);
            }
        }
        stalling
    });
    let addr = server.addr.replace("127.0.0.1", "localhost");
    for _ in 0..5 {
        let (ok, out) = grpcurl(
            &[
                "-cacert",
                &ca_file,
                "-connect-timeout",
                "4",
                "-max-time",
                "5",
            ],
            &addr,
            &["list"],
        );
        assert!(ok && out.contains("toolgate.v1.ToolGate"), "{out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_client_certificate_that_maps_to_no_identity_is_refused_not_anonymous() {
    crate::peers::require_peers!(TestEnv);
    let dir = folder("unmapped-cert");
    let (server_ca, client_ca) = (Ca::new(), Ca::new());
    let (cert, key) = server_ca.sign(&["localhost"]);
    let (stranger_cert, stranger_key) = client_ca.sign(&["nobody.clients.test"]);
    let ca_file = write(&dir, "ca.pem", &server_ca.pem);
    let config = write(
        &dir,
        "toolgate.toml",
        &format!(
            "[auth]\nanonymous_roles = [\"agent\", \"admin\"]\n[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\nclient_ca_file = \"{}\"\nrequire_client_cert = false\n\
             [[auth.certificates]]\nname = \"agent-7.clients.test\"\ntenant = \"acme\"\n",
            write(&dir, "server.pem", &cert),
            write(&dir, "server.key", &key),
            write(&dir, "client-ca.pem", &client_ca.pem),
        ),
    );
    let server = Binary::start(&["--config", &config]);
    let addr = server.addr.replace("127.0.0.1", "localhost");
    let stranger = [
        "-cacert",
        ca_file.as_str(),
        "-cert",
        &write(&dir, "stranger.pem", &stranger_cert),
        "-key",
        &write(&dir, "stranger.key", &stranger_key),
    ];
    // From loopback, without the certificate: anonymous (the default), admin included.
    let (ok, out) = grpcurl(
        &["-cacert", &ca_file],
        &addr,
        &["toolgate.v1.ToolGate/GetToolHealth"],
    );
    assert!(ok, "{out}");
    // With a valid certificate that names no identity: refused, never served as anonymous.
    let (ok, out) = grpcurl(&stranger, &addr, &["toolgate.v1.ToolGate/GetToolHealth"]);
    assert!(!ok && out.contains("Unauthenticated"), "{out}");
    let (ok, out) = grpcurl(&stranger, &addr, &["toolgate.v1.ToolGate/ListTools"]);
    assert!(!ok && out.contains("Unauthenticated"), "{out}");
}

/// A JWT with this exact header, signed ES256 by `key`.
fn jwt_with_header(key: &JwtKey, header: Value, claims: &Value) -> String {
    let message = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    let signature = jsonwebtoken::crypto::sign(
        message.as_bytes(),
        &key.encoding,
        jsonwebtoken::Algorithm::ES256,
    )
    .unwrap();
    format!("{message}.{signature}")
}

#[test]
fn jwts_with_crit_a_foreign_algorithm_or_no_subject_are_refused_and_audit_lines_cannot_be_forged() {
    crate::peers::require_peers!(TestEnv);
    let dir = folder("jwt-hardening");
    let key = JwtKey::new("k1");
    // The second key says it is for ES384, while its curve would verify ES256.
    let other = JwtKey::new("k2");
    let mut other_jwk = other.jwk.clone();
    other_jwk["alg"] = json!("ES384");
    let jwks = write(
        &dir,
        "jwks.json",
        &json!({"keys": [key.jwk, other_jwk]}).to_string(),
    );
    let config = write(
        &dir,
        "toolgate.toml",
        &format!(
            "[auth]\nanonymous = \"none\"\n[auth.jwt]\njwks_file = \"{jwks}\"\nissuer = \"https://idp.test\"\naudience = \"toolgate\"\n"
        ),
    );
    let server = Binary::start(&["--config", &config]);
    let claims = |extra: Value| {
        let mut claims = json!({"iss": "https://idp.test", "aud": "toolgate", "sub": "alice",
            "tenant": "acme", "exp": now() + 600});
        for (k, v) in extra.as_object().unwrap() {
            claims[k] = v.clone();
        }
        claims
    };
    let call = |token: &str| {
        grpcurl(
            &[
                "-plaintext",
                "-H",
                &format!("authorization: Bearer {token}"),
            ],
            &server.addr,
            &["toolgate.v1.ToolGate/ListTools"],
        )
    };
    let (ok, out) = call(&key.token("k1", claims(json!({}))));
    assert!(ok, "a plain valid token works: {out}");
    let forged_kid = r#"k" rpc="RegisterRemote" outcome="allowed"#;
    for (why, token) in [
        (
            "crit",
            jwt_with_header(
                &key,
                json!({"alg": "ES256", "kid": "k1", "crit": ["exp"]}),
                &claims(json!({})),
            ),
        ),
        (
            "the key's own algorithm",
            other.token("k2", claims(json!({}))),
        ),
        (
            "an empty subject",
            key.token("k1", claims(json!({"sub": ""}))),
        ),
        ("a forged kid", key.token(forged_kid, claims(json!({})))),
        (
            "a kid the log's redactor would cut",
            key.token(
                r#"x password=hunter2\" outcome=allowed rpc=RegisterRemote"#,
                claims(json!({})),
            ),
        ),
    ] {
        let (ok, out) = call(&token);
        assert!(!ok && out.contains("Unauthenticated"), "{why}: {out}");
        // The caller is told its credential was refused, not what the check found.
        assert!(
            out.contains("the credentials were not accepted"),
            "{why}: {out}"
        );
        assert!(!out.contains("JWT"), "{why}: {out}");
    }
    let (_, log) = server.terminate();
    for expected in [
        "critical extensions (crit)",
        "but the key is for ES384",
        "the sub claim is empty",
    ] {
        assert!(
            log.contains(expected),
            "the log keeps the detail: {expected}\n{log}"
        );
    }
    // The forged kid stays inside the quoted reason: no unescaped `outcome="allowed"`.
    let refusal = log
        .lines()
        .find(|l| l.contains("no key k"))
        .expect("the unknown kid's refusal is logged");
    assert!(
        refusal.contains(r#"outcome="unauthenticated""#),
        "{refusal}"
    );
    assert!(!refusal.contains(r#" outcome="allowed""#), "{refusal}");
    assert!(refusal.contains("outcome='allowed"), "defused: {refusal}");
    // However the redactor rewrites the line, no request's text closes the quoted reason.
    for line in log.lines().filter(|l| l.contains("toolgate::audit")) {
        // What a key=value parser reads as fields: the text outside quotes.
        let outside: String = line.split('"').step_by(2).collect::<Vec<_>>().join(" ");
        assert!(
            line.matches('"').count() % 2 == 0,
            "a quote is unbalanced: {line}"
        );
        assert!(!outside.contains("outcome=allowed"), "{line}");
        assert!(!outside.contains("rpc=RegisterRemote"), "{line}");
    }
}

/// `toolgate approvals` reaches a TLS server as a person would: the CA that signed it, a client
/// certificate that maps to an approver, or a bearer token from an environment variable; the
/// wrong CA or no credentials are refused with a message saying so.
#[test]
fn the_approvals_cli_speaks_tls_with_a_client_certificate_or_a_token() {
    let dir = folder("approvals-cli-tls");
    let (server_ca, client_ca, stranger_ca) = (Ca::new(), Ca::new(), Ca::new());
    let (cert, key) = server_ca.sign(&["localhost"]);
    let ca_file = write(&dir, "ca.pem", &server_ca.pem);
    let stranger_file = write(&dir, "stranger.pem", &stranger_ca.pem);
    let cert_file = write(&dir, "server.pem", &cert);
    let key_file = write(&dir, "server.key", &key);
    let client_ca_file = write(&dir, "client-ca.pem", &client_ca.pem);
    let (alice_cert, alice_key) = client_ca.sign(&["alice.clients.test"]);
    let alice = (
        write(&dir, "alice.pem", &alice_cert),
        write(&dir, "alice.key", &alice_key),
    );
    let config = write(
        &dir,
        "toolgate.toml",
        &format!(
            r#"
            [tls]
            cert_file = "{cert_file}"
            key_file = "{key_file}"
            client_ca_file = "{client_ca_file}"
            require_client_cert = false
            reload_interval = "0s"
            [auth]
            anonymous = "none"
            [[auth.certificates]]
            name = "alice.clients.test"
            tenant = "acme"
            roles = ["approver"]
            [[auth.tokens]]
            id = "bob"
            tenant = "acme"
            roles = ["approver"]
            env = "TG_BOB"
            "#
        ),
    );
    let token = "bob-approver-token-0001";
    let server = Binary::start_with(&["--config", &config], &[("TG_BOB", token)]);
    let addr = server.addr.replace("127.0.0.1", "localhost");
    let cli = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(["approvals", "list", "--addr", &addr])
            .args(args)
            .env("TG_BOB", token)
            .env("TG_WRONG", "not-a-token-of-anyone")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        (output.status.success(), text)
    };
    let with_cert = cli(&[
        "--tls-ca",
        &ca_file,
        "--tls-cert",
        &alice.0,
        "--tls-key",
        &alice.1,
    ]);
    assert_eq!(with_cert, (true, "no pending approvals\n".to_owned()));
    let with_token = cli(&["--tls-ca", &ca_file, "--token-env", "TG_BOB"]);
    assert_eq!(with_token, (true, "no pending approvals\n".to_owned()));
    let (ok, said) = cli(&["--tls-ca", &ca_file, "--token-env", "TG_WRONG"]);
    assert!(!ok && said.contains("Unauthenticated"), "{said}");
    let (ok, said) = cli(&["--tls-ca", &ca_file]);
    assert!(
        !ok && said.contains("Unauthenticated: credentials required"),
        "{said}"
    );
    let (ok, said) = cli(&["--tls-ca", &stranger_file, "--token-env", "TG_BOB"]);
    assert!(!ok && said.contains("cannot connect"), "{said}");
    let (ok, said) = cli(&["--tls-cert", &alice.0]);
    assert!(
        !ok && said.contains("--tls-cert and --tls-key go together"),
        "{said}"
    );
}
