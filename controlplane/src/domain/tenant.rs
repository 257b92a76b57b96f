//! The tenant aggregate: one tenant, its API keys and its quotas.
//!
//! Keys live in their tenant's stream rather than in streams of their own:
//! a key is meaningless without its tenant, revoking one must see the
//! tenant's other keys, and one stream per tenant keeps the audit trail of
//! "who could act as acme, and since when" in one place. Only a salted hash
//! of a key's secret is an event; the service mints the secret, shows it
//! once, and hands the aggregate the hash (aggregates do no I/O and draw no
//! random numbers).
//!
//! ```text
//! Absent ──create──▶ Active ──issue key / revoke key / set quota──▶ Active
//! ```
//! A revoked key stays revoked; a tenant is never deleted (its keys are
//! revoked instead), so its history stays readable.

use std::collections::BTreeMap;

use stoker_schemas::events::{
    ApiKeyIssued, ApiKeyRevoked, KeyScope, TenantCreated, TenantEvent, TenantQuota, TenantQuotaSet,
};
use stoker_schemas::ids::{KeyId, TenantId};

use super::{Aggregate, DomainError, Meta};

/// The most keys one tenant may hold, active or revoked: a bound on the
/// stream and on the authenticator's table.
pub const MAX_KEYS_PER_TENANT: usize = 1000;

#[derive(Clone, Debug, PartialEq)]
pub enum TenantCommand {
    Create {
        tenant_id: TenantId,
        display_name: Option<String>,
    },
    /// `salt` and `secret_sha256` are hex, computed by the caller.
    IssueKey {
        key_id: KeyId,
        name: String,
        scopes: Vec<KeyScope>,
        salt: String,
        secret_sha256: String,
    },
    /// Needs a reason.
    RevokeKey {
        key_id: KeyId,
    },
    SetQuota {
        quota: TenantQuota,
    },
}

/// The state of one tenant stream; `Default` is a tenant never created.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tenant {
    tenant_id: Option<TenantId>,
    /// Key id to whether it is revoked.
    keys: BTreeMap<KeyId, bool>,
    quota: TenantQuota,
}

impl Tenant {
    pub fn exists(&self) -> bool {
        self.tenant_id.is_some()
    }

    pub fn quota(&self) -> &TenantQuota {
        &self.quota
    }

    pub fn active_keys(&self) -> usize {
        self.keys.values().filter(|revoked| !**revoked).count()
    }

    fn id(&self) -> Result<TenantId, DomainError> {
        self.tenant_id.clone().ok_or(DomainError::NotFound {
            kind: "tenant",
            id: String::new(),
        })
    }
}

