//! Real third-party peers against the real binary: grpcurl (the repository's demo script) and a
//! Python client with stubs generated from the repository's protos. `scripts/test` installs both
//! into `.testenv/`; set TOOLGATE_TESTENV to use another folder.

use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// The folder `scripts/test` installs grpcurl and the Python packages into.
pub(crate) fn testenv() -> PathBuf {
    std::env::var_os("TOOLGATE_TESTENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(REPO).join(".testenv"))
}

/// What a test needs that `cargo` does not install; `scripts/test` installs every one.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Peer {
    /// `.testenv/venv`: Python with the packages of `scripts/requirements-test.txt`, and grpcurl.
    TestEnv,
    /// Node, and `@modelcontextprotocol/server-everything` in `.testenv/node`.
    Everything,
    /// Node, and the TypeScript SDK (`@modelcontextprotocol/sdk`) in `.testenv/node`.
    TypeScriptSdk,
    /// Node, and the MCP Inspector (`@modelcontextprotocol/inspector`) in `.testenv/node`.
    Inspector,
    /// `.testenv/mcp-v1`: Python with the MCP SDK 1.x (`scripts/requirements-mcp-v1.txt`).
    McpV1,
    /// `promtool` (Debian's `prometheus` package).
    Promtool,
    /// The `prometheus` server (the same package).
    Prometheus,
    /// `redis-server` (Debian's `redis-server` package).
    Redis,
    /// nginx (Debian's `nginx-light`), as a gRPC balancer.
    Nginx,
    /// A headless Chromium (Debian's `chromium`), Playwright for Python in `.testenv/venv`, and
    /// axe-core in `.testenv/node`.
    Chromium,
}

impl Peer {
    /// Why the peer cannot be used here, if it cannot.
    fn missing(self) -> Option<String> {
        let env = testenv();
        let file =
            |path: PathBuf| (!path.exists()).then(|| format!("{} is missing", path.display()));
        match self {
            Peer::TestEnv => {
                file(env.join("venv/bin/python")).or_else(|| file(env.join("venv/bin/grpcurl")))
            }
            Peer::Everything => on_path("node").or_else(|| {
                file(env.join(
                    "node/node_modules/@modelcontextprotocol/server-everything/dist/index.js",
                ))
            }),
            Peer::TypeScriptSdk => on_path("node").or_else(|| {
                file(env.join(
                    "node/node_modules/@modelcontextprotocol/sdk/dist/esm/client/streamableHttp.js",
                ))
            }),
            Peer::Inspector => {
                on_path("node").or_else(|| file(env.join("node/node_modules/.bin/mcp-inspector")))
            }
            Peer::McpV1 => file(env.join("mcp-v1/bin/python")),
            Peer::Promtool => on_path("promtool"),
            Peer::Prometheus => on_path("prometheus"),
            Peer::Redis => on_path("redis-server"),
            Peer::Nginx => {
                let sbin = Path::new("/usr/sbin/nginx").exists();
                if sbin { None } else { on_path("nginx") }
            }
            Peer::Chromium => on_path("chromium").or_else(|| {
                let found = std::fs::read_dir(env.join("venv/lib"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .any(|dir| dir.path().join("site-packages/playwright").exists());
                (!found)
                    .then(|| "Playwright for Python is not in .testenv/venv".to_owned())
                    .or_else(|| file(env.join("node/node_modules/axe-core/axe.min.js")))
            }),
        }
    }
}

/// Why `program` cannot be run, if it is not on `PATH`.
fn on_path(program: &str) -> Option<String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path).any(|dir| dir.join(program).is_file());
    (!found).then(|| format!("`{program}` is not on PATH"))
}

