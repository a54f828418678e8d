//! Every rule of the reference text as a table: each example sentence is a case.

use serde_json::{Value, json};

use super::*;

fn context() -> Map<String, Value> {
    let Value::Object(map) = json!({
        "user": {"profile": {"name": "Ada"}, "private_note": "internal", "roles": ["admin", "dev"]},
        "users": [{"id": "u-0"}, {"id": "u-1"}],
        "region": "eu",
        "a.b": "dotted-key",
        "nullkey": null,
        "n": 5,
        "tool_name": "parent-tool-name",
        "arguments": "parent-arguments"
    }) else {
        unreachable!()
    };
    map
}

fn arguments() -> Value {
    json!({"city": "Berlin", "tags": ["x", "y"], "matrix": [[1, 2], [3, 4]],
           "nested": {"deep": {"v": true}}, "0": "zero-key", "empty": null})
}

fn call(arguments: &Value) -> Value {
    json!({"id": "call_A", "index": 0, "name": "probe", "arguments": arguments, "raw_arguments": "RAW"})
}

#[track_caller]
fn check(spec: Value, expected: Value) {
    let ctx = context();
    let args = arguments();
    let call = call(&args);
    let scope = Scope {
        call: &call,
        arguments: &args,
        tool_name: "probe",
        tool_call_id: "call_A",
        context: &ctx,
    };
    assert_eq!(resolve(&spec, &scope), expected, "spec {spec}");
}

#[test]
fn arguments_references() {
    check(json!("arguments"), arguments());
    check(json!("arguments.city"), json!("Berlin"));
    check(json!("arguments.tags.0"), json!("x"));
    check(json!("arguments.tags.1"), json!("y"));
    check(json!("arguments.matrix.1.0"), json!(3));
    check(json!("arguments.nested.deep.v"), json!(true));
    check(json!("arguments.empty"), json!(null));
    // An object key that looks like an index is still reachable on an object.
    check(json!("arguments.0"), json!("zero-key"));
}

#[test]
fn the_complete_path_must_resolve_or_it_is_null_never_the_parent() {
    for spec in [
        "arguments.nope",    // missing field
        "arguments.tags.5",  // out-of-range index
        "arguments.tags.-1", // not an index
        "arguments.tags.+1", // no sign
        "arguments.tags.01", // no leading zero
        "arguments.city.0",  // traversal through a scalar
        "arguments.city.",   // trailing dot
        "arguments..city",   // empty segment
        "arguments.",        // nothing after the dot
        "ctx.user.id",       // the source text's example: null, not the user object
        "ctx.user.",         // malformed: null
        "ctx.user.roles.9",
        "ctx.region.x",
        "ctx.nothing.x", // missing root
        "ctx.",
        "ctx.a.b", // a dotted key is not reachable through ctx.
        "call.nope",
        "call.",
    ] {
        check(json!(spec), json!(null));
    }
}

#[test]
fn context_references() {
    check(json!("ctx.user.profile.name"), json!("Ada"));
    check(
        json!("ctx.user"),
        json!({"profile": {"name": "Ada"}, "private_note": "internal", "roles": ["admin", "dev"]}),
    );
    check(json!("ctx.users.0.id"), json!("u-0"));
    check(json!("ctx.user.roles.1"), json!("dev"));
    check(json!("ctx.nullkey"), json!(null));
    check(json!("ctx.region"), json!("eu"));
}

#[test]
fn call_and_metadata_references() {
    check(json!("call.id"), json!("call_A"));
    check(json!("call.name"), json!("probe"));
    check(json!("call.index"), json!(0));
    check(json!("call.raw_arguments"), json!("RAW"));
    check(json!("call.arguments.city"), json!("Berlin"));
    check(json!("call"), call(&arguments()));
    // These names are references and shadow context keys of the same name.
    check(json!("tool_name"), json!("probe"));
    check(json!("tool_call_id"), json!("call_A"));
}

