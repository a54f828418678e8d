//! The JSON-backed `Value` and `Struct` against prost's own `prost_types`: the same bytes written,
//! the same JSON read, and what JSON cannot hold refused with the path.

use proptest::prelude::*;
use prost::Message;
use prost_types::value::Kind;
use serde_json::{Map, json};

use super::*;

/// The reference: JSON as a `prost_types::Value`, numbers as doubles.
fn reference(value: &serde_json::Value) -> prost_types::Value {
    let kind = match value {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(*b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap()),
        serde_json::Value::String(s) => Kind::StringValue(s.clone()),
        serde_json::Value::Array(items) => Kind::ListValue(prost_types::ListValue {
            values: items.iter().map(reference).collect(),
        }),
        serde_json::Value::Object(map) => Kind::StructValue(reference_struct(map)),
    };
    prost_types::Value { kind: Some(kind) }
}

fn reference_struct(map: &Map<String, serde_json::Value>) -> prost_types::Struct {
    prost_types::Struct {
        fields: map.iter().map(|(k, v)| (k.clone(), reference(v))).collect(),
    }
}

fn number(n: f64) -> prost_types::Value {
    prost_types::Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

fn decode(bytes: &[u8]) -> Value {
    Value::decode(bytes).unwrap()
}

fn nested(levels: usize) -> serde_json::Value {
    let mut v = json!(1);
    for i in 0..levels {
        v = if i % 2 == 0 {
            json!([v])
        } else {
            json!({"k": v})
        };
    }
    v
}

fn json_strategy() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i32>().prop_map(|n| json!(n)),
        (-1e6f64..1e6).prop_map(|n| json!(n)),
        ".{0,8}".prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(".{0,6}", inner, 0..6)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn writes_the_bytes_prost_writes_and_reads_them_back(value in json_strategy()) {
        let ours = Value::from(value.clone());
        let theirs = reference(&value);
        prop_assert_eq!(ours.encoded_len(), theirs.encoded_len());
        prop_assert_eq!(ours.encode_to_vec(), theirs.encode_to_vec());
        let back = decode(&theirs.encode_to_vec()).into_json_within(64, &"x").unwrap();
        // Numbers come back as doubles would: integral ones as integers.
        let expected: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&value).unwrap()).unwrap();
        prop_assert_eq!(back.to_string(), normalise(&expected).to_string());
        if let serde_json::Value::Object(map) = &value {
            let ours = Struct::from(map.clone());
            prop_assert_eq!(ours.encode_to_vec(), reference_struct(map).encode_to_vec());
            let back = Struct::decode(&*reference_struct(map).encode_to_vec()).unwrap();
            prop_assert_eq!(back.into_json(), normalise(&value).as_object().unwrap().clone());
        }
    }
}

/// `value` with every number as a double would bring it back.
fn normalise(value: &serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Number(n) => json_number(n.as_f64().unwrap()).unwrap(),
        serde_json::Value::Array(items) => items.iter().map(normalise).collect(),
        serde_json::Value::Object(map) => {
            serde_json::Value::Object(map.iter().map(|(k, v)| (k.clone(), normalise(v))).collect())
        }
        other => other.clone(),
    }
}

#[test]
fn integral_numbers_become_integers_within_two_to_the_53() {
    let read = |n: f64| decode(&number(n).encode_to_vec()).into_json_within(64, &"x");
    assert_eq!(read(2.0).unwrap(), json!(2));
    assert_eq!(read(-7.0).unwrap(), json!(-7));
    assert_eq!(read(2.5).unwrap(), json!(2.5));
    assert_eq!(
        read(9_007_199_254_740_992.0).unwrap(),
        json!(9_007_199_254_740_992_i64)
    );
    assert_eq!(read(1e20).unwrap(), json!(1e20));
    assert_eq!(read(2.0).unwrap().to_string(), "2");
}