/// Whether a test may go on: every peer it needs is installed. Without one, the test says it
/// is skipped and why, and passes; with `TOOLGATE_REQUIRE_PEERS=1` (which `scripts/test`, and so
/// CI, sets) it fails instead, so no test is skipped where the peers were meant to be.
pub(crate) fn present(peers: &[Peer]) -> bool {
    let missing: Vec<String> = peers.iter().filter_map(|p| p.missing()).collect();
    if missing.is_empty() {
        return true;
    }
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    let why = missing.join("; ");
    assert!(
        std::env::var_os("TOOLGATE_REQUIRE_PEERS").is_none_or(|v| v != "1"),
        "{test} needs a peer that is not installed ({why}); scripts/test installs every one"
    );
    // Straight to stderr, past the test harness's capture of `eprintln!`, so the skip shows.
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {why} (scripts/test installs it; TOOLGATE_REQUIRE_PEERS=1 fails instead)"
    );
    false
}

/// Returns from the test (skipped, saying why) unless every named `Peer` is installed.
macro_rules! require_peers {
    ($($peer:ident),+) => {
        if !$crate::peers::present(&[$($crate::peers::Peer::$peer),+]) {
            return;
        }
    };
}
pub(crate) use require_peers;

/// The `toolgate` binary serving on a free port; killed on drop.
pub(crate) struct Binary {
    pub(crate) child: Child,
    pub(crate) addr: String,
    /// The admin listener's address.
    pub(crate) admin: String,
    stderr: Option<std::process::ChildStderr>,
}

impl Binary {
    pub(crate) fn start(extra: &[&str]) -> Binary {
        Binary::start_with(extra, &[])
    }

    pub(crate) fn start_with(extra: &[&str], env: &[(&str, &str)]) -> Binary {
        Binary::spawn(Command::new(env!("CARGO_BIN_EXE_toolgate")), extra, env)
    }

    /// The binary listening on `listen` instead of `127.0.0.1:0`.
    pub(crate) fn start_on(listen: &str, extra: &[&str]) -> Binary {
        let mut args = vec!["--listen", listen];
        args.extend_from_slice(extra);
        Binary::spawn(Command::new(env!("CARGO_BIN_EXE_toolgate")), &args, &[])
    }

    /// The binary with its file limit (soft and hard) at `files`, as `ulimit -n` sets it.
    pub(crate) fn start_with_file_limit(extra: &[&str], files: u32) -> Binary {
        let mut shell = Command::new("bash");
        shell.args([
            "-c",
            &format!("ulimit -n {files} && exec \"$0\" \"$@\""),
            env!("CARGO_BIN_EXE_toolgate"),
        ]);
        Binary::spawn(shell, extra, &[])
    }

    fn spawn(mut command: Command, extra: &[&str], env: &[(&str, &str)]) -> Binary {
        let mut child = crate::processes::own_group(&mut command)
            .args(["serve", "--admin-listen", "127.0.0.1:0"])
            .args(if extra.contains(&"--listen") {
                &[][..]
            } else {
                &["--listen", "127.0.0.1:0"][..]
            })
            .args(extra)
            .env("RUST_LOG", "info")
            .envs(env.iter().copied())
            .env_remove("TOOLGATE_CONFIG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("toolgate starts");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = |prefix: &str| {
            let mut line = String::new();
            stdout.read_line(&mut line).unwrap();
            line.trim()
                .strip_prefix(prefix)
                .unwrap_or_else(|| panic!("unexpected line {line:?}"))
                .to_owned()
        };
        let addr = line("listening on ");
        let admin = line("admin listening on ");
        let stderr = child.stderr.take();
        Binary {
            child,
            addr,
            admin,
            stderr,
        }
    }

    /// Sends SIGTERM and returns the exit status and what the server logged.
    pub(crate) fn terminate(self) -> (std::process::ExitStatus, String) {
        self.send_sigterm();
        self.exit()
    }

    fn send_sigterm(&self) {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
    }

    /// Waits for the process to exit; returns its status and what it logged.
    fn exit(mut self) -> (std::process::ExitStatus, String) {
        let status = self.child.wait().unwrap();
        let mut log = String::new();
        std::io::Read::read_to_string(&mut self.stderr.take().unwrap(), &mut log).unwrap();
        (status, log)
    }
}

impl Drop for Binary {
    /// At once, with whatever it started (hook programs, MCP servers over stdio).
    fn drop(&mut self) {
        crate::processes::stop(&mut self.child, std::time::Duration::ZERO);
    }
}

