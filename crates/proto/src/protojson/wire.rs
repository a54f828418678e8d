//! The protobuf wire format of `Value`, `Struct` and `ListValue` read into and written from
//! `serde_json` directly: the bytes prost's `prost_types` would write, with no tree in between.
//!
//! `Value` is a oneof: `null_value = 1` (enum), `number_value = 2` (double), `string_value = 3`,
//! `bool_value = 4`, `struct_value = 5`, `list_value = 6`. `Struct` is `map<string, Value>
//! fields = 1` (each entry a message: `key = 1`, `value = 2`); `ListValue` is `repeated Value
//! values = 1`. Decoding follows protobuf's merge rules: the last oneof field wins, a repeated
//! struct or list merges into the one before it, a map entry replaces an earlier one with its key.

use prost::bytes::{Buf, BufMut};
use prost::encoding::{
    DecodeContext, WireType, bool as pbool, check_wire_type, decode_key, double, encode_key,
    encode_varint, encoded_len_varint, int32, merge_loop, skip_field, string,
};
use prost::{DecodeError, Message};
use serde_json::{Map, Value as Json};

use super::meter::charge;
use super::{Found, MAX_DECODE_DEPTH, Struct, Value, json_number};

/// What a decoded value holds besides its content (`json::held_bytes`'s figures): its slot, a
/// new object's first map node, an object member's share of its map's nodes.
const SLOT: usize = 32;
const FIRST_NODE: usize = 640;
const MEMBER: usize = 64;

/// Charges `bytes` to the running decode (`meter`); `false` once its allowance is spent: then
/// nothing more is built (what follows is read past, as nesting too deep is), and the codec
/// refuses the message.
fn spend(bytes: usize) -> bool {
    charge(bytes)
}

const NULL: u32 = 1;
const NUMBER: u32 = 2;
const STRING: u32 = 3;
const BOOL: u32 = 4;
const STRUCT: u32 = 5;
const LIST: u32 = 6;
/// `Struct.fields`, `ListValue.values`, and a map entry's key: all field 1.
const FIRST: u32 = 1;
/// A map entry's value.
const ENTRY_VALUE: u32 = 2;

impl Message for Value {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        encode_value(&self.json, buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        // Merged into a value made from JSON, the depth starts from what it holds already.
        let Self { json, found } = self;
        let found = found.get_or_insert_with(|| Found::of(json));
        merge_value(json, tag, wire_type, buf, ctx, 0, found)
    }

