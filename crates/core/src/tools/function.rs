//! `FnTool`: a tool from a name, a schema and an async closure, for embedders and tests that do
//! not want a type per tool.

use std::future::Future;

use serde_json::Value;

use super::{Annotations, BoxFuture, Tool, ToolContext, ToolError, ToolOutput};

/// A tool whose behaviour is an async closure over (input, context).
pub struct FnTool<F> {
    name: String,
    description: String,
    input_schema: Value,
    annotations: Annotations,
    concurrency_safe: bool,
    run: F,
}

impl<F, Fut> FnTool<F>
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
{
    /// A tool named `name` that accepts any object and runs `run`.
    pub fn new(name: impl Into<String>, description: impl Into<String>, run: F) -> Self {
        FnTool {
            name: name.into(),
            description: description.into(),
            input_schema: serde_json::json!({"type": "object"}),
            annotations: Annotations::default(),
            concurrency_safe: false,
            run,
        }
    }

    /// Sets the input JSON Schema.
    pub fn schema(mut self, input_schema: Value) -> Self {
        self.input_schema = input_schema;
        self
    }

    /// Sets the behaviour hints.
    pub fn annotations(mut self, annotations: Annotations) -> Self {
        self.annotations = annotations;
        self
    }

    /// Marks every call of the tool as safe to run concurrently.
    pub fn concurrency_safe(mut self, safe: bool) -> Self {
        self.concurrency_safe = safe;
        self
    }
}

impl<F, Fut> Tool for FnTool<F>
where
    F: Fn(Value, ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<ToolOutput, ToolError>> + Send + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn input_schema(&self) -> Value {
        self.input_schema.clone()
    }
    fn annotations(&self) -> Annotations {
        self.annotations
    }
    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        self.concurrency_safe
    }
    fn call<'a>(
        &'a self,
        input: Value,
        ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        Box::pin((self.run)(input, ctx.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[tokio::test]
    async fn a_closure_becomes_a_tool() {
        let tool = FnTool::new("double", "doubles n", |input: Value, _ctx| async move {
            let n = input["n"]
                .as_i64()
                .ok_or_else(|| ToolError::invalid_input("'n' must be an integer"))?;
            Ok(ToolOutput::Json(json!(n * 2)))
        })
        .schema(json!({"type": "object", "required": ["n"]}))
        .concurrency_safe(true);
        let ctx = ToolContext::new("s", "c", 0, std::env::temp_dir());
        assert_eq!(
            tool.call(json!({"n": 21}), &ctx).await.unwrap(),
            ToolOutput::Json(json!(42))
        );
        assert_eq!(tool.name(), "double");
        assert!(tool.is_concurrency_safe(&json!({})));
        assert_eq!(tool.input_schema()["required"], json!(["n"]));
    }
}
