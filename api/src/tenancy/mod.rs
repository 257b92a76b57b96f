//! Tenants at the edge: their quotas enforced before any model work, their
//! fair-share weights handed to the engine, and the issued keys' table kept
//! in step with the control plane's read models.
//!
//! Quotas come from the read models (`TenantQuotaSet`), refreshed on the
//! control plane's tick; live usage (requests in flight, the tokens-per-minute
//! bucket) is per API instance. In distributed mode each of the `n` live API
//! instances (their transport leases) enforces `ceil(quota / n)`: the tenant's
//! budget is split, not shared through a counter. That costs no coordination
//! on the request path (one lease count per refresh tick); its price is that
//! a tenant whose traffic lands unevenly on the instances gets less than its
//! quota, never more. Batch backlog and stored bytes are read from the shared
//! store, so those are exact across instances.
//!
//! A tenant without a quota is not metered here, and the metrics give a
//! tenant its own label only when it has a quota (the rest are `other`), so
//! the label set stays bounded by what operators configured.

mod bucket;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use stoker_controlplane::projection::Views;
use stoker_schemas::events::TenantQuota;

pub use bucket::{Bucket, Short};

use crate::error::{ApiError, RetryAfter};

/// What the read models say of one tenant.
#[derive(Clone, Debug)]
struct Entry {
    quota: TenantQuota,
    /// Whether a quota was set (metered under its own label).
    metered: bool,
}

/// One tenant's live usage on this instance.
#[derive(Debug, Default)]
struct Live {
    in_flight: u32,
    bucket: Option<Bucket>,
    /// Refusals by quota name, for the metrics.
    refusals: BTreeMap<&'static str, u64>,
    admitted: u64,
    tokens_reserved: u64,
    tokens_returned: u64,
}

#[derive(Debug, Default)]
pub struct Tenancy {
    /// Tenant id to its quota; replaced whole on refresh.
    table: RwLock<Arc<HashMap<String, Entry>>>,
    live: Mutex<HashMap<String, Live>>,
    /// Live API instances sharing each quota (at least 1).
    instances: AtomicU32,
}

/// What `GET /admin/v1/tenants/{id}` shows of a tenant's usage.
#[derive(Clone, Debug, Default, Serialize)]
pub struct UsageOut {
    pub concurrent_requests: u32,
    pub tokens_available: Option<u64>,
    pub tokens_reserved: u64,
    pub batch_queued_rows: u64,
    pub batch_queued_tokens: u64,
    pub file_bytes: u64,
    /// API instances the quotas are split between.
    pub api_instances: u32,
}

fn share(limit: u64, instances: u32) -> u64 {
    limit.div_ceil(u64::from(instances.max(1))).max(1)
}

fn refusal(message: String, retry: Duration) -> ApiError {
    ApiError::TenantQuotaExceeded {
        message,
        retry_after: RetryAfter(retry.max(Duration::from_secs(1))),
    }
}

impl Tenancy {
    pub fn new() -> Arc<Tenancy> {
        let t = Tenancy::default();
        t.instances.store(1, Ordering::Relaxed);
        Arc::new(t)
    }

    /// Replaces the quota table with what `views` hold.
    pub fn set_table(&self, views: &Views) {
        let table = views
            .tenants
            .iter()
            .map(|(id, t)| {
                (
                    id.clone(),
                    Entry {
                        quota: t.quota.clone(),
                        metered: t.quota_set,
                    },
                )
            })
            .collect();
        *self.table.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(table);
        let now = Instant::now();
        let n = self.instances();
        let table = self.table();
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        // Buckets follow quota changes; tenants that left the table go.
        live.retain(|id, l| table.contains_key(id) || l.in_flight > 0);
        for (id, l) in live.iter_mut() {
            match table.get(id).and_then(|e| e.quota.tokens_per_minute) {
                Some(tpm) => match &mut l.bucket {
                    Some(b) => b.resize(share(tpm, n), now),
                    None => l.bucket = Some(Bucket::new(share(tpm, n), now)),
                },
                None => l.bucket = None,
            }
        }
    }

