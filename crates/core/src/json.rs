//! JSON helpers shared by the pipeline: canonical compact rendering, nesting depth, char-safe cuts.
//! Canonical means object keys sorted by byte order at every level, whatever serde_json features
//! other crates switch on, so `content` and digests never depend on insertion order.

use serde_json::Value;

/// Compact JSON with object keys sorted at every level; integers stay integers.
pub fn canonical(value: &Value) -> String {
    let mut out = Vec::with_capacity(64);
    write_canonical(value, &mut out);
    // Only JSON text was written, which is UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// Writes into one buffer: no temporary string per key or scalar.
fn write_canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Object(map) => {
            // serde_json's map is a BTreeMap (no `preserve_order` in the tree): it iterates in
            // key order, which for `String` is byte order. A test fails if that ever changes.
            out.push(b'{');
            for (i, (key, member)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_scalar(key, out);
                out.push(b':');
                write_canonical(member, out);
            }
            out.push(b'}');
        }
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_canonical(item, out);
            }
            out.push(b']');
        }
        Value::String(s) => write_scalar(s, out),
        scalar => write_scalar(scalar, out),
    }
}

fn write_scalar<T: serde::Serialize + ?Sized>(value: &T, out: &mut Vec<u8>) {
    // Serializing strings, numbers, booleans and null into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, value);
}

/// 16 hex digits of FNV-1a 64 over the canonical JSON: independent of key order.
pub fn digest(value: &Value) -> String {
    format!("{:016x}", crate::hash::fnv1a(canonical(value).as_bytes()))
}

/// Nesting depth of arrays and objects: a scalar is 0, `{}` and `[]` are 1, `{"a":[1]}` is 2.
pub fn depth(value: &Value) -> usize {
    match value {
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Bytes a `serde_json::Value` holds in memory, about: each value's own slot, the nodes of each
/// object's map, and the bytes of strings and keys. It overestimates a little rather than under
/// (an object's map allocates a whole node even for one entry), so bounds on what callers make
/// the server hold can be set on it; one walk, no allocation.
pub fn held_bytes(value: &Value) -> usize {
    // `Value` is 32 bytes; a B-tree leaf of `String` keys and `Value`s holds up to 11 entries
    // in about 640 bytes.
    const SLOT: usize = 32;
    const NODE: usize = 640;
    const PER_NODE: usize = 11;
    match value {
        Value::String(text) => SLOT + text.len(),
        Value::Array(items) => SLOT + items.iter().map(held_bytes).sum::<usize>(),
        Value::Object(map) => {
            let nodes = NODE * map.len().div_ceil(PER_NODE);
            let entries: usize = map.iter().map(|(k, v)| k.len() + held_bytes(v)).sum();
            SLOT + nodes + entries
        }
        _ => SLOT,
    }
}

/// `held_bytes`, plus what parsing each string that looks like a JSON object or array would
/// hold (`text_held_bytes`): arguments may arrive as JSON text (`function.arguments`), which
/// the server parses, so a request is weighed before anything in it is parsed.
pub fn held_bytes_if_parsed(value: &Value) -> usize {
    match value {
        Value::String(text) => {
            let looks_like_json = matches!(text.trim_start().as_bytes().first(), Some(b'{' | b'['));
            held_bytes(value)
                + if looks_like_json {
                    text_held_bytes(text)
                } else {
                    0
                }
        }
        Value::Array(items) => 32 + items.iter().map(held_bytes_if_parsed).sum::<usize>(),
        Value::Object(map) => {
            let nodes = 640 * map.len().div_ceil(11);
            let entries: usize = map
                .iter()
                .map(|(k, v)| k.len() + held_bytes_if_parsed(v))
                .sum();
            32 + nodes + entries
        }
        _ => held_bytes(value),
    }
}

/// What parsing JSON `text` would hold, about (`held_bytes` of the result, or a little more),
/// found by one scan that allocates nothing: the text's bytes, a slot per value, a map node
/// per object and a share of one per member. Text that is not JSON is weighed all the same.
pub fn text_held_bytes(text: &str) -> usize {
    let (mut in_string, mut escaped) = (false, false);
    let mut held = text.len() + 32;
    for byte in text.bytes() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        held += match byte {
            b'"' => {
                in_string = true;
                0
            }
            b'{' => 32 + 640,
            // A `Vec` grows by doubling: an element may take two slots.
            b'[' | b',' => 64,
            b':' => 64 + 32,
            _ => 0,
        };
    }
    held
}

/// The JSON text of `value` cut to at most `max` bytes (at a character boundary, with `…` when
/// cut), written only as far as needed: a large value is not serialized whole to be cut.
pub fn preview(value: &Value, max: usize) -> String {
    /// Takes bytes until it holds `max`, then refuses more, which stops the serializer.
    struct Capped {
        bytes: Vec<u8>,
        max: usize,
    }
    impl std::io::Write for Capped {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let room = self.max.saturating_sub(self.bytes.len());
            if room == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            let taken = buf.len().min(room);
            self.bytes.extend_from_slice(&buf[..taken]);
            Ok(taken)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // One byte past `max` tells a value that fits exactly from one that was cut.
    let mut capped = Capped {
        bytes: Vec::new(),
        max: max.saturating_add(1),
    };
    let whole = serde_json::to_writer(&mut capped, value).is_ok() && capped.bytes.len() <= max;
    let text = String::from_utf8_lossy(&capped.bytes);
    if whole {
        return text.into_owned();
    }
    let mut cut = max.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &text[..cut])
}

/// The JSON type of a value as a model would name it ("an object", "a string", ...).
pub(crate) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Cuts `text` to at most `max` characters (not bytes), appending `…` when it was cut.
pub fn truncate_chars(text: &str, max: usize) -> String {
    let mut out = String::new();
    push_truncated(&mut out, text, max);
    out
}

/// Appends `text` cut to at most `max` characters, with `…` when cut.
pub(crate) fn push_truncated(out: &mut String, text: &str, max: usize) {
    // No more bytes than `max` means no more characters: nothing to count.
    if text.len() <= max {
        out.push_str(text);
        return;
    }
    match text.char_indices().nth(max) {
        None => out.push_str(text),
        Some((cut, _)) => {
            out.push_str(&text[..cut]);
            out.push('…');
        }
    }
}

/// A JSON pointer (RFC 6901) split and unescaped once: looking it up allocates nothing, where
/// `Value::pointer` splits and unescapes the text again on every lookup. It finds what
/// `Value::pointer` finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    /// `None` for a text that is no pointer (neither empty nor starting with `/`): finds nothing.
    tokens: Option<Vec<String>>,
}

