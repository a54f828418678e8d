//! What requests hold once decoded, bounded while their batches run: server-wide, per tenant,
//! per identity and per connection. A request's JSON is weighed as the server holds it
//! (`json::held_bytes_if_parsed`: small objects cost far more decoded than on the wire, and
//! arguments sent as JSON text are weighed as parsed), before anything in it is parsed, and a
//! request past any bound is refused RESOURCE_EXHAUSTED. The byte budgets (`budget.rs`) bound
//! the bytes still on the wire; this bounds what they become.
//! Invariant: a `Decoded` gives back exactly what it took, when it is dropped.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;

use super::admission::Holder;

/// The bounds, in bytes (0: none at that level).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodedLimits {
    pub total: usize,
    pub per_tenant: usize,
    pub per_identity: usize,
    pub per_connection: usize,
}

impl From<&crate::config::Limits> for DecodedLimits {
    fn from(limits: &crate::config::Limits) -> Self {
        DecodedLimits {
            total: limits.max_decoded_bytes,
            per_tenant: limits.max_decoded_bytes_per_tenant,
            per_identity: limits.max_decoded_bytes_per_identity,
            per_connection: limits.max_decoded_bytes_per_connection,
        }
    }
}

/// Which bound a request would pass, and its size. The text names the bound's setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodedFull {
    #[error(
        "running batches and this request would hold more than {0} bytes once decoded (limits.max_decoded_bytes); send less, or retry when a batch ends"
    )]
    Server(usize),
    #[error(
        "this tenant's running batches and this request would hold more than {0} bytes once decoded (limits.max_decoded_bytes_per_tenant); send less, or retry when a batch ends"
    )]
    Tenant(usize),
    #[error(
        "this identity's running batches and this request would hold more than {0} bytes once decoded (limits.max_decoded_bytes_per_identity); send less, or retry when a batch ends"
    )]
    Identity(usize),
    #[error(
        "this connection's running batches and this request would hold more than {0} bytes once decoded (limits.max_decoded_bytes_per_connection); send less, or retry when a batch ends"
    )]
    Connection(usize),
}

impl DecodedFull {
    /// The capacity, as metrics label it.
    pub(crate) fn capacity_name(self) -> &'static str {
        match self {
            DecodedFull::Server(_) => "decoded_bytes_server",
            DecodedFull::Tenant(_) => "decoded_bytes_tenant",
            DecodedFull::Identity(_) => "decoded_bytes_identity",
            DecodedFull::Connection(_) => "decoded_bytes_connection",
        }
    }
}

/// The server's decoded bytes in use.
#[derive(Debug)]
pub struct DecodedBudget {
    limits: DecodedLimits,
    usage: Mutex<Usage>,
}

#[derive(Debug, Default)]
struct Usage {
    total: usize,
    tenants: HashMap<String, usize>,
    identities: HashMap<String, usize>,
    connections: HashMap<SocketAddr, usize>,
}

/// Bytes a running batch holds; given back when dropped.
#[derive(Debug)]
pub(crate) struct Decoded {
    budget: Arc<DecodedBudget>,
    holder: Holder,
    bytes: usize,
}

impl DecodedBudget {
    pub fn new(limits: DecodedLimits) -> Arc<Self> {
        Arc::new(DecodedBudget {
            limits,
            usage: Mutex::default(),
        })
    }

