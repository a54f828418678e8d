//! Loop detection as a plain state machine over a session's recent operations.
//! An operation is (tool, canonical input, result hash). The window keeps digests, never the
//! inputs, and is the detector's only state beside a fixed 256-byte filter over it: counts,
//! predictions and warnings are read off it, so a session's detector stays `window` × 32 bytes
//! plus the filter however many calls it has seen.
//! Unlike the reference, the stop applies to the call about to repeat the looping operation (not
//! to whatever call comes next), and the warning is reported once per pattern.
//! A window shared through a session store is seeded from the store's slots and journals its
//! changes (pushes and clears, in order), which the store replays atomically on its copy, so two
//! batches of one session on two servers both count. That journal lives for one batch and is
//! the one other state a shared detector has (bounded: `journal_change`).

use std::collections::VecDeque;

use crate::{hash, json};

/// Thresholds for one tool (already resolved from global and per-tool config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// Repeats at which the pattern is reported (0 = never).
    pub warn_after: u32,
    /// Repeats at which the next identical call is refused (0 = never).
    pub stop_after: u32,
}

/// One operation to record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Operation<'a> {
    pub tool: &'a str,
    /// Canonical JSON of the input.
    pub input: &'a str,
    pub result: u64,
}

/// The pre-check's verdict for a call about to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    Pass,
    /// The call would repeat an operation already seen `repeats` times.
    Stop {
        repeats: u32,
        pattern: String,
    },
}

/// A recording crossed the warning threshold for the first time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub repeats: u32,
    pub pattern: String,
}

/// A (tool, input) pair as two independent 64-bit digests: telling two calls apart wrongly
/// would take a collision in both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CallKey(u64, u64);

impl CallKey {
    fn of(tool: &str, input: &str) -> Self {
        let fnv = hash::fnv1a_extend(hash::FNV1A_OFFSET, tool.as_bytes());
        let fnv = hash::fnv1a_extend(hash::fnv1a_extend(fnv, &[0]), input.as_bytes());
        // Tool and input are hashed apart and combined asymmetrically, so pairs do not alias.
        let words = hash::mix(hash::words64(tool.as_bytes())) ^ hash::words64(input.as_bytes());
        CallKey(fnv, words)
    }
}

impl CallKey {
    fn encode(self) -> [u8; CALL_BYTES] {
        let mut bytes = [0; CALL_BYTES];
        bytes[..8].copy_from_slice(&self.0.to_le_bytes());
        bytes[8..].copy_from_slice(&self.1.to_le_bytes());
        bytes
    }
}

/// A recorded operation: the call and what it returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct OpKey {
    call: CallKey,
    result: u64,
}

/// One place in the window.
#[derive(Debug, Clone, Copy)]
struct Slot {
    op: OpKey,
    /// The operation's pattern was reported. Every later slot of the same operation inherits the
    /// mark, so the newest one carries it: the pattern stays reported while any of it is in the
    /// window, and warns again only after it has left completely (or was cleared).
    warned: bool,
}

/// Bytes of a slot as a session store keeps it: the call's two digests, the result hash (each
/// little-endian) and the warned mark.
pub const SLOT_BYTES: usize = 25;

/// Bytes of a call's identity: a stored slot's first 16.
pub const CALL_BYTES: usize = 16;

/// Most changes a shared window journals (see `journal_change`).
const JOURNAL_MAX: usize = 4096;

/// A change to a shared window, for the store to replay on its copy in this order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A slot appended (the store trims its copy to the window).
    Pushed([u8; SLOT_BYTES]),
    /// Every slot of this call removed (a stop used the pattern up).
    Cleared([u8; CALL_BYTES]),
}

/// A session's sliding window of operations.
///
/// No index beside the window: maps keyed by operation churn with every distinct call, and a
/// hash table that keeps deleting and inserting doubles its buckets once its tombstones fill it
/// (256 for 100 entries), which made two maps 17 of a full session's 30 KB. Scanning the default
/// 100 slots was faster than those maps' lookups in a micro-benchmark; the cost grows linearly
/// with `window` (slower than the maps by 1000). The filter spares the scans for calls the
/// window has not seen, which is most calls.
#[derive(Debug, Clone)]
pub struct LoopDetector {
    capacity: usize,
    window: VecDeque<Slot>,
    filter: Filter,
    /// Changes since the window was seeded from a shared store; `None` for a window only this
    /// server holds.
    journal: Option<Vec<Change>>,
}