impl Pointer {
    /// Splits and unescapes `text` (`~1` is `/`, `~0` is `~`).
    pub fn new(text: &str) -> Self {
        let tokens = match text.strip_prefix('/') {
            _ if text.is_empty() => Some(Vec::new()),
            Some(rest) => Some(
                rest.split('/')
                    .map(|t| t.replace("~1", "/").replace("~0", "~"))
                    .collect(),
            ),
            None => None,
        };
        Pointer { tokens }
    }

    /// The value the pointer names in `value`.
    pub fn find<'v>(&self, value: &'v Value) -> Option<&'v Value> {
        self.tokens
            .as_ref()?
            .iter()
            .try_fold(value, |target, token| match target {
                Value::Object(map) => map.get(token),
                Value::Array(items) => array_index(token).and_then(|i| items.get(i)),
                _ => None,
            })
    }
}

impl From<&str> for Pointer {
    fn from(text: &str) -> Self {
        Pointer::new(text)
    }
}

/// An array index token as RFC 6901 (and `Value::pointer`) reads it: digits, no sign, no
/// leading zero.
fn array_index(token: &str) -> Option<usize> {
    if token.starts_with('+') || (token.starts_with('0') && token.len() != 1) {
        return None;
    }
    token.parse().ok()
}

/// About how many bytes `value` holds in memory: a `Value` per node, the bytes of every string
/// and key, and a map entry's own overhead. An estimate for bounding stores, not an allocator's
/// count.
pub(crate) fn heap_bytes(value: &Value) -> usize {
    /// A map entry's key `String` and the tree's share per entry, beyond the key's bytes.
    const ENTRY: usize = std::mem::size_of::<String>() + 16;
    let own = std::mem::size_of::<Value>();
    own + match value {
        Value::String(text) => text.len(),
        Value::Array(items) => items.iter().map(heap_bytes).sum(),
        Value::Object(map) => map
            .iter()
            .map(|(key, member)| ENTRY + key.len() + heap_bytes(member))
            .sum(),
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[track_caller]
    fn check(value: Value, expected: &str) {
        assert_eq!(canonical(&value), expected);
    }

    #[test]
    fn maps_iterate_in_byte_order_of_their_keys_whatever_the_insertion_order() {
        // `canonical` relies on it; serde_json's `preserve_order` feature would break it.
        let mut map = serde_json::Map::new();
        for key in ["b", "é", "a", "B", "aa", "", "Z", "~"] {
            map.insert(key.to_owned(), Value::Null);
        }
        let keys: Vec<&[u8]> = map.keys().map(|k| k.as_bytes()).collect();
        assert!(keys.is_sorted(), "{keys:?}");
        check(
            Value::Object(map),
            r#"{"":null,"B":null,"Z":null,"a":null,"aa":null,"b":null,"~":null,"é":null}"#,
        );
    }

    #[test]
    fn canonical_sorts_keys_recursively_and_keeps_integers() {
        check(
            json!({"z": 1, "y": {"b": 2, "a": 1}}),
            r#"{"y":{"a":1,"b":2},"z":1}"#,
        );
        check(
            json!([3, 1.5, "a\"b", null, true]),
            r#"[3,1.5,"a\"b",null,true]"#,
        );
        check(
            json!({"text": "21°C", "slash": "a/b"}),
            r#"{"slash":"a/b","text":"21°C"}"#,
        );
        check(json!(21.0), "21.0");
        check(json!({}), "{}");
    }

    #[test]
    fn truncation_counts_characters_and_marks_the_cut() {
        assert_eq!(truncate_chars("héllo", 2), "hé…");
        assert_eq!(truncate_chars("héllo", 5), "héllo");
    }

    #[test]
    fn digest_is_fnv1a_of_canonical_json() {
        assert_eq!(
            digest(&json!({"b": 1, "a": [1, 2]})),
            digest(&json!({"a": [1, 2], "b": 1}))
        );
        assert_ne!(digest(&json!([1, 2])), digest(&json!([2, 1])));
        assert_eq!(digest(&json!({})).len(), 16);
        assert_eq!(
            digest(&json!({"p": 1})),
            format!("{:016x}", crate::hash::fnv1a(br#"{"p":1}"#))
        );
    }

    #[test]
    fn depth_counts_containers() {
        assert_eq!(depth(&json!(1)), 0);
        assert_eq!(depth(&json!({})), 1);
        assert_eq!(depth(&json!({"a": [1, {"b": []}]})), 4);
    }

    #[test]
    fn truncate_counts_characters_not_bytes() {
        assert_eq!(truncate_chars("héllo", 3), "hél…");
        assert_eq!(truncate_chars("héllo", 5), "héllo");
        assert_eq!(truncate_chars("", 0), "");
    }

    #[test]
    fn pointers_find_what_value_pointer_finds() {
        let doc = json!({
            "a": {"b": [10, {"c/d": 1, "e~f": 2}], "": 3},
            "0": "zero",
            "list": [[1], 2],
        });
        for text in [
            "",
            "/",
            "/a",
            "/a/b",
            "/a/b/0",
            "/a/b/1/c~1d",
            "/a/b/1/e~0f",
            "/a/",
            "/0",
            "/list/0/0",
            "/list/1",
            "/list/01",
            "/list/+1",
            "/list/2",
            "/list/-",
            "a",
            "/a/b/1/c/d",
            "/nothing/here",
            "/a/b/x",
        ] {
            assert_eq!(Pointer::new(text).find(&doc), doc.pointer(text), "{text:?}");
        }
    }

    #[test]
    fn held_bytes_counts_a_small_object_as_the_node_its_map_allocates() {
        assert_eq!(held_bytes(&json!(1)), 32);
        assert_eq!(held_bytes(&json!("abc")), 35);
        // What an amplifying request is made of: 7 bytes of JSON, a whole B-tree leaf held.
        assert_eq!(held_bytes(&json!({"k": 1})), 32 + 640 + 1 + 32);
        let many = Value::Array(vec![json!({"k": 1}); 1000]);
        assert_eq!(held_bytes(&many), 32 + 1000 * 705);
        let big = json!({"text": "x".repeat(10_000)});
        assert!(held_bytes(&big) > 10_000);
    }

    #[test]
    fn a_preview_is_the_json_text_cut_without_writing_the_rest() {
        assert_eq!(preview(&json!({"a": [1, 2]}), 100), r#"{"a":[1,2]}"#);
        assert_eq!(preview(&json!({"a": [1, 2]}), 11), r#"{"a":[1,2]}"#);
        assert_eq!(preview(&json!({"a": [1, 2]}), 10), r#"{"a":[1,2]…"#);
        assert_eq!(preview(&json!("éé"), 3), "\"é…");
        let huge = json!({"text": "y".repeat(3_000_000)});
        assert_eq!(preview(&huge, 12).len(), 12 + '…'.len_utf8());
    }

    #[test]
    fn text_is_weighed_as_parsing_it_would_hold() {
        for text in [
            r#"{"k":1}"#,
            r#"[{"k":1},{"k":2}]"#,
            r#"{"a":"x,{[:","b":[1,2,3]}"#,
        ] {
            let parsed: Value = serde_json::from_str(text).unwrap();
            let (estimate, held) = (text_held_bytes(text), held_bytes(&parsed));
            assert!(
                estimate >= held && estimate <= held * 2,
                "{text}: {estimate} vs {held}"
            );
        }
        // Brackets inside strings are text, not values.
        assert_eq!(text_held_bytes(r#""{{{{""#), 6 + 32);
        let amplifying = format!("[{}]", vec![r#"{"k":1}"#; 1000].join(","));
        assert!(text_held_bytes(&amplifying) > 700_000);
        // Only strings that look like JSON are weighed as parsed.
        assert_eq!(
            held_bytes_if_parsed(&json!({"q": "{}"})),
            held_bytes(&json!({"q": "{}"})) + 2 + 32 + 672
        );
        assert_eq!(
            held_bytes_if_parsed(&json!({"q": "plain"})),
            held_bytes(&json!({"q": "plain"}))
        );
    }
}
