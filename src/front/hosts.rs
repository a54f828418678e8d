//! Which `Host` a request may name, against DNS rebinding: a page of another site whose name
//! comes to point at this server's address is sent with that site's name as `Host`, so a
//! front that a browser can reach answers only the names it goes by. Shared by the MCP front
//! (`mcp.allowed_hosts`) and the console (`console.allowed_hosts`).

use http::HeaderMap;

/// Why a request's `Host` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HostRefused {
    /// No `Host` header.
    Missing,
    /// Not shaped like a host (it may be written into URLs).
    Malformed,
    /// A name the list does not hold.
    NotListed,
}

/// Whether `headers`' `Host` is one of `allowed` (names, with or without a port, case
/// insensitive; `None`: any well-formed host).
pub(crate) fn check(headers: &HeaderMap, allowed: Option<&[String]>) -> Result<(), HostRefused> {
    let Some(host) = headers.get(http::header::HOST) else {
        return match allowed {
            Some(_) => Err(HostRefused::Missing),
            None => Ok(()),
        };
    };
    // Two `Host` headers: which one a proxy or the router reads is anyone's guess.
    if headers.get_all(http::header::HOST).iter().nth(1).is_some() {
        return Err(HostRefused::Malformed);
    }
    let host = host.to_str().unwrap_or_default();
    let shaped = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'));
    // A name, or `[v6]`, with at most a port after it.
    let port = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let name = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((name, "")) => Some(name),
            Some((name, after)) => after.strip_prefix(':').filter(|p| port(p)).map(|_| name),
            None => None,
        },
        None => match host.split_once(':') {
            Some((name, after)) => port(after).then_some(name),
            None => Some(host),
        },
    };
    let name = match name {
        Some(name) if shaped && !name.is_empty() => name,
        _ => return Err(HostRefused::Malformed),
    };
    let Some(allowed) = allowed else {
        return Ok(());
    };
    let listed = allowed
        .iter()
        .any(|entry| entry.eq_ignore_ascii_case(host) || entry.eq_ignore_ascii_case(name));
    if listed {
        Ok(())
    } else {
        Err(HostRefused::NotListed)
    }
}

/// The list `entries` says: `None` for `["*"]` (any host).
pub(crate) fn allowed(entries: &[String]) -> Option<Vec<String>> {
    (!entries.iter().any(|h| h == "*")).then(|| entries.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_host(host: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::HOST, host.parse().unwrap());
        headers
    }

    #[test]
    fn listed_names_pass_with_any_port_and_others_do_not() {
        let list = vec!["localhost".to_owned(), "::1".to_owned()];
        let allowed = Some(list.as_slice());
        assert_eq!(check(&with_host("localhost:9464"), allowed), Ok(()));
        assert_eq!(check(&with_host("[::1]:9464"), allowed), Ok(()));
        assert_eq!(check(&with_host("LOCALHOST"), allowed), Ok(()));
        assert_eq!(
            check(&with_host("evil.example:9464"), allowed),
            Err(HostRefused::NotListed)
        );
        assert_eq!(
            check(&with_host("a/b"), allowed),
            Err(HostRefused::Malformed)
        );
        assert_eq!(check(&HeaderMap::new(), allowed), Err(HostRefused::Missing));
        let mut twice = with_host("localhost");
        twice.append(http::header::HOST, "evil.example".parse().unwrap());
        assert_eq!(check(&twice, allowed), Err(HostRefused::Malformed));
        for malformed in [
            "[::1]evil",
            "[::1",
            "localhost:",
            "localhost:80:80",
            "::1",
            ":80",
        ] {
            assert_eq!(
                check(&with_host(malformed), allowed),
                Err(HostRefused::Malformed),
                "{malformed}"
            );
        }
        assert_eq!(check(&with_host("anything.example"), None), Ok(()));
    }
}