    fn table(&self) -> Arc<HashMap<String, Entry>> {
        self.table.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn set_instances(&self, n: u32) {
        self.instances.store(n.max(1), Ordering::Relaxed);
    }

    pub fn instances(&self) -> u32 {
        self.instances.load(Ordering::Relaxed).max(1)
    }

    /// The tenant's fair-share weight in the engine (1 unless set).
    pub fn weight(&self, tenant: &str) -> u32 {
        self.table().get(tenant).map_or(1, |e| e.quota.weight)
    }

    /// Admits one request of `tenant` reserving `tokens` (prompt plus
    /// `max_tokens` of every choice), or refuses it naming the quota.
    /// `None` when the tenant has no quota to meter.
    pub fn admit(self: &Arc<Self>, tenant: &str, tokens: u64) -> Result<Option<Permit>, ApiError> {
        let table = self.table();
        let Some(entry) = table.get(tenant) else {
            return Ok(None);
        };
        let q = &entry.quota;
        let n = self.instances();
        let now = Instant::now();
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let l = live.entry(tenant.to_owned()).or_default();
        if let Some(max) = q.max_concurrent_requests {
            let limit = share(u64::from(max), n);
            if u64::from(l.in_flight) >= limit {
                *l.refusals.entry("max_concurrent_requests").or_default() += 1;
                return Err(refusal(
                    format!(
                        "tenant {tenant:?} is over its max_concurrent_requests quota: {} \
                         requests in flight, {limit} allowed{}; retry when one ends",
                        l.in_flight,
                        split_note(max.into(), n)
                    ),
                    Duration::from_secs(1),
                ));
            }
        }
        if let Some(tpm) = q.tokens_per_minute {
            let cap = share(tpm, n);
            let b = l.bucket.get_or_insert_with(|| Bucket::new(cap, now));
            if let Err(short) = b.take(tokens, now) {
                *l.refusals.entry("tokens_per_minute").or_default() += 1;
                let available = b.available(now);
                let (why, retry) = match short {
                    Short::Never => (
                        format!(
                            "the request reserves {tokens} tokens (prompt plus max_tokens), more \
                             than the whole minute's {cap}; lower max_tokens"
                        ),
                        Duration::from_secs(60),
                    ),
                    Short::Wait(w) => (
                        format!(
                            "the request reserves {tokens} tokens (prompt plus max_tokens) and \
                             {available} are left"
                        ),
                        w,
                    ),
                };
                return Err(refusal(
                    format!(
                        "tenant {tenant:?} is over its tokens_per_minute quota ({cap}{}): {why}",
                        split_note(tpm, n)
                    ),
                    Duration::from_secs(retry.as_secs_f64().ceil() as u64),
                ));
            }
            l.tokens_reserved += tokens;
        }
        l.in_flight += 1;
        l.admitted += 1;
        Ok(Some(Permit {
            tenancy: self.clone(),
            tenant: tenant.to_owned(),
            reserved: if q.tokens_per_minute.is_some() {
                tokens
            } else {
                0
            },
        }))
    }

    /// Refuses a batch that would take the tenant's open batches past its
    /// backlog quota (read from the shared store: exact across instances).
    pub fn check_batch(
        &self,
        tenant: &str,
        views: &Views,
        rows: u64,
        tokens: u64,
    ) -> Result<(), ApiError> {
        let table = self.table();
        let Some(q) = table.get(tenant).map(|e| &e.quota) else {
            return Ok(());
        };
        let (queued_rows, queued_tokens) = batch_backlog(views, tenant);
        for (name, limit, queued, new) in [
            (
                "max_batch_queued_rows",
                q.max_batch_queued_rows,
                queued_rows,
                rows,
            ),
            (
                "max_batch_queued_tokens",
                q.max_batch_queued_tokens,
                queued_tokens,
                tokens,
            ),
        ] {
            if let Some(limit) = limit
                && queued + new > limit
            {
                self.count_refusal(tenant, name);
                return Err(refusal(
                    format!(
                        "tenant {tenant:?} is over its {name} quota ({limit}): its open batches \
                         hold {queued} and this one adds {new}; retry when they finish"
                    ),
                    Duration::from_secs(30),
                ));
            }
        }
        Ok(())
    }

    /// Refuses an upload that would take the tenant's stored files past its
    /// byte quota.
    pub fn check_file(&self, tenant: &str, stored: u64, new: u64) -> Result<(), ApiError> {
        let limit = self
            .table()
            .get(tenant)
            .and_then(|e| e.quota.max_file_bytes);
        if let Some(limit) = limit
            && stored + new > limit
        {
            self.count_refusal(tenant, "max_file_bytes");
            return Err(refusal(
                format!(
                    "tenant {tenant:?} is over its max_file_bytes quota ({limit}): it stores \
                     {stored} bytes and this file adds {new}; delete files it no longer needs"
                ),
                Duration::from_secs(60),
            ));
        }
        Ok(())
    }

    pub fn has_file_quota(&self, tenant: &str) -> bool {
        self.table()
            .get(tenant)
            .is_some_and(|e| e.quota.max_file_bytes.is_some())
    }

    fn count_refusal(&self, tenant: &str, quota: &'static str) {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        *live
            .entry(tenant.to_owned())
            .or_default()
            .refusals
            .entry(quota)
            .or_default() += 1;
    }

    /// The live usage of `tenant` on this instance, with the store's counts.
    pub fn usage(&self, tenant: &str, views: &Views, file_bytes: u64) -> UsageOut {
        let (batch_queued_rows, batch_queued_tokens) = batch_backlog(views, tenant);
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let l = live.get_mut(tenant);
        let (concurrent_requests, tokens_available, tokens_reserved) = match l {
            Some(l) => (
                l.in_flight,
                l.bucket.as_mut().map(|b| b.available(now)),
                l.tokens_reserved - l.tokens_returned.min(l.tokens_reserved),
            ),
            None => (0, None, 0),
        };
        let tokens_available = tokens_available.or_else(|| {
            self.table()
                .get(tenant)
                .and_then(|e| e.quota.tokens_per_minute)
                .map(|t| share(t, self.instances()))
        });
        UsageOut {
            concurrent_requests,
            tokens_available,
            tokens_reserved,
            batch_queued_rows,
            batch_queued_tokens,
            file_bytes,
            api_instances: self.instances(),
        }
    }

    /// The tenant metrics in OpenMetrics text, without the final `# EOF`.
    pub fn render_metrics(&self) -> String {
        let table = self.table();
        let label = |id: &str| {
            if table.get(id).is_some_and(|e| e.metered) {
                id.to_owned()
            } else {
                "other".to_owned()
            }
        };
        let live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let mut in_flight: BTreeMap<String, u64> = BTreeMap::new();
        let mut admitted: BTreeMap<String, u64> = BTreeMap::new();
        let mut tokens: BTreeMap<String, u64> = BTreeMap::new();
        let mut refused: BTreeMap<(String, &'static str), u64> = BTreeMap::new();
        for (id, l) in live.iter() {
            let t = label(id);
            *in_flight.entry(t.clone()).or_default() += u64::from(l.in_flight);
            *admitted.entry(t.clone()).or_default() += l.admitted;
            *tokens.entry(t.clone()).or_default() +=
                l.tokens_reserved - l.tokens_returned.min(l.tokens_reserved);
            for (q, n) in &l.refusals {
                *refused.entry((t.clone(), q)).or_default() += n;
            }
        }
        let mut out = String::new();
        let mut family = |name: &str, kind: &str, help: &str, rows: Vec<(String, u64)>| {
            let _ = writeln!(out, "# TYPE {name} {kind}\n# HELP {name} {help}");
            let suffix = if kind == "counter" { "_total" } else { "" };
            for (labels, v) in rows {
                let _ = writeln!(out, "{name}{suffix}{{{labels}}} {v}");
            }
        };
        let lab = |t: &str| format!("tenant=\"{t}\"");
        family(
            "stoker_tenant_requests_in_flight",
            "gauge",
            "Requests of the tenant in flight on this instance.",
            in_flight.iter().map(|(t, v)| (lab(t), *v)).collect(),
        );
        family(
            "stoker_tenant_requests_admitted",
            "counter",
            "Requests of the tenant admitted past its quotas.",
            admitted.iter().map(|(t, v)| (lab(t), *v)).collect(),
        );
        family(
            "stoker_tenant_tokens_charged",
            "counter",
            "Tokens charged to the tenant's tokens-per-minute quota (reserved less returned).",
            tokens.iter().map(|(t, v)| (lab(t), *v)).collect(),
        );
        family(
            "stoker_tenant_quota_refusals",
            "counter",
            "Requests refused with tenant_quota_exceeded, by quota.",
            refused
                .iter()
                .map(|((t, q), v)| (format!("tenant=\"{t}\",quota=\"{q}\""), *v))
                .collect(),
        );
        out
    }
}

fn split_note(limit: u64, n: u32) -> String {
    if n > 1 {
        format!(" of {limit} split between {n} API instances")
    } else {
        String::new()
    }
}

/// Rows and estimated tokens of the tenant's open batches. A running batch
/// counts whole: the backlog errs toward refusing.
fn batch_backlog(views: &Views, tenant: &str) -> (u64, u64) {
    views
        .batches
        .values()
        .filter(|b| b.tenant == tenant && b.is_open())
        .fold((0, 0), |(r, t), b| {
            (r + b.total_rows, t + b.estimated_tokens)
        })
}

/// A request counted against its tenant's quotas; dropping it ends the
/// request's share of the concurrency quota.
pub struct Permit {
    tenancy: Arc<Tenancy>,
    tenant: String,
    reserved: u64,
}

impl Permit {
    /// The request used `used` tokens of its reservation: the rest goes back.
    pub fn settle(&mut self, used: u64) {
        let back = self.reserved.saturating_sub(used);
        self.reserved = 0;
        if back == 0 {
            return;
        }
        let mut live = self.tenancy.live.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = live.get_mut(&self.tenant) {
            l.tokens_returned += back;
            if let Some(b) = &mut l.bucket {
                b.give_back(back, Instant::now());
            }
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut live = self.tenancy.live.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = live.get_mut(&self.tenant) {
            l.in_flight = l.in_flight.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests;
