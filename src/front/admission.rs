//! Admission: how many batches and concurrent calls may run at once, server-wide and per
//! connection, and whether the server is overloaded. A plain decision struct; the service asks
//! it before a batch runs and the ticket it hands out gives the capacity back when dropped.
//!
//! A batch takes one batch slot and as many call slots as calls it may run at once (one for a
//! SEQUENTIAL batch; for a PARALLEL one, its concurrency), and holds them until it ends. When
//! fewer call slots are free than a PARALLEL batch asks for, it runs with the slots there are
//! (as if it had asked for less concurrency: later, and with FAIL_FAST or a deadline possibly
//! fewer calls run); with none free it is refused. Shares keep one holder from taking
//! everything: a connection (one client multiplexing many streams, or one that stopped reading),
//! a tenant, and an identity (one token spread over many connections) each hold at most their
//! share once the server is half full, so a lone client on an idle server is not capped.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

use crate::config::ServerConfig;

/// The capacity admission hands out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Batches running at once, server-wide.
    pub batches: usize,
    /// Calls running at once, server-wide.
    pub calls: usize,
    /// Batches one connection may run at once.
    pub batches_per_connection: usize,
    /// Calls one connection may run at once.
    pub calls_per_connection: usize,
    /// Batches and calls one tenant may run at once.
    pub batches_per_tenant: usize,
    pub calls_per_tenant: usize,
    /// Batches and calls one identity (within its tenant) may run at once.
    pub batches_per_identity: usize,
    pub calls_per_identity: usize,
}

impl From<&ServerConfig> for Capacity {
    fn from(server: &ServerConfig) -> Self {
        Capacity {
            batches: server.max_concurrent_batches,
            calls: server.max_concurrent_calls,
            batches_per_connection: server.max_batches_per_connection,
            calls_per_connection: server.max_calls_per_connection,
            batches_per_tenant: server.max_batches_per_tenant,
            calls_per_tenant: server.max_calls_per_tenant,
            batches_per_identity: server.max_batches_per_identity,
            calls_per_identity: server.max_calls_per_identity,
        }
    }
}

/// Why a batch was not admitted: the capacity that was full, and its size. The text says which
/// capacity was full, and that retrying later helps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Every batch slot of the server is taken.
    #[error("too many batches are running ({0} at once); retry later")]
    Batches(usize),
    /// Every call slot of the server is taken.
    #[error("too many calls are running ({0} at once); retry later")]
    Calls(usize),
    /// The connection runs its share of batches while the server is half full or more.
    #[error(
        "this connection has reached its share of a busy server (server.max_batches_per_connection = {0}); retry when one finishes"
    )]
    ConnectionBatches(usize),
    /// The connection holds its share of call slots while the server is half full or more.
    #[error(
        "this connection has reached its share of a busy server (server.max_calls_per_connection = {0}); retry when one finishes"
    )]
    ConnectionCalls(usize),
    /// The caller's tenant runs its share of batches while the server is half full or more.
    #[error(
        "this tenant has reached its share of a busy server (server.max_batches_per_tenant = {0}); retry when one finishes"
    )]
    TenantBatches(usize),
    #[error(
        "this tenant has reached its share of a busy server (server.max_calls_per_tenant = {0}); retry when one finishes"
    )]
    TenantCalls(usize),
    /// The caller's identity runs its share of batches while the server is half full or more.
    #[error(
        "this identity has reached its share of a busy server (server.max_batches_per_identity = {0}); retry when one finishes"
    )]
    IdentityBatches(usize),
    #[error(
        "this identity has reached its share of a busy server (server.max_calls_per_identity = {0}); retry when one finishes"
    )]
    IdentityCalls(usize),
}

impl Refusal {
    /// Which capacity was full, as metrics label it.
    pub(crate) fn capacity_name(self) -> &'static str {
        match self {
            Refusal::Batches(_) => "batches",
            Refusal::Calls(_) => "calls",
            Refusal::ConnectionBatches(_) => "connection_batches",
            Refusal::ConnectionCalls(_) => "connection_calls",
            Refusal::TenantBatches(_) => "tenant_batches",
            Refusal::TenantCalls(_) => "tenant_calls",
            Refusal::IdentityBatches(_) => "identity_batches",
            Refusal::IdentityCalls(_) => "identity_calls",
        }
    }
}

/// Who a batch runs for: the holders whose shares it counts against. A part left `None`
/// (in-process callers) is bounded by the server-wide capacity only.
#[derive(Debug, Clone, Default)]
pub struct Holder {
    pub connection: Option<SocketAddr>,
    pub tenant: Option<String>,
    /// The identity within its tenant and credential (`token:tenant/id`: two tenants may name
    /// an identity alike, and a JWT subject must not share a token's slots).
    pub identity: Option<String>,
}

