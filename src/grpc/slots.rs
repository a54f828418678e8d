//! A list of weak references whose owners each hold a slot: an owner empties its slot when it is
//! dropped and the next one reuses it, so the list never holds more slots than owners have ever
//! been alive at once, and a sweep walks only those. The watchdogs over streams and replies that
//! their clients stopped reading keep their owners here. (slab has the same insert, remove and
//! reuse, but not the slot count the tests pin to prove slots are reused rather than grown.)

use std::sync::Weak;

/// Weak references to live owners, one slot each.
#[derive(Debug)]
pub(super) struct WeakSlots<T: ?Sized> {
    slots: Vec<Option<Weak<T>>>,
    free: Vec<usize>,
}

impl<T: ?Sized> Default for WeakSlots<T> {
    fn default() -> Self {
        WeakSlots {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T: ?Sized> WeakSlots<T> {
    /// Keeps `owner` in a free slot; answers the slot, for `remove`.
    pub(super) fn insert(&mut self, owner: Weak<T>) -> usize {
        match self.free.pop() {
            Some(at) => {
                self.slots[at] = Some(owner);
                at
            }
            None => {
                self.slots.push(Some(owner));
                self.slots.len() - 1
            }
        }
    }

    /// Empties slot `at` (an owner leaving).
    pub(super) fn remove(&mut self, at: usize) {
        if let Some(slot) = self.slots.get_mut(at)
            && slot.take().is_some()
        {
            self.free.push(at);
        }
    }

    /// Every owner still held.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Weak<T>> {
        self.slots.iter().flatten()
    }

    /// How many owners are held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    /// How many slots there are, held or free.
    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_removed_slot_is_reused_and_only_held_owners_are_walked() {
        let (a, b, c) = (Arc::new(1), Arc::new(2), Arc::new(3));
        let mut slots = WeakSlots::default();
        let at_a = slots.insert(Arc::downgrade(&a));
        let _at_b = slots.insert(Arc::downgrade(&b));
        slots.remove(at_a);
        slots.remove(at_a);
        assert_eq!(slots.insert(Arc::downgrade(&c)), at_a, "reused");
        assert_eq!((slots.len(), slots.capacity()), (2, 2));
        let held: Vec<i32> = slots
            .iter()
            .filter_map(|w| w.upgrade())
            .map(|v| *v)
            .collect();
        assert_eq!(held, [3, 2]);
    }
}