pub(crate) fn run(command: &mut Command) -> String {
    let output = command.output().expect("command runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{command:?} failed:\n{stdout}\n{stderr}"
    );
    stdout
}

#[track_caller]
fn assert_contains(output: &str, expected: &[&str]) {
    for needle in expected {
        assert!(output.contains(needle), "missing {needle:?} in:\n{output}");
    }
}

#[test]
fn calls_as_the_official_sdks_dump_them_are_read_exactly() {
    crate::peers::require_peers!(TestEnv);
    let env = testenv();
    let server = Binary::start(&[]);
    let output = run(Command::new(env.join("venv/bin/python"))
        .arg(Path::new(REPO).join("tests/sdk/sdk_shapes.py"))
        .args(["--addr", &server.addr]));
    assert_contains(
        &output,
        &[
            "ok openai chat message.to_dict()",
            "ok openai responses output list",
            "ok anthropic message.to_dict()",
            "ok google-genai content.to_json_dict()",
            "ok google-genai part.to_json_dict() in calls",
            "ok google-genai response.function_calls dumped in calls",
            "every SDK shape read exactly",
        ],
    );
}

#[test]
fn reflection_lists_only_the_services_toolgate_serves() {
    crate::peers::require_peers!(TestEnv);
    let env = testenv();
    let server = Binary::start(&[]);
    let output =
        run(Command::new(env.join("venv/bin/grpcurl")).args(["-plaintext", &server.addr, "list"]));
    let listed: Vec<&str> = output
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    // Not toolgate.v1.ToolHooks or toolgate.v1.ToolWorker: toolgate calls those, it does not
    // serve them. (grpcurl 1.8 asks over reflection v1alpha, so that is the one it lists.)
    assert_eq!(
        listed,
        [
            "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection",
            "toolgate.v1.ToolGate"
        ]
    );
}

#[test]
fn the_grpcurl_demo_runs_against_the_binary() {
    crate::peers::require_peers!(TestEnv);
    let env = testenv();
    let server = Binary::start(&[]);
    let output = run(Command::new("bash")
        .arg(Path::new(REPO).join("examples/grpcurl/demo.sh"))
        .arg(&server.addr)
        .env("GRPCURL", env.join("venv/bin/grpcurl")));
    assert_contains(
        &output,
        &[
            "toolgate.v1.ToolGate",
            "grpc.health.v1.Health",
            "rpc DispatchBatch ( .toolgate.v1.DispatchBatchRequest ) returns ( stream .toolgate.v1.DispatchEvent )",
            "repeated .google.protobuf.Value calls = 2;",
            // Dispatch: the OpenAI batch, integers kept, the unknown tool answered in place.
            r#""tool_call_id": "call_weather_1""#,
            r#""content": "{\"city\":\"Paris\",\"days\":2}""#,
            r#""errorClass": "UNKNOWN_TOOL""#,
            "tool 'get_weather' is not available",
            // DispatchBatch: events, then Anthropic tool messages.
            r#""callReceived""#,
            r#""toolPre""#,
            r#""toolPost""#,
            r#""tool_use_id": "toolu_02""#,
            r#""content": "buy milk""#,
        ],
    );
}

#[test]
fn the_python_client_example_runs_against_the_binary() {
    crate::peers::require_peers!(TestEnv);
    let env = testenv();
    let server = Binary::start(&[]);
    let output = run(Command::new(env.join("venv/bin/python"))
        .arg(Path::new(REPO).join("examples/python/dispatch_batch.py"))
        .args(["--addr", &server.addr]));
    assert_contains(
        &output,
        &[
            "event call_received: id=call_3",
            "event tool_post: id=call_2 attempt=1",
            "outcome: COMPLETED; 3 calls, 1 errors",
            r#"{"content": "{\"city\":\"Berlin\",\"units\":\"metric\"}", "role": "tool", "tool_call_id": "call_1"}"#,
            r#"{"content": "tool 'lookup_stock' is not available", "role": "tool", "tool_call_id": "call_3"}"#,
        ],
    );
}