impl Slot {
    fn encode(self) -> [u8; SLOT_BYTES] {
        let mut bytes = [0; SLOT_BYTES];
        bytes[..CALL_BYTES].copy_from_slice(&self.op.call.encode());
        bytes[CALL_BYTES..24].copy_from_slice(&self.op.result.to_le_bytes());
        bytes[24] = u8::from(self.warned);
        bytes
    }

    fn decode(bytes: &[u8]) -> Option<Slot> {
        let bytes: &[u8; SLOT_BYTES] = bytes.try_into().ok()?;
        let word = |at: usize| {
            let mut word = [0; 8];
            word.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(word)
        };
        Some(Slot {
            op: OpKey {
                call: CallKey(word(0), word(8)),
                result: word(16),
            },
            warned: bytes[24] != 0,
        })
    }
}

/// How many slots of the window fall in each of 256 buckets of their call's digest: a bucket at
/// 0 proves the call absent without a scan. A bucket that reaches 255 stays there (it can no
/// longer count exactly), so 0 never lies.
#[derive(Debug, Clone)]
struct Filter([u8; 256]);

impl Filter {
    fn bucket(call: CallKey) -> usize {
        usize::from(call.1.to_le_bytes()[0])
    }

    fn may_hold(&self, call: CallKey) -> bool {
        self.0[Self::bucket(call)] != 0
    }

    fn add(&mut self, call: CallKey) {
        let count = &mut self.0[Self::bucket(call)];
        *count = count.saturating_add(1);
    }

    fn remove(&mut self, call: CallKey) {
        let count = &mut self.0[Self::bucket(call)];
        if *count != u8::MAX {
            *count = count.saturating_sub(1);
        }
    }
}

/// How a pattern is shown: `tool(input)`, with long inputs cut.
pub fn pattern(tool: &str, input: &str) -> String {
    format!("{tool}({})", json::truncate_chars(input, 200))
}

impl LoopDetector {
    /// A detector remembering the last `capacity` operations.
    pub fn new(capacity: usize) -> Self {
        LoopDetector {
            capacity: capacity.max(1),
            window: VecDeque::new(),
            filter: Filter([0; 256]),
            journal: None,
        }
    }