impl Holder {
    /// A batch from `connection` by `caller`.
    pub fn new(connection: Option<SocketAddr>, caller: &toolgate_core::identity::Caller) -> Self {
        Holder {
            connection,
            tenant: Some(caller.tenant.clone()),
            identity: Some(format!(
                "{}:{}/{}",
                caller.method.name(),
                caller.tenant,
                caller.id
            )),
        }
    }
}

/// Capacity in use.
#[derive(Debug, Default)]
struct Usage {
    batches: usize,
    calls: usize,
    /// (batches, calls) per connection, tenant and identity with anything running.
    connections: Held<SocketAddr>,
    tenants: Held<String>,
    identities: Held<String>,
    /// Latched when server-wide capacity ran out; cleared once usage is back under the low
    /// watermark, so health does not flap at the edge.
    overloaded: bool,
}

/// The server's admission control.
#[derive(Debug)]
pub struct Admission {
    capacity: Capacity,
    usage: Mutex<Usage>,
    overloaded: watch::Sender<bool>,
}

/// (batches, calls) held per key; a key holding nothing is removed.
#[derive(Debug)]
struct Held<K>(HashMap<K, (usize, usize)>);

impl<K> Default for Held<K> {
    fn default() -> Self {
        Held(HashMap::new())
    }
}

impl<K: std::hash::Hash + Eq> Held<K> {
    fn of<Q>(&self, key: &Q) -> (usize, usize)
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        self.0.get(key).copied().unwrap_or_default()
    }

    fn add(&mut self, key: K, calls: usize) {
        let entry = self.0.entry(key).or_default();
        entry.0 += 1;
        entry.1 += calls;
    }

    fn remove<Q>(&mut self, key: &Q, calls: usize)
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ?Sized,
    {
        if let Some(entry) = self.0.get_mut(key) {
            entry.0 = entry.0.saturating_sub(1);
            entry.1 = entry.1.saturating_sub(calls);
            if entry.0 == 0 {
                self.0.remove(key);
            }
        }
    }
}

/// Capacity held by one running batch; dropping it gives the capacity back.
#[derive(Debug)]
pub(crate) struct Ticket {
    admission: Arc<Admission>,
    holder: Holder,
    calls: usize,
}

impl Ticket {
    /// The calls this batch may run at once (at least one).
    pub(crate) fn calls(&self) -> usize {
        self.calls
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.admission.release(&self.holder, self.calls);
    }
}

impl Admission {
    pub fn new(capacity: Capacity) -> Arc<Self> {
        Arc::new(Admission {
            capacity,
            usage: Mutex::new(Usage::default()),
            overloaded: watch::Sender::new(false),
        })
    }

    /// Follows the overload state: true while server-wide batch or call capacity is exhausted
    /// (and until usage is back under three quarters of it).
    pub fn overloaded(&self) -> watch::Receiver<bool> {
        self.overloaded.subscribe()
    }

    /// Batches and calls running now, server-wide.
    pub(crate) fn in_use(&self) -> (usize, usize) {
        let usage = self.usage.lock();
        (usage.batches, usage.calls)
    }

    /// Admits a batch for `holder` that wants to run `wanted_calls` calls at once.
    pub(crate) fn admit(
        self: &Arc<Self>,
        holder: Holder,
        wanted_calls: usize,
    ) -> Result<Ticket, Refusal> {
        let cap = self.capacity;
        let mut usage = self.usage.lock();
        if let Some(refusal) = self.refusal(&usage, &holder) {
            if matches!(refusal, Refusal::Batches(_) | Refusal::Calls(_)) {
                self.set_overloaded(&mut usage, true);
            }
            return Err(refusal);
        }
        let mut calls = wanted_calls.max(1).min(cap.calls - usage.calls);
        if self.contended(&usage) {
            // Within every share: each leaves at least one call, as the refusal check saw.
            let room = |held: usize, share: usize| share.saturating_sub(held).max(1);
            if let Some(c) = &holder.connection {
                calls = calls.min(room(usage.connections.of(c).1, cap.calls_per_connection));
            }
            if let Some(t) = &holder.tenant {
                calls = calls.min(room(usage.tenants.of(t.as_str()).1, cap.calls_per_tenant));
            }
            if let Some(i) = &holder.identity {
                calls = calls.min(room(
                    usage.identities.of(i.as_str()).1,
                    cap.calls_per_identity,
                ));
            }
        }
        usage.batches += 1;
        usage.calls += calls;
        if let Some(c) = holder.connection {
            usage.connections.add(c, calls);
        }
        if let Some(t) = &holder.tenant {
            usage.tenants.add(t.clone(), calls);
        }
        if let Some(i) = &holder.identity {
            usage.identities.add(i.clone(), calls);
        }
        if usage.batches >= cap.batches || usage.calls >= cap.calls {
            self.set_overloaded(&mut usage, true);
        }
        Ok(Ticket {
            admission: self.clone(),
            holder,
            calls,
        })
    }

