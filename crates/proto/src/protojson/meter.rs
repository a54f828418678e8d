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
    let outer = (LEFT.replace(Some(limit)), SPENT.replace(0));
    let out = decode();
    LEFT.set(outer.0);
    let spent = SPENT.replace(outer.1);
    let exceeded = spent > limit;
    (out, Metered { spent, exceeded })
}

/// Charges `bytes` to the running decode; `false` once its allowance is spent (the decoder
/// then stops). Outside `metered`, nothing is counted.
pub(super) fn charge(bytes: usize) -> bool {
    charged(bytes)
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
}
