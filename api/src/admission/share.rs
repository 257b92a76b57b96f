//! Each tenant's part of the edge queue, and what stands ahead of a request
//! of one tenant in the engine's fair-share order.
//!
//! The engine serves the tenants of a lane by the tokens it computed for
//! them divided by their weight (`stoker_executor::scheduler`'s fair share):
//! a request of tenant T does not wait for the whole queue. Of another
//! tenant U's waiting work, only about T's own waiting work (this request
//! included) times `w_U / w_T` is served before it. The edge used to count
//! every tenant's backlog against every request, so a flooding tenant's
//! queue made another tenant's chat look late: it was refused for load it
//! did not cause, or told to retry for a wait it would never have had.
//!
//! The same shares bound the queue limits: a tenant within its weighted
//! share of a limit (its weight over the weights of the tenants with work
//! outstanding, itself included) is admitted even when the limit is full of
//! other tenants' work. A flood can fill the queue, but it cannot lock
//! another tenant out; the limit is then passed by at most the in-share
//! tenants' part, which is at most the limit again. With one tenant, its
//! share is the whole limit and nothing changes.

use std::collections::HashMap;
use std::sync::Arc;

/// A request's tenant as admission sees it: who, and its share weight.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantKey {
    pub id: Arc<str>,
    /// The tenant's weight (1 to 1000, `TenantQuotaSet`'s `weight`).
    pub weight: u32,
}

impl TenantKey {
    pub fn new(id: &str, weight: u32) -> Self {
        TenantKey {
            id: Arc::from(id),
            weight: weight.max(1),
        }
    }
}

/// One tenant's outstanding requests at the edge.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Counts {
    pub waiting: usize,
    pub waiting_tokens: usize,
    pub waiting_prompt_tokens: usize,
    /// Prompt tokens not yet prefilled: waiting, or running with no first
    /// token yet.
    pub prefill_tokens: usize,
    /// Waiting plus running.
    pub outstanding: usize,
    /// Prompt + max_tokens of its outstanding requests.
    pub active_tokens: usize,
    /// The weight its latest request carried.
    pub weight: u32,
}

/// What is served before a request, in the engine's fair-share order.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Ahead {
    /// Waiting requests ahead, its own tenant's included.
    pub waiting: usize,
    pub waiting_prompt_tokens: usize,
    pub waiting_tokens: usize,
    /// Prompt tokens prefilled before it: waiting, or admitted by the
    /// engine and not yet through their prefill.
    pub prefill_tokens: usize,
}

/// The tenants with work outstanding at the edge.
#[derive(Debug, Default)]
pub struct Tenants {
    map: HashMap<Arc<str>, Counts>,
}

impl Tenants {
    /// Counts of `key`'s tenant (zeros when it has nothing outstanding).
    pub fn of(&self, key: &TenantKey) -> Counts {
        self.map.get(&key.id).copied().unwrap_or(Counts {
            weight: key.weight,
            ..Counts::default()
        })
    }

    /// Applies `f` to `key`'s counts, creating them, and forgets the tenant
    /// once nothing of it is outstanding.
    pub fn update(&mut self, key: &TenantKey, f: impl FnOnce(&mut Counts)) {
        let c = self.map.entry(key.id.clone()).or_insert(Counts {
            weight: key.weight,
            ..Counts::default()
        });
        c.weight = key.weight;
        f(c);
        if c.outstanding == 0 {
            self.map.remove(&key.id);
        }
    }

    /// `key`'s share (0 to 1] of a limit: its weight over the weights of the
    /// tenants with work outstanding, itself included.
    pub fn share(&self, key: &TenantKey) -> f64 {
        let others: u64 = self
            .map
            .iter()
            .filter(|(id, _)| **id != key.id)
            .map(|(_, c)| u64::from(c.weight.max(1)))
            .sum();
        let own = f64::from(key.weight.max(1));
        own / (own + others as f64)
    }

    /// Whether other tenants hold work outstanding.
    pub fn others_active(&self, key: &TenantKey) -> bool {
        self.map.keys().any(|id| *id != key.id)
    }