    /// Whether a batch for `holder` would be refused now: a cheap check before the request is
    /// parsed, so refusing under load costs little.
    pub fn check(&self, holder: &Holder) -> Result<(), Refusal> {
        match self.refusal(&self.usage.lock(), holder) {
            Some(refusal) => Err(refusal),
            None => Ok(()),
        }
    }

    fn refusal(&self, usage: &Usage, holder: &Holder) -> Option<Refusal> {
        let cap = self.capacity;
        if usage.batches >= cap.batches {
            return Some(Refusal::Batches(cap.batches));
        }
        if usage.calls >= cap.calls {
            return Some(Refusal::Calls(cap.calls));
        }
        if !self.contended(usage) {
            return None;
        }
        // Each holder's (batches, calls) held against its shares, checked in this order.
        type Over = fn(usize) -> Refusal;
        type Check = (Option<(usize, usize)>, usize, usize, Over, Over);
        let shares: [Check; 3] = [
            (
                holder.connection.as_ref().map(|c| usage.connections.of(c)),
                cap.batches_per_connection,
                cap.calls_per_connection,
                Refusal::ConnectionBatches,
                Refusal::ConnectionCalls,
            ),
            (
                holder.identity.as_deref().map(|i| usage.identities.of(i)),
                cap.batches_per_identity,
                cap.calls_per_identity,
                Refusal::IdentityBatches,
                Refusal::IdentityCalls,
            ),
            (
                holder.tenant.as_deref().map(|t| usage.tenants.of(t)),
                cap.batches_per_tenant,
                cap.calls_per_tenant,
                Refusal::TenantBatches,
                Refusal::TenantCalls,
            ),
        ];
        shares
            .into_iter()
            .find_map(|(held, batches, calls, over_batches, over_calls)| {
                let (held_batches, held_calls) = held?;
                if held_batches >= batches {
                    Some(over_batches(batches))
                } else if held_calls >= calls {
                    Some(over_calls(calls))
                } else {
                    None
                }
            })
    }

    /// Shares apply once the server is half full (by batches or calls).
    fn contended(&self, usage: &Usage) -> bool {
        let cap = self.capacity;
        usage.batches * 2 >= cap.batches || usage.calls * 2 >= cap.calls
    }

    fn release(&self, holder: &Holder, calls: usize) {
        let mut usage = self.usage.lock();
        usage.batches = usage.batches.saturating_sub(1);
        usage.calls = usage.calls.saturating_sub(calls);
        if let Some(c) = &holder.connection {
            usage.connections.remove(c, calls);
        }
        if let Some(t) = &holder.tenant {
            usage.tenants.remove(t.as_str(), calls);
        }
        if let Some(i) = &holder.identity {
            usage.identities.remove(i.as_str(), calls);
        }
        let cap = self.capacity;
        if usage.overloaded
            && usage.batches * 4 < cap.batches * 3
            && usage.calls * 4 < cap.calls * 3
        {
            self.set_overloaded(&mut usage, false);
        }
    }

