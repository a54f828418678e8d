//! How a tool call ended, in the terms every layer shares: the error class (mirroring
//! `toolgate.v1.ErrorClass`) and the text a JSON result reads as.

use serde_json::Value;

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
        }
    }
}

/// A string result is used verbatim; any other JSON is canonical compact JSON.
pub fn content_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => json::canonical(other),
    }
}