#[test]
fn sigterm_stops_the_binary_gracefully() {
    let server = Binary::start(&[]);
    let (status, log) = server.terminate();
    assert!(status.success(), "exit status {status:?}\n{log}");
    assert_contains(&log, &["shutdown started", "stopped"]);
}

/// What `docker stop` does to the container: SIGTERM while a batch runs. The batch finishes
/// within the grace period, its client gets the whole result, and the process exits 0.
#[tokio::test]
async fn sigterm_lets_a_running_batch_finish_then_exits_0() {
    use tokio_stream::StreamExt;
    use toolgate::pb::dispatch_event::Event;

    let server = Binary::start(&[]);
    let mut client =
        toolgate::pb::tool_gate_client::ToolGateClient::connect(format!("http://{}", server.addr))
            .await
            .unwrap();
    let calls = serde_json::json!([{"id": "s", "name": "sleep", "arguments": {"ms": 1500}}]);
    let mut stream = client
        .dispatch_batch(crate::support::request(calls))
        .await
        .unwrap()
        .into_inner();
    while !matches!(
        stream.next().await.unwrap().unwrap().event,
        Some(Event::ToolPre(_))
    ) {}
    server.send_sigterm();
    let mut result = None;
    while let Some(message) = stream.next().await {
        if let Some(Event::Result(r)) = message.unwrap().event {
            result = Some(r);
        }
    }
    let result = result.expect("the result arrives after SIGTERM");
    assert_eq!(
        result.outcome,
        toolgate::pb::batch_result::Outcome::Completed as i32
    );
    assert!(result.all_succeeded, "{result:?}");
    let (status, log) = server.exit();
    assert!(status.success(), "exit status {status:?}\n{log}");
    assert_contains(&log, &["shutdown started", "stopped"]);
}

