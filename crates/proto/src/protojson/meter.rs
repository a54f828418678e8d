//! What the JSON values of one message cost once decoded, counted as they are decoded: the
//! codec decodes a message inside `metered`, and each value the wire decoder makes is charged
//! (`charge`). Past the allowance, decoding fails at once instead of building the rest.
//! Decoding a message is synchronous and runs on one thread, so the meter is that thread's.

use std::cell::Cell;

thread_local! {
    /// Bytes left in the running decode's allowance; `None` outside `metered`.
    static LEFT: Cell<Option<usize>> = const { Cell::new(None) };
    /// Bytes charged in the running decode.
    static SPENT: Cell<usize> = const { Cell::new(0) };
}

/// What a metered decode cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metered {
    /// Bytes charged (as `json::held_bytes` counts them, about).
    pub spent: usize,
    /// The allowance ran out: the decode was stopped.
    pub exceeded: bool,
}

/// Runs `decode` with an allowance of `limit` bytes for the JSON values it decodes.
pub fn metered<T>(limit: usize, decode: impl FnOnce() -> T) -> (T, Metered) {
    /// Puts the enclosing meter back however `decode` ends, a panic included: a meter left
    /// behind would cut every later decode on this thread short.
    struct Restore(Option<usize>, usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            LEFT.set(self.0);
            SPENT.set(self.1);
        }
    }
    let outer = Restore(LEFT.replace(Some(limit)), SPENT.replace(0));
    let out = decode();
    let spent = SPENT.get();
    drop(outer);
    let exceeded = spent > limit;
    (out, Metered { spent, exceeded })
}

/// Charges `bytes` to the running decode; `false` once its allowance is spent (the decoder
/// then stops). Outside `metered`, nothing is counted.
pub(super) fn charge(bytes: usize) -> bool {
    charged(bytes)
}

/// What each field of a message costs decoded before anything in it is, about: an element of
/// a repeated field or a map entry, even an empty one, takes a slot the value decoders never
/// see (a `Value` and its decode state, a map bucket and its key).
const PER_FIELD: usize = 128;

/// Charges the running decode for the top-level fields of the message in `bytes`, before it
/// is decoded: a message of millions of empty elements would otherwise cost its `Vec` and
/// reach the value decoders as nothing. `false` once the allowance is spent.
pub fn prepay_fields(bytes: &[u8]) -> bool {
    charge(top_level_fields(bytes).saturating_mul(PER_FIELD))
}

/// How many top-level fields the protobuf message in `bytes` holds (up to where it stops being
/// well formed: the decoder reports that).
fn top_level_fields(mut bytes: &[u8]) -> usize {
    use prost::encoding::decode_varint;
    let mut fields = 0;
    while !bytes.is_empty() {
        let Ok(key) = decode_varint(&mut bytes) else {
            break;
        };
        let skip = match key & 0x7 {
            0 => decode_varint(&mut bytes).map(|_| 0).ok(),
            1 => Some(8),
            2 => decode_varint(&mut bytes)
                .ok()
                .and_then(|len| usize::try_from(len).ok()),
            5 => Some(4),
            _ => None,
        };
        let Some(skip) = skip.filter(|n| *n <= bytes.len()) else {
            break;
        };
        bytes = &bytes[skip..];
        fields += 1;
    }
    fields
}

fn charged(bytes: usize) -> bool {
    let Some(left) = LEFT.get() else {
        return true;
    };
    SPENT.set(SPENT.get().saturating_add(bytes));
    match left.checked_sub(bytes) {
        Some(rest) => {
            LEFT.set(Some(rest));
            true
        }
        None => {
            LEFT.set(Some(0));
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_decode_is_charged_until_its_allowance_is_spent() {
        let (charged, cost) = metered(100, || (charge(60), charge(30), charge(20)));
        assert_eq!(charged, (true, true, false));
        assert_eq!(
            cost,
            Metered {
                spent: 110,
                exceeded: true
            }
        );
        let ((), cost) = metered(100, || {
            charge(100);
        });
        assert_eq!(
            cost,
            Metered {
                spent: 100,
                exceeded: false
            }
        );
        // Outside a metered decode nothing is counted, and nested decodes keep their own.
        assert!(charge(usize::MAX));
        let (inner, outer) = metered(10, || metered(1000, || charge(500)).1);
        assert_eq!((inner.spent, outer.spent), (500, 0));
    }

    #[test]
    fn every_top_level_field_is_prepaid_even_an_empty_one() {
        // Field 2, length-delimited, empty: two bytes each.
        let empties = [0x12u8, 0x00].repeat(1000);
        assert_eq!(top_level_fields(&empties), 1000);
        let ((), cost) = metered(usize::MAX, || {
            prepay_fields(&empties);
        });
        assert_eq!(cost.spent, 1000 * PER_FIELD);
        // A varint, a fixed64, a string; then a length past the end stops the count.
        assert_eq!(
            top_level_fields(&[
                0x08, 0x96, 0x01, 0x11, 0, 0, 0, 0, 0, 0, 0, 0, 0x1a, 1, b'x'
            ]),
            3
        );
        assert_eq!(top_level_fields(&[0x1a, 9, b'x']), 0);
    }
}
