//! A tenant's byte ledgers in the store (scratch files, memory entries): reserve before a session
//! grows, settle to what it did add, give back what a session that went held. Each step is one
//! atomic script on the tenant's keys (`scripts.rs` `TENANT_RESERVE`), so a tenant's bound holds
//! across every replica at every moment.

use toolgate_core::session::StoreError;

use super::{RedisStore, keys};

/// What a ledger counts: each has its keys and its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ledger {
    Scratch,
    Memory,
}

/// Sessions of a tenant whose charges a full ledger checks (as the session cap's eviction
/// samples): those that ended, expired or were made again give their bytes back.
const SAMPLE: isize = 64;

impl Ledger {
    /// The ledger's keys for `tenant`: what each session holds, the generation charged for it,
    /// the total; under the tenant index's hash tag.
    fn keys(self, tenant: &str) -> [String; 3] {
        let parts = match self {
            Ledger::Scratch => ["scratch_held", "scratch_generations", "scratch_total"],
            Ledger::Memory => ["memory_held", "memory_generations", "memory_total"],
        };
        parts.map(|part| format!("toolgate:{{tenant:{tenant}}}:{part}"))
    }
}

impl RedisStore {
    /// Reserves `bytes` for session `id` of `generation` in `tenant`'s `ledger` within `bound`:
    /// true if granted. Refused, the ledger first gives back what sessions that went held, and
    /// is asked once more.
    pub(super) async fn reserve(
        &self,
        ledger: Ledger,
        tenant: &str,
        (id, generation): (&str, &str),
        bytes: u64,
        bound: u64,
    ) -> Result<bool, StoreError> {
        for attempt in 0..2 {
            let mut call = self.tenant_reserve.prepare_invoke();
            for key in ledger.keys(tenant) {
                call.key(key);
            }
            call.arg(id)
                .arg(generation)
                .arg(bytes)
                .arg(bound)
                .arg(self.data_ttl());
            let granted: i64 = self.within(async |c| call.invoke_async(c).await).await?;
            if granted == 1 {
                return Ok(true);
            }
            if attempt == 0 {
                self.give_back_gone(ledger, tenant).await;
            }
        }
        Ok(false)
    }

    /// Corrects session `id`'s charge by `by` bytes. A correction lost (the store failed
    /// meanwhile) leaves the tenant charged too much, never too little, until the session goes.
    pub(super) async fn settle(
        &self,
        ledger: Ledger,
        tenant: &str,
        (id, generation): (&str, &str),
        by: i64,
    ) {
        if by == 0 {
            return;
        }
        let mut call = self.tenant_settle.prepare_invoke();
        for key in ledger.keys(tenant) {
            call.key(key);
        }
        call.arg(id).arg(generation).arg(by).arg(self.data_ttl());
        let settled: Result<i64, _> = self.within(async |c| call.invoke_async(c).await).await;
        if let Err(error) = settled {
            self.metrics.store_error("ledger");
            tracing::warn!(target: "toolgate::session", ?ledger, %error, "a tenant's charge was not corrected; it holds too much until the session goes");
        }
    }

    /// Gives back what session `id` holds in `tenant`'s `ledger`, if it is charged as
    /// `generation` (`""`: whichever).
    pub(super) async fn release(
        &self,
        ledger: Ledger,
        tenant: &str,
        id: &str,
        generation: &str,
    ) -> Result<(), StoreError> {
        let mut call = self.tenant_release.prepare_invoke();
        for key in ledger.keys(tenant) {
            call.key(key);
        }
        call.arg(id).arg(generation).arg(self.data_ttl());
        let _: i64 = self.within(async |c| call.invoke_async(c).await).await?;
        Ok(())
    }

    /// A full ledger checks a sample of the sessions it charges: one whose meta is gone (ended,
    /// expired, evicted) or names another generation (made again) gives its bytes back. Up to
    /// three round trips, only when a tenant is full.
    async fn give_back_gone(&self, ledger: Ledger, tenant: &str) {
        let [_, generations, _] = ledger.keys(tenant);
        let mut sample = redis::cmd("HRANDFIELD");
        sample.arg(&generations).arg(SAMPLE).arg("WITHVALUES");
        let Ok(sampled) = self
            .within(async |c| sample.query_async::<Vec<String>>(c).await)
            .await
        else {
            return;
        };
        let checks = sampled.chunks_exact(2).map(|pair| async move {
            let (id, charged) = (&pair[0], &pair[1]);
            let mut current = redis::cmd("HGET");
            current.arg(&keys(tenant, id)[0]).arg("generation");
            let current: Option<String> = self
                .within(async |c| current.query_async(c).await)
                .await
                .ok()?;
            if current.as_deref() == Some(charged.as_str()) {
                return None;
            }
            self.release(ledger, tenant, id, charged).await.ok()
        });
        let given_back = futures::future::join_all(checks).await;
        let sessions = given_back.iter().flatten().count();
        if sessions > 0 {
            tracing::debug!(target: "toolgate::session", ?ledger, %tenant, sessions, "bytes of sessions that went given back");
        }
    }
}
