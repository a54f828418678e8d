//! How a tool call ended, in the terms every layer shares: the error class (mirroring
//! `toolgate.v1.ErrorClass`) and the text an output reads as.

use serde_json::Value;

use super::{ContentPart, ToolOutput};
use crate::json;

/// Why a call did not succeed; mirrors `toolgate.v1.ErrorClass`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    None,
    InvalidCall,
    InvalidArguments,
    DuplicateId,
    UnknownTool,
    Blocked,
    PermissionDenied,
    CircuitOpen,
    Timeout,
    Cancelled,
    ToolError,
    Panic,
    Transport,
    LoopStopped,
    Skipped,
    Quarantined,
    /// A person denied the call when asked.
    ApprovalDenied,
    /// Nobody answered the call's approval in time.
    ApprovalTimeout,
    /// The session store failed and the call's change was not applied (not the tool's fault).
    StoreUnavailable,
    /// The call's change was sent to the session store and no answer came: it may have been
    /// applied (the model should check before retrying).
    OutcomeUnknown,
}

impl ErrorClass {
    /// The name used on the wire (`TOOL_ERROR`), for hooks and logs.
    pub fn name(self) -> &'static str {
        match self {
            ErrorClass::None => "NONE",
            ErrorClass::InvalidCall => "INVALID_CALL",
            ErrorClass::InvalidArguments => "INVALID_ARGUMENTS",
            ErrorClass::DuplicateId => "DUPLICATE_ID",
            ErrorClass::UnknownTool => "UNKNOWN_TOOL",
            ErrorClass::Blocked => "BLOCKED",
            ErrorClass::PermissionDenied => "PERMISSION_DENIED",
            ErrorClass::CircuitOpen => "CIRCUIT_OPEN",
            ErrorClass::Timeout => "TIMEOUT",
            ErrorClass::Cancelled => "CANCELLED",
            ErrorClass::ToolError => "TOOL_ERROR",
            ErrorClass::Panic => "PANIC",
            ErrorClass::Transport => "TRANSPORT",
            ErrorClass::LoopStopped => "LOOP_STOPPED",
            ErrorClass::Skipped => "SKIPPED",
            ErrorClass::Quarantined => "QUARANTINED",
            ErrorClass::ApprovalDenied => "APPROVAL_DENIED",
            ErrorClass::ApprovalTimeout => "APPROVAL_TIMEOUT",
            ErrorClass::StoreUnavailable => "STORE_UNAVAILABLE",
            ErrorClass::OutcomeUnknown => "OUTCOME_UNKNOWN",
        }
    }
}

impl ToolOutput {
    /// The text this output reads as, which is what the model reads: text verbatim, JSON as
    /// `content_of` writes it, parts as their text joined by newlines.
    pub fn text(&self) -> String {
        match self {
            ToolOutput::Text(text) => text.clone(),
            ToolOutput::Json(value) => content_of(value),
            ToolOutput::Parts(parts) => parts_text(parts),
        }
    }

    /// About how many bytes this output holds in memory (its texts, and a JSON value's nodes):
    /// what a store of outputs counts against its bound.
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            ToolOutput::Text(text) => text.len(),
            ToolOutput::Json(value) => json::heap_bytes(value),
            ToolOutput::Parts(parts) => parts
                .iter()
                .map(|part| match part {
                    ContentPart::Text(text) => text.len(),
                    ContentPart::Image { mime_type, data } => mime_type.len() + data.len(),
                } + std::mem::size_of::<ContentPart>())
                .sum(),
        }
    }

    /// Output made of content parts, in its simplest form: no parts is empty text, one text
    /// part is that text, anything else stays parts.
    pub fn from_parts(parts: Vec<ContentPart>) -> ToolOutput {
        match parts.as_slice() {
            [] => ToolOutput::Text(String::new()),
            [ContentPart::Text(text)] => ToolOutput::Text(text.clone()),
            _ => ToolOutput::Parts(parts),
        }
    }
}

/// A string result is used verbatim; any other JSON is canonical compact JSON.
pub(crate) fn content_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => json::canonical(other),
    }
}

/// Text parts joined by newlines; images appear as a marker so the model knows they exist.
fn parts_text(parts: &[ContentPart]) -> String {
    let pieces: Vec<String> = parts
        .iter()
        .map(|part| match part {
            ContentPart::Text(text) => text.clone(),
            ContentPart::Image { mime_type, .. } => format!("[image: {mime_type}]"),
        })
        .collect();
    pieces.join("\n")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[track_caller]
    fn check(output: ToolOutput, text: &str) {
        assert_eq!(output.text(), text);
    }

    #[test]
    fn an_output_reads_as_its_text() {
        check(ToolOutput::Text("hi".into()), "hi");
        check(ToolOutput::Json(json!("quoted")), "quoted");
        check(
            ToolOutput::Json(json!({"b": 2, "a": 1})),
            r#"{"a":1,"b":2}"#,
        );
        check(ToolOutput::Parts(Vec::new()), "");
        check(
            ToolOutput::Parts(vec![
                ContentPart::Text("first".into()),
                ContentPart::Image {
                    mime_type: "image/png".into(),
                    data: "AAA=".into(),
                },
                ContentPart::Text("second".into()),
            ]),
            "first\n[image: image/png]\nsecond",
        );
    }

    #[test]
    fn parts_take_their_simplest_form() {
        let text = |t: &str| ContentPart::Text(t.to_owned());
        let image = ContentPart::Image {
            mime_type: "image/png".into(),
            data: "AAA=".into(),
        };
        assert_eq!(
            ToolOutput::from_parts(Vec::new()),
            ToolOutput::Text(String::new())
        );
        assert_eq!(
            ToolOutput::from_parts(vec![text("one")]),
            ToolOutput::Text("one".into())
        );
        let several = vec![text("one"), text("two")];
        assert_eq!(
            ToolOutput::from_parts(several.clone()),
            ToolOutput::Parts(several)
        );
        let picture = vec![image];
        assert_eq!(
            ToolOutput::from_parts(picture.clone()),
            ToolOutput::Parts(picture)
        );
    }
}
