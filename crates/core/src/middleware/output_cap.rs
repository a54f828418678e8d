//! Output caps: at most N characters of content per call (per tool or global), and optionally a
//! budget shared by all results of a batch. Text is cut at a character boundary and ends with a
//! visible marker saying how much was cut; the marker counts toward the cap.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use tower::{Layer, Service};

use super::{Invocation, Invoked, Reply};
use crate::tools::content_of;
use crate::tools::{BoxFuture, ContentPart, ToolOutput};

/// Characters left of a batch-wide output budget.
#[derive(Debug)]
pub struct CharBudget {
    remaining: AtomicUsize,
}

impl CharBudget {
    pub fn new(chars: usize) -> Self {
        CharBudget {
            remaining: AtomicUsize::new(chars),
        }
    }

    pub fn remaining(&self) -> usize {
        self.remaining.load(Ordering::SeqCst)
    }

    fn spend(&self, chars: usize) {
        let _ = self
            .remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| {
                Some(r.saturating_sub(chars))
            });
    }
}

/// Applies `OutputCap`.
#[derive(Debug, Clone)]
pub(crate) struct OutputCapLayer {
    max_chars: usize,
    per_tool: Arc<BTreeMap<String, usize>>,
}

/// Cuts oversized output.
#[derive(Debug, Clone)]
pub(crate) struct OutputCap<S> {
    inner: S,
    max_chars: usize,
    per_tool: Arc<BTreeMap<String, usize>>,
}

impl OutputCapLayer {
    /// `max_chars` 0 means no global cap.
    pub(crate) fn new(max_chars: usize, per_tool: BTreeMap<String, usize>) -> Self {
        OutputCapLayer {
            max_chars,
            per_tool: Arc::new(per_tool),
        }
    }
}

impl<S> Layer<S> for OutputCapLayer {
    type Service = OutputCap<S>;
    fn layer(&self, inner: S) -> OutputCap<S> {
        OutputCap {
            inner,
            max_chars: self.max_chars,
            per_tool: self.per_tool.clone(),
        }
    }
}

/// Cuts `text` to `max` characters including the marker; returns the text, whether it was cut
/// and its length in characters. Text within the cap is returned as is, not copied.
fn cut(text: String, max: usize) -> (String, bool, usize) {
    let total = text.chars().count();
    if total <= max {
        return (text, false, total);
    }
    // The marker's own length depends on the numbers in it; two passes settle it.
    let mut keep = max;
    let mut marker = String::new();
    for _ in 0..2 {
        marker = format!("\n[truncated: {} of {total} characters cut]", total - keep);
        keep = max.saturating_sub(marker.chars().count());
    }
    let text = if keep == 0 {
        // No room for the marker: the cap still holds.
        marker.chars().take(max).collect()
    } else {
        let head: String = text.chars().take(keep).collect();
        format!("{head}{marker}")
    };
    let used = text.chars().count();
    (text, true, used)
}

/// One output after its cap.
#[derive(Debug)]
pub(crate) struct Capped {
    /// The output within the cap (cut JSON becomes text).
    pub output: ToolOutput,
    /// The cap cut it.
    pub cut: bool,
    /// Its length in characters of content.
    pub used: usize,
    /// Its content text when measuring it meant writing it (JSON within the cap), so the
    /// result does not write it again.
    pub content: Option<String>,
}

/// Caps one output at `max` characters of content; JSON that is cut becomes readable text.
pub(crate) fn truncate_output(output: ToolOutput, max: usize) -> Capped {
    match output {
        ToolOutput::Text(text) => {
            let (text, was_cut, used) = cut(text, max);
            Capped {
                output: ToolOutput::Text(text),
                cut: was_cut,
                used,
                content: None,
            }
        }
        ToolOutput::Json(value) => {
            let (text, was_cut, used) = cut(content_of(&value), max);
            if was_cut {
                Capped {
                    output: ToolOutput::Text(text),
                    cut: true,
                    used,
                    content: None,
                }
            } else {
                Capped {
                    output: ToolOutput::Json(value),
                    cut: false,
                    used,
                    content: Some(text),
                }
            }
        }
        ToolOutput::Parts(parts) => {
            let mut left = max;
            let mut any = false;
            let mut out = Vec::with_capacity(parts.len());
            for part in parts {
                match part {
                    ContentPart::Text(text) => {
                        let (text, was_cut, used) = cut(text, left);
                        any |= was_cut;
                        left = left.saturating_sub(used);
                        out.push(ContentPart::Text(text));
                    }
                    image => out.push(image),
                }
            }
            Capped {
                output: ToolOutput::Parts(out),
                cut: any,
                used: max - left,
                content: None,
            }
        }
    }
}

