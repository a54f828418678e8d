//! The answer to one call (`CallResult`) and how its `content` is derived from the output.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::calls::{Rejection, ToolCall};
use crate::tools::{ContentPart, ErrorClass, ToolOutput};

impl From<Rejection> for ErrorClass {
    fn from(rejection: Rejection) -> Self {
        match rejection {
            Rejection::InvalidCall => ErrorClass::InvalidCall,
            Rejection::InvalidArguments => ErrorClass::InvalidArguments,
            Rejection::DuplicateId => ErrorClass::DuplicateId,
        }
    }
}

/// The answer to one call.
#[derive(Debug, Clone, PartialEq)]
pub struct CallResult {
    pub index: usize,
    pub id: String,
    pub id_generated: bool,
    /// The tool the model asked for.
    pub name: String,
    /// The tool that ran; empty when none did.
    pub tool: String,
    pub success: bool,
    pub arguments: Arc<Value>,
    pub result: Value,
    /// Exactly what the tool message carries.
    pub content: String,
    /// Multipart output, when the tool returned parts.
    pub parts: Vec<ContentPart>,
    /// Empty on success.
    pub error: String,
    pub error_class: ErrorClass,
    pub attempts: u32,
    pub duration: Duration,
    pub cached: bool,
    pub truncated: bool,
    /// A TIMEOUT under a deadline the client cut below the tool's own: neutral for the tool's
    /// health and breaker. Not on the wire.
    pub client_deadline: bool,
}

impl CallResult {
    /// Records how many times the tool ran; `tool` is empty when it never did (a refusal by a
    /// hook, loop detection, the breaker or a middleware layer), so an audit never reads a
    /// refused tool as run.
    pub(crate) fn set_executions(&mut self, executions: u32) {
        self.attempts = executions;
        if executions == 0 {
            self.tool.clear();
        }
    }

    /// A call answered without running: its content is the error text.
    pub fn refused(call: &ToolCall, class: ErrorClass, message: String) -> Self {
        CallResult {
            index: call.index,
            id: call.id.clone(),
            id_generated: call.id_generated,
            name: call.name.clone(),
            tool: String::new(),
            success: false,
            arguments: call.arguments.clone(),
            result: Value::Null,
            content: message.clone(),
            parts: Vec::new(),
            error: message,
            error_class: class,
            attempts: 0,
            duration: Duration::ZERO,
            cached: false,
            truncated: false,
            client_deadline: false,
        }
    }

    /// A call that ran and returned output.
    /// `content` is the output's text when a layer already wrote it.
    pub fn succeeded(
        call: &ToolCall,
        tool: &str,
        output: ToolOutput,
        content: Option<String>,
    ) -> Self {
        let mut result = CallResult::refused(call, ErrorClass::None, String::new());
        result.success = true;
        result.tool = tool.to_owned();
        result.set_output(output, content);
        result
    }

    /// A call that ran and failed; output the tool produced anyway becomes result and content.
    pub fn failed(
        call: &ToolCall,
        tool: &str,
        class: ErrorClass,
        message: String,
        output: Option<ToolOutput>,
    ) -> Self {
        let mut result = CallResult::refused(call, class, message);
        result.tool = tool.to_owned();
        if let Some(output) = output {
            result.set_output(output, None);
        }
        result
    }

