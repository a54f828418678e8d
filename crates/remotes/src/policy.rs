//! What a remote registered at run time (`RegisterRemote`) may be. A stdio MCP server runs only
//! as an allowlisted argv (a whole argv, or an argv prefix whose further arguments match a
//! pattern), with only the allowed `env` keys and `cwd`. URLs (worker endpoints, HTTP tools, MCP
//! over HTTP) reach only allowed addresses: loopback, link-local (cloud metadata included),
//! unspecified, multicast and broadcast addresses are refused unless an `egress_allow` entry
//! lists them, and a host name must resolve to allowed addresses only. No file paths come from an
//! RPC (`tls.ca_file`), nor a share of the server's environment (`env_allow`), and an HTTP tool
//! may follow redirects only when allowed. Remotes from
//! the config file are the operator's choice and are not checked here.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use regex::Regex;

use super::spec::{RemoteSpec, Resolved};

/// One allowlisted program for stdio MCP servers registered at run time.
#[derive(Debug, Clone)]
pub struct CommandRule {
    /// The argv, or its prefix when `args` is set.
    pub argv: Vec<String>,
    /// Each argument after `argv` must match this (anchored); `None`: no further arguments.
    pub args: Option<Regex>,
    /// Environment keys a registration may set.
    pub env_keys: Vec<String>,
    /// Working directories a registration may use.
    pub cwd: Vec<String>,
}

/// Addresses or names registered remotes may connect to beyond the default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EgressRule {
    /// An address block, `10.0.0.0/8` or `::1/128`.
    Net { addr: IpAddr, prefix: u8 },
    /// A host name, allowed whatever it resolves to.
    Host(String),
}

impl EgressRule {
    /// `10.0.0.0/8`, `127.0.0.1` (one address), `fd00::/8`, or a host name.
    pub fn parse(text: &str) -> Result<Self, EgressRuleError> {
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        if let Ok(addr) = addr.parse::<IpAddr>() {
            let max = if addr.is_ipv4() { 32 } else { 128 };
            let prefix = match prefix {
                Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max).ok_or_else(|| {
                    EgressRuleError::Prefix {
                        text: text.to_owned(),
                        max,
                    }
                })?,
                None => max,
            };
            return Ok(EgressRule::Net { addr, prefix });
        }
        let name_like = !text.is_empty()
            && prefix.is_none()
            && text
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.'));
        if name_like {
            Ok(EgressRule::Host(text.to_ascii_lowercase()))
        } else {
            Err(EgressRuleError::Neither(text.to_owned()))
        }
    }

    fn contains(&self, ip: IpAddr) -> bool {
        match *self {
            EgressRule::Net { addr, prefix } => in_block(ip, addr, prefix),
            EgressRule::Host(_) => false,
        }
    }
}

/// What `RegisterRemote` may ask for.
#[derive(Debug, Clone, Default)]
pub struct RegistrationPolicy {
    pub commands: Vec<CommandRule>,
    pub egress_allow: Vec<EgressRule>,
    pub allow_redirects: bool,
}

impl RegistrationPolicy {
    /// Checks `spec` without connecting (but resolving host names); the error says why it is
    /// refused. Answers the addresses each host name resolved to and was checked at: the
    /// remote must connect to those and no others (a name that resolves elsewhere later, DNS
    /// rebinding, must not move it), except names `egress_allow` lists, which are trusted.
    pub async fn check(&self, spec: &RemoteSpec) -> Result<Resolved, RegistrationRefusal> {
        if spec.env_allow.is_some() {
            return Err(RegistrationRefusal::EnvAllow);
        }
        if let Some(tls) = &spec.tls {
            for (field, set) in [
                ("tls.ca_file", tls.ca_file.is_some()),
                ("tls.cert_file", tls.cert_file.is_some()),
                ("tls.key_file", tls.key_file.is_some()),
            ] {
                if set {
                    return Err(RegistrationRefusal::ServerFile(field));
                }
            }
        }
        if spec.auth.is_some() {
            return Err(RegistrationRefusal::Auth);
        }
        if spec.follow_redirects && !self.allow_redirects {
            return Err(RegistrationRefusal::Redirects);
        }
        // Every part that could start a program or reach an address is checked, whatever the
        // kind reads: a check that chose one by the kind was skipped by a `command` beside a URL.
        if !spec.command.is_empty() {
            self.check_command(spec)?;
        }
        let mut resolved = Resolved::new();
        for url in [&spec.endpoint, &spec.url].into_iter().flatten() {
            if let Some((name, addresses)) = self.check_url(url).await? {
                resolved.insert(name, addresses);
            }
        }
        Ok(resolved)
    }

