//! Config loading tests: defaults, precedence, and reporting every problem at once.

use std::path::Path;
use std::time::Duration;

use super::*;
use toolgate_core::safety::detector::Thresholds;

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn embedded_default_matches_the_rust_defaults() {
    assert_eq!(Config::load(None, env(&[])).unwrap(), Config::default());
    assert_eq!(Config::from_toml("").unwrap(), Config::default());
}

#[test]
fn a_file_overrides_only_what_it_names() {
    let config = Config::from_toml(
        "[limits]\nmax_calls = 10\n[dispatch]\ncall_timeout = \"1500ms\"\n[tools.builtin]\nexclude = [\"sleep\"]",
    )
    .unwrap();
    assert_eq!(config.limits.max_calls, 10);
    assert_eq!(config.limits.max_calls_ceiling, 1024);
    assert_eq!(config.dispatch.call_timeout, Duration::from_millis(1500));
    assert_eq!(config.tools.builtin.exclude, ["sleep"]);
    assert!(config.tools.builtin.enabled);
}

#[test]
fn environment_overrides_the_file() {
    let dir = std::env::temp_dir().join(format!("toolgate-config-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.toml");
    std::fs::write(
        &file,
        "[server]\nlisten = \"127.0.0.1:7000\"\n[limits]\nmax_calls = 5",
    )
    .unwrap();
    let config = Config::load(
        Some(&file),
        env(&[
            ("TOOLGATE_LISTEN", "127.0.0.1:0"),
            ("TOOLGATE_LIMITS__MAX_CALLS", "7"),
            ("TOOLGATE_TOOLS__BUILTIN__ENABLED", "false"),
            ("TOOLGATE_LOG__FORMAT", "json"),
            ("TOOLGATE_UNRELATED", "ignored"),
            ("PATH", "/bin"),
        ]),
    )
    .unwrap();
    assert_eq!(config.server.listen, "127.0.0.1:0".parse().unwrap());
    assert_eq!(config.limits.max_calls, 7);
    assert!(!config.tools.builtin.enabled);
    assert_eq!(config.log.format, LogFormat::Json);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_problem_is_listed() {
    let err = Config::from_toml(
        "[server]\nlisten = \"nowhere\"\n[limits]\nmax_calls = 0\nmax_json_depth = 500\n\
         [dispatch]\ncall_timeout = \"soon\"\n[tools.builtin]\nexclude = [\"nope\"]\n[bogus]\nx = 1\n\
         [hooks]\nenv_allow = [\"\"]\n[[hooks.command]]\ncommand = [\"x\"]\nenv = { \"A=B\" = \"v\" }",
    )
    .unwrap_err();
    let text = err.to_string();
    for expected in [
        "server.listen: 'nowhere'",
        "limits.max_calls: must be at least 1",
        "limits.max_json_depth: must be from 1 to 32",
        "[dispatch]: 'soon' is not a duration",
        "tools.builtin.exclude: 'nope' is not a built-in tool",
        "unknown section 'bogus'",
        "hooks.env_allow: '' is not an environment variable name",
        "hooks.command[0].env: 'A=B' is not an environment variable name",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert_eq!(err.problems.len(), 8, "{text}");
}

#[test]
fn unknown_keys_and_wrong_types_are_problems() {
    let err = Config::from_toml("[server]\nlisten = 5\n[limits]\nmax_cals = 3").unwrap_err();
    assert_eq!(err.problems.len(), 2, "{err}");
    assert!(
        err.problems[1].contains("unknown field `max_cals`"),
        "{err}"
    );
    let err = Config::from_toml("not toml = = 1").unwrap_err();
    assert!(err.problems[0].starts_with("config: "), "{err}");
    let err = Config::load(Some(Path::new("/nonexistent/toolgate.toml")), env(&[])).unwrap_err();
    assert!(err.problems[0].contains("cannot read"), "{err}");
}

#[test]
fn remote_entries_are_checked_without_connecting() {
    let config = r#"
[[remotes]]
name = "tls"
kind = "mcp"
url = "https://mcp.internal/mcp"
[[remotes]]
name = "tlsworker"
kind = "worker"
endpoint = "https://workers.internal:443"
[remotes.tls]
ca_file = "/etc/toolgate/ca.pem"
[[remotes]]
name = "plainworker"
kind = "worker"
endpoint = "http://workers.internal:80"
[remotes.tls]
[[remotes]]
name = "nourl"
kind = "http"
[[remotes]]
name = "badheader"
kind = "mcp"
url = "http://127.0.0.1:1/mcp"
headers = { "bad name" = "x" }
[[remotes]]
name = "both"
kind = "mcp"
command = ["server"]
url = "http://127.0.0.1:1/mcp"
[[remotes]]
name = "tls"
kind = "mcp"
url = "ftp://x"
[[remotes]]
name = "badenv"
kind = "mcp"
command = ["server"]
env_allow = ["PATH", "A=B"]
"#;
    let err = Config::from_toml(config).unwrap_err();
    let text = err.to_string();
    for expected in [
        "remotes[2] (plainworker): tls applies only to a remote reached over https://",
        "remotes[3] (nourl): an http remote needs a url",
        "remotes[4] (badheader): 'bad name' is not a valid HTTP header name",
        "remotes[5] (both): set either command (stdio) or url (HTTP), not both",
        "remotes[6]: the name 'tls' is used twice",
        "remotes[6] (tls): 'ftp://x' is not an http:// or https:// URL",
        "remotes[7] (badenv): 'A=B' is not an environment variable name",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert!(
        !text.contains("remotes[0] (tls)"),
        "an https MCP server is fine:\n{text}"
    );
    assert!(
        !text.contains("tlsworker"),
        "an https worker is fine:\n{text}"
    );
}

#[test]
fn settings_the_code_has_a_type_for_are_read_into_that_type() {
    use toolgate_core::middleware::{CacheScope, PermissionVerdict};
    use toolgate_core::safety::hooks::{Action, FailureMode};
    let c = Config::from_toml(
        "[breaker]\nfailure_threshold = 1\ncooldown = \"5s\"\n\
         [bindings.weather]\ntool = \"echo\"\n\
         [per_tool.t.cache]\nenabled = true\nscope = \"global\"\n\
         [[permissions.rules]]\ndecision = \"deny\"\n\
         [[hooks.rules]]\naction = \"block\"\n\
         [[hooks.command]]\ncommand = [\"guard\"]\nfailure_mode = \"fail_open\"",
    )
    .unwrap();
    assert_eq!(
        c.breaker,
        toolgate_core::safety::breaker::BreakerConfig {
            failure_threshold: 1,
            cooldown: Duration::from_secs(5),
            probe_lease: Duration::from_secs(30),
        }
    );
    assert_eq!(
        c.bindings["weather"],
        toolgate_core::dispatch::Binding {
            tool: "echo".into(),
            input: None
        }
    );
    assert_eq!(c.per_tool["t"].cache.scope, CacheScope::Global);
    assert_eq!(c.permissions.rules[0].decision, PermissionVerdict::Deny);
    assert_eq!(c.hooks.rules[0].action, Action::Block);
    assert_eq!(c.hooks.command[0].failure_mode, FailureMode::FailOpen);
}

#[test]
fn a_value_outside_a_closed_set_names_the_choices() {
    let err = Config::from_toml("[per_tool.t.cache]\nscope = \"world\"").unwrap_err();
    let text = err.problems.join("\n");
    assert!(
        text.contains("world") && text.contains("session") && text.contains("global"),
        "{text}"
    );
}

#[test]
fn the_unknown_section_message_lists_every_section() {
    let err = Config::from_toml("[nope]\nx = 1").unwrap_err();
    assert_eq!(
        err.problems,
        [format!(
            "unknown section 'nope' (known: {})",
            SECTIONS.join(", ")
        )]
    );
    for name in ["server", "bindings", "remotes", "log", "mcp", "console"] {
        assert!(SECTIONS.contains(&name));
    }
    assert_eq!(SECTIONS.len(), 28);
}

#[test]
fn a_binding_named_after_a_built_in_tool_is_a_config_error() {
    let err = Config::from_toml("[bindings.echo]\ntool = \"now\"").unwrap_err();
    assert!(
        err.to_string().contains(
            "bindings.echo: 'echo' is a built-in tool's name, which a binding to another tool ('now') may not shadow"
        ),
        "{err}"
    );
    // Excluded or disabled, the name is free.
    for free in [
        "[tools.builtin]\nexclude = [\"echo\"]",
        "[tools.builtin]\nenabled = false",
    ] {
        assert!(
            Config::from_toml(&format!("{free}\n[bindings.echo]\ntool = \"now\"")).is_ok(),
            "{free}"
        );
    }
}

#[test]
fn a_malformed_binding_reference_is_a_warning_not_an_error() {
    let c = Config::from_toml(
        "[auth]\nanonymous_roles = [\"agent\"]\n[bindings.x]\ntool = \"echo\"\ninput = { user = \"ctx.user.\" }",
    )
        .expect("a malformed reference resolves to null: the config is valid");
    let warnings = c.warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].starts_with("bindings.x.input.user: 'ctx.user.'"),
        "{warnings:?}"
    );
}

#[test]
fn capacity_limits_are_checked_and_a_share_as_large_as_the_server_warns() {
    let problems = Config::from_toml(
        "[server]\nmax_concurrent_calls = 0\nstall_timeout = \"0s\"\nkeepalive_timeout = \"0s\"\n\
         [limits]\nmax_reply_bytes = 1000\nmax_hook_processes = 0",
    )
    .unwrap_err()
    .problems;
    for key in [
        "server.max_concurrent_calls",
        "server.stall_timeout",
        "server.keepalive_timeout",
        "limits.max_reply_bytes",
        "limits.max_hook_processes",
    ] {
        assert!(
            problems.iter().any(|p| p.starts_with(key)),
            "{key}: {problems:?}"
        );
    }
    assert!(
        Config::default().warnings().is_empty(),
        "the defaults warn of nothing"
    );
    // Anonymous callers that are admins are warned of.
    let admins = Config::from_toml("[auth]\nanonymous_roles = [\"agent\", \"admin\"]")
        .unwrap()
        .warnings();
    assert_eq!(admins.len(), 1, "{admins:?}");
    assert!(
        admins[0].starts_with(
            "auth.anonymous_roles: callers without credentials (from this machine) get the admin role"
        ),
        "{admins:?}"
    );
    let agents = "[auth]\nanonymous_roles = [\"agent\"]\n";
    let c = Config::from_toml(&format!(
        "{agents}[server]\nmax_batches_per_connection = 256"
    ))
    .unwrap();
    assert_eq!(
        c.warnings(),
        [
            "server.max_batches_per_connection: 256 is not below server.max_concurrent_batches (256), so one connection can take the whole server"
        ]
    );
}

#[test]
fn every_share_above_its_total_is_a_config_error() {
    let err = Config::from_toml(
        "[server]\nmax_concurrent_batches = 8\nmax_concurrent_calls = 16\nmax_connections = 4\n\
         [limits]\nmax_buffered_request_bytes = 4194304\nmax_unread_reply_bytes = 4194304",
    )
    .unwrap_err();
    let shares: Vec<&str> = err
        .problems
        .iter()
        .filter(|p| p.contains("a share cannot exceed its total"))
        .filter_map(|p| p.split(':').next())
        .collect();
    assert_eq!(
        shares,
        [
            "server.max_batches_per_connection",
            "server.max_batches_per_tenant",
            "server.max_batches_per_identity",
            "server.max_calls_per_connection",
            "server.max_calls_per_tenant",
            "server.max_calls_per_identity",
            "server.max_connections_per_address",
            "limits.max_buffered_request_bytes_per_connection",
            "limits.max_unread_reply_bytes_per_connection",
        ],
        "{err}"
    );
    assert!(
        err.problems.contains(
            &"server.max_batches_per_tenant: 128 is above server.max_concurrent_batches (8); a share cannot exceed its total, lower it to at most 8 too"
                .to_owned()
        ),
        "{err}"
    );
    // A share equal to its total, and no per-address bound (0), are fine.
    assert!(
        Config::from_toml(
            "[server]\nmax_concurrent_batches = 8\nmax_batches_per_connection = 8\n\
             max_batches_per_tenant = 8\nmax_batches_per_identity = 8\n\
             max_connections = 4\nmax_connections_per_address = 0"
        )
        .is_ok()
    );
}

#[test]
fn log_filter_field_values_match_as_text_not_as_regexes() {
    // As a regex `a(` does not compile; as text it is a value like any other.
    assert!(log_filter("toolgate[batch{tool=a(}]=debug").is_ok());
    // The config fuzzer's input (`TOOLGATE_LOG__LEVEL`): compiled as regexes, its field values
    // took 5.7 s; as text the filter is built at once.
    let level = "[+{+{i]]]]{0i]LOG__LEVEL[..{+{i]]]]{0i]]]]]]]mA=[F[et\u{18}rics_interval\x00\x00.\"\"\"...\"\"\"\u{8}too\r\r\"\"\"tt....\"\"\".....................tttttttttttttttt]t(.\x00 \x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00]\"tt....[[permissions.rules]]................[...tttttttttttttttttt(.\x00 \x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00]\"tt....\"\"\"...................\x001\x00#\x00\x00\x00\x00\u{8}\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00==[}}$\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\u{4}.\x00\x00\x00\x005{";
    assert!(log_filter(level).is_err());
    let err = Config::load(None, env(&[("TOOLGATE_LOG__LEVEL", level)])).unwrap_err();
    assert!(err.to_string().contains("log.level"), "{err}");
    assert!(log_filter("info,toolgate=debug").is_ok());
    assert!(log_filter("toolgate=loud").is_err());
}

/// The safety policy the config makes: per-tool overrides win over the global settings.
#[test]
fn per_tool_overrides_win() {
    let config = Config::from_toml(
        "[per_tool.poll.loop_detection]\nstop_after = 50\n[per_tool.noisy.loop_detection]\nexempt = true\n\
         [per_tool.fetch.retry]\nenabled = true\nmax_retries = 5",
    )
    .unwrap();
    let p = config.policy();
    assert_eq!(
        p.loop_thresholds("poll"),
        Some(Thresholds {
            warn_after: 3,
            stop_after: 50
        })
    );
    assert_eq!(p.loop_thresholds("noisy"), None);
    assert_eq!(p.loop_thresholds("other"), Some(Thresholds::default()));
    assert_eq!(
        (p.retry_enabled("fetch"), p.max_retries("fetch")),
        (Some(true), 5)
    );
    assert_eq!(
        (p.retry_enabled("other"), p.max_retries("other")),
        (None, 3)
    );
}

#[test]
fn addresses_urls_and_the_sampler_are_typed_as_they_are_read() {
    let c = Config::from_toml(
        "[server]\nlisten = \"[::1]:7000\"\n[admin]\nlisten = \"0.0.0.0:0\"\n\
         [console]\nenabled = false\n[telemetry]\notlp_endpoint = \"https://collector:4317\"\nsampler = \"traceidratio\"\n\
         [auth.jwt]\njwks_url = \"http://idp/jwks\"\nissuer = \"i\"\naudience = \"a\"",
    )
    .unwrap();
    assert_eq!(c.server.listen, "[::1]:7000".parse().unwrap());
    assert_eq!(c.admin.listen, Some("0.0.0.0:0".parse().unwrap()));
    let otlp = c.telemetry.otlp_endpoint.unwrap();
    assert_eq!((otlp.scheme(), otlp.port()), ("https", Some(4317)));
    assert_eq!(c.telemetry.sampler, TraceSampler::TraceIdRatio);
    assert_eq!(c.auth.jwt.jwks_url.unwrap().as_str(), "http://idp/jwks");
    for sampler in TraceSampler::ALL {
        let c = Config::from_toml(&format!("[telemetry]\nsampler = \"{}\"", sampler.name()));
        assert_eq!(c.unwrap().telemetry.sampler, sampler);
    }
}

/// The console, off loopback, needs the admin listener's TLS, which needs `[tls]`.
#[test]
fn the_console_off_loopback_needs_the_admin_listeners_tls() {
    let refused = Config::from_toml("[admin]\nlisten = \"0.0.0.0:9464\"").unwrap_err();
    assert!(
        refused.to_string().contains("console.enabled")
            && refused.to_string().contains("admin.tls"),
        "{refused}"
    );
    let refused = Config::from_toml("[admin]\ntls = true").unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("admin.tls: needs tls.cert_file"),
        "{refused}"
    );
    let off = Config::from_toml("[admin]\nlisten = \"0.0.0.0:9464\"\n[console]\nenabled = false");
    assert!(off.is_ok(), "{off:?}");
    let tls = Config::from_toml(
        "[admin]\nlisten = \"0.0.0.0:9464\"\ntls = true\n\
         [tls]\ncert_file = \"/c.pem\"\nkey_file = \"/k.pem\"",
    );
    assert!(
        tls.as_ref()
            .err()
            .is_none_or(|e| !e.to_string().contains("console")),
        "{tls:?}"
    );
}

/// `""` still means "off" or "unset" in a file and in a variable, as the file documents.
#[test]
fn an_empty_string_is_none() {
    let c = Config::from_toml(
        "[admin]\nlisten = \"\"\n[telemetry]\notlp_endpoint = \"\"\n[sessions]\nscratch_base = \"\"\n\
         [tls]\ncert_file = \"\"\nkey_file = \"\"\nclient_ca_file = \"\"\n\
         [auth.jwt]\njwks_file = \"\"\njwks_url = \"\"\n\
         [remote_registration]\n[[remote_registration.commands]]\nargv = [\"x\"]\nargs_pattern = \"\"",
    )
    .unwrap();
    assert_eq!(c.admin.listen, None);
    assert_eq!(c.telemetry.otlp_endpoint, None);
    assert_eq!(c.sessions.scratch_base, None);
    assert_eq!(
        (&c.tls.cert_file, &c.tls.key_file, &c.tls.client_ca_file),
        (&None, &None, &None)
    );
    assert!(!c.tls.enabled() && !c.auth.jwt.enabled());
    assert_eq!(c.remote_registration.commands[0].args_pattern, None);
    let c = Config::load(None, env(&[("TOOLGATE_ADMIN__LISTEN", "")])).unwrap();
    assert_eq!(c.admin.listen, None);
    let c = Config::from_toml(
        "[sessions]\nscratch_base = \"/srv/scratch\"\n[tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"",
    )
    .unwrap();
    assert_eq!(c.sessions.scratch_base, Some("/srv/scratch".into()));
    assert!(c.tls.enabled());
}

/// A value refused as it is read is refused with the text validation gave it, naming its key.
#[test]
fn a_value_typed_as_it_is_read_names_its_key() {
    for (toml, expected) in [
        (
            "[server]\nlisten = \"nowhere\"",
            "server.listen: 'nowhere' is not an address such as 127.0.0.1:50051",
        ),
        (
            "[admin]\nlisten = \"localhost\"",
            "admin.listen: 'localhost' is not an address such as 127.0.0.1:9464 (empty turns the admin listener off)",
        ),
        (
            "[telemetry]\notlp_endpoint = \"collector:4317\"",
            "telemetry.otlp_endpoint: 'collector:4317' is not a URL such as http://127.0.0.1:4317",
        ),
        (
            "[telemetry]\notlp_endpoint = \"HTTP://collector:4317\"",
            "telemetry.otlp_endpoint: 'HTTP://collector:4317' is not a URL such as http://127.0.0.1:4317",
        ),
        (
            "[telemetry]\nsampler = \"sometimes\"",
            "telemetry.sampler: 'sometimes' is not one of always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio",
        ),
        (
            "[auth.jwt]\njwks_url = \"ftp://idp/jwks\"",
            "auth.jwt.jwks_url: 'ftp://idp/jwks' is not an http(s) URL",
        ),
        // Not a string at all: the section's problem, as before.
        (
            "[server]\nlisten = 5",
            "[server]: invalid type: integer `5`, expected a string",
        ),
    ] {
        let err = Config::from_toml(toml).unwrap_err();
        assert_eq!(err.problems, [expected], "{toml}");
    }
}

#[test]
fn every_problem_names_its_key() {
    let err = Config::from_toml(
        "[server]\nmax_connections = 0\ninsecure = false\n[limits]\nmax_reply_bytes = 1\n\
         [dispatch]\ncall_timeout = \"0s\"\n[sessions]\nidle_ttl = \"0s\"\n[retry]\nbase_delay = \"1h\"\n\
         [telemetry]\nsampler_ratio = 2.0\n[log]\nlevel = \"=\"\n\
         [tls]\nkey_file = \"k.pem\"\nclient_ca_file = \"ca.pem\"\n\
         [auth]\nanonymous = \"none\"\nanonymous_roles = [\"root\"]\n\
         [[auth.tokens]]\nid = \"\"\nsha256 = \"abc\"\n[[auth.certificates]]\nname = \"not a name\"\n\
         [auth.jwt]\njwks_file = \"j.json\"\n\
         [[hooks.grpc]]\nendpoint = \"localhost:7000\"\n[unknown_tool]\nsuggestion_threshold = 3.0",
    )
    .unwrap_err();
    assert!(err.problems.len() >= 15, "{err}");
    for problem in &err.problems {
        let key = problem.split([':', ' ', '[', '.']).next().unwrap_or("");
        assert!(SECTIONS.contains(&key), "names no key: {problem}");
    }
    assert!(
        err.problems.contains(
            &"hooks.grpc[0].endpoint: 'localhost:7000' is not a URL such as http://127.0.0.1:7000"
                .to_owned()
        ),
        "{err}"
    );
}

/// A value that cannot be read hides nothing else in its section: every bad key is reported,
/// and the rules still judge the keys that were read.
#[test]
fn a_key_that_cannot_be_read_does_not_hide_the_rest_of_its_section() {
    let err = Config::from_toml(
        "[server]\nlisten = \"nowhere\"\nmax_connections = 0\n\
         [dispatch]\ncall_timeout = \"soon\"\nmax_call_timeout = \"later\"\n\
         [telemetry]\nsampler = \"sometimes\"\notlp_endpoint = \"http://\"",
    )
    .unwrap_err();
    let text = err.to_string();
    for expected in [
        "server.listen: 'nowhere'",
        "server.max_connections: must be at least 1",
        "[dispatch]: 'soon' is not a duration",
        "[dispatch]: 'later' is not a duration",
        "telemetry.sampler",
        "telemetry.otlp_endpoint",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    assert_eq!(err.problems.len(), 6, "{text}");
}

/// A config built in code can hold a URL no file could: validation still refuses its scheme.
#[test]
fn urls_set_in_code_are_held_to_http() {
    let mut config = Config::default();
    config.telemetry.otlp_endpoint = Some(Url::parse("ftp://collector:4317").unwrap());
    config.auth.jwt.jwks_url = Some(Url::parse("file:///etc/jwks.json").unwrap());
    let text = config.validate().unwrap_err().to_string();
    assert!(
        text.contains("telemetry.otlp_endpoint: 'ftp://collector:4317"),
        "{text}"
    );
    assert!(
        text.contains("auth.jwt.jwks_url: 'file:///etc/jwks.json'"),
        "{text}"
    );
}

#[test]
fn the_session_store_is_memory_or_a_redis_url_and_never_shows_its_password() {
    let config =
        Config::from_toml("[sessions]\nstore = \"rediss://u:pw-1@redis.internal:6380/2\"").unwrap();
    let SessionStoreUrl::Redis(url) = &config.sessions.store else {
        panic!("a Redis store: {:?}", config.sessions.store);
    };
    assert_eq!((url.scheme(), url.port()), ("rediss", Some(6380)));
    assert!(!format!("{config:?}").contains("pw-1"));
    for bad in ["redis", "http://x", "redis://", "rediss://:pw-2@"] {
        let error = Config::from_toml(&format!("[sessions]\nstore = \"{bad}\"")).unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains("sessions.store: not `memory` or a URL"),
            "{bad}: {text}"
        );
        assert!(!text.contains("pw-2"), "{text}");
    }
    // No scratch quota is refused with a shared store: every file would be in its memory.
    let error = Config::from_toml(
        "[sessions]\nstore = \"redis://127.0.0.1:6379/0\"\n[tools.builtin]\nscratch_quota_bytes = 0",
    )
    .unwrap_err();
    assert!(error.to_string().contains("tools.builtin.scratch_quota_bytes: 0 (no quota) cannot be used with a Redis sessions.store"), "{error}");
    assert!(Config::from_toml("[tools.builtin]\nscratch_quota_bytes = 0").is_ok());
}

#[test]
fn hooks_and_permission_rules_need_distinct_names() {
    let problems = Config::from_toml(
        r#"
[[hooks.rules]]
id = "command[0]"
action = "block"
[[hooks.command]]
command = ["true"]
[[hooks.rules]]
action = "ask"
[[hooks.rules]]
id = "rules[1]"
action = "block"
[[permissions.rules]]
id = "shell"
decision = "ask"
[[permissions.rules]]
id = "shell"
decision = "deny"
[[permissions.rules]]
id = "command[0]"
decision = "deny"
"#,
    )
    .unwrap_err()
    .to_string();
    assert!(
        problems.contains("hooks.command[0]: the name 'command[0]' is also hooks.rules[0]'s"),
        "{problems}"
    );
    assert!(
        problems.contains("hooks.rules[2]: the name 'rules[1]' is also hooks.rules[1]'s"),
        "{problems}"
    );
    assert!(
        problems.contains("permissions.rules[1]: the name 'shell' is also permissions.rules[0]'s"),
        "{problems}"
    );
    // A permission rule and a hook are told apart by their section.
    assert!(!problems.contains("permissions.rules[2]"), "{problems}");
}

#[test]
fn an_mcp_listener_off_loopback_needs_tls_or_insecure_and_is_warned_about() {
    let plain = Config::from_toml("[mcp]\nlisten = \"0.0.0.0:8765\"").unwrap_err();
    assert!(
        plain
            .to_string()
            .contains("mcp.listen: 0.0.0.0:8765 is not a loopback address and TLS is off"),
        "{plain}"
    );
    let insecure = Config::from_toml(
        "[server]\ninsecure = true\n[mcp]\nlisten = \"0.0.0.0:8765\"\n[auth]\nanonymous = \"any\"",
    )
    .unwrap();
    let warnings = insecure.warnings();
    assert!(
        warnings.iter().any(|w| w.starts_with(
            "mcp.listen: 0.0.0.0:8765 is not a loopback address and auth.anonymous = \"any\""
        )),
        "{warnings:?}"
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("mcp.listen: 0.0.0.0:8765 serves plaintext")),
        "{warnings:?}"
    );
    let bad = Config::from_toml(
        "[mcp]\npath = \"mcp\"\npage_size = 0\nauthorization_servers = [\"ftp://x\"]",
    )
    .unwrap_err()
    .to_string();
    for expected in [
        "mcp.path: 'mcp' must start with '/'",
        "mcp.page_size: must be at least 1",
        "mcp.authorization_servers[0]: 'ftp://x' is not an http(s) URL",
    ] {
        assert!(bad.contains(expected), "{expected} in {bad}");
    }
}