#[test]
fn any_other_string_is_a_top_level_context_key_or_a_literal() {
    check(json!("region"), json!("eu"));
    check(json!("n"), json!(5));
    check(json!("nullkey"), json!(null));
    check(json!("a.b"), json!("dotted-key"));
    check(json!("hello world"), json!("hello world"));
    check(json!(""), json!(""));
    check(json!("Arguments.city"), json!("Arguments.city"));
    check(json!("ctx"), json!("ctx"));
    // No interpolation, no bracket syntax.
    check(json!("${ctx.region}"), json!("${ctx.region}"));
    check(json!("arguments[0]"), json!("arguments[0]"));
}

#[test]
fn the_literal_form_is_never_a_reference() {
    check(
        json!({"$literal": "arguments.city"}),
        json!("arguments.city"),
    );
    check(
        json!({"$literal": {"x": "ctx.region"}}),
        json!({"x": "ctx.region"}),
    );
    check(
        json!({"city": {"$literal": "region"}}),
        json!({"city": "region"}),
    );
}

#[test]
fn mappings_resolve_recursively_and_scalars_stay() {
    check(json!(42), json!(42));
    check(json!(1.5), json!(1.5));
    check(json!(true), json!(true));
    check(json!(null), json!(null));
    check(json!([]), json!([]));
    check(json!({}), json!({}));
    check(
        json!(["arguments.city", "region", 7, ["ctx.users.1.id"], null]),
        json!(["Berlin", "eu", 7, ["u-1"], null]),
    );
    check(
        json!({"c": "arguments.city", "lit": "x", "n": {"deep": "tool_call_id"}}),
        json!({"c": "Berlin", "lit": "x", "n": {"deep": "call_A"}}),
    );
}

#[test]
fn selected_values_are_copied_as_is_not_read_again() {
    let Value::Object(ctx) = json!({"pointer": "ctx.secret", "secret": "s3cr3t"}) else {
        unreachable!()
    };
    let args = json!({"ref": "ctx.secret"});
    let call = call(&args);
    let scope = Scope {
        call: &call,
        arguments: &args,
        tool_name: "t",
        tool_call_id: "c",
        context: &ctx,
    };
    assert_eq!(resolve(&json!("ctx.pointer"), &scope), json!("ctx.secret"));
    assert_eq!(
        resolve(&json!("arguments.ref"), &scope),
        json!("ctx.secret")
    );
}

#[test]
fn a_private_sibling_never_comes_along() {
    let spec = json!({"name": "ctx.user.profile.name", "id": "ctx.user.id"});
    let ctx = context();
    let args = arguments();
    let call = call(&args);
    let scope = Scope {
        call: &call,
        arguments: &args,
        tool_name: "probe",
        tool_call_id: "call_A",
        context: &ctx,
    };
    let out = resolve(&spec, &scope);
    assert_eq!(out, json!({"name": "Ada", "id": null}));
    assert!(!out.to_string().contains("internal"));
}

#[test]
fn malformed_references_are_warnings_and_a_mixed_literal_is_a_problem() {
    let clean = json!({"a": "arguments.city", "b": "ctx.user.name", "c": {"$literal": "ctx."}});
    assert!(problems(&clean).is_empty());
    assert!(warnings(&clean).is_empty());
    let spec = json!({"a": "ctx.user.", "b": ["arguments..x"], "c": {"$literal": 1, "other": 2}, "d": "call."});
    let found = problems(&spec);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("input.c:"), "{found:?}");
    let warned = warnings(&spec);
    assert_eq!(warned.len(), 3, "{warned:?}");
    assert!(
        warned.iter().any(|p| p.starts_with("input.a: 'ctx.user.'")),
        "{warned:?}"
    );
    assert!(
        warned.iter().any(|p| p.starts_with("input.b[0]:")),
        "{warned:?}"
    );
}

#[test]
fn malformed_references_resolve_to_null() {
    // The source text: "ctx.user. is malformed and also selects null. The same rule applies to
    // arguments.* and call.*, including a trailing dot with no field."
    for reference in [
        "ctx.user.",
        "ctx.",
        "arguments..city",
        "arguments.",
        "call.",
        "call.arguments.",
    ] {
        check(json!(reference), Value::Null);
    }
}