    fn check_command(&self, spec: &RemoteSpec) -> Result<(), RegistrationRefusal> {
        let argv = &spec.command;
        let Some(rule) = self.commands.iter().find(|r| argv_allowed(r, argv)) else {
            return Err(RegistrationRefusal::Command(argv.clone()));
        };
        if let Some(key) = spec.env.keys().find(|k| !rule.env_keys.contains(k)) {
            return Err(RegistrationRefusal::EnvKey {
                key: key.clone(),
                argv: rule.argv.clone(),
            });
        }
        if let Some(cwd) = &spec.cwd
            && !rule.cwd.contains(cwd)
        {
            return Err(RegistrationRefusal::Cwd {
                cwd: cwd.clone(),
                argv: rule.argv.clone(),
            });
        }
        Ok(())
    }

    /// Checks where `url` reaches; for a host name, answers it with the addresses checked.
    async fn check_url(
        &self,
        url: &str,
    ) -> Result<Option<(String, Vec<SocketAddr>)>, RegistrationRefusal> {
        let parsed = reqwest::Url::parse(url).map_err(|e| RegistrationRefusal::Url {
            url: url.to_owned(),
            reason: e.to_string(),
        })?;
        let port = parsed.port_or_known_default().unwrap_or(80);
        let Some(host) = parsed.host_str() else {
            return Err(RegistrationRefusal::NoHost(url.to_owned()));
        };
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let (addresses, name) = match bare.parse::<IpAddr>() {
            Ok(ip) => (vec![SocketAddr::new(ip, port)], None),
            Err(_) => {
                let name = bare.to_ascii_lowercase();
                if self.egress_allow.contains(&EgressRule::Host(name.clone())) {
                    return Ok(None);
                }
                let addresses: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), port))
                    .await
                    .map_err(|source| RegistrationRefusal::Resolve {
                        name: name.clone(),
                        source,
                    })?
                    .collect();
                (addresses, Some(name))
            }
        };
        for address in &addresses {
            let ip = address.ip();
            if !self.ip_allowed(ip) {
                return Err(RegistrationRefusal::Egress {
                    url: url.to_owned(),
                    ip,
                });
            }
        }
        Ok(name.map(|name| (name, addresses)))
    }

    /// Whether a registered remote may reach `ip`: listed in `egress_allow`, or neither denied
    /// by default nor this host's own, and likewise every IPv4 address it carries (NAT64,
    /// IPv4-compatible, SIIT, 6to4, Teredo): those reach the IPv4 host, so every IPv4 rule
    /// applies to them.
    fn ip_allowed(&self, ip: IpAddr) -> bool {
        let ip = unmapped(ip);
        if self.egress_allow.iter().any(|r| r.contains(ip)) {
            return true;
        }
        if denied_by_default(ip) || is_this_host(ip) {
            return false;
        }
        embedded_v4(ip).into_iter().flatten().all(|v4| {
            let v4 = IpAddr::V4(v4);
            self.egress_allow.iter().any(|r| r.contains(v4))
                || (!denied_by_default(v4) && !is_this_host(v4))
        })
    }
}

