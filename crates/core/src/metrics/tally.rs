//! A labelled counter aggregated in atomics and exported through an observable counter.
//!
//! The SDK's synchronous counter hashes the whole attribute list with SipHash and allocates the
//! label strings on every `add`, and the per-call path records up to three counters a call
//! (`calls`, and `hook_decisions` for the rule hook and the permission rule; the cost is in
//! BENCHMARKS.md §9). Here a record is one FNV hash of a short name, a read lock and
//! an atomic add; the attributes are built only when a reader collects. Label values stay bounded
//! as before: the dynamic label is a registered tool, a configured hook or remote, a redaction
//! kind; the fixed label is a `&'static str` from a closed set.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use opentelemetry::KeyValue;
use opentelemetry::metrics::{AsyncInstrument, Meter};
use parking_lot::RwLock;

use crate::hash::{FNV1A_OFFSET, fnv1a_extend};

/// What a tally is called and labelled with.
#[derive(Debug, Clone, Copy)]
pub(super) struct Spec {
    pub name: &'static str,
    pub description: &'static str,
    /// The attribute key of the dynamic label (`None`: the counter has none).
    pub dynamic: Option<&'static str>,
    /// The attribute key of the fixed label (`None`: the counter has none).
    pub fixed: Option<&'static str>,
}

/// Counts by (dynamic label, fixed label), shared with the instrument's collection callback.
#[derive(Debug, Clone)]
pub(super) struct Tally {
    counts: Arc<Counts>,
}

type Counts = RwLock<HashMap<Labels, AtomicU64, BuildHasherDefault<Fnv>>>;

impl Tally {
    /// A tally registered on `meter` as the observable counter `spec` describes.
    pub(super) fn new(meter: &Meter, spec: Spec) -> Self {
        let tally = Tally {
            counts: Arc::default(),
        };
        let counts = tally.counts.clone();
        meter
            .u64_observable_counter(spec.name)
            .with_description(spec.description)
            .with_callback(move |observer| observe(&counts, spec, observer))
            .build();
        tally
    }

    /// Adds `n` under (`dynamic`, `fixed`); pass `""` for a label the counter does not have.
    pub(super) fn add(&self, dynamic: &str, fixed: &'static str, n: u64) {
        let key: &dyn Pair = &(dynamic, fixed);
        if let Some(count) = self.counts.read().get(key) {
            count.fetch_add(n, Ordering::Relaxed);
            return;
        }
        self.counts
            .write()
            .entry(Labels {
                dynamic: dynamic.into(),
                fixed,
            })
            .or_default()
            .fetch_add(n, Ordering::Relaxed);
    }
}

/// Reports every label set counted so far (a set appears with its first record, as with the
/// SDK's counters, and never goes back: the values are cumulative).
fn observe(counts: &Counts, spec: Spec, observer: &dyn AsyncInstrument<u64>) {
    for (labels, count) in counts.read().iter() {
        let mut attributes = Vec::with_capacity(2);
        if let Some(key) = spec.dynamic {
            attributes.push(KeyValue::new(key, labels.dynamic.to_string()));
        }
        if let Some(key) = spec.fixed {
            attributes.push(KeyValue::new(key, labels.fixed));
        }
        observer.observe(count.load(Ordering::Relaxed), &attributes);
    }
}

/// A stored label set.
#[derive(Debug)]
struct Labels {
    dynamic: Box<str>,
    fixed: &'static str,
}

/// A label set, stored or borrowed from a record: lets the map be searched with `(&str, &str)`
/// without building a key.
trait Pair {
    fn dynamic(&self) -> &str;
    fn fixed(&self) -> &str;
}

impl Pair for Labels {
    fn dynamic(&self) -> &str {
        &self.dynamic
    }
    fn fixed(&self) -> &str {
        self.fixed
    }
}

impl Pair for (&str, &'static str) {
    fn dynamic(&self) -> &str {
        self.0
    }
    fn fixed(&self) -> &str {
        self.1
    }
}

impl<'a> Borrow<dyn Pair + 'a> for Labels {
    fn borrow(&self) -> &(dyn Pair + 'a) {
        self
    }
}

impl Hash for dyn Pair + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.dynamic().hash(state);
        self.fixed().hash(state);
    }
}

impl PartialEq for dyn Pair + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.dynamic() == other.dynamic() && self.fixed() == other.fixed()
    }
}

impl Eq for dyn Pair + '_ {}

impl Hash for Labels {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self as &dyn Pair).hash(state);
    }
}

impl PartialEq for Labels {
    fn eq(&self, other: &Self) -> bool {
        (self as &dyn Pair) == (other as &dyn Pair)
    }
}

impl Eq for Labels {}

/// FNV-1a as a `Hasher`: the keys are a few bytes of operator-controlled names (a name the model
/// made up is never a label), so SipHash's flooding resistance buys nothing here.
#[derive(Debug)]
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(FNV1A_OFFSET)
    }
}

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        self.0 = fnv1a_extend(self.0, bytes);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_of_one_label_set_add_up_and_label_sets_stay_apart() {
        let tally = Tally {
            counts: Arc::default(),
        };
        tally.add("echo", "NONE", 1);
        tally.add("echo", "NONE", 2);
        tally.add("echo", "TIMEOUT", 1);
        tally.add("echo2", "NONE", 5);
        tally.add("", "COMPLETED", 1);
        let counts = tally.counts.read();
        let get = |d: &str, f: &'static str| {
            let key: &dyn Pair = &(d, f);
            counts.get(key).map(|c| c.load(Ordering::Relaxed))
        };
        assert_eq!(get("echo", "NONE"), Some(3));
        assert_eq!(get("echo", "TIMEOUT"), Some(1));
        assert_eq!(get("echo2", "NONE"), Some(5));
        assert_eq!(get("", "COMPLETED"), Some(1));
        assert_eq!(get("echo", "COMPLETED"), None);
        assert_eq!(counts.len(), 4);
    }
}