#[test]
fn a_number_that_is_not_finite_is_refused_with_its_path_or_read_as_null() {
    for n in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let inside = prost_types::Value {
            kind: Some(Kind::ListValue(prost_types::ListValue {
                values: vec![number(1.0), number(n)],
            })),
        };
        let value = decode(&inside.encode_to_vec());
        assert_eq!(
            value
                .clone()
                .into_json_within(64, &"calls[3]")
                .unwrap_err()
                .to_string(),
            "calls[3] holds a number that is not finite"
        );
        assert_eq!(value.into_json(), json!([1, null]));
        let map = prost_types::Struct {
            fields: [("n".to_owned(), number(n))].into_iter().collect(),
        };
        let decoded = Struct::decode(&*map.encode_to_vec()).unwrap();
        assert_eq!(
            decoded
                .into_json_within(64, &"context")
                .unwrap_err()
                .to_string(),
            "context holds a number that is not finite"
        );
    }
}

#[test]
fn nesting_is_counted_as_json_depth_and_refused_past_the_limit() {
    for levels in [0, 1, 2, 31, 32, 33, 64] {
        let bytes = reference(&nested(levels)).encode_to_vec();
        let value = decode(&bytes);
        assert_eq!(value.found.unwrap().depth, levels);
        assert!(value.clone().into_json_within(levels, &"x").is_ok());
        if levels > 0 {
            assert_eq!(
                value
                    .into_json_within(levels - 1, &"calls[0]")
                    .unwrap_err()
                    .to_string(),
                format!("calls[0] nests deeper than {} levels", levels - 1)
            );
        }
        // Made from JSON, the same answer.
        let made = Value::from(nested(levels));
        assert!(made.clone().into_json_within(levels, &"x").is_ok());
        assert_eq!(
            made.into_json_within(levels.max(1) - 1, &"x").is_err(),
            levels > 0
        );
    }
    let object = Struct::from(json!({"a": {"b": 1}}).as_object().unwrap().clone());
    assert!(object.clone().into_json_within(2, &"x").is_ok());
    assert!(object.into_json_within(1, &"x").is_err());
    let decoded = Struct::decode(
        &*reference_struct(json!({"a": {"b": 1}}).as_object().unwrap()).encode_to_vec(),
    )
    .unwrap();
    assert!(decoded.clone().into_json_within(2, &"x").is_ok());
    assert!(decoded.into_json_within(1, &"x").is_err());
}

#[test]
fn nesting_past_the_decode_limit_is_skipped_without_recursion_and_refused() {
    // 5 000 levels, each a `Value` holding a `ListValue` holding the next (prost's own decoder
    // would stop at 100 messages). Past the limit the rest is skipped as one field.
    let mut bytes = reference(&json!(1)).encode_to_vec();
    for _ in 0..5_000 {
        let mut list = Vec::new();
        prost::encoding::encode_key(1, prost::encoding::WireType::LengthDelimited, &mut list);
        prost::encoding::encode_varint(bytes.len() as u64, &mut list);
        list.extend_from_slice(&bytes);
        let mut value = Vec::new();
        prost::encoding::encode_key(6, prost::encoding::WireType::LengthDelimited, &mut value);
        prost::encoding::encode_varint(list.len() as u64, &mut value);
        value.extend_from_slice(&list);
        bytes = value;
    }
    let value = decode(&bytes);
    assert_eq!(
        value
            .clone()
            .into_json_within(MAX_REPLY_DEPTH, &"calls[0]")
            .unwrap_err()
            .to_string(),
        format!("calls[0] nests deeper than {MAX_REPLY_DEPTH} levels")
    );
    // The level past the limit is left an empty list.
    assert_eq!(depth(&value.into_json()), MAX_DECODE_DEPTH + 1);
}

