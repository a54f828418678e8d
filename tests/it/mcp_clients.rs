//! The MCP front door of the real binary (`toolgate serve --mcp-listen`, `toolgate mcp`) with
//! three more real MCP clients than `mcp_front`'s Python SDK 2.x: the TypeScript SDK's client
//! (listing, calls, failed and unknown calls, loop detection in its session, a remote tool's
//! progress, an aborted call), the MCP Inspector's CLI in both protocol eras, and the Python
//! SDK 1.x client over streamable HTTP and over stdio.

use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{eventually, folder, http_get, write};

/// The tools the binary serves with no remotes, as every client should list them.
const BUILTINS: [&str; 6] = [
    "echo",
    "now",
    "scratch_list",
    "scratch_read",
    "scratch_write",
    "sleep",
];

/// Longest a client program may run before the test kills it: a guard against a hang, far
/// above what any of them takes.
const CLIENT_PATIENCE: Duration = Duration::from_secs(120);

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// `toolgate serve` with its MCP listener, on free loopback ports; stopped with what it
/// started (an MCP remote's process) when dropped.
struct Toolgate {
    child: Child,
    /// The streamable HTTP endpoint, `http://ADDR/mcp`.
    url: String,
    /// The admin listener's address (`/metrics`).
    admin: String,
    /// The config and the log (kept when the test fails).
    dir: PathBuf,
    /// Held open: the binary may still write to its stdout.
    _stdout: BufReader<ChildStdout>,
}

impl Toolgate {
    /// The binary with `config` as its config file (`name` names the test's folder).
    async fn start(name: &str, config: &str) -> Toolgate {
        let dir = folder(name);
        let file = write(&dir, "toolgate.toml", config);
        let log = std::fs::File::create(dir.join("toolgate.log")).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolgate"));
        crate::processes::own_group(&mut command)
            .args(["serve", "--config", &file, "--listen", "127.0.0.1:0"])
            .args([
                "--admin-listen",
                "127.0.0.1:0",
                "--mcp-listen",
                "127.0.0.1:0",
            ])
            .env("RUST_LOG", "info")
            .env_remove("TOOLGATE_CONFIG")
            .stdout(Stdio::piped())
            .stderr(log);
        let mut child = command.spawn().expect("toolgate starts");
        let stdout = BufReader::new(child.stdout.take().unwrap());
        // Off the runtime: the lines come when the binary has bound its listeners.
        let (stdout, lines) = tokio::task::spawn_blocking(move || announced(stdout))
            .await
            .unwrap();
        let addr = |prefix: &str| lines.iter().find_map(|l| l.strip_prefix(prefix));
        let (Some(mcp), Some(admin)) = (addr("mcp listening on "), addr("admin listening on "))
        else {
            crate::processes::stop(&mut child, Duration::ZERO);
            let log = std::fs::read_to_string(dir.join("toolgate.log")).unwrap_or_default();
            panic!("toolgate did not announce its listeners: {lines:?}\n{log}");
        };
        Toolgate {
            url: format!("http://{mcp}/mcp"),
            admin: admin.to_owned(),
            child,
            dir,
            _stdout: stdout,
        }
    }

    /// The admin listener's `/metrics` text.
    async fn metrics(&self) -> String {
        let url = format!("http://{}/metrics", self.admin);
        http_get(url).await.unwrap().text().await.unwrap()
    }
}

