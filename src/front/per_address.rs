//! Counts per key with a bound: each turn taken is given back when its guard drops. Above all
//! per client address, where a client is counted by its IPv4 address (also when mapped into
//! IPv6) or its IPv6 /64, which one host usually holds whole: the transport's connection and
//! TLS handshake bounds and the admin listener's use it; the console's live streams count
//! per identity.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use parking_lot::Mutex;

/// How many turns each key holds now, with a bound per key taken: each turn is given back
/// when its guard drops. Keyed by client address (`PerAddress`) for connections, and by
/// identity for the console's live streams.
#[derive(Debug)]
pub(crate) struct Turns<K> {
    counts: Mutex<HashMap<K, usize>>,
}

impl<K> Default for Turns<K> {
    fn default() -> Self {
        Turns {
            counts: Mutex::new(HashMap::new()),
        }
    }
}

/// One turn of one key; given back when dropped.
#[derive(Debug)]
pub(crate) struct Turn<K: Eq + Hash> {
    owner: Arc<Turns<K>>,
    key: K,
}

impl<K: Eq + Hash + Clone> Turns<K> {
    /// A turn for `key`, unless it holds `max` already (0: no bound).
    pub(crate) fn take_for(self: &Arc<Self>, key: K, max: usize) -> Option<Turn<K>> {
        let mut counts = self.counts.lock();
        let held = counts.entry(key.clone()).or_insert(0);
        // At the bound `held` is above zero: nothing was inserted for this refusal.
        if max > 0 && *held >= max {
            return None;
        }
        *held += 1;
        Some(Turn {
            owner: self.clone(),
            key,
        })
    }

    /// How many turns `key` holds.
    pub(crate) fn held(&self, key: &K) -> usize {
        self.counts.lock().get(key).copied().unwrap_or(0)
    }

    /// How many keys hold a turn.
    #[cfg(test)]
    pub(crate) fn addresses(&self) -> usize {
        self.counts.lock().len()
    }
}

impl<K: Eq + Hash> Drop for Turn<K> {
    fn drop(&mut self) {
        let mut counts = self.owner.counts.lock();
        if let Some(held) = counts.get_mut(&self.key) {
            *held -= 1;
            if *held == 0 {
                counts.remove(&self.key);
            }
        }
    }
}

/// Turns per client address (as `client_of` counts it).
pub(crate) type PerAddress = Turns<IpAddr>;
/// One turn of one client address.
pub(crate) type AddressTurn = Turn<IpAddr>;

impl PerAddress {
    /// A turn for the client at `ip`, unless its address holds `max` already (0: no bound).
    pub(crate) fn take(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<AddressTurn> {
        self.take_for(client_of(ip), max)
    }
}

/// The address a client is counted under.
pub(crate) fn client_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let s = v6.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_holds_at_most_its_turns_and_an_ipv6_client_is_its_64() {
        let counts = Arc::new(PerAddress::default());
        let a: IpAddr = "2001:db8:1:2::10".parse().unwrap();
        let same_64: IpAddr = "2001:db8:1:2::99".parse().unwrap();
        let first = counts.take(a, 2).unwrap();
        let _second = counts.take(same_64, 2).unwrap();
        assert!(counts.take(a, 2).is_none(), "one /64 is one client");
        assert!(
            counts
                .take("2001:db8:1:3::10".parse().unwrap(), 2)
                .is_some()
        );
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        let _v4 = counts.take(mapped, 1).unwrap();
        assert!(counts.take("10.0.0.1".parse().unwrap(), 1).is_none());
        drop(first);
        assert!(counts.take(a, 2).is_some());
        assert!(counts.take(a, 0).is_some(), "0 is no bound");
    }
}