/// A key's holder name: printable, 1 to 64 characters (it becomes the actor
/// of what the key writes).
fn check_name(name: &str) -> Result<(), DomainError> {
    let n = name.chars().count();
    if n == 0 || n > 64 || name.chars().any(char::is_control) || name.trim() != name {
        return Err(DomainError::InvalidKey(format!(
            "name must be 1 to 64 printable characters without surrounding spaces; got {:?}",
            name.chars().take(64).collect::<String>()
        )));
    }
    Ok(())
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Quotas are positive when set, and the weight is 1 to 1000.
pub fn check_quota(q: &TenantQuota) -> Result<(), DomainError> {
    let zero = [
        (
            "max_concurrent_requests",
            q.max_concurrent_requests.map(u64::from),
        ),
        ("tokens_per_minute", q.tokens_per_minute),
        ("max_batch_queued_rows", q.max_batch_queued_rows),
        ("max_batch_queued_tokens", q.max_batch_queued_tokens),
        ("max_file_bytes", q.max_file_bytes),
    ]
    .into_iter()
    .find(|(_, v)| *v == Some(0));
    if let Some((field, _)) = zero {
        return Err(DomainError::InvalidQuota(format!(
            "`{field}` must be at least 1, or null for no limit (revoke the tenant's keys to \
             stop it entirely)"
        )));
    }
    if !(1..=TenantQuota::MAX_WEIGHT).contains(&q.weight) {
        return Err(DomainError::InvalidQuota(format!(
            "`weight` must be 1 to {}; got {}",
            TenantQuota::MAX_WEIGHT,
            q.weight
        )));
    }
    Ok(())
}

impl Aggregate for Tenant {
    type Command = TenantCommand;
    type Event = TenantEvent;

    fn handle(&self, cmd: TenantCommand, meta: &Meta) -> Result<Vec<TenantEvent>, DomainError> {
        if let TenantCommand::Create {
            tenant_id,
            display_name,
        } = cmd
        {
            if self.exists() {
                return Err(DomainError::AlreadyExists {
                    kind: "tenant",
                    id: tenant_id.into_string(),
                });
            }
            if let Some(d) = &display_name
                && (d.is_empty() || d.chars().count() > 128 || d.chars().any(char::is_control))
            {
                return Err(DomainError::InvalidTenant(
                    "`display_name` must be 1 to 128 printable characters".into(),
                ));
            }
            return Ok(vec![
                TenantCreated {
                    tenant_id,
                    display_name,
                }
                .into(),
            ]);
        }
        let tenant_id = self.id()?;
        let event = match cmd {
            TenantCommand::Create { .. } => unreachable!("handled above"),
            TenantCommand::IssueKey {
                key_id,
                name,
                scopes,
                salt,
                secret_sha256,
            } => {
                if self.keys.contains_key(&key_id) {
                    return Err(DomainError::AlreadyExists {
                        kind: "API key",
                        id: key_id.into_string(),
                    });
                }
                if self.keys.len() >= MAX_KEYS_PER_TENANT {
                    return Err(DomainError::InvalidKey(format!(
                        "tenant {tenant_id:?} already holds {MAX_KEYS_PER_TENANT} keys, the most \
                         one tenant may"
                    )));
                }
                check_name(&name)?;
                if scopes.is_empty() {
                    return Err(DomainError::InvalidKey(
                        "`scopes` must name at least one of inference, batch, admin".into(),
                    ));
                }
                let mut scopes = scopes;
                scopes.sort_by_key(|s| s.as_str());
                scopes.dedup();
                if !is_hex(&salt, 32) || !is_hex(&secret_sha256, 64) {
                    return Err(DomainError::InvalidKey(
                        "the salt must be 16 bytes and the digest 32 bytes, in hex".into(),
                    ));
                }
                ApiKeyIssued {
                    tenant_id,
                    key_id,
                    name,
                    scopes,
                    salt,
                    secret_sha256,
                }
                .into()
            }
            TenantCommand::RevokeKey { key_id } => match self.keys.get(&key_id) {
                None => {
                    return Err(DomainError::NotFound {
                        kind: "API key",
                        id: key_id.into_string(),
                    });
                }
                Some(true) => {
                    return Err(DomainError::KeyRevoked { tenant_id, key_id });
                }
                Some(false) => {
                    meta.require_reason(|| format!("revoking API key {key_id:?}"))?;
                    ApiKeyRevoked { tenant_id, key_id }.into()
                }
            },
            TenantCommand::SetQuota { quota } => {
                check_quota(&quota)?;
                TenantQuotaSet { tenant_id, quota }.into()
            }
        };
        Ok(vec![event])
    }

    fn apply(&mut self, ev: &TenantEvent) {
        match ev {
            TenantEvent::TenantCreated(c) => self.tenant_id = Some(c.tenant_id.clone()),
            TenantEvent::ApiKeyIssued(k) => {
                self.keys.insert(k.key_id.clone(), false);
            }
            TenantEvent::ApiKeyRevoked(k) => {
                self.keys.insert(k.key_id.clone(), true);
            }
            TenantEvent::TenantQuotaSet(q) => self.quota = q.quota.clone(),
        }
    }
}
