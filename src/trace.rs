//! The W3C trace context a batch runs in: parsed from the client's `traceparent` or started new,
//! and the `traceparent` toolgate sends on to workers, HTTP tools and MCP servers.

use crate::hash::mix;

/// A W3C trace context: the trace a batch belongs to, from the client's `traceparent` or new.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// 32 lowercase hex digits.
    pub trace_id: String,
    /// 2 hex digits (`01` = sampled).
    pub flags: String,
}

impl TraceContext {
    /// Parses `00-<trace-id>-<parent-id>-<flags>`; `None` for anything malformed or all-zero.
    pub fn parse(traceparent: &str) -> Option<Self> {
        let parts: Vec<&str> = traceparent.trim().split('-').collect();
        let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
        let [version, trace_id, parent_id, flags] = parts.as_slice() else {
            return None;
        };
        let valid = hex(version, 2)
            && *version != "ff"
            && hex(trace_id, 32)
            && trace_id.bytes().any(|b| b != b'0')
            && hex(parent_id, 16)
            && hex(flags, 2);
        valid.then(|| TraceContext {
            trace_id: trace_id.to_ascii_lowercase(),
            flags: flags.to_ascii_lowercase(),
        })
    }

    /// A new sampled trace.
    pub fn new_trace() -> Self {
        TraceContext {
            trace_id: format!("{:016x}{:016x}", random_u64(), random_u64()),
            flags: "01".to_owned(),
        }
    }

    /// The `traceparent` for an outgoing call: this trace, a new span id.
    pub fn child(&self) -> String {
        format!(
            "00-{}-{:016x}-{}",
            self.trace_id,
            random_u64() | 1,
            self.flags
        )
    }
}

/// Non-cryptographic randomness for ids (splitmix64 over the clock and a counter).
fn random_u64() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    mix(nanos ^ COUNTER.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traceparents_parse_and_children_keep_the_trace() {
        let tc =
            TraceContext::parse("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01").unwrap();
        assert_eq!(tc.trace_id, "0af7651916cd43dd8448eb211c80319c");
        let child = tc.child();
        assert!(
            child.starts_with("00-0af7651916cd43dd8448eb211c80319c-") && child.ends_with("-01"),
            "{child}"
        );
        assert_ne!(child, tc.child());
        for bad in [
            "",
            "00-abc-def-01",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ] {
            assert_eq!(TraceContext::parse(bad), None, "{bad}");
        }
        assert_eq!(TraceContext::new_trace().trace_id.len(), 32);
    }
}