    /// Shrinks what this result carries to about `max_chars` characters each: the content (and
    /// the result with it, which becomes the cut text), text parts, the error text, the echoed
    /// arguments (which become a cut preview of their JSON text), and images larger than that
    /// (replaced by a note).
    /// Marks the result truncated and says whether anything changed. For replies that would
    /// otherwise be too large for the client to accept.
    pub(crate) fn shrink_to(&mut self, max_chars: usize) -> bool {
        let mut changed = false;
        let arguments = crate::json::canonical(&self.arguments);
        if arguments.len() > max_chars {
            self.arguments = Arc::new(Value::String(crate::json::truncate_chars(
                &arguments, max_chars,
            )));
            changed = true;
        }
        if self.content.len() > max_chars || self.parts_bytes() > max_chars {
            let had_output = !self.parts.is_empty() || !self.result.is_null();
            let output = if !self.parts.is_empty() {
                let parts = std::mem::take(&mut self.parts)
                    .into_iter()
                    .map(|part| match part {
                        ContentPart::Image { mime_type, data } if data.len() > max_chars => {
                            ContentPart::Text(format!(
                                "[{mime_type} image of {} bytes left out: the reply was too large]",
                                data.len()
                            ))
                        }
                        part => part,
                    })
                    .collect();
                ToolOutput::Parts(parts)
            } else if let Value::String(text) = &mut self.result {
                ToolOutput::Text(std::mem::take(text))
            } else if self.result.is_null() {
                // A refusal or failure without output: its content is its error text.
                ToolOutput::Text(self.content.clone())
            } else {
                ToolOutput::Json(std::mem::take(&mut self.result))
            };
            let capped = crate::middleware::truncate_output(output, max_chars);
            if had_output {
                self.set_output(capped.output, capped.content);
            } else {
                self.content = capped.content.unwrap_or_else(|| capped.output.text());
            }
            changed = true;
        }
        if self.error.len() > max_chars {
            let content_is_error = self.content == self.error;
            self.error = crate::json::truncate_chars(&self.error, max_chars);
            if content_is_error {
                self.content.clone_from(&self.error);
            }
            changed = true;
        }
        self.truncated |= changed;
        changed
    }

    fn parts_bytes(&self) -> usize {
        self.parts
            .iter()
            .map(|p| match p {
                ContentPart::Text(text) => text.len(),
                ContentPart::Image { data, .. } => data.len(),
            })
            .sum()
    }

    /// Takes `output` as result and content; `content` is its text when already written.
    fn set_output(&mut self, output: ToolOutput, content: Option<String>) {
        self.content = content.unwrap_or_else(|| output.text());
        match output {
            ToolOutput::Text(text) => self.result = Value::String(text),
            ToolOutput::Json(value) => self.result = value,
            ToolOutput::Parts(parts) => {
                self.result = Value::Array(parts.iter().map(part_json).collect());
                self.parts = parts;
            }
        }
    }
}

fn part_json(part: &ContentPart) -> Value {
    match part {
        ContentPart::Text(text) => json!({"type": "text", "text": text}),
        ContentPart::Image { mime_type, data } => {
            json!({"type": "image", "mime_type": mime_type, "data": data})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call() -> ToolCall {
        ToolCall {
            index: 0,
            id: "c1".into(),
            id_generated: false,
            name: "t".into(),
            arguments: json!({}).into(),
            raw_arguments: None,
            shape: None,
        }
    }

    #[track_caller]
    fn check(output: ToolOutput, result: Value, content: &str) {
        let r = CallResult::succeeded(&call(), "t", output, None);
        assert_eq!(r.result, result);
        assert_eq!(r.content, content);
        assert!(r.success);
    }

    #[test]
    fn content_follows_the_result() {
        check(ToolOutput::Text("hi".into()), json!("hi"), "hi");
        check(ToolOutput::Json(json!("quoted")), json!("quoted"), "quoted");
        check(
            ToolOutput::Json(json!({"b": 2, "a": 1})),
            json!({"a": 1, "b": 2}),
            r#"{"a":1,"b":2}"#,
        );
        check(ToolOutput::Json(json!(21)), json!(21), "21");
        check(ToolOutput::Json(json!(null)), json!(null), "null");
        check(
            ToolOutput::Parts(vec![
                ContentPart::Text("see".into()),
                ContentPart::Image {
                    mime_type: "image/png".into(),
                    data: "AAA=".into(),
                },
            ]),
            json!([{"type": "text", "text": "see"}, {"type": "image", "mime_type": "image/png", "data": "AAA="}]),
            "see\n[image: image/png]",
        );
    }

    #[test]
    fn errors_carry_their_text_as_content_unless_output_came_too() {
        let r = CallResult::failed(&call(), "t", ErrorClass::ToolError, "boom".into(), None);
        assert_eq!(
            (r.content.as_str(), r.error.as_str(), r.success),
            ("boom", "boom", false)
        );
        let r = CallResult::failed(
            &call(),
            "t",
            ErrorClass::ToolError,
            "boom".into(),
            Some(ToolOutput::Text("partial".into())),
        );
        assert_eq!((r.content.as_str(), r.error.as_str()), ("partial", "boom"));
    }
}
