//! The parallel planner: which earlier calls each call must wait for. Pure and table-tested.
//! Two calls conflict when either is not concurrency-safe, when they share a resource key, or
//! when they are the same operation (tool and canonical input: so a burst of identical calls
//! cannot slip past loop detection). A call waits for every earlier call it conflicts with, so
//! conflicting calls never run out of the model's order; everything else may run at once.
//! Unlike greedy wave planning, a call never waits for an unrelated slow call.

/// What the planner knows about one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Slot {
    /// Whether the call executes a tool at all (refused and unknown calls are answered at once
    /// and conflict with nothing).
    pub runs: bool,
    /// The tool says this input may run alongside other calls.
    pub concurrency_safe: bool,
    pub resource_key: Option<String>,
    /// Tool name and canonical input.
    pub operation: String,
}

/// For each call, the earlier calls that must finish before it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub waits_for: Vec<Vec<usize>>,
}

fn conflicts(a: &Slot, b: &Slot) -> bool {
    if !a.runs || !b.runs {
        return false;
    }
    !a.concurrency_safe
        || !b.concurrency_safe
        || (a.resource_key.is_some() && a.resource_key == b.resource_key)
        || a.operation == b.operation
}

/// Plans a parallel batch.
pub fn plan(slots: &[Slot]) -> Plan {
    let waits_for = slots
        .iter()
        .enumerate()
        .map(|(i, slot)| (0..i).filter(|&j| conflicts(&slots[j], slot)).collect())
        .collect();
    Plan { waits_for }
}

/// Plans a sequential batch: every call waits for the one before it.
pub fn chain(len: usize) -> Plan {
    Plan {
        waits_for: (0..len)
            .map(|i| if i == 0 { Vec::new() } else { vec![i - 1] })
            .collect(),
    }
}

impl Plan {
    /// The wave each call would run in with unlimited concurrency and equal durations (for
    /// documentation and tests): one more than the latest wave it waits for.
    #[cfg(test)]
    pub(crate) fn waves(&self) -> Vec<Vec<usize>> {
        let mut level = vec![0usize; self.waits_for.len()];
        for (i, deps) in self.waits_for.iter().enumerate() {
            level[i] = deps.iter().map(|&j| level[j] + 1).max().unwrap_or(0);
        }
        let depth = level.iter().max().map_or(0, |m| m + 1);
        let mut waves = vec![Vec::new(); depth];
        for (i, l) in level.into_iter().enumerate() {
            waves[l].push(i);
        }
        waves
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `R:a` safe with key a, `R` safe without key, `E` unsafe, `X` not run; `@n` distinct ops.
    fn slot(spec: &str, n: usize) -> Slot {
        let (kind, key) = spec
            .split_once(':')
            .map_or((spec, None), |(k, key)| (k, Some(key.to_owned())));
        Slot {
            runs: kind != "X",
            concurrency_safe: kind == "R",
            resource_key: key,
            operation: format!("op{n}"),
        }
    }

    #[track_caller]
    fn check(specs: &[&str], expected_waves: &[&[usize]]) {
        let slots: Vec<Slot> = specs.iter().enumerate().map(|(i, s)| slot(s, i)).collect();
        let waves = plan(&slots).waves();
        let expected: Vec<Vec<usize>> = expected_waves.iter().map(|w| w.to_vec()).collect();
        assert_eq!(waves, expected, "{specs:?}");
    }

    #[test]
    fn all_safe_calls_without_keys_run_together() {
        check(&["R", "R", "R", "R"], &[&[0, 1, 2, 3]]);
    }

    #[test]
    fn an_unsafe_call_is_a_barrier_both_ways() {
        check(&["R", "E", "R"], &[&[0], &[1], &[2]]);
        check(&["E", "E"], &[&[0], &[1]]);
    }

    #[test]
    fn same_keys_split_and_different_keys_share() {
        // The reference's example: A(/x), B(/x), C(/y) -> A and C together, B later.
        check(&["R:x", "R:x", "R:y"], &[&[0, 2], &[1]]);
    }

    #[test]
    fn the_reference_reordering_case_keeps_conflicting_calls_in_order() {
        // Read(a) Read(b) Edit(c)* Grep Read(a) Stat: the reference ran Grep and Stat before the
        // unsafe Edit that precedes them. Here nothing after Edit starts before it finishes.
        check(
            &["R:a", "R:b", "E", "R", "R:a", "R"],
            &[&[0, 1], &[2], &[3, 4, 5]],
        );
    }

    #[test]
    fn identical_operations_conflict() {
        let a = Slot {
            runs: true,
            concurrency_safe: true,
            resource_key: None,
            operation: "echo{}".into(),
        };
        let b = Slot {
            operation: "echo{\"x\":1}".into(),
            ..a.clone()
        };
        assert_eq!(
            plan(&[a.clone(), a.clone(), b]).waits_for,
            vec![vec![], vec![0], vec![]]
        );
    }

    #[test]
    fn calls_that_do_not_run_conflict_with_nothing() {
        check(&["E", "X", "E"], &[&[0, 1], &[2]]);
    }

    #[test]
    fn no_calls_no_waves_and_chains_are_sequential() {
        check(&[], &[]);
        assert_eq!(chain(3).waves(), vec![vec![0], vec![1], vec![2]]);
    }

    #[test]
    fn a_call_waits_only_for_what_it_conflicts_with() {
        let slots: Vec<Slot> = ["R:x", "R:y", "R:y"]
            .iter()
            .enumerate()
            .map(|(i, s)| slot(s, i))
            .collect();
        assert_eq!(plan(&slots).waits_for, vec![vec![], vec![], vec![1]]);
    }
}