    /// A detector seeded with a shared store's slots (oldest first; malformed ones are skipped,
    /// and only the newest `capacity` kept) that journals its changes for `take_changes`.
    pub fn shared<'s>(capacity: usize, stored: impl IntoIterator<Item = &'s [u8]>) -> Self {
        let mut detector = LoopDetector::new(capacity);
        for slot in stored.into_iter().filter_map(Slot::decode) {
            if detector.window.len() >= detector.capacity
                && let Some(oldest) = detector.window.pop_front()
            {
                detector.filter.remove(oldest.op.call);
            }
            detector.filter.add(slot.op.call);
            detector.window.push_back(slot);
        }
        detector.journal = Some(Vec::new());
        detector
    }

    /// The changes journaled since the seed (or the last take), oldest first.
    pub fn take_changes(&mut self) -> Vec<Change> {
        self.journal
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Pure read: would running (tool, input) repeat an operation at or past the stop threshold?
    /// The operation is predicted from the latest result this exact call produced.
    pub fn check(&self, tool: &str, input: &str, thresholds: Thresholds) -> Check {
        if thresholds.stop_after == 0 {
            return Check::Pass;
        }
        let call = CallKey::of(tool, input);
        if !self.filter.may_hold(call) {
            return Check::Pass;
        }
        let Some(latest) = self.window.iter().rev().find(|s| s.op.call == call) else {
            return Check::Pass;
        };
        let repeats = self.count(latest.op);
        if repeats >= thresholds.stop_after {
            Check::Stop {
                repeats,
                pattern: pattern(tool, input),
            }
        } else {
            Check::Pass
        }
    }

    /// Records an executed (or refused) attempt; reports the warning once per pattern.
    pub fn record(&mut self, op: Operation<'_>, thresholds: Thresholds) -> Option<Warning> {
        if self.window.len() >= self.capacity {
            if let Some(oldest) = self.window.pop_front() {
                self.filter.remove(oldest.op.call);
            }
        } else if self.window.len() == self.window.capacity() {
            // Grow by doubling but stop at the window, not at the next power of two above it.
            let room = self
                .window
                .len()
                .max(4)
                .min(self.capacity - self.window.len());
            self.window.reserve_exact(room);
        }
        let key = OpKey {
            call: CallKey::of(op.tool, op.input),
            result: op.result,
        };
        let (mut repeats, mut warned) = (1, false);
        if self.filter.may_hold(key.call) {
            for slot in self.window.iter().filter(|s| s.op == key) {
                repeats += 1;
                warned |= slot.warned;
            }
        }
        self.filter.add(key.call);
        let warn = !warned && thresholds.warn_after > 0 && repeats >= thresholds.warn_after;
        let slot = Slot {
            op: key,
            warned: warned || warn,
        };
        self.window.push_back(slot);
        self.journal_push(slot);
        warn.then(|| Warning {
            repeats,
            pattern: pattern(op.tool, op.input),
        })
    }

    /// Forgets every operation of (tool, input): a stop uses the pattern up.
    pub fn clear(&mut self, tool: &str, input: &str) {
        let call = CallKey::of(tool, input);
        // The store's copy may hold slots this one no longer does, so the clear is always
        // journaled. Earlier pushes of the call stay: each also trimmed the window.
        self.journal_change(Change::Cleared(call.encode()));
        if !self.filter.may_hold(call) {
            return;
        }
        let filter = &mut self.filter;
        self.window.retain(|s| {
            let keep = s.op.call != call;
            if !keep {
                filter.remove(s.op.call);
            }
            keep
        });
    }

    pub fn len(&self) -> usize {
        self.window.len()
    }

    pub fn is_empty(&self) -> bool {
        self.window.is_empty()
    }

    /// Journals a pushed slot. Once the journal ends in `capacity` pushes in a row, those
    /// alone make the window whatever came before (each push trims it), so everything
    /// before them is dropped: exact, and it keeps a batch's journal near the window's size.
    fn journal_push(&mut self, slot: Slot) {
        self.journal_change(Change::Pushed(slot.encode()));
        let Some(journal) = &mut self.journal else {
            return;
        };
        let run = journal
            .iter()
            .rev()
            .take(self.capacity)
            .take_while(|c| matches!(c, Change::Pushed(_)))
            .count();
        if run == self.capacity && journal.len() > run {
            journal.drain(..journal.len() - run);
        }
    }

    /// Journals a change. A journal lives for one batch, so its pushes and clears are bounded
    /// by the batch's attempts; `JOURNAL_MAX` bounds it whatever the batch (past it the oldest
    /// change goes, which only a batch of thousands of attempts with stops among them meets).
    fn journal_change(&mut self, change: Change) {
        let Some(journal) = &mut self.journal else {
            return;
        };
        if journal.len() >= JOURNAL_MAX {
            journal.remove(0);
        }
        journal.push(change);
    }

    /// How many operations in the window are `op`.
    fn count(&self, op: OpKey) -> u32 {
        let n = self.window.iter().filter(|s| s.op == op).count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: Thresholds = Thresholds {
        warn_after: 3,
        stop_after: 10,
    };

    fn op<'a>(tool: &'a str, input: &'a str, result: u64) -> Operation<'a> {
        Operation {
            tool,
            input,
            result,
        }
    }

    #[test]
    fn the_eleventh_identical_call_is_stopped_and_only_that_call() {
        let mut d = LoopDetector::new(100);
        for i in 1..=10 {
            assert_eq!(
                d.check("read", "{\"p\":1}", DEFAULT),
                Check::Pass,
                "call {i}"
            );
            d.record(op("read", "{\"p\":1}", 7), DEFAULT);
        }
        assert_eq!(
            d.check("read", "{\"p\":1}", DEFAULT),
            Check::Stop {
                repeats: 10,
                pattern: "read({\"p\":1})".into()
            }
        );
        // A different call is not punished for the loop.
        assert_eq!(d.check("read", "{\"p\":2}", DEFAULT), Check::Pass);
        assert_eq!(d.check("write", "{\"p\":1}", DEFAULT), Check::Pass);
    }

    #[test]
    fn the_warning_fires_once_per_pattern_at_the_threshold() {
        let mut d = LoopDetector::new(100);
        let warnings: Vec<Option<u32>> = (0..5)
            .map(|_| d.record(op("t", "{}", 1), DEFAULT).map(|w| w.repeats))
            .collect();
        assert_eq!(warnings, [None, None, Some(3), None, None]);
        // Another pattern warns on its own.
        d.record(op("t", "{}", 2), DEFAULT);
        d.record(op("t", "{}", 2), DEFAULT);
        assert_eq!(
            d.record(op("t", "{}", 2), DEFAULT).map(|w| w.repeats),
            Some(3)
        );
    }

    #[test]
    fn a_changing_result_is_progress_not_a_loop() {
        let mut d = LoopDetector::new(100);
        for i in 0..20 {
            assert_eq!(d.check("poll", "{}", DEFAULT), Check::Pass);
            d.record(op("poll", "{}", i), DEFAULT);
        }
    }

    #[test]
    fn the_prediction_follows_the_latest_result() {
        let mut d = LoopDetector::new(100);
        for _ in 0..10 {
            d.record(op("t", "{}", 1), DEFAULT);
        }
        // The call now returns something new: the next call is predicted to repeat that.
        d.record(op("t", "{}", 2), DEFAULT);
        assert_eq!(d.check("t", "{}", DEFAULT), Check::Pass);
    }

    #[test]
    fn clearing_a_pattern_lets_the_next_batch_proceed() {
        let mut d = LoopDetector::new(100);
        for _ in 0..10 {
            d.record(op("t", "{}", 1), DEFAULT);
        }
        d.record(op("u", "{}", 1), DEFAULT);
        d.clear("t", "{}");
        assert_eq!(d.check("t", "{}", DEFAULT), Check::Pass);
        assert_eq!(d.len(), 1);
        for _ in 0..2 {
            assert_eq!(d.record(op("t", "{}", 1), DEFAULT), None);
        }
        assert!(
            d.record(op("t", "{}", 1), DEFAULT).is_some(),
            "warns again after a clear"
        );
    }

    #[test]
    fn old_operations_slide_out_of_the_window() {
        let mut d = LoopDetector::new(5);
        for _ in 0..3 {
            d.record(
                op("t", "{}", 1),
                Thresholds {
                    warn_after: 0,
                    stop_after: 3,
                },
            );
        }
        assert!(matches!(
            d.check(
                "t",
                "{}",
                Thresholds {
                    warn_after: 0,
                    stop_after: 3
                }
            ),
            Check::Stop { .. }
        ));
        for i in 0..5 {
            d.record(op("other", "{}", i), DEFAULT);
        }
        assert_eq!(d.len(), 5);
        assert_eq!(
            d.check(
                "t",
                "{}",
                Thresholds {
                    warn_after: 0,
                    stop_after: 3
                }
            ),
            Check::Pass
        );
    }

    #[test]
    fn a_pattern_warns_again_only_after_leaving_the_window() {
        let th = Thresholds {
            warn_after: 2,
            stop_after: 0,
        };
        let mut d = LoopDetector::new(4);
        let warned = |d: &mut LoopDetector, tool| d.record(op(tool, "{}", 1), th).is_some();
        assert!(!warned(&mut d, "a"));
        assert!(warned(&mut d, "a"));
        for tool in ["b", "c", "d"] {
            warned(&mut d, tool);
        }
        // The first `a` slid out; the reported one is still in: no second warning.
        assert!(!warned(&mut d, "a"));
        for tool in ["e", "f", "g", "h"] {
            warned(&mut d, tool);
        }
        // Every `a` has left the window: the pattern is new again.
        assert!(!warned(&mut d, "a"));
        assert!(warned(&mut d, "a"));
    }

    #[test]
    fn the_window_is_all_a_detector_keeps_whatever_it_has_seen() {
        for mut d in [LoopDetector::new(100), LoopDetector::shared(100, [])] {
            let mut clears = 0;
            for i in 0..10_000u64 {
                let input = format!("{{\"n\":{}}}", i % 700);
                d.record(op("t", &input, i % 3), DEFAULT);
                if i % 97 == 0 {
                    d.clear("t", &input);
                    clears += 1;
                }
            }
            assert!(d.len() <= 100);
            assert!(d.window.capacity() <= 100, "{} slots", d.window.capacity());
            // A shared window's journal stays bounded, however many changes it saw.
            let journal = d.journal.as_ref().map_or(0, Vec::len);
            assert!(
                journal <= JOURNAL_MAX,
                "{journal} changes after {clears} clears"
            );
        }
        // Nothing beside the window, its size, the fixed filter and the journal: a field added
        // here must be bounded too (maps keyed by operation were not: they settled at twice
        // their entries).
        assert_eq!(
            std::mem::size_of::<LoopDetector>(),
            std::mem::size_of::<usize>()
                + std::mem::size_of::<VecDeque<Slot>>()
                + 256
                + std::mem::size_of::<Option<Vec<Change>>>()
        );
    }

    #[test]
    fn the_filter_answers_exactly_as_a_plain_scan() {
        // The reference scans every time: all its buckets saturated, so none ever reads zero.
        let scanning = |capacity| {
            let mut d = LoopDetector::new(capacity);
            d.filter = Filter([u8::MAX; 256]);
            d
        };
        let th = Thresholds {
            warn_after: 3,
            stop_after: 400,
        };
        for capacity in [5, 100, 1000] {
            let (mut fast, mut plain) = (LoopDetector::new(capacity), scanning(capacity));
            let step = |d1: &mut LoopDetector, d2: &mut LoopDetector, input: &str, result| {
                assert_eq!(
                    d1.check("t", input, th),
                    d2.check("t", input, th),
                    "{input}"
                );
                assert_eq!(
                    d1.record(op("t", input, result), th),
                    d2.record(op("t", input, result), th),
                    "{input}"
                );
            };
            // One operation 300 times saturates its bucket; then many distinct ones share
            // buckets and slide everything out; clears take operations out from the middle.
            for _ in 0..300 {
                step(&mut fast, &mut plain, "{\"hot\":1}", 1);
            }
            let hot = Filter::bucket(CallKey::of("t", "{\"hot\":1}"));
            if capacity >= 255 {
                assert_eq!(fast.filter.0[hot], u8::MAX, "saturated");
            }
            for i in 0..5_000u64 {
                let input = format!("{{\"n\":{}}}", i % 1_300);
                step(&mut fast, &mut plain, &input, i % 2);
                if i % 131 == 0 {
                    fast.clear("t", &input);
                    plain.clear("t", &input);
                }
                if i % 977 == 0 {
                    step(&mut fast, &mut plain, "{\"hot\":1}", 1);
                }
            }
            assert_eq!(fast.len(), plain.len());
            // Everything the window holds is counted (a saturated bucket counts at least 255).
            let held: usize = fast.filter.0.iter().map(|&c| usize::from(c)).sum();
            assert!(
                held >= fast.len().min(255),
                "{held} for {} slots",
                fast.len()
            );
        }
    }

    #[test]
    fn a_saturated_bucket_never_reads_empty() {
        // 300 repeats count 255 in their bucket; once 255 of them slide out, 45 remain, which
        // is still a loop: a bucket that had counted down to zero would hide them.
        let th = Thresholds {
            warn_after: 0,
            stop_after: 40,
        };
        let mut d = LoopDetector::new(1000);
        let hot = "{\"hot\":1}";
        for _ in 0..300 {
            d.record(op("t", hot, 1), th);
        }
        let bucket = Filter::bucket(CallKey::of("t", hot));
        let others = (0u64..)
            .map(|i| format!("{{\"n\":{i}}}"))
            .filter(|input| Filter::bucket(CallKey::of("t", input)) != bucket);
        for input in others.take(955) {
            d.record(op("t", &input, 1), th);
        }
        assert_eq!(d.len(), 1000);
        assert_eq!(
            d.count(OpKey {
                call: CallKey::of("t", hot),
                result: 1
            }),
            45
        );
        assert!(matches!(
            d.check("t", hot, th),
            Check::Stop { repeats: 45, .. }
        ));
    }

    #[test]
    fn zero_thresholds_switch_warning_and_stopping_off() {
        let off = Thresholds {
            warn_after: 0,
            stop_after: 0,
        };
        let mut d = LoopDetector::new(100);
        for _ in 0..50 {
            assert_eq!(d.record(op("t", "{}", 1), off), None);
        }
        assert_eq!(d.check("t", "{}", off), Check::Pass);
    }

    /// What a store does with the journal: replay it on its copy, trimmed to the window at
    /// every push as the window is.
    fn replay(stored: &mut Vec<Vec<u8>>, changes: Vec<Change>, capacity: usize) {
        for change in changes {
            match change {
                Change::Pushed(slot) => {
                    stored.push(slot.to_vec());
                    let excess = stored.len().saturating_sub(capacity);
                    stored.drain(..excess);
                }
                Change::Cleared(call) => stored.retain(|s| s[..CALL_BYTES] != call),
            }
        }
    }

    #[test]
    fn a_replayed_journal_leaves_the_store_as_the_window() {
        // The store holds three X; the batch pushes Y three times (the window lets every X go),
        // then a stop clears Y: the window is empty, and so must the store be.
        let mut stored: Vec<Vec<u8>> = Vec::new();
        let mut d = LoopDetector::shared(3, stored.iter().map(Vec::as_slice));
        for _ in 0..3 {
            d.record(op("x", "{}", 1), DEFAULT);
        }
        replay(&mut stored, d.take_changes(), 3);
        let mut e = LoopDetector::shared(3, stored.iter().map(Vec::as_slice));
        for _ in 0..3 {
            e.record(op("y", "{}", 1), DEFAULT);
        }
        e.clear("y", "{}");
        assert!(e.is_empty());
        replay(&mut stored, e.take_changes(), 3);
        assert!(
            stored.is_empty(),
            "{} slots the window had let go",
            stored.len()
        );
    }

    #[test]
    fn two_servers_sharing_a_window_both_count() {
        let mut stored: Vec<Vec<u8>> = Vec::new();
        // Two batches at once on two servers, each seeded before the other saved.
        for _ in 0..5 {
            let seed = || LoopDetector::shared(100, stored.iter().map(Vec::as_slice));
            let (mut a, mut b) = (seed(), seed());
            a.record(op("t", "{}", 1), DEFAULT);
            b.record(op("t", "{}", 1), DEFAULT);
            replay(&mut stored, a.take_changes(), 100);
            replay(&mut stored, b.take_changes(), 100);
        }
        let d = LoopDetector::shared(100, stored.iter().map(Vec::as_slice));
        assert_eq!(d.len(), 10);
        assert_eq!(
            d.check("t", "{}", DEFAULT),
            Check::Stop {
                repeats: 10,
                pattern: "t({})".into()
            }
        );
    }

    #[test]
    fn a_shared_clear_removes_what_the_store_holds_and_the_journal_stays_bounded() {
        let mut stored: Vec<Vec<u8>> = Vec::new();
        let mut d = LoopDetector::shared(3, stored.iter().map(Vec::as_slice));
        for i in 0..10 {
            d.record(op("u", "{}", i), DEFAULT);
        }
        d.record(op("t", "{}", 1), DEFAULT);
        let changes = d.take_changes();
        assert_eq!(
            changes.len(),
            3,
            "the last pushes that fill the window decide it"
        );
        assert!(d.take_changes().is_empty(), "taken once");
        replay(&mut stored, changes, 3);
        let mut e = LoopDetector::shared(3, stored.iter().map(Vec::as_slice));
        assert_eq!(e.len(), 3);
        e.clear("t", "{}");
        e.record(op("t", "{}", 1), DEFAULT);
        e.clear("t", "{}");
        let changes = e.take_changes();
        assert_eq!(
            changes.len(),
            3,
            "every change short of a full window is kept"
        );
        replay(&mut stored, changes, 3);
        assert_eq!(stored.len(), 2);
        // Malformed slots from a store are skipped, not trusted.
        stored.push(vec![1, 2, 3]);
        assert_eq!(
            LoopDetector::shared(3, stored.iter().map(Vec::as_slice)).len(),
            2
        );
    }

    #[test]
    fn a_slot_survives_the_store_unchanged() {
        let mut d = LoopDetector::shared(10, std::iter::empty());
        for _ in 0..3 {
            d.record(op("t", "{\"a\":1}", 42), DEFAULT);
        }
        let stored: Vec<Vec<u8>> = d
            .take_changes()
            .into_iter()
            .map(|c| match c {
                Change::Pushed(s) => s.to_vec(),
                Change::Cleared(_) => unreachable!(),
            })
            .collect();
        let mut e = LoopDetector::shared(10, stored.iter().map(Vec::as_slice));
        // The warned mark came along: the pattern does not warn again.
        assert_eq!(e.record(op("t", "{\"a\":1}", 42), DEFAULT), None);
        assert_eq!(e.len(), 4);
    }
}