    fn encoded_len(&self) -> usize {
        value_len(&self.json)
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

impl Message for Struct {
    fn encode_raw(&self, buf: &mut impl BufMut) {
        encode_fields(&self.fields, buf);
    }

    fn merge_field(
        &mut self,
        tag: u32,
        wire_type: WireType,
        buf: &mut impl Buf,
        ctx: DecodeContext,
    ) -> Result<(), DecodeError> {
        let Self { fields, found } = self;
        let found = found.get_or_insert_with(|| Found::of_fields(fields));
        if tag == FIRST {
            merge_entry(fields, wire_type, buf, ctx, 1, found)
        } else {
            skip_field(wire_type, tag, buf, ctx)
        }
    }

    fn encoded_len(&self) -> usize {
        fields_len(&self.fields)
    }

    fn clear(&mut self) {
        *self = Self::default();
    }
}

/// Merges one field of a `Value` message into `target`, which sits inside `level` arrays or
/// objects.
fn merge_value(
    target: &mut Json,
    tag: u32,
    wire_type: WireType,
    buf: &mut impl Buf,
    ctx: DecodeContext,
    level: usize,
    found: &mut Found,
) -> Result<(), DecodeError> {
    match tag {
        NULL => {
            let mut ignored = 0;
            int32::merge(wire_type, &mut ignored, buf, ctx)?;
            spend(SLOT);
            *target = Json::Null;
        }
        NUMBER => {
            spend(SLOT);
            let mut n = 0.0;
            double::merge(wire_type, &mut n, buf, ctx)?;
            *target = json_number(n).unwrap_or_else(|| {
                found.not_finite = true;
                Json::Null
            });
        }
        STRING => {
            let mut text = String::new();
            string::merge(wire_type, &mut text, buf, ctx)?;
            if spend(SLOT + text.len()) {
                *target = Json::String(text);
            }
        }
        BOOL => {
            spend(SLOT);
            let mut b = false;
            pbool::merge(wire_type, &mut b, buf, ctx)?;
            *target = Json::Bool(b);
        }
        STRUCT => {
            if !target.is_object() {
                if !spend(SLOT + FIRST_NODE) {
                    return skip_field(wire_type, tag, buf, ctx);
                }
                *target = Json::Object(Map::new());
            }
            if let Json::Object(map) = target
                && enter(wire_type, tag, buf, &ctx, level + 1, found)?
            {
                merge_loop(map, buf, ctx, |map, buf, ctx| {
                    let (tag, wire_type) = decode_key(buf)?;
                    if tag == FIRST {
                        merge_entry(map, wire_type, buf, ctx, level + 1, found)
                    } else {
                        skip_field(wire_type, tag, buf, ctx)
                    }
                })?;
            }
        }
        LIST => {
            if !target.is_array() {
                if !spend(SLOT) {
                    return skip_field(wire_type, tag, buf, ctx);
                }
                *target = Json::Array(Vec::new());
            }
            if let Json::Array(items) = target
                && enter(wire_type, tag, buf, &ctx, level + 1, found)?
            {
                merge_loop(items, buf, ctx, |items, buf, ctx| {
                    let (tag, wire_type) = decode_key(buf)?;
                    if tag == FIRST {
                        let mut item = Json::Null;
                        merge_message(&mut item, wire_type, buf, ctx, level + 1, found)?;
                        // Even an empty item takes its slot, and a `Vec` grows by doubling.
                        if spend(2 * SLOT) {
                            items.push(item);
                        }
                        Ok(())
                    } else {
                        skip_field(wire_type, tag, buf, ctx)
                    }
                })?;
            }
        }
        _ => skip_field(wire_type, tag, buf, ctx)?,
    }
    Ok(())
}

/// Whether to decode a struct or list that makes `depth` levels of nesting; past
/// `MAX_DECODE_DEPTH` it is skipped whole (no recursion) and the value marked too deep.
fn enter(
    wire_type: WireType,
    tag: u32,
    buf: &mut impl Buf,
    ctx: &DecodeContext,
    depth: usize,
    found: &mut Found,
) -> Result<bool, DecodeError> {
    check_wire_type(WireType::LengthDelimited, wire_type)?;
    if depth > MAX_DECODE_DEPTH {
        found.too_deep = true;
        skip_field(wire_type, tag, buf, ctx.clone())?;
        return Ok(false);
    }
    found.depth = found.depth.max(depth);
    Ok(true)
}

/// Merges a length-delimited `Value` message into `target`.
fn merge_message(
    target: &mut Json,
    wire_type: WireType,
    buf: &mut impl Buf,
    ctx: DecodeContext,
    level: usize,
    found: &mut Found,
) -> Result<(), DecodeError> {
    check_wire_type(WireType::LengthDelimited, wire_type)?;
    merge_loop(target, buf, ctx, |target, buf, ctx| {
        let (tag, wire_type) = decode_key(buf)?;
        merge_value(target, tag, wire_type, buf, ctx, level, found)
    })
}

/// Decodes one map entry of a `Struct` whose members sit inside `level` objects or arrays, and
/// puts it in `map` (replacing an earlier member with its key, as protobuf maps do).
fn merge_entry(
    map: &mut Map<String, Json>,
    wire_type: WireType,
    buf: &mut impl Buf,
    ctx: DecodeContext,
    level: usize,
    found: &mut Found,
) -> Result<(), DecodeError> {
    check_wire_type(WireType::LengthDelimited, wire_type)?;
    let mut entry = (String::new(), Json::Null);
    merge_loop(&mut entry, buf, ctx, |(key, value), buf, ctx| {
        let (tag, wire_type) = decode_key(buf)?;
        match tag {
            FIRST => string::merge(wire_type, key, buf, ctx),
            ENTRY_VALUE => merge_message(value, wire_type, buf, ctx, level, found),
            _ => skip_field(wire_type, tag, buf, ctx),
        }
    })?;
    if spend(MEMBER + entry.0.len()) {
        map.insert(entry.0, entry.1);
    }
    Ok(())
}

/// The length of a length-delimited field holding `len` bytes, its key included.
fn delimited_len(len: usize) -> usize {
    1 + encoded_len_varint(len as u64) + len
}

/// The encoded length of a `Value` message holding `value`.
fn value_len(value: &Json) -> usize {
    match value {
        // A oneof field is written even when it holds its default.
        Json::Null | Json::Bool(_) => 2,
        Json::Number(_) => 9,
        Json::String(text) => delimited_len(text.len()),
        Json::Array(items) => delimited_len(list_len(items)),
        Json::Object(map) => delimited_len(fields_len(map)),
    }
}

fn list_len(items: &[Json]) -> usize {
    items
        .iter()
        .map(|item| delimited_len(value_len(item)))
        .sum()
}

fn fields_len(map: &Map<String, Json>) -> usize {
    map.iter()
        .map(|(key, value)| delimited_len(entry_len(key, value)))
        .sum()
}

/// A map entry's length: prost leaves out an empty key (the default); a value always has a field
/// set, so it is never the default and always written.
fn entry_len(key: &str, value: &Json) -> usize {
    let key_len = if key.is_empty() {
        0
    } else {
        delimited_len(key.len())
    };
    key_len + delimited_len(value_len(value))
}

fn encode_value(value: &Json, buf: &mut impl BufMut) {
    match value {
        Json::Null => {
            encode_key(NULL, WireType::Varint, buf);
            encode_varint(0, buf);
        }
        Json::Bool(b) => {
            encode_key(BOOL, WireType::Varint, buf);
            encode_varint(u64::from(*b), buf);
        }
        Json::Number(n) => {
            encode_key(NUMBER, WireType::SixtyFourBit, buf);
            buf.put_f64_le(n.as_f64().unwrap_or(0.0));
        }
        Json::String(text) => {
            encode_key(STRING, WireType::LengthDelimited, buf);
            encode_varint(text.len() as u64, buf);
            buf.put_slice(text.as_bytes());
        }
        Json::Array(items) => {
            encode_key(LIST, WireType::LengthDelimited, buf);
            encode_varint(list_len(items) as u64, buf);
            for item in items {
                encode_key(FIRST, WireType::LengthDelimited, buf);
                encode_varint(value_len(item) as u64, buf);
                encode_value(item, buf);
            }
        }
        Json::Object(map) => {
            encode_key(STRUCT, WireType::LengthDelimited, buf);
            encode_varint(fields_len(map) as u64, buf);
            encode_fields(map, buf);
        }
    }
}

fn encode_fields(map: &Map<String, Json>, buf: &mut impl BufMut) {
    for (key, value) in map {
        encode_key(FIRST, WireType::LengthDelimited, buf);
        encode_varint(entry_len(key, value) as u64, buf);
        if !key.is_empty() {
            encode_key(FIRST, WireType::LengthDelimited, buf);
            encode_varint(key.len() as u64, buf);
            buf.put_slice(key.as_bytes());
        }
        encode_key(ENTRY_VALUE, WireType::LengthDelimited, buf);
        encode_varint(value_len(value) as u64, buf);
        encode_value(value, buf);
    }
}