    /// Takes `bytes` for `holder`, or says which bound it would pass.
    pub(crate) fn take(
        self: &Arc<Self>,
        holder: &Holder,
        bytes: usize,
    ) -> Result<Decoded, DecodedFull> {
        let limits = self.limits;
        let mut usage = self.usage.lock();
        let over = |held: usize, limit: usize| limit != 0 && held.saturating_add(bytes) > limit;
        // Narrowest first: a request larger than a connection's share is told so, whatever
        // the others hold.
        if let Some(c) = &holder.connection
            && over(held(&usage.connections, c), limits.per_connection)
        {
            return Err(DecodedFull::Connection(limits.per_connection));
        }
        if let Some(i) = &holder.identity
            && over(held(&usage.identities, i), limits.per_identity)
        {
            return Err(DecodedFull::Identity(limits.per_identity));
        }
        if let Some(t) = &holder.tenant
            && over(held(&usage.tenants, t), limits.per_tenant)
        {
            return Err(DecodedFull::Tenant(limits.per_tenant));
        }
        if over(usage.total, limits.total) {
            return Err(DecodedFull::Server(limits.total));
        }
        usage.total += bytes;
        if let Some(c) = holder.connection {
            *usage.connections.entry(c).or_default() += bytes;
        }
        if let Some(i) = &holder.identity {
            *usage.identities.entry(i.clone()).or_default() += bytes;
        }
        if let Some(t) = &holder.tenant {
            *usage.tenants.entry(t.clone()).or_default() += bytes;
        }
        Ok(Decoded {
            budget: self.clone(),
            holder: holder.clone(),
            bytes,
        })
    }

    /// Bytes held server-wide now.
    #[cfg(test)]
    fn used(&self) -> usize {
        self.usage.lock().total
    }
}

fn held<K: std::hash::Hash + Eq>(map: &HashMap<K, usize>, key: &K) -> usize {
    map.get(key).copied().unwrap_or(0)
}

/// Takes `bytes` off `key`'s count, forgetting a key that holds nothing.
fn give_back<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: &K, bytes: usize) {
    if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(bytes);
        if *n == 0 {
            map.remove(key);
        }
    }
}

impl Drop for Decoded {
    fn drop(&mut self) {
        let mut usage = self.budget.usage.lock();
        usage.total = usage.total.saturating_sub(self.bytes);
        if let Some(c) = &self.holder.connection {
            give_back(&mut usage.connections, c, self.bytes);
        }
        if let Some(i) = &self.holder.identity {
            give_back(&mut usage.identities, i, self.bytes);
        }
        if let Some(t) = &self.holder.tenant {
            give_back(&mut usage.tenants, t, self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(port: u16, tenant: &str, identity: &str) -> Holder {
        Holder {
            connection: Some(SocketAddr::from(([127, 0, 0, 1], port))),
            tenant: Some(tenant.to_owned()),
            identity: Some(identity.to_owned()),
        }
    }

    #[test]
    fn each_level_bounds_its_holders_and_bytes_come_back_on_drop() {
        let budget = DecodedBudget::new(DecodedLimits {
            total: 100,
            per_tenant: 60,
            per_identity: 40,
            per_connection: 30,
        });
        let a = holder(1, "acme", "bot");
        let first = budget.take(&a, 30).unwrap();
        assert_eq!(budget.take(&a, 1).unwrap_err(), DecodedFull::Connection(30));
        // Another connection of the same identity: the identity's bound.
        let b = holder(2, "acme", "bot");
        let _second = budget.take(&b, 10).unwrap();
        assert_eq!(budget.take(&b, 1).unwrap_err(), DecodedFull::Identity(40));
        // Another identity of the tenant: the tenant's.
        let c = holder(3, "acme", "bot-2");
        let _third = budget.take(&c, 20).unwrap();
        assert_eq!(
            budget.take(&holder(4, "acme", "bot-3"), 1).unwrap_err(),
            DecodedFull::Tenant(60)
        );
        // Another tenant: the server's.
        let _fourth = budget.take(&holder(5, "globex", "g"), 30).unwrap();
        assert_eq!(
            budget.take(&holder(6, "initech", "i"), 11).unwrap_err(),
            DecodedFull::Server(100)
        );
        drop(first);
        assert_eq!(budget.used(), 60);
        assert!(budget.take(&a, 30).is_ok());
    }

    #[test]
    fn a_zero_bound_is_no_bound() {
        let budget = DecodedBudget::new(DecodedLimits {
            total: 0,
            per_tenant: 0,
            per_identity: 0,
            per_connection: 0,
        });
        assert!(budget.take(&holder(1, "t", "i"), usize::MAX / 2).is_ok());
    }
}
