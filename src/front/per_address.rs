//! Counts per client address with a bound: each turn taken is given back when its guard drops.
//! A client is counted by its IPv4 address (also when mapped into IPv6) or its IPv6 /64, which
//! one host usually holds whole. The transport's connection and TLS handshake bounds and the
//! admin listener's use it.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use parking_lot::Mutex;

/// How many turns each client address holds now.
#[derive(Debug, Default)]
pub(crate) struct PerAddress {
    counts: Mutex<HashMap<IpAddr, usize>>,
}

/// One turn of one address; given back when dropped.
#[derive(Debug)]
pub(crate) struct AddressTurn {
    owner: Arc<PerAddress>,
    client: IpAddr,
}

impl PerAddress {
    /// A turn for `ip`, unless its address holds `max` already (0: no bound).
    pub(crate) fn take(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<AddressTurn> {
        let client = client_of(ip);
        let mut counts = self.counts.lock();
        let held = counts.entry(client).or_insert(0);
        // At the bound `held` is above zero: nothing was inserted for this refusal.
        if max > 0 && *held >= max {
            return None;
        }
        *held += 1;
        Some(AddressTurn {
            owner: self.clone(),
            client,
        })
    }

    /// How many turns `client` (an address as `client_of` counts it) holds.
    pub(crate) fn held(&self, client: IpAddr) -> usize {
        self.counts.lock().get(&client).copied().unwrap_or(0)
    }

    /// How many addresses hold a turn.
    #[cfg(test)]
    pub(crate) fn addresses(&self) -> usize {
        self.counts.lock().len()
    }
}

impl Drop for AddressTurn {
    fn drop(&mut self) {
        let mut counts = self.owner.counts.lock();
        if let Some(held) = counts.get_mut(&self.client) {
            *held -= 1;
            if *held == 0 {
                counts.remove(&self.client);
            }
        }
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