    fn set_overloaded(&self, usage: &mut Usage, overloaded: bool) {
        if usage.overloaded != overloaded {
            usage.overloaded = overloaded;
            self.overloaded.send_replace(overloaded);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(batches: usize, calls: usize, per_conn: (usize, usize)) -> Arc<Admission> {
        Admission::new(Capacity {
            batches,
            calls,
            batches_per_connection: per_conn.0,
            calls_per_connection: per_conn.1,
            batches_per_tenant: batches,
            calls_per_tenant: calls,
            batches_per_identity: batches,
            calls_per_identity: calls,
        })
    }

    /// A holder with only a connection.
    fn conn(port: u16) -> Holder {
        Holder {
            connection: Some(SocketAddr::from(([127, 0, 0, 1], port))),
            ..Holder::default()
        }
    }

    fn none() -> Holder {
        Holder::default()
    }

    #[test]
    fn batches_are_bounded_and_capacity_comes_back_on_drop() {
        let a = admission(2, 100, (2, 100));
        let first = a.admit(none(), 1).unwrap();
        let _second = a.admit(none(), 1).unwrap();
        assert_eq!(a.admit(none(), 1).unwrap_err(), Refusal::Batches(2));
        drop(first);
        assert!(a.admit(none(), 1).is_ok());
        assert_eq!(a.in_use(), (1, 1));
    }

    #[test]
    fn a_parallel_batch_gets_the_call_slots_that_are_free_and_none_is_a_refusal() {
        let a = admission(10, 8, (10, 8));
        let wide = a.admit(none(), 6).unwrap();
        assert_eq!(wide.calls(), 6);
        let narrowed = a.admit(none(), 6).unwrap();
        assert_eq!(narrowed.calls(), 2, "ran with what was left");
        assert_eq!(a.admit(none(), 1).unwrap_err(), Refusal::Calls(8));
        drop(wide);
        assert_eq!(
            a.admit(none(), 0).unwrap().calls(),
            1,
            "every batch runs one call"
        );
    }

    #[test]
    fn one_connection_cannot_take_everything_once_the_server_is_half_full() {
        let a = admission(4, 100, (1, 100));
        let first = a.admit(conn(1), 1).unwrap();
        let second = a.admit(conn(1), 1).unwrap();
        assert_eq!(
            a.admit(conn(1), 1).unwrap_err(),
            Refusal::ConnectionBatches(1),
            "over its share with the server half full"
        );
        assert_eq!(a.check(&conn(1)), Err(Refusal::ConnectionBatches(1)));
        assert!(
            a.admit(conn(2), 1).is_ok(),
            "another connection still gets in"
        );
        drop((first, second));
        let b = admission(100, 8, (100, 2));
        let wide = b.admit(conn(1), 3).unwrap();
        assert_eq!(wide.calls(), 3, "an idle server does not cap a lone client");
        let wider = b.admit(conn(1), 4).unwrap();
        assert_eq!(wider.calls(), 4, "still under half full when it asked");
        assert_eq!(
            b.admit(conn(1), 1).unwrap_err(),
            Refusal::ConnectionCalls(2)
        );
        assert_eq!(b.admit(conn(2), 2).unwrap().calls(), 1, "the one slot left");
    }

    #[test]
    fn an_identity_over_many_connections_and_a_tenant_hold_their_share_only() {
        let a = Admission::new(Capacity {
            batches: 8,
            calls: 100,
            batches_per_connection: 8,
            calls_per_connection: 100,
            batches_per_tenant: 3,
            calls_per_tenant: 100,
            batches_per_identity: 2,
            calls_per_identity: 100,
        });
        let who = |port: u16, tenant: &str, id: &str| Holder {
            connection: Some(SocketAddr::from(([127, 0, 0, 1], port))),
            tenant: Some(tenant.to_owned()),
            identity: Some(format!("{tenant}/{id}")),
        };
        // One token over a new connection each time: the server fills to half, then the
        // identity's share stops it whatever connection it uses.
        let held: Vec<Ticket> = (0..4)
            .map(|p| a.admit(who(p, "acme", "bot"), 1).unwrap())
            .collect();
        assert_eq!(
            a.admit(who(9, "acme", "bot"), 1).unwrap_err(),
            Refusal::IdentityBatches(2)
        );
        // Another identity of the same tenant: the tenant's share is spent too.
        assert_eq!(
            a.admit(who(10, "acme", "other"), 1).unwrap_err(),
            Refusal::TenantBatches(3)
        );
        // Another tenant still gets in.
        assert!(a.admit(who(11, "globex", "bot"), 1).is_ok());
        drop(held);
        assert!(a.usage.lock().identities.0.is_empty());
    }

    #[test]
    fn overload_is_reported_at_full_capacity_and_cleared_below_three_quarters() {
        let a = admission(4, 100, (4, 100));
        let overloaded = a.overloaded();
        let tickets: Vec<Ticket> = (0..4).map(|_| a.admit(none(), 1).unwrap()).collect();
        assert!(*overloaded.borrow(), "full");
        let mut tickets = tickets.into_iter();
        drop(tickets.next());
        assert!(*overloaded.borrow(), "3 of 4 is not below three quarters");
        drop(tickets.next());
        assert!(!*overloaded.borrow(), "2 of 4 in use");
        drop(tickets);
        assert!(a.admit(conn(9), 1).is_ok());
        assert!(!*overloaded.borrow());
    }

    #[test]
    fn a_refused_connection_does_not_mark_the_server_overloaded() {
        let a = admission(4, 100, (1, 100));
        let _t = (a.admit(conn(1), 1).unwrap(), a.admit(conn(2), 1).unwrap());
        assert!(a.admit(conn(1), 1).is_err());
        assert!(!*a.overloaded().borrow());
    }
}
