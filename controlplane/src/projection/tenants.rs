//! The tenants' read model: each tenant with its quota and its keys (the
//! salted digests the authenticator checks, never a secret), folded from the
//! `tenant` streams. Every API instance rebuilds its key table from this on
//! each refresh, which is how a revocation reaches all of them.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use stoker_schemas::events::{KeyScope, TenantEvent, TenantQuota};
use stoker_schemas::ids::{KeyId, TenantId};

use crate::store::Recorded;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyView {
    pub key_id: KeyId,
    pub tenant_id: TenantId,
    pub name: String,
    pub scopes: Vec<KeyScope>,
    pub salt: String,
    pub secret_sha256: String,
    pub issued_at: DateTime<Utc>,
    pub issued_by: String,
    pub revoked_at: Option<DateTime<Utc>>,
    pub revoked_by: Option<String>,
    pub revoke_reason: Option<String>,
}

impl KeyView {
    pub fn is_active(&self) -> bool {
        self.revoked_at.is_none()
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TenantView {
    pub tenant_id: TenantId,
    pub display_name: Option<String>,
    pub quota: TenantQuota,
    /// Whether a quota was ever set (a tenant without one is metered under
    /// `other` in the metrics).
    #[serde(default)]
    pub quota_set: bool,
    pub keys: BTreeMap<KeyId, KeyView>,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub updated_at: DateTime<Utc>,
}

/// Folds one event of a `tenant` stream into `tenants` (keyed by tenant id);
/// returns the id of the tenant it changed, if any.
pub(super) fn fold(
    tenants: &mut BTreeMap<String, TenantView>,
    ev: &Recorded,
    e: TenantEvent,
) -> Option<String> {
    let id = ev.stream.stream_id.0.clone();
    let at = ev.recorded_at;
    let by = ev.actor.0.clone();
    if let TenantEvent::TenantCreated(c) = &e {
        tenants.insert(
            id.clone(),
            TenantView {
                tenant_id: c.tenant_id.clone(),
                display_name: c.display_name.clone(),
                quota: TenantQuota::default(),
                quota_set: false,
                keys: BTreeMap::new(),
                created_at: at,
                created_by: by,
                updated_at: at,
            },
        );
        return Some(id);
    }
    let t = tenants.get_mut(&id)?;
    t.updated_at = at;
    match e {
        TenantEvent::TenantCreated(_) => {}
        TenantEvent::ApiKeyIssued(k) => {
            t.keys.insert(
                k.key_id.clone(),
                KeyView {
                    key_id: k.key_id,
                    tenant_id: k.tenant_id,
                    name: k.name,
                    scopes: k.scopes,
                    salt: k.salt,
                    secret_sha256: k.secret_sha256,
                    issued_at: at,
                    issued_by: by,
                    revoked_at: None,
                    revoked_by: None,
                    revoke_reason: None,
                },
            );
        }
        TenantEvent::ApiKeyRevoked(r) => {
            if let Some(k) = t.keys.get_mut(&r.key_id) {
                k.revoked_at = Some(at);
                k.revoked_by = Some(by);
                k.revoke_reason = ev.reason.clone();
            }
        }
        TenantEvent::TenantQuotaSet(q) => {
            t.quota = q.quota;
            t.quota_set = true;
        }
    }
    Some(id)
}