/// Whether `argv` is the rule's whole argv, or its prefix followed by arguments that each match
/// the rule's pattern.
fn argv_allowed(rule: &CommandRule, argv: &[String]) -> bool {
    let Some(rest) = argv.strip_prefix(rule.argv.as_slice()) else {
        return false;
    };
    match &rule.args {
        None => rest.is_empty(),
        Some(pattern) => rest.iter().all(|arg| pattern.is_match(arg)),
    }
}

/// Compiles an argument pattern so it must match a whole argument.
pub fn anchored(pattern: &str) -> Result<Regex, PatternError> {
    Regex::new(&format!("^(?:{pattern})$")).map_err(|source| PatternError {
        pattern: pattern.to_owned(),
        source,
    })
}

/// An argument pattern that does not compile.
#[derive(Debug, Clone, thiserror::Error)]
#[error("'{pattern}': {source}")]
pub struct PatternError {
    pattern: String,
    source: regex::Error,
}

/// An `egress_allow` entry that is neither an address block nor a host name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressRuleError {
    #[error("'{text}': the prefix must be 0 to {max}")]
    Prefix { text: String, max: u8 },
    #[error("'{0}' is neither an address block (10.0.0.0/8) nor a host name")]
    Neither(String),
}

/// Why a run-time registration is refused (`PERMISSION_DENIED`; the text is the caller's).
#[derive(Debug, thiserror::Error)]
pub enum RegistrationRefusal {
    #[error("env_allow shares the server's environment: only the config file may set it")]
    EnvAllow,
    #[error("{0} names a file on the server: only the config file may do that")]
    ServerFile(&'static str),
    /// Credentials come from the server's environment or files, and OAuth discovery reaches
    /// hosts the egress check never saw.
    #[error(
        "auth reads the server's environment or files: only the config file may set it (send a token in headers instead)"
    )]
    Auth,
    #[error("follow_redirects needs [remote_registration] allow_redirects = true")]
    Redirects,
    #[error("the command {0:?} matches no [[remote_registration.commands]] entry")]
    Command(Vec<String>),
    #[error("env key '{key}' is not allowed for {argv:?} (env_keys)")]
    EnvKey { key: String, argv: Vec<String> },
    #[error("cwd '{cwd}' is not allowed for {argv:?}")]
    Cwd { cwd: String, argv: Vec<String> },
    #[error("'{url}': {reason}")]
    Url { url: String, reason: String },
    #[error("'{0}' has no host")]
    NoHost(String),
    #[error("'{name}' does not resolve: {source}")]
    Resolve {
        name: String,
        source: std::io::Error,
    },
    #[error(
        "'{url}' reaches {ip}, a loopback, link-local, metadata, unspecified or this host's own address (or an IPv6 address carrying one); list it in [remote_registration] egress_allow to allow it"
    )]
    Egress { url: String, ip: IpAddr },
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn unmapped(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    }
}

/// Addresses no registered remote reaches unless listed: this host, link-local (cloud metadata
/// at 169.254.169.254 included), "this network" (0.0.0.0/8), multicast, broadcast and the other
/// well-known metadata addresses. The IPv4 addresses an IPv6 address carries are checked apart
/// (`embedded_v4`).
fn denied_by_default(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_link_local()
                || v4.octets()[0] == 0
                || v4.is_multicast()
                || v4.is_broadcast()
                || v4.octets() == [100, 100, 100, 200]
        }
        IpAddr::V6(v6) => {
            let link_local = (v6.segments()[0] & 0xffc0) == 0xfe80;
            let aws_metadata = v6.segments() == [0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || link_local
                || aws_metadata
        }
    }
}

