//! Keeps this instance's view of tenants in step with the control plane:
//! after each read-model refresh that moved, the issued keys' table and the
//! quota table are rebuilt (a revocation recorded by any instance stops the
//! key here within one refresh interval), and an API instance counts the
//! live API instances its quotas are split between.

use std::collections::HashMap;
use std::time::Duration;

use stoker_controlplane::projection::Views;
use stoker_controlplane::transport::{Lease, LeaseKind};
use stoker_schemas::ids::KeyId;

use crate::auth::{IssuedKey, Principal};
use crate::state::{AppState, Role};

/// The active issued keys of `views`.
pub fn issued_keys(views: &Views) -> HashMap<KeyId, IssuedKey> {
    let mut out = HashMap::new();
    for t in views.tenants.values() {
        for k in t.keys.values().filter(|k| k.is_active()) {
            let Some(digest) = hex::decode(&k.secret_sha256)
                .ok()
                .and_then(|d| <[u8; 32]>::try_from(d).ok())
            else {
                tracing::warn!(key_id = %k.key_id, "issued key with a malformed digest; ignored");
                continue;
            };
            out.insert(
                k.key_id.clone(),
                IssuedKey {
                    salt: k.salt.clone(),
                    digest,
                    principal: Principal {
                        name: k.name.clone(),
                        tenant: t.tenant_id.to_string(),
                        scopes: k.scopes.clone(),
                    },
                },
            );
        }
    }
    out
}

/// Rebuilds the keys' and quotas' tables from `views`.
pub fn apply(state: &AppState, views: &Views) {
    state.auth.set_issued(issued_keys(views));
    state.tenancy.set_table(views);
}

/// Applies the read models as they are now (after a write on this instance).
pub async fn now(state: &AppState) {
    if let Some(c) = state.control() {
        let v = c.cp.projector().views().await;
        apply(state, &v);
    }
}

/// Follows the read models for the life of the process.
pub fn spawn(state: &AppState) {
    let state = state.clone();
    let every = Duration::from_millis(state.config.control.refresh_interval_ms.max(50));
    tokio::spawn(async move {
        let mut seen = None;
        let mut t = tokio::time::interval(every);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            t.tick().await;
            let Some(c) = state.control() else { continue };
            // A change in the number of instances resizes every split quota.
            let mut resized = false;
            if state.role == Role::Api {
                match Lease::live_count(&c.cp.store().db(), LeaseKind::Replies).await {
                    Ok(n) if n.max(1) != state.tenancy.instances() => {
                        state.tenancy.set_instances(n);
                        resized = true;
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "counting API instances failed"),
                }
            }
            let v = c.cp.projector().views().await;
            if resized || seen != Some(v.position) {
                apply(&state, &v);
                seen = Some(v.position);
            }
        }
    });
}