impl Drop for Toolgate {
    fn drop(&mut self) {
        crate::processes::stop(&mut self.child, Duration::ZERO);
        if std::thread::panicking() {
            let log = self.dir.join("toolgate.log");
            let _ = writeln!(std::io::stderr(), "toolgate's log: {}", log.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The lines the binary prints up to `mcp listening on`, the last of its addresses.
fn announced(mut stdout: BufReader<ChildStdout>) -> (BufReader<ChildStdout>, Vec<String>) {
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        if stdout.read_line(&mut line).unwrap() == 0 {
            break;
        }
        let line = line.trim().to_owned();
        let last = line.starts_with("mcp listening on ");
        lines.push(line);
        if last {
            break;
        }
    }
    (stdout, lines)
}

/// The config of a server with server-everything (over stdio) as an MCP remote under `ev.`.
fn with_everything() -> String {
    let everything = crate::mcp::everything_js().display().to_string();
    format!(
        "[[remotes]]\nname = \"everything\"\nkind = \"mcp\"\nprefix = \"ev.\"\ntimeout = \"30s\"\ncommand = [\"node\", {everything:?}, \"stdio\"]\n"
    )
}

/// Runs a client program to its end, off the runtime, as the leader of its own process group,
/// which is killed afterwards (and at once should the program hang) so nothing it started is
/// left running.
async fn run_client(mut command: Command) -> Output {
    crate::processes::own_group(&mut command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let what = format!("{command:?}");
    let child = command
        .spawn()
        .unwrap_or_else(|e| panic!("{what} starts: {e}"));
    let group = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    let waited = tokio::time::timeout(
        CLIENT_PATIENCE,
        tokio::task::spawn_blocking(move || child.wait_with_output()),
    )
    .await;
    let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
    match waited {
        Ok(output) => output.unwrap().unwrap(),
        Err(_) => panic!("{what} ran past {CLIENT_PATIENCE:?}"),
    }
}

/// The one JSON object a driver printed last; fails the test, showing everything it printed,
/// if it printed none or exited non-zero.
fn printed(output: &Output, what: &str) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stdout.lines().last().unwrap_or_default();
    let value: Value = serde_json::from_str(line)
        .unwrap_or_else(|_| panic!("{what} printed no JSON:\n{stdout}\n{stderr}"));
    assert!(output.status.success(), "{what} failed: {value}\n{stderr}");
    value
}

fn node_modules() -> PathBuf {
    crate::peers::testenv().join("node/node_modules")
}

/// Runs the TypeScript SDK driver (`tests/mcp/ts_client.mjs`) and returns what it printed.
async fn ts_client(url: &str, scenario: &str) -> Value {
    let mut command = Command::new("node");
    command
        .arg(Path::new(REPO).join("tests/mcp/ts_client.mjs"))
        .args([url, scenario])
        .env("MCP_SDK", node_modules().join("@modelcontextprotocol/sdk"));
    let output = run_client(command).await;
    printed(&output, &format!("ts_client.mjs {scenario}"))
}

/// Runs the Python SDK 1.x driver (`tests/mcp/front_client_v1.py`) and returns what it printed.
async fn python_v1(args: &[&str]) -> Value {
    let mut command = Command::new(crate::peers::testenv().join("mcp-v1/bin/python"));
    command
        .arg(Path::new(REPO).join("tests/mcp/front_client_v1.py"))
        .args(args);
    let output = run_client(command).await;
    printed(&output, &format!("front_client_v1.py {args:?}"))
}

/// Runs the MCP Inspector's CLI against `url` in `era` (`legacy` or `modern`) with `args`:
/// its exit code, and its stdout and stderr as JSON (`--format json`: the result on stdout, an
/// error envelope on stderr).
async fn inspector(home: &Path, url: &str, era: &str, args: &[&str]) -> (i32, Value, Value) {
    let mut command = Command::new(node_modules().join(".bin/mcp-inspector"));
    command
        .args(["--cli", url, "--transport", "http", "--protocol-era", era])
        .args(["--format", "json"])
        .args(args)
        // Its catalog and storage go to the test's folder, its secrets nowhere.
        .env("HOME", home)
        .env("MCP_INSPECTOR_SECRET_STORE", "memory");
    let output = run_client(command).await;
    let json = |bytes: &[u8]| {
        let text = String::from_utf8_lossy(bytes);
        text.lines()
            .rev()
            .find_map(|l| serde_json::from_str(l).ok())
            .unwrap_or(Value::Null)
    };
    let code = output.status.code().unwrap_or(-1);
    (code, json(&output.stdout), json(&output.stderr))
}

/// The classes of a session's 12 same `echo` calls, checked against loop detection with
/// `stop_after` = `stop`: warned at the 3rd same result, refused at the one that would repeat
/// it `stop` times, and that pattern forgotten once refused.
#[track_caller]
fn assert_loop(results: &Value, stop: usize, who: &str) {
    let results = results.as_array().unwrap();
    let class = |r: &Value| r["meta"]["error_class"].as_str().unwrap_or("?").to_owned();
    let text = |i: usize| results[i]["text"].as_str().unwrap_or_default().to_owned();
    let classes: Vec<String> = results.iter().map(class).collect();
    let mut expected = vec!["NONE"; stop];
    expected.push("LOOP_STOPPED");
    expected.resize(results.len(), "NONE");
    assert_eq!(classes, expected, "{who}: {results:?}");
    assert!(
        !text(1).contains("[toolgate] warning"),
        "{who}: {}",
        text(1)
    );
    assert!(text(2).contains("[toolgate] warning"), "{who}: {}", text(2));
    assert!(
        text(stop).contains("Loop detected"),
        "{who}: {}",
        text(stop)
    );
    assert_eq!(results[stop]["is_error"], true, "{who}");
    assert_eq!(results[0]["structured"], json!({"same": 1}), "{who}");
}

/// Each listed tool's name, sorted.
fn names(tools: impl Iterator<Item = String>) -> Vec<String> {
    let mut names: Vec<String> = tools.collect();
    names.sort();
    names
}

#[tokio::test]
async fn the_typescript_sdk_lists_calls_and_gets_failures_as_results() {
    crate::peers::require_peers!(TypeScriptSdk);
    let server = Toolgate::start("mcp-ts-calls", "").await;
    let out = ts_client(&server.url, "calls").await;
    // The 2025-11-25 handshake: the SDK's newest revision, and a session.
    assert_eq!(out["protocol"], "2025-11-25", "{out}");
    assert!(out["session"].as_str().is_some_and(|s| !s.is_empty()));
    let tools = out["tools"].as_object().unwrap();
    assert_eq!(names(tools.keys().cloned()), BUILTINS, "{out}");
    assert_eq!(tools["sleep"]["schema"]["required"], json!(["ms"]));
    assert_eq!(tools["echo"]["annotations"]["readOnlyHint"], true);
    let echo = &out["echo"];
    assert_eq!(echo["is_error"], false, "{echo}");
    assert_eq!(echo["structured"], json!({"text": "hi"}));
    assert_eq!(echo["text"], r#"{"text":"hi"}"#);
    assert_eq!(echo["meta"]["error_class"], "NONE");
    assert_eq!(echo["meta"]["attempts"], 1);
    let unknown = &out["unknown"];
    assert_eq!(unknown["is_error"], true, "{unknown}");
    assert_eq!(unknown["meta"]["error_class"], "UNKNOWN_TOOL");
    assert_eq!(unknown["meta"]["attempts"], 0);
    assert_eq!(
        unknown["text"],
        "tool 'ecoh' is not available. Did you mean 'echo'?"
    );
    let invalid = &out["invalid"];
    assert_eq!(invalid["is_error"], true, "{invalid}");
    assert_eq!(invalid["meta"]["error_class"], "INVALID_ARGUMENTS");
    assert!(
        invalid["text"]
            .as_str()
            .unwrap()
            .starts_with("arguments do not match the input schema of 'scratch_write': "),
        "{invalid}"
    );
    // Nothing the SDK could not take (a result it failed to validate, a stray notification).
    assert_eq!(out["errors"], json!([]), "{out}");
}

#[tokio::test]
async fn loop_detection_spans_one_typescript_sdk_session_and_not_the_next() {
    crate::peers::require_peers!(TypeScriptSdk);
    let server = Toolgate::start("mcp-ts-loop", "").await;
    // Two sessions one after the other: the second starts with a window of its own.
    for run in ["first session", "second session"] {
        let out = ts_client(&server.url, "loop").await;
        assert_loop(&out["results"], 10, run);
    }
}

#[tokio::test]
async fn progress_of_a_remote_tool_reaches_the_typescript_sdks_onprogress() {
    crate::peers::require_peers!(TypeScriptSdk, Everything);
    let server = Toolgate::start("mcp-ts-progress", &with_everything()).await;
    let out = ts_client(&server.url, "progress").await;
    assert_eq!(out["result"]["is_error"], false, "{out}");
    assert_eq!(
        out["result"]["text"], "Long running operation completed. Duration: 1 seconds, Steps: 3.",
        "{out}"
    );
    // The remote reports steps 1 to 3, the last just before its result. What the front heard
    // before the call ended goes out before the result; under load toolgate's own MCP client
    // can hear the remote's last notification after its result, so two are required, in order.
    let progress = out["progress"].as_array().unwrap();
    assert!(progress.len() >= 2, "progress notifications arrive: {out}");
    for (i, p) in progress.iter().enumerate() {
        assert_eq!(p["progress"], json!(i + 1), "{out}");
        assert_eq!(p["total"], 3, "{out}");
    }
    assert_eq!(out["errors"], json!([]), "{out}");
}

#[tokio::test]
async fn an_aborted_typescript_sdk_call_cancels_the_sleep_and_the_session_goes_on() {
    crate::peers::require_peers!(TypeScriptSdk);
    let server = Toolgate::start("mcp-ts-cancel", "").await;
    let out = ts_client(&server.url, "cancel").await;
    assert_eq!(out["cancelled"], true, "{out}");
    assert!(
        out["error"].as_str().unwrap().contains("the test gave up"),
        "the call ended by the client's abort: {out}"
    );
    // The client did not wait for the 30 s sleep.
    assert!(out["elapsed_ms"].as_u64().unwrap() < 30_000, "{out}");
    // The same session answers the next call.
    assert_eq!(out["after"]["is_error"], false, "{out}");
    assert_eq!(out["after"]["structured"], json!({"after": true}), "{out}");
    // The server stopped the tool (notifications/cancelled reached it): the sleep ended
    // CANCELLED, long before its 30 s were up.
    let cancelled =
        r#"toolgate_calls_total{gen_ai_tool_name="sleep",toolgate_error_class="CANCELLED"} 1"#;
    eventually("the sleep is counted CANCELLED", async || {
        server.metrics().await.contains(cancelled)
    })
    .await;
    assert!(
        !server.metrics().await.contains(
            r#"toolgate_calls_total{gen_ai_tool_name="sleep",toolgate_error_class="NONE"}"#
        )
    );
}

#[tokio::test]
async fn the_mcp_inspector_cli_lists_and_calls_in_both_protocol_eras() {
    crate::peers::require_peers!(Inspector);
    for era in ["legacy", "modern"] {
        // A server each, so its metrics tell which handshake the era used.
        let server = Toolgate::start(&format!("mcp-inspector-{era}"), "").await;
        let home = folder(&format!("mcp-inspector-home-{era}"));
        let run = |args: &'static [&'static str]| inspector(&home, &server.url, era, args);

        let (code, out, err) = run(&["--method", "tools/list"]).await;
        assert_eq!(code, 0, "{era}: {out} {err}");
        let tools = out["result"]["tools"].as_array().unwrap();
        let listed = tools.iter().map(|t| t["name"].as_str().unwrap().to_owned());
        assert_eq!(names(listed), BUILTINS, "{era}: {out}");

        let (code, out, err) = run(&[
            "--method",
            "tools/call",
            "--tool-name",
            "echo",
            "--tool-arg",
            "text=hi",
        ])
        .await;
        assert_eq!(code, 0, "{era}: {out} {err}");
        let result = &out["result"];
        assert_eq!(result["isError"], false, "{era}: {out}");
        assert_eq!(result["structuredContent"], json!({"text": "hi"}), "{era}");
        assert_eq!(result["_meta"]["error_class"], "NONE", "{era}");

        // A call that ran and failed: the result, isError, and the inspector's exit code 5.
        let (code, out, err) = run(&[
            "--method",
            "tools/call",
            "--tool-name",
            "scratch_read",
            "--tool-arg",
            "path=missing.txt",
        ])
        .await;
        assert_eq!(code, 5, "{era}: {out} {err}");
        let result = &out["result"];
        assert_eq!(result["isError"], true, "{era}: {out}");
        assert_eq!(result["_meta"]["error_class"], "INVALID_ARGUMENTS", "{era}");
        assert_eq!(result["content"][0]["text"], "'missing.txt' does not exist");

        // An unknown name: the inspector looks it up in what toolgate listed, and says so.
        let (code, out, err) = run(&[
            "--method",
            "tools/call",
            "--tool-name",
            "ecoh",
            "--tool-arg",
            "text=hi",
        ])
        .await;
        assert_eq!(code, 5, "{era}: {out} {err}");
        assert_eq!(err["error"]["code"], "tool_not_found", "{era}: {err}");
        assert_eq!(err["error"]["message"], "Tool 'ecoh' not found on server.");

        // The legacy era opened sessions with initialize; the modern one is stateless.
        let metrics = server.metrics().await;
        let initialized = metrics.contains(r#"mcp_method_name="initialize",toolgate_outcome="ok""#);
        assert_eq!(initialized, era == "legacy", "{era}:\n{metrics}");
        assert!(
            metrics.contains(r#"mcp_method_name="tools/call",toolgate_outcome="ok""#),
            "{era}:\n{metrics}"
        );
        let _ = std::fs::remove_dir_all(&home);
    }
}

#[tokio::test]
async fn the_python_sdk_1x_lists_calls_and_loops_over_http_and_stdio() {
    crate::peers::require_peers!(McpV1);
    let server = Toolgate::start("mcp-v1-http", "").await;
    // The engine over stdio stops loops sooner: its config is the one `--config` names.
    let dir = folder("mcp-v1-stdio");
    let config = write(&dir, "toolgate.toml", "[loop_detection]\nstop_after = 6\n");
    let toolgate = env!("CARGO_BIN_EXE_toolgate");
    let stdio = ["stdio", "--", toolgate, "mcp", "--config", config.as_str()];
    for (transport, args, stop) in [
        ("streamable HTTP", &[server.url.as_str()][..], 10),
        ("stdio", &stdio[..], 6),
    ] {
        let out = python_v1(args).await;
        assert!(
            out["sdk"].as_str().unwrap().starts_with("1."),
            "{transport}: {out}"
        );
        assert_eq!(out["protocol"], "2025-11-25", "{transport}: {out}");
        // A session id over HTTP; none over stdio, where the process is the session.
        assert_eq!(out["session"].is_string(), transport != "stdio", "{out}");
        let listed = out["tools"].as_array().unwrap();
        let listed = listed.iter().map(|t| t.as_str().unwrap().to_owned());
        assert_eq!(names(listed), BUILTINS, "{transport}");
        assert_eq!(out["echo"]["is_error"], false, "{transport}: {out}");
        assert_eq!(
            out["echo"]["structured"],
            json!({"text": "hi"}),
            "{transport}"
        );
        assert_eq!(out["echo"]["meta"]["error_class"], "NONE", "{transport}");
        let unknown = &out["unknown"];
        assert_eq!(unknown["is_error"], true, "{transport}: {unknown}");
        assert_eq!(
            unknown["meta"]["error_class"], "UNKNOWN_TOOL",
            "{transport}"
        );
        assert_eq!(
            unknown["text"],
            "tool 'ecoh' is not available. Did you mean 'echo'?"
        );
        assert_loop(&out["loop"], stop, transport);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