/// The IPv4 addresses an IPv6 address carries, for the forms whose packets reach them: NAT64
/// (64:ff9b::/96 and the local-use 64:ff9b:1::/48), the deprecated IPv4-compatible ::/96 (not
/// :: and ::1), SIIT's IPv4-translated ::ffff:0:0/96, 6to4 (2002::/16), and Teredo (2001::/32:
/// the server's address, and the client's, stored inverted). IPv4-mapped addresses are unmapped
/// before (`unmapped`).
fn embedded_v4(ip: IpAddr) -> [Option<Ipv4Addr>; 2] {
    let IpAddr::V6(v6) = ip else {
        return [None, None];
    };
    let s = v6.segments();
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    let one = |hi: u16, lo: u16| [Some(v4(hi, lo)), None];
    match s {
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => one(hi, lo),
        [0x64, 0xff9b, 1, _, _, _, hi, lo] => one(hi, lo),
        [0, 0, 0, 0, 0, 0, hi, lo] if (u32::from(hi) << 16 | u32::from(lo)) > 1 => one(hi, lo),
        [0, 0, 0, 0, 0xffff, 0, hi, lo] => one(hi, lo),
        [0x2002, hi, lo, ..] => one(hi, lo),
        [0x2001, 0, server_hi, server_lo, _, _, client_hi, client_lo] => [
            Some(v4(server_hi, server_lo)),
            Some(v4(!client_hi, !client_lo)),
        ],
        _ => [None, None],
    }
}

