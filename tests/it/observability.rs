//! The admin listener through a real server: `/metrics` in Prometheus text that the real
//! `promtool` accepts, with the counts of a batch that succeeded, retried, was blocked and named
//! an unknown tool; and the plain-HTTP probes `/livez` and `/readyz`.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::json;
use toolgate::config::Config;

use crate::support::*;

async fn get(url: String) -> (u16, String) {
    let response = http_get(url).await.expect("the admin listener answers");
    let status = response.status().as_u16();
    (status, response.text().await.expect("a text body"))
}

/// `promtool check metrics` on `text`: its verdict and what it said.
fn promtool_check(text: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs (Debian package `prometheus`; scripts/test installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), said)
}

#[tokio::test]
async fn metrics_count_what_a_batch_did_and_pass_promtool() {
    crate::peers::require_peers!(Promtool);
    let config = Config::from_toml(
        r#"
        [retry]
        base_delay = "1ms"
        [[hooks.rules]]
        id = "no-clocks"
        tools = "now"
        action = "block"
        reason = "no clocks today"
        "#,
    )
    .unwrap();
    let ts = start_with(config).await;
    let admin = ts
        .server
        .admin_addr()
        .expect("the admin listener is on by default");
    let result = dispatch(
        &ts,
        request(json!([
            {"id": "a", "name": "echo", "arguments": {"x": 1}},
            {"id": "b", "name": "flaky"},
            {"id": "c", "name": "now"},
            {"id": "d", "name": "made_up_tool_xyz"},
            {"id": "e", "name": "echo", "arguments": {"key": "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z_Ab3dEf6hIj9kL"}},
        ])),
    )
    .await;
    assert_eq!(result.count, 5);
    let (status, text) = get(format!("http://{admin}/metrics")).await;
    assert_eq!(status, 200);
    for expected in [
        r#"toolgate_calls_total{gen_ai_tool_name="echo",toolgate_error_class="NONE"} 2"#,
        r#"toolgate_redactions_total{toolgate_kind="openai_key"} 1"#,
        r#"toolgate_calls_total{gen_ai_tool_name="flaky",toolgate_error_class="NONE"} 1"#,
        r#"toolgate_calls_total{gen_ai_tool_name="now",toolgate_error_class="BLOCKED"} 1"#,
        r#"toolgate_calls_total{gen_ai_tool_name="unknown",toolgate_error_class="UNKNOWN_TOOL"} 1"#,
        r#"toolgate_retries_total{gen_ai_tool_name="flaky"} 2"#,
        r#"gen_ai_execute_tool_duration_seconds_count{error_type="TOOL_ERROR",gen_ai_tool_name="flaky"} 2"#,
        r#"gen_ai_execute_tool_duration_seconds_count{gen_ai_tool_name="flaky"} 1"#,
        r#"gen_ai_execute_tool_duration_seconds_count{gen_ai_tool_name="echo"} 2"#,
        r#"toolgate_hook_decisions_total{toolgate_hook="no-clocks",toolgate_verdict="block"} 1"#,
        r#"toolgate_batches_total{toolgate_outcome="COMPLETED"} 1"#,
        r#"toolgate_batch_duration_seconds_count{toolgate_outcome="COMPLETED"} 1"#,
        "toolgate_batches_in_flight 0",
        "toolgate_overloaded 0",
        "toolgate_sessions_live 0",
        "toolgate_session_memory_bytes 0",
        "toolgate_connections_open 1",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in\n{text}");
    }
    // The process's own gauges, what a soak watches for leaks.
    for gauge in [
        "process_resident_memory_bytes",
        "process_open_fds",
        "toolgate_runtime_tasks",
    ] {
        let value: f64 = text
            .lines()
            .find(|l| l.starts_with(gauge) && !l.starts_with('#'))
            .and_then(|l| l.rsplit(' ').next())
            .unwrap_or_else(|| panic!("no {gauge} in\n{text}"))
            .parse()
            .unwrap();
        assert!(value > 0.0, "{gauge} = {value}");
    }
    assert!(
        !text.contains("made_up_tool_xyz"),
        "a name the model made up is never a label"
    );
    assert!(
        !text.contains(r#"gen_ai_execute_tool_duration_seconds_count{gen_ai_tool_name="now"}"#),
        "a refused call has no execution duration"
    );
    let (valid, said) = promtool_check(&text);
    assert!(valid, "promtool check metrics: {said}\n{text}");
}

#[tokio::test]
async fn probes_answer_plain_http_and_readiness_follows_the_drain() {
    let ts = start().await;
    let admin = ts.server.admin_addr().unwrap();
    assert_eq!(
        get(format!("http://{admin}/livez")).await,
        (200, "ok\n".to_owned())
    );
    assert_eq!(
        get(format!("http://{admin}/readyz")).await,
        (200, "ready\n".to_owned())
    );
    // While a batch keeps the drain waiting, readiness says so and liveness holds.
    let mut running = ts
        .client
        .clone()
        .dispatch_batch(request(json!([{"name": "wait_cancel"}])))
        .await
        .unwrap()
        .into_inner();
    let _received = tokio_stream::StreamExt::next(&mut running).await;
    ts.server.shutdown_handle().shutdown();
    eventually("readiness to say shutting down", async || {
        get(format!("http://{admin}/readyz")).await == (503, "shutting down\n".to_owned())
    })
    .await;
    assert_eq!(get(format!("http://{admin}/livez")).await.0, 200);
    drop(running);
}

#[tokio::test]
async fn an_empty_admin_address_turns_the_listener_off() {
    let ts = start_with(Config::from_toml("[admin]\nlisten = \"\"").unwrap()).await;
    assert_eq!(ts.server.admin_addr(), None);
}

/// The Python OTLP receiver (`tests/otel/otlp_receiver.py`), killed on drop.
pub(crate) struct Receiver {
    child: tokio::process::Child,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    pub addr: String,
}

impl Receiver {
    pub(crate) async fn start() -> Receiver {
        use tokio::io::AsyncBufReadExt;
        let python = crate::peers::testenv().join("venv/bin/python");
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otel/otlp_receiver.py");
        let mut child = tokio::process::Command::new(python)
            .arg(script)
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the OTLP receiver starts");
        let stdout = child.stdout.take().unwrap();
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let first = lines.next_line().await.unwrap().expect("a listening line");
        let addr = first
            .strip_prefix("listening on ")
            .expect("listening on ADDR")
            .to_owned();
        Receiver { child, lines, addr }
    }

    /// The next export of `signal` whose request text contains `needle` (waiting up to 20 s).
    pub(crate) async fn export_containing(
        &mut self,
        signal: &str,
        needle: &str,
    ) -> serde_json::Value {
        let wait = async {
            while let Some(line) = self.lines.next_line().await.unwrap() {
                let export: serde_json::Value = serde_json::from_str(&line).unwrap();
                if export["signal"] == signal && export["request"].to_string().contains(needle) {
                    return export;
                }
            }
            panic!("the receiver stopped");
        };
        tokio::time::timeout(std::time::Duration::from_secs(20), wait)
            .await
            .unwrap_or_else(|_| panic!("no {signal} export containing {needle:?} within 20 s"))
    }
}

impl Receiver {
    /// The spans exported so far, until `enough` says they are (waiting up to 20 s). Each span
    /// gets `service` (its resource's `service.name`) added.
    pub(crate) async fn spans_until(
        &mut self,
        enough: impl Fn(&[serde_json::Value]) -> bool,
    ) -> Vec<serde_json::Value> {
        let mut spans = Vec::new();
        let wait = async {
            while !enough(&spans) {
                let Some(line) = self.lines.next_line().await.unwrap() else {
                    panic!("the receiver stopped");
                };
                let export: serde_json::Value = serde_json::from_str(&line).unwrap();
                if export["signal"] != "traces" {
                    continue;
                }
                for resource in export["request"]["resourceSpans"].as_array().unwrap() {
                    let service = resource["resource"]["attributes"]
                        .as_array()
                        .and_then(|a| a.iter().find(|kv| kv["key"] == "service.name"))
                        .map(|kv| kv["value"]["stringValue"].clone())
                        .unwrap_or_default();
                    for scope in resource["scopeSpans"].as_array().unwrap() {
                        for span in scope["spans"].as_array().unwrap() {
                            let mut span = span.clone();
                            span["service"] = service.clone();
                            spans.push(span);
                        }
                    }
                }
            }
        };
        if tokio::time::timeout(std::time::Duration::from_secs(20), wait)
            .await
            .is_err()
        {
            panic!("not enough spans within 20 s; got {spans:#?}");
        }
        spans
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

#[tokio::test]
async fn metrics_are_pushed_to_an_otlp_collector_with_the_service_name() {
    crate::peers::require_peers!(TestEnv);
    let mut receiver = Receiver::start().await;
    let config = Config::from_toml(&format!(
        "[telemetry]\notlp_endpoint = \"http://{}\"\nmetrics_interval = \"1s\"\nservice_name = \"toolgate-test\"",
        receiver.addr
    ))
    .unwrap();
    let ts = start_with(config).await;
    dispatch(
        &ts,
        request(json!([{"id": "a", "name": "echo", "arguments": {"x": 1}}])),
    )
    .await;
    let export = receiver
        .export_containing("metrics", "gen_ai.execute_tool.duration")
        .await;
    let resource = export["request"]["resourceMetrics"][0]["resource"].to_string();
    assert!(
        resource.contains(r#""key":"service.name","value":{"stringValue":"toolgate-test"}"#),
        "{resource}"
    );
    let metrics = export["request"].to_string();
    for name in [
        "toolgate.calls",
        "toolgate.batches",
        "toolgate.sessions.live",
    ] {
        assert!(
            metrics.contains(&format!(r#""name":"{name}""#)),
            "no {name} in {metrics}"
        );
    }
    assert!(metrics.contains(r#""stringValue":"echo""#), "{metrics}");
}

#[tokio::test]
async fn an_unreachable_collector_does_not_slow_or_fail_batches() {
    // A port nothing listens on: every export fails, on the exporter's own thread.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = closed.local_addr().unwrap();
    drop(closed);
    let config = Config::from_toml(&format!(
        "[telemetry]\notlp_endpoint = \"http://{addr}\"\nmetrics_interval = \"1s\"\nexport_timeout = \"500ms\"\nmax_queued_spans = 1"
    ))
    .unwrap();
    let ts = start_with(config).await;
    // A burst of spans against a queue of one: most are dropped, and counted.
    let burst: Vec<serde_json::Value> = (0..50)
        .map(|i| json!({"id": format!("b{i}"), "name": "echo", "arguments": {"i": i}}))
        .collect();
    assert!(dispatch(&ts, request(json!(burst))).await.all_succeeded);
    for i in 0..20 {
        let result = dispatch(
            &ts,
            request(json!([{"id": format!("c{i}"), "name": "echo"}])),
        )
        .await;
        assert!(result.all_succeeded);
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // Spans that could not be exported are counted, by reason.
    let admin = ts.server.admin_addr().unwrap();
    let dropped = |text: &str, reason: &str| {
        let prefix =
            format!(r#"toolgate_telemetry_spans_dropped_total{{toolgate_reason="{reason}"}} "#);
        text.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0.0, |n| n.parse::<f64>().unwrap())
    };
    let mut text = String::new();
    for _ in 0..100 {
        text = get(format!("http://{admin}/metrics")).await.1;
        if dropped(&text, "queue_full") > 0.0 && dropped(&text, "export_failed") > 0.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(dropped(&text, "queue_full") > 0.0, "{text}");
    assert!(dropped(&text, "export_failed") > 0.0, "{text}");
    let started = std::time::Instant::now();
    ts.server.shutdown().await.unwrap();
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "stopping waits for the last export only briefly: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_real_prometheus_server_scrapes_the_endpoint() {
    crate::peers::require_peers!(Prometheus);
    let ts = start().await;
    let admin = ts.server.admin_addr().unwrap();
    dispatch(
        &ts,
        request(json!([{"id": "a", "name": "echo", "arguments": {"x": 1}}])),
    )
    .await;
    let dir = std::env::temp_dir().join(format!(
        "toolgate-prometheus-{}-{}",
        std::process::id(),
        admin.port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: toolgate\n    static_configs:\n      - targets: ['{admin}']\n"
        ),
    )
    .unwrap();
    let web = {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        free.local_addr().unwrap()
    };
    let _prometheus = tokio::process::Command::new("prometheus")
        .arg(format!(
            "--config.file={}",
            dir.join("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("prometheus runs (Debian package `prometheus`; scripts/test installs it)");
    // Ask its query API until the scraped series is there.
    let mut last = String::new();
    let mut found = false;
    for _ in 0..300 {
        if let Ok(response) = http_get(format!(
            "http://{web}/api/v1/query?query=toolgate_calls_total"
        ))
        .await
        {
            last = response.text().await.unwrap_or_default();
            let parsed: serde_json::Value = serde_json::from_str(&last).unwrap_or_default();
            found = parsed["data"]["result"].as_array().is_some_and(|series| {
                series.iter().any(|s| {
                    s["metric"]["gen_ai_tool_name"] == "echo"
                        && s["metric"]["job"] == "toolgate"
                        && s["value"][1] == "1"
                })
            });
            if found {
                break;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(found, "prometheus never scraped the echo call: {last}");
}