    /// What the engine serves before a new request of `key` with
    /// `prompt_tokens` and `tokens` (prompt + max_tokens): all of its own
    /// tenant's waiting work, and of each other tenant's at most its own
    /// (this request included) scaled by the weights.
    pub fn ahead(&self, key: &TenantKey, prompt_tokens: usize, tokens: usize) -> Ahead {
        let own = self.of(key);
        let mut a = Ahead {
            waiting: own.waiting,
            waiting_prompt_tokens: own.waiting_prompt_tokens,
            waiting_tokens: own.waiting_tokens,
            prefill_tokens: own.prefill_tokens,
        };
        let w = f64::from(key.weight.max(1));
        for (id, c) in &self.map {
            if *id == key.id {
                continue;
            }
            let ratio = f64::from(c.weight.max(1)) / w;
            let scaled = |mine: usize| (mine as f64 * ratio).ceil().min(usize::MAX as f64) as usize;
            a.waiting += c.waiting.min(scaled(own.waiting + 1));
            a.waiting_prompt_tokens += c
                .waiting_prompt_tokens
                .min(scaled(own.waiting_prompt_tokens + prompt_tokens.max(1)));
            a.waiting_tokens += c
                .waiting_tokens
                .min(scaled(own.waiting_tokens + tokens.max(1)));
            a.prefill_tokens += c
                .prefill_tokens
                .min(scaled(own.prefill_tokens + prompt_tokens.max(1)));
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str, w: u32) -> TenantKey {
        TenantKey::new(id, w)
    }

    fn wait(t: &mut Tenants, k: &TenantKey, n: usize, prompt: usize, max: usize) {
        for _ in 0..n {
            t.update(k, |c| {
                c.waiting += 1;
                c.outstanding += 1;
                c.waiting_prompt_tokens += prompt;
                c.prefill_tokens += prompt;
                c.waiting_tokens += prompt + max;
                c.active_tokens += prompt + max;
            });
        }
    }

    #[test]
    fn a_flood_stands_ahead_of_another_tenant_only_by_its_share() {
        let (a, b) = (key("a", 1), key("b", 1));
        let mut t = Tenants::default();
        wait(&mut t, &a, 30, 400, 32);
        // B's first request: one of A's is served before it (one request,
        // its 30 prompt tokens' worth of A's prompts), not all thirty.
        let ahead = t.ahead(&b, 30, 62);
        assert_eq!(ahead.waiting, 1);
        assert_eq!(ahead.waiting_prompt_tokens, 30);
        assert_eq!(ahead.waiting_tokens, 62);
        // A's next request waits for all of A's own.
        assert_eq!(t.ahead(&a, 400, 432).waiting, 30);
    }

    #[test]
    fn weights_scale_what_stands_ahead() {
        let (a, b) = (key("a", 1), key("b", 4));
        let mut t = Tenants::default();
        wait(&mut t, &a, 30, 400, 32);
        wait(&mut t, &b, 3, 100, 0);
        // B (weight 4) with 3 waiting: A gets a quarter of B's 4 requests.
        assert_eq!(t.ahead(&b, 100, 100).waiting, 3 + 1);
        // A with weight 1 against B's 4: B's whole backlog stands ahead.
        assert_eq!(t.ahead(&a, 400, 432).waiting, 30 + 3);
        assert!((t.share(&b) - 0.8).abs() < 1e-9);
        assert!((t.share(&a) - 0.2).abs() < 1e-9);
    }

    #[test]
    fn one_tenant_owns_the_whole_share_and_is_forgotten_when_idle() {
        let a = key("a", 7);
        let mut t = Tenants::default();
        assert_eq!(t.share(&a), 1.0);
        wait(&mut t, &a, 2, 10, 10);
        assert_eq!(t.share(&a), 1.0);
        assert!(!t.others_active(&a));
        assert!(t.others_active(&key("b", 1)));
        t.update(&a, |c| {
            c.outstanding -= 2;
            c.waiting -= 2;
        });
        assert_eq!(
            t.of(&a),
            Counts {
                weight: 7,
                ..Counts::default()
            }
        );
        assert!(!t.others_active(&key("b", 1)));
    }
}