#[test]
fn merges_as_protobuf_does() {
    let one = |v: serde_json::Value| reference(&v).encode_to_vec();
    // Two struct_value fields merge; a later member replaces one with its key.
    let bytes = [one(json!({"a": 1, "b": 2})), one(json!({"b": 3, "c": 4}))].concat();
    assert_eq!(decode(&bytes).into_json(), json!({"a": 1, "b": 3, "c": 4}));
    // Two list_value fields append.
    let bytes = [one(json!([1])), one(json!([2, 3]))].concat();
    assert_eq!(decode(&bytes).into_json(), json!([1, 2, 3]));
    // The last oneof field wins.
    let bytes = [one(json!([1])), one(json!("s")), one(json!(true))].concat();
    assert_eq!(decode(&bytes).into_json(), json!(true));
    // Unknown fields are skipped; an empty message is null; an entry without a value is null.
    let bytes = [vec![0x38, 0x05], one(json!(7))].concat();
    assert_eq!(decode(&bytes).into_json(), json!(7));
    assert_eq!(decode(&[]).into_json(), serde_json::Value::Null);
    let entry_without_value = [0x2a, 0x05, 0x0a, 0x03, 0x0a, 0x01, b'k'];
    assert_eq!(decode(&entry_without_value).into_json(), json!({"k": null}));
    // An empty key is written as prost writes it (left out) and read back.
    let empty_key = json!({"": 1});
    assert_eq!(
        Value::from(empty_key.clone()).encode_to_vec(),
        one(empty_key.clone())
    );
    assert_eq!(decode(&one(empty_key.clone())).into_json(), empty_key);
}

#[test]
fn malformed_bytes_are_a_decode_error() {
    let good = reference(&json!({"a": ["x", 1]})).encode_to_vec();
    for cut in 1..good.len() {
        assert!(Value::decode(&good[..cut]).is_err(), "cut at {cut}");
    }
    // Not UTF-8.
    assert!(Value::decode(&[0x1a, 0x01, 0xff][..]).is_err());
    // A struct_value with the wrong wire type.
    assert!(Value::decode(&[0x28, 0x01][..]).is_err());
}

#[test]
fn what_was_sent_is_remembered_even_when_a_later_field_replaces_it() {
    // NaN, then 1.0: the value reads 1, but the message held a number JSON has no word for.
    let bytes = [
        number(f64::NAN).encode_to_vec(),
        number(1.0).encode_to_vec(),
    ]
    .concat();
    let value = decode(&bytes);
    assert_eq!(value.json(), &json!(1));
    assert!(value.into_json_within(64, &"x").is_err());
}

#[test]
fn merging_into_a_value_made_from_json_counts_the_depth_it_already_had() {
    let mut value = Value::from(nested(10));
    value
        .merge(&*reference(&json!(true)).encode_to_vec())
        .unwrap();
    assert_eq!(value.json(), &json!(true));
    let mut deep = Value::from(json!([[[[1]]]]));
    deep.merge(&*reference(&json!([2])).encode_to_vec())
        .unwrap();
    assert_eq!(deep.json(), &json!([[[[1]]], 2]));
    assert!(deep.clone().into_json_within(4, &"x").is_ok());
    assert!(deep.into_json_within(3, &"x").is_err());
    let mut object = Struct::from(json!({"a": {"b": {}}}).as_object().unwrap().clone());
    object
        .merge(&*reference_struct(json!({"c": 1}).as_object().unwrap()).encode_to_vec())
        .unwrap();
    assert!(object.clone().into_json_within(3, &"x").is_ok());
    assert!(object.into_json_within(2, &"x").is_err());
}

#[test]
fn a_metered_decode_stops_building_once_its_allowance_is_spent() {
    use prost::Message;
    let small = serde_json::json!({"items": vec![serde_json::json!({"k": 1}); 1000]});
    let bytes = super::Value::from(small.clone()).encode_to_vec();
    assert!(bytes.len() < 25_000, "{}", bytes.len());
    // Whole within a generous allowance, costing what `held_bytes` would say, about.
    let (decoded, cost) = super::metered(usize::MAX, || super::Value::decode(&bytes[..]));
    assert_eq!(decoded.unwrap().into_json(), small);
    assert!(!cost.exceeded);
    assert!((600_000..900_000).contains(&cost.spent), "{}", cost.spent);
    // Past a small one, the rest is read past, not built.
    let (decoded, cost) = super::metered(50_000, || super::Value::decode(&bytes[..]));
    assert!(cost.exceeded);
    // (What was built is dropped: the codec refuses the message.)
    let partial = decoded.unwrap().into_json();
    assert!(partial.to_string().len() < 1_000, "{partial}");
}
