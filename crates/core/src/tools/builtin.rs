//! Built-in tools that are useful for real and for demos: echo, sleep, now; and `Builtin`, the
//! fixed definition every built-in (the scratch tools too) is made of.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::{Annotations, BoxFuture, Tool, ToolContext, ToolError, ToolOutput};

const READ_ONLY: Annotations = Annotations {
    read_only: true,
    destructive: false,
    idempotent: true,
    open_world: false,
};

/// Longest `sleep` accepted, so a model cannot park a call for hours.
const MAX_SLEEP_MS: u64 = 3_600_000;

/// A built-in tool: a fixed definition and the function that runs it. Every built-in is one of
/// these, so the `Tool` getters are written once.
pub(super) struct Builtin {
    pub name: &'static str,
    pub description: &'static str,
    pub input_schema: fn() -> Value,
    pub annotations: Annotations,
    pub concurrency_safe: bool,
    /// Calls naming the same `path` touch the same file (the scratch tools' resource key).
    pub path_is_resource: bool,
    pub run: for<'a> fn(Value, &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>>,
}

impl Tool for Builtin {
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        self.description
    }
    fn input_schema(&self) -> Value {
        (self.input_schema)()
    }
    fn annotations(&self) -> Annotations {
        self.annotations
    }
    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        self.concurrency_safe
    }
    fn resource_key(&self, input: &Value) -> Option<String> {
        let path = input.get("path").and_then(Value::as_str);
        path.filter(|_| self.path_is_resource).map(str::to_owned)
    }
    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        (self.run)(input, ctx)
    }
}

pub(super) const ECHO: Builtin = Builtin {
    name: "echo",
    description: "Returns its input unchanged.",
    input_schema: || json!({"type": "object", "additionalProperties": true}),
    annotations: READ_ONLY,
    concurrency_safe: true,
    path_is_resource: false,
    run: echo,
};

pub(super) const SLEEP: Builtin = Builtin {
    name: "sleep",
    description: "Waits the given number of milliseconds, then returns; stops at once when cancelled.",
    input_schema: || {
        json!({
            "type": "object",
            "properties": {"ms": {"type": "integer", "minimum": 0, "maximum": MAX_SLEEP_MS}},
            "required": ["ms"],
            "additionalProperties": false
        })
    },
    annotations: READ_ONLY,
    concurrency_safe: true,
    path_is_resource: false,
    run: sleep,
};

pub(super) const NOW: Builtin = Builtin {
    name: "now",
    description: "Returns the current UTC time as RFC 3339 text and as Unix milliseconds.",
    input_schema: || json!({"type": "object", "properties": {}, "additionalProperties": false}),
    annotations: Annotations {
        idempotent: false,
        ..READ_ONLY
    },
    concurrency_safe: true,
    path_is_resource: false,
    run: now,
};

fn echo<'a>(input: Value, _ctx: &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
    Box::pin(async move { Ok(ToolOutput::Json(input)) })
}

fn sleep<'a>(input: Value, ctx: &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
    Box::pin(async move {
        let Some(ms) = input
            .get("ms")
            .and_then(Value::as_u64)
            .filter(|ms| *ms <= MAX_SLEEP_MS)
        else {
            return Err(ToolError::invalid_input(format!(
                "'ms' must be an integer from 0 to {MAX_SLEEP_MS}"
            )));
        };
        tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => Err(ToolError::failed("sleep cancelled")),
            () = tokio::time::sleep(Duration::from_millis(ms)) => Ok(ToolOutput::Json(json!({"slept_ms": ms}))),
        }
    })
}

fn now<'a>(_input: Value, _ctx: &'a ToolContext) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
    Box::pin(async move {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|_| ToolError::failed("the system clock is before 1970"))?;
        let unix_ms = u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX);
        Ok(ToolOutput::Json(
            json!({"utc": rfc3339(unix_ms), "unix_ms": unix_ms}),
        ))
    })
}

/// Formats Unix milliseconds as `YYYY-MM-DDTHH:MM:SS.mmmZ` (proleptic Gregorian, UTC).
fn rfc3339(unix_ms: u64) -> String {
    let secs = unix_ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX);
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        unix_ms % 1000
    )
}

/// Days since 1970-01-01 to (year, month, day), after Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let month = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::{BUILTIN_NAMES, builtin_tools};

    fn ctx() -> ToolContext {
        ToolContext::new("s", "c", 0, std::env::temp_dir())
    }

    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_910_401_234), "2026-11-29T00:00:01.234Z");
    }

    #[tokio::test]
    async fn echo_returns_its_input() {
        let out = ECHO.call(json!({"a": [1, 2]}), &ctx()).await.unwrap();
        assert_eq!(out, ToolOutput::Json(json!({"a": [1, 2]})));
    }

    #[tokio::test(start_paused = true)]
    async fn sleep_waits_and_stops_on_cancel() {
        let ctx = ctx();
        let out = SLEEP.call(json!({"ms": 50}), &ctx).await.unwrap();
        assert_eq!(out, ToolOutput::Json(json!({"slept_ms": 50})));
        ctx.cancel.cancel();
        let err = SLEEP.call(json!({"ms": 60_000}), &ctx).await.unwrap_err();
        assert_eq!(err.message, "sleep cancelled");
        let err = SLEEP.call(json!({"ms": -1}), &ctx).await.unwrap_err();
        assert_eq!(err.kind, crate::tools::ToolErrorKind::InvalidInput);
    }

    #[test]
    fn excluded_builtins_are_left_out() {
        let names: Vec<String> = builtin_tools(&["sleep".into(), "now".into()])
            .iter()
            .map(|t| t.name().to_owned())
            .collect();
        assert_eq!(
            names,
            ["echo", "scratch_write", "scratch_read", "scratch_list"]
        );
        let mut all: Vec<String> = builtin_tools(&[])
            .iter()
            .map(|t| t.name().to_owned())
            .collect();
        all.sort();
        assert_eq!(all, BUILTIN_NAMES);
    }
}