/// Whether `ip` is one of this host's own addresses (a socket can be bound to it): a remote
/// there reaches the server's own ports, the admin listener among them, from outside loopback.
fn is_this_host(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

fn in_block(ip: IpAddr, block: IpAddr, prefix: u8) -> bool {
    match (unmapped(ip), block) {
        (IpAddr::V4(ip), IpAddr::V4(block)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(ip) & mask == u32::from(block) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(block)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(ip) & mask == u128::from(block) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: serde_json::Value) -> RemoteSpec {
        serde_json::from_value(json).unwrap()
    }

    #[tokio::test]
    async fn argv_env_and_cwd_are_pinned() {
        let policy = RegistrationPolicy {
            commands: vec![
                CommandRule {
                    argv: vec!["python3".into(), "/srv/mcp/server.py".into()],
                    args: None,
                    env_keys: vec!["MCP_MODE".into()],
                    cwd: vec!["/srv/mcp".into()],
                },
                CommandRule {
                    argv: vec!["npx".into(), "-y".into(), "@scope/server".into()],
                    args: Some(anchored("--port=[0-9]+").unwrap()),
                    env_keys: Vec::new(),
                    cwd: Vec::new(),
                },
            ],
            ..RegistrationPolicy::default()
        };
        let mcp = |command: serde_json::Value| {
            spec(serde_json::json!({"name": "m", "kind": "mcp", "command": command}))
        };
        assert!(
            policy
                .check(&mcp(serde_json::json!(["python3", "/srv/mcp/server.py"])))
                .await
                .is_ok()
        );
        for abuse in [
            serde_json::json!(["python3", "-c", "import os; os.system('id')"]),
            serde_json::json!(["python3", "/srv/mcp/server.py", "--extra"]),
            serde_json::json!(["python3"]),
            serde_json::json!(["npx", "-y", "@scope/server", "--port=1; rm -rf /"]),
        ] {
            assert!(policy.check(&mcp(abuse.clone())).await.is_err(), "{abuse}");
        }
        assert!(
            policy
                .check(&mcp(serde_json::json!([
                    "npx",
                    "-y",
                    "@scope/server",
                    "--port=8080"
                ])))
                .await
                .is_ok()
        );
        let with_env = spec(serde_json::json!({"name": "m", "kind": "mcp",
            "command": ["python3", "/srv/mcp/server.py"], "env": {"LD_PRELOAD": "/tmp/x.so"}}));
        assert!(
            policy
                .check(&with_env)
                .await
                .unwrap_err()
                .to_string()
                .contains("LD_PRELOAD")
        );
        let with_cwd = spec(serde_json::json!({"name": "m", "kind": "mcp",
            "command": ["python3", "/srv/mcp/server.py"], "cwd": "/tmp"}));
        assert!(policy.check(&with_cwd).await.is_err());
        // An allowed command beside a URL does not spare the URL its check.
        for smuggled in [
            serde_json::json!({"name": "h", "kind": "http", "url": "http://169.254.169.254/",
                "definition": {"name": "t"}, "command": ["python3", "/srv/mcp/server.py"]}),
            serde_json::json!({"name": "w", "kind": "worker", "endpoint": "http://127.0.0.1:7001",
                "command": ["python3", "/srv/mcp/server.py"]}),
        ] {
            let error = policy
                .check(&spec(smuggled.clone()))
                .await
                .unwrap_err()
                .to_string();
            assert!(error.contains("egress_allow"), "{smuggled}: {error}");
        }
    }

    #[tokio::test]
    async fn urls_reach_only_allowed_addresses() {
        let open = RegistrationPolicy::default();
        let http = |url: &str| {
            spec(serde_json::json!({"name": "h", "kind": "http", "url": url,
                "definition": {"name": "t"}}))
        };
        for denied in [
            "http://169.254.169.254/latest/meta-data/",
            "http://127.0.0.1:9464/metrics",
            "http://[::1]:50051/",
            "http://[::ffff:127.0.0.1]:80/",
            "http://0.0.0.0:80/",
            "http://[fe80::1]/",
            "http://localhost:8080/",
            // "This network", and denied IPv4 addresses in NAT64, 6to4 and IPv4-compatible
            // IPv6 forms.
            "http://0.1.2.3/",
            "http://[64:ff9b::7f00:1]/",
            "http://[64:ff9b::a9fe:a9fe]/latest/meta-data/",
            "http://[64:ff9b:1::a9fe:a9fe]/",
            "http://[2002:7f00:1::]/",
            "http://[2002:a9fe:a9fe::1]/",
            "http://[::7f00:1]/",
        ] {
            assert!(open.check(&http(denied)).await.is_err(), "{denied}");
        }
        // This host's own address, as other hosts reach it.
        let probe = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        if probe.connect("192.0.2.1:9").is_ok()
            && let Ok(own) = probe.local_addr()
            && !own.ip().is_loopback()
        {
            let url = format!("http://{}:9464/metrics", own.ip());
            let error = open.check(&http(&url)).await.unwrap_err().to_string();
            assert!(error.contains("this host's own address"), "{error}");
        }
        // NAT64 of an ordinary address is as allowed as the address.
        assert!(
            open.check(&http("http://[64:ff9b::a01:203]/"))
                .await
                .is_ok()
        );
        assert!(open.check(&http("http://10.1.2.3:8080/tool")).await.is_ok());
        let listed = RegistrationPolicy {
            egress_allow: vec![
                EgressRule::parse("127.0.0.0/8").unwrap(),
                EgressRule::parse("::1").unwrap(),
            ],
            ..RegistrationPolicy::default()
        };
        assert!(listed.check(&http("http://127.0.0.1:7001/")).await.is_ok());
        // A name is answered with the addresses it was checked at, for the connection to use.
        let resolved = listed.check(&http("http://LocalHost:7001/")).await.unwrap();
        let addresses = &resolved["localhost"];
        assert!(!addresses.is_empty());
        assert!(
            addresses
                .iter()
                .all(|a| a.ip().is_loopback() && a.port() == 7001)
        );
        assert!(
            listed
                .check(&http("http://169.254.169.254/"))
                .await
                .is_err()
        );
        let worker_ca = spec(serde_json::json!({"name": "w", "kind": "worker",
            "endpoint": "https://10.0.0.5:7001", "tls": {"ca_file": "/etc/shadow"}}));
        assert!(
            listed
                .check(&worker_ca)
                .await
                .unwrap_err()
                .to_string()
                .contains("ca_file")
        );
        let redirecting = spec(serde_json::json!({"name": "h", "kind": "http",
            "url": "http://10.0.0.5/", "definition": {"name": "t"}, "follow_redirects": true}));
        assert!(open.check(&redirecting).await.is_err());
    }

    /// `v4` in every IPv6 form that carries it: NAT64, local-use NAT64, IPv4-compatible, SIIT,
    /// 6to4, a Teredo client (behind an ordinary server) and a Teredo server.
    fn embedded_forms(v4: Ipv4Addr) -> Vec<std::net::Ipv6Addr> {
        let [a, b] = [(u32::from(v4) >> 16) as u16, u32::from(v4) as u16];
        [
            [0x64, 0xff9b, 0, 0, 0, 0, a, b],
            [0x64, 0xff9b, 1, 0, 0, 0, a, b],
            [0, 0, 0, 0, 0, 0, a, b],
            [0, 0, 0, 0, 0xffff, 0, a, b],
            [0x2002, a, b, 0, 0, 0, 0, 1],
            [0x2001, 0, 0x4136, 0xe378, 0x8000, 0x63bf, !a, !b],
            [0x2001, 0, a, b, 0x8000, 0x63bf, 0x3fff, 0xfdd2],
        ]
        .into_iter()
        .map(std::net::Ipv6Addr::from)
        .collect()
    }

    #[track_caller]
    fn check(policy: &RegistrationPolicy, ip: IpAddr, allowed: bool) {
        assert_eq!(policy.ip_allowed(ip), allowed, "{ip}");
    }

    #[test]
    fn ipv4_rules_apply_to_every_embedded_ipv4() {
        let open = RegistrationPolicy::default();
        let mut denied: Vec<Ipv4Addr> =
            ["127.0.0.1", "169.254.169.254", "0.1.2.3", "100.100.100.200"]
                .into_iter()
                .map(|a| a.parse().unwrap())
                .collect();
        // This host's own address, as other hosts reach it (192.0.2.2 in the review).
        let probe = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
        if probe.connect("192.0.2.1:9").is_ok()
            && let Ok(own) = probe.local_addr()
            && let IpAddr::V4(own) = own.ip()
            && !own.is_loopback()
        {
            denied.push(own);
        }
        for v4 in &denied {
            check(&open, IpAddr::V4(*v4), false);
            for v6 in embedded_forms(*v4) {
                check(&open, IpAddr::V6(v6), false);
            }
        }
        // An ordinary address is as allowed in each form as it is alone.
        for v6 in embedded_forms(Ipv4Addr::new(10, 1, 2, 3)) {
            check(&open, IpAddr::V6(v6), true);
        }
        // The Teredo example of RFC 4380: server 65.54.227.120, client 192.0.2.45.
        check(
            &open,
            "2001:0:4136:e378:8000:63bf:3fff:fdd2".parse().unwrap(),
            true,
        );
        // Listing the IPv4 block allows its embedded forms.
        let listed = RegistrationPolicy {
            egress_allow: vec![EgressRule::parse("127.0.0.0/8").unwrap()],
            ..RegistrationPolicy::default()
        };
        for v6 in embedded_forms(Ipv4Addr::LOCALHOST) {
            check(&listed, IpAddr::V6(v6), true);
        }
        check(&listed, "::1".parse().unwrap(), false);
    }

    #[test]
    fn egress_rules_parse_blocks_addresses_and_names() {
        assert_eq!(
            EgressRule::parse("10.0.0.0/8").unwrap(),
            EgressRule::Net {
                addr: "10.0.0.0".parse().unwrap(),
                prefix: 8
            }
        );
        assert!(EgressRule::parse("10.0.0.0/33").is_err());
        assert!(EgressRule::parse("tools.internal").is_ok());
        assert!(EgressRule::parse("bad name!").is_err());
        let block = EgressRule::parse("fd00::/8").unwrap();
        assert!(block.contains("fd12::1".parse().unwrap()));
        assert!(!block.contains("fe80::1".parse().unwrap()));
    }
}