impl<S> Service<Invocation> for OutputCap<S>
where
    S: Service<Invocation, Response = Invoked, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Invoked;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<Invoked, Infallible>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, inv: Invocation) -> Self::Future {
        let per_call = self
            .per_tool
            .get(inv.name())
            .copied()
            .unwrap_or(self.max_chars);
        let budget = inv.budget.clone();
        let running = self.inner.call(inv);
        Box::pin(async move {
            let Ok(mut invoked) = running.await;
            let mut max = if per_call == 0 { usize::MAX } else { per_call };
            if let Some(b) = &budget {
                max = max.min(b.remaining());
            }
            let (output, succeeded) = match &mut invoked.reply {
                Reply::Output(output) => (Some(output), true),
                Reply::Error { output, .. } => (output.as_mut(), false),
            };
            if let Some(output) = output {
                let taken = std::mem::replace(output, ToolOutput::Text(String::new()));
                let capped = truncate_output(taken, max);
                *output = capped.output;
                invoked.truncated |= capped.cut;
                // Read back only for a success (`answer`); a failure with output is rare.
                if succeeded {
                    invoked.content = capped.content;
                }
                if let Some(b) = &budget {
                    b.spend(capped.used);
                }
            }
            Ok(invoked)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cuts_at_characters_and_the_marker_fits_the_cap() {
        let (text, was_cut, used) = cut("é".repeat(200), 100);
        assert!(was_cut);
        assert_eq!(text.chars().count(), 100);
        assert_eq!(used, 100);
        assert!(text.starts_with('é'));
        assert!(text.ends_with("characters cut]"), "{text}");
        assert!(text.contains("of 200 characters cut"), "{text}");
        assert_eq!(cut("short".into(), 100), ("short".to_owned(), false, 5));
        let (tiny, _, _) = cut("x".repeat(50), 5);
        assert_eq!(tiny.chars().count(), 5);
    }

    #[test]
    fn cut_json_stays_readable_and_parts_share_the_cap() {
        let capped = truncate_output(ToolOutput::Json(json!({"data": "x".repeat(500)})), 100);
        assert!(capped.cut);
        assert_eq!(capped.content, None);
        let ToolOutput::Text(text) = capped.output else {
            panic!("cut JSON becomes text")
        };
        assert!(text.starts_with("{\"data\":\"xxx"));
        let parts = vec![
            ContentPart::Text("a".repeat(80)),
            ContentPart::Image {
                mime_type: "image/png".into(),
                data: "AA".into(),
            },
            ContentPart::Text("b".repeat(80)),
        ];
        let capped = truncate_output(ToolOutput::Parts(parts), 100);
        assert!(capped.cut);
        assert!(capped.used <= 100);
        let ToolOutput::Parts(parts) = capped.output else {
            panic!("parts")
        };
        assert!(matches!(parts[1], ContentPart::Image { .. }));
    }

    #[test]
    fn json_within_the_cap_stays_json_and_hands_on_the_text_it_measured() {
        let value = json!({"b": [1, 2], "a": "é"});
        let capped = truncate_output(ToolOutput::Json(value.clone()), 100);
        assert!(!capped.cut);
        assert_eq!(capped.used, r#"{"a":"é","b":[1,2]}"#.chars().count());
        assert_eq!(capped.content.as_deref(), Some(content_of(&value).as_str()));
        assert!(matches!(capped.output, ToolOutput::Json(v) if v == value));
    }
}