#[test]
fn a_bad_config_exits_non_zero_listing_every_problem() {
    let dir = std::env::temp_dir().join(format!("toolgate-peers-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(
        &file,
        "[server]\nlisten = \"nowhere\"\n[limits]\nmax_calls = 0\n",
    )
    .unwrap();
    for args in [
        vec!["check-config", file.to_str().unwrap()],
        vec!["--config", file.to_str().unwrap()],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .args(&args)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_contains(
            &stderr,
            &[
                "server.listen: 'nowhere'",
                "limits.max_calls: must be at least 1",
            ],
        );
    }
    let output = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["check-config", &format!("{REPO}/config/default.toml")])
        .output()
        .unwrap();
    assert!(output.status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The configs the deployment ships: deploy/compose.yaml's file and the Kubernetes ConfigMap's.
#[test]
fn the_deploy_configs_pass_check_config() {
    let configmap = std::fs::read_to_string(format!("{REPO}/deploy/k8s/configmap.yaml")).unwrap();
    // The file is the ConfigMap's one block scalar, `toolgate.toml: |`, indented four spaces.
    let (_, block) = configmap.split_once("toolgate.toml: |\n").unwrap();
    let toml: String = block
        .lines()
        .take_while(|line| line.is_empty() || line.starts_with("    "))
        .map(|line| format!("{}\n", line.get(4..).unwrap_or_default()))
        .collect();
    assert!(toml.contains("[server]"), "{toml}");
    let dir = std::env::temp_dir().join(format!("toolgate-peers-deploy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let from_configmap = dir.join("configmap.toml");
    std::fs::write(&from_configmap, toml).unwrap();
    // The compose stack's MCP front door faces the stack's network without TLS or credentials
    // (its ports are published on the host's loopback), and its remotes speak plaintext on
    // that network: check-config says so, and says nothing else.
    let compose_warnings = [
        "mcp.listen: 0.0.0.0:8765 is not a loopback address and auth.anonymous = \"any\"",
        "mcp.listen: 0.0.0.0:8765 serves plaintext",
        "remotes[0] (py): endpoint 'http://worker:7001' is plaintext off loopback",
        "remotes[1] (mcp): url 'http://mcp:8000/mcp' is plaintext off loopback",
    ];
    for (file, expected) in [
        (
            Path::new(REPO).join("deploy/toolgate.toml"),
            &compose_warnings[..],
        ),
        (from_configmap, &[][..]),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_toolgate"))
            .arg("check-config")
            .arg(&file)
            .output()
            .unwrap();
        let printed = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "{printed}");
        let warnings: Vec<&str> = printed.lines().filter(|l| l.contains("warning")).collect();
        assert_eq!(warnings.len(), expected.len(), "{printed}");
        for (line, start) in warnings.iter().zip(expected) {
            assert!(
                line.contains(start),
                "{line:?} does not say {start:?}\n{printed}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn command_line_settings_win_over_the_environment_and_are_validated_with_the_config() {
    let server = Binary::start_with(
        &["--log-format", "json"],
        &[("TOOLGATE_LOG__FORMAT", "text")],
    );
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty());
    for line in lines {
        let parsed: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(parsed.get("fields").is_some(), "{line}");
    }

    // A bad --listen is reported in the same list as the config file's own problems.
    let dir = std::env::temp_dir().join(format!("toolgate-peers-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(&file, "[limits]\nmax_calls = 0\n").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_toolgate"))
        .args(["--config", file.to_str().unwrap(), "--listen", "nowhere"])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_contains(
        &stderr,
        &[
            "invalid configuration",
            "server.listen: 'nowhere'",
            "limits.max_calls: must be at least 1",
        ],
    );
}

#[test]
fn the_next_turn_example_builds_the_conversation_in_every_format() {
    crate::peers::require_peers!(TestEnv);
    let env = testenv();
    let server = Binary::start(&[]);
    let output = run(Command::new(env.join("venv/bin/python"))
        .arg(Path::new(REPO).join("examples/python/next_turn.py"))
        .args(["--addr", &server.addr]));
    assert_contains(
        &output,
        &[
            "== OPENAI_CHAT: the next request's conversation ==",
            r#"{"content": "{\"text\":\"hi\"}", "role": "tool", "tool_call_id": "call_7"}"#,
            r#""tool_use_id": "toolu_7", "type": "tool_result""#,
            r#"{"call_id": "call_r7", "output": "{\"text\":\"hi\"}", "type": "function_call_output"}"#,
            r#"{"functionResponse": {"id": "g7", "name": "echo", "response": {"output": {"text": "hi"}}}}"#,
            "every tool call answered by id in every format",
        ],
    );
}

#[test]
fn the_agent_loop_example_runs_two_turns_with_a_context_binding() {
    crate::peers::require_peers!(TestEnv);
    let env = testenv();
    let server = Binary::start(&[]);
    let output = run(Command::new(env.join("venv/bin/python"))
        .arg(Path::new(REPO).join("examples/python/agent_loop.py"))
        .args(["--addr", &server.addr]));
    assert_contains(
        &output,
        &[
            r#"turn 0: get_weather -> echo: {"city":"Berlin","plan":"pro","units":"metric","user":"u-7"}"#,
            "turn 1: scratch_write -> scratch_write: {\"bytes\":15,\"path\":\"notes/weather.txt\"}",
            "turn 2: final answer: Noted the Berlin weather check in notes/weather.txt.",
        ],
    );
    // The results and the conversation are printed: an unselected context field in any tool
    // input would show up in echo's result.
    assert!(
        !output.contains("ada@example.com"),
        "the unselected context field leaked:\n{output}"
    );
}

/// The server's resident memory, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn loop_detection_keeps_digests_not_whole_inputs() {
    if !Path::new("/proc/self/status").exists() {
        return;
    }
    let server = Binary::start_with(&[], &[("TOOLGATE_SERVER__MAX_MESSAGE_BYTES", "8388608")]);
    let mut client =
        toolgate::pb::tool_gate_client::ToolGateClient::connect(format!("http://{}", server.addr))
            .await
            .unwrap()
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(64 << 20);
    let before = rss_kib(server.child.id());
    // 40 distinct calls of 3.5 MB arguments in one session: all in its loop window (100).
    for i in 0..40 {
        let pad = format!("{i:06}{}", "x".repeat(3_500_000));
        let mut req = crate::support::request(serde_json::json!([
            {"id": format!("c{i}"), "name": "now", "arguments": {"pad": pad}}
        ]));
        req.session_id = "big".into();
        client.dispatch(req).await.unwrap();
    }
    let after = rss_kib(server.child.id());
    // With whole inputs in the window this read ~530 MB; with digests ~65 MB.
    assert!(
        after < 200 * 1024,
        "RSS grew from {before} KiB to {after} KiB over 140 MB of arguments"
    );
}

#[test]
fn log_lines_inside_a_batch_carry_its_trace_ids_and_no_secrets() {
    let secret = "ghp_AbCdEfGhIjKlMnOpQrStUvWxYz0123456789";
    let dir = std::env::temp_dir().join(format!("toolgate-peers-log-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("leaky.toml");
    // A hook that fails with a secret in its stderr: the failure is logged, the secret is not.
    std::fs::write(
        &file,
        format!(
            "[[hooks.command]]\nname = \"leaky\"\ncommand = [\"sh\", \"-c\", \"cat >/dev/null; echo 'auth with {secret} failed' >&2; exit 1\"]\nfailure_mode = \"fail_open\"\n"
        ),
    )
    .unwrap();
    let server = Binary::start(&["--config", file.to_str().unwrap(), "--log-format", "json"]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let result = runtime.block_on(async {
        let channel = crate::support::connect(server.addr.parse().unwrap()).await;
        let mut client = toolgate::pb::tool_gate_client::ToolGateClient::new(channel);
        let mut req = tonic::Request::new(crate::support::request(
            serde_json::json!([{"id": "a", "name": "echo", "arguments": {"x": 1}}]),
        ));
        req.metadata_mut().insert(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
                .parse()
                .unwrap(),
        );
        client.dispatch(req).await.unwrap().into_inner()
    });
    assert!(result.results[0].success, "the hook fails open");
    let (status, log) = server.terminate();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success(), "{log}");
    assert!(!log.contains(secret), "a secret reached the log: {log}");
    let line = log
        .lines()
        .find(|l| l.contains("hook failed"))
        .unwrap_or_else(|| panic!("no hook failure logged: {log}"));
    let parsed: serde_json::Value = serde_json::from_str(line).unwrap();
    assert!(
        parsed["fields"]["reason"]
            .as_str()
            .unwrap()
            .contains("[REDACTED:github_token]"),
        "{line}"
    );
    assert_eq!(
        parsed["trace_id"], "0af7651916cd43dd8448eb211c80319c",
        "{line}"
    );
    let span_id = parsed["span_id"].as_str().unwrap();
    assert!(
        span_id.len() == 16 && span_id != "b7ad6b7169203331",
        "the line carries the span it was logged in: {line}"
    );
    // Lines outside any request carry no ids.
    let listening = log.lines().find(|l| l.contains("listening")).unwrap();
    assert!(!listening.contains("trace_id"), "{listening}");
}

/// Lines `NAME=value` of an `env` dump, by name.
fn variables(dump: &str) -> std::collections::BTreeMap<String, String> {
    dump.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// A value only the server's environment holds.
const SECRET: &str = "s3cret-only-in-the-server";

/// The binary with `config`, `TOOLGATE_TEST_SECRET=SECRET` in its environment, and a client.
async fn start_with_a_secret(
    config: &Path,
) -> (
    Binary,
    toolgate::pb::tool_gate_client::ToolGateClient<tonic::transport::Channel>,
) {
    let server = Binary::start_with(
        &["--config", config.to_str().unwrap()],
        &[("TOOLGATE_TEST_SECRET", SECRET)],
    );
    let channel = crate::support::connect(server.addr.parse().unwrap()).await;
    let client = toolgate::pb::tool_gate_client::ToolGateClient::new(channel);
    (server, client)
}

/// What `sh` adds to any environment it runs in.
const SHELL_OWN: [&str; 3] = ["PWD", "SHLVL", "_"];

#[tokio::test]
async fn a_hook_does_not_see_a_server_secret_and_runs_in_its_own_group() {
    let dir = crate::mcp::test_dir("peers-hook-env");
    let file = dir.join("hooks.toml");
    let script = format!(
        "cat >/dev/null; env > {d}/env; cut -d' ' -f5 /proc/$$/stat > {d}/pgid; echo $$ > {d}/pid",
        d = dir.display()
    );
    std::fs::write(
        &file,
        format!(
            "[[hooks.command]]\nname = \"env\"\ncommand = [\"sh\", \"-c\", {script:?}]\nenv = {{ HOOK_TOKEN = \"configured\" }}\n"
        ),
    )
    .unwrap();
    let (server, mut client) = start_with_a_secret(&file).await;
    let req = crate::support::request(serde_json::json!([{"id": "a", "name": "echo"}]));
    let result = client.dispatch(req).await.unwrap().into_inner();
    assert!(result.all_succeeded, "{result:?}");
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    let dump = std::fs::read_to_string(dir.join("env")).unwrap();
    assert!(!dump.contains(SECRET), "the hook saw the secret:\n{dump}");
    let seen = variables(&dump);
    assert_eq!(
        seen.get("HOOK_TOKEN").map(String::as_str),
        Some("configured")
    );
    assert!(seen.contains_key("PATH"), "{dump}");
    // Nothing but the default allowlist, the hook's own value and what sh sets itself: not
    // TOOLGATE_TEST_SECRET, not RUST_LOG, not the CARGO_* variables of the test run.
    let allowed: Vec<&str> = toolgate_core::child::DEFAULT_ENV_ALLOW
        .into_iter()
        .chain(SHELL_OWN)
        .chain(["HOOK_TOKEN"])
        .collect();
    let extra: Vec<&String> = seen
        .keys()
        .filter(|k| !allowed.contains(&k.as_str()))
        .collect();
    assert!(extra.is_empty(), "the hook saw {extra:?}");
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();
    assert_eq!(
        read("pgid").trim(),
        read("pid").trim(),
        "the hook leads its group"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn no_child_process_survives_the_binarys_shutdown() {
    crate::peers::require_peers!(TestEnv);
    use crate::mcp::{
        all_end, process_gone, python_server_with_a_grandchild, server_and_grandchild,
    };
    let dir = crate::mcp::test_dir("peers-children");
    let command: Vec<String> = python_server_with_a_grandchild(&dir)
        .iter()
        .map(|a| format!("{a:?}"))
        .collect();
    // A hook that leaves a background process behind and exits at once.
    let hook = format!(
        "cat >/dev/null; sleep 1000 </dev/null >/dev/null 2>&1 & echo $! > {}/hook-child",
        dir.display()
    );
    let file = dir.join("children.toml");
    std::fs::write(
        &file,
        format!(
            "[[remotes]]\nname = \"wrapped\"\nkind = \"mcp\"\nprefix = \"w.\"\ntimeout = \"30s\"\nrequired = true\n\
             command = [{}]\nenv = {{ MCP_TOKEN = \"configured\" }}\n\
             [[hooks.command]]\nname = \"bg\"\ncommand = [\"sh\", \"-c\", {hook:?}]\n",
            command.join(", ")
        ),
    )
    .unwrap();
    let (server, mut client) = start_with_a_secret(&file).await;
    let (server_pid, grandchild) = server_and_grandchild(&mut client, "w.", &dir).await;
    // The hook ran for that call; its group went when it exited.
    let hook_child: u32 = std::fs::read_to_string(dir.join("hook-child"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    crate::support::eventually("the hook's background process is killed", async || {
        process_gone(hook_child)
    })
    .await;
    let seen = variables(&std::fs::read_to_string(dir.join("env")).unwrap());
    assert_eq!(
        seen.get("MCP_TOKEN").map(String::as_str),
        Some("configured")
    );
    assert!(!seen.contains_key("TOOLGATE_TEST_SECRET"), "{seen:?}");
    let (status, log) = server.terminate();
    assert!(status.success(), "{log}");
    all_end(&[server_pid, grandchild], "with the binary").await;
    let _ = std::fs::remove_dir_all(&dir);
}
