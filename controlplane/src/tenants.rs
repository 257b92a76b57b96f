//! Tenants and their API keys as the control plane's writers and the API's
//! authenticator see them: issuing a key (minting its secret and recording
//! only a salted hash), revoking one, setting a tenant's quota, and the one
//! spelling of a key on the wire.
//!
//! A key is `stk_{key id}_{secret}`: the key id says which row to check, so
//! authenticating costs one SHA-256 however many keys exist, and the secret
//! (64 hex digits from two v4 UUIDs, 244 random bits) is checked against
//! `sha256(salt || secret)` in constant time. A fast hash is enough for a
//! secret of that entropy (no dictionary to try); the salt keeps equal
//! secrets from having equal digests and a stolen table from matching keys
//! minted elsewhere.

use sha2::{Digest, Sha256};
use stoker_schemas::events::{KeyScope, TenantQuota};
use stoker_schemas::ids::{KeyId, TenantId};

use crate::domain::{DomainError, Meta, Tenant, TenantCommand};
use crate::service::{ControlPlane, CpError};
use crate::store::Recorded;

/// What every key issued here starts with.
pub const KEY_PREFIX: &str = "stk_";

/// A key just issued: the only moment its secret exists outside the caller.
#[derive(Clone)]
pub struct IssuedKey {
    pub key_id: KeyId,
    /// `stk_{key id}_{secret}`: what the holder sends as `Bearer`.
    pub token: String,
    pub events: Vec<Recorded>,
}

impl std::fmt::Debug for IssuedKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedKey")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

fn random_hex(bytes: usize) -> String {
    let mut s = String::with_capacity(bytes * 2);
    while s.len() < bytes * 2 {
        s.push_str(&uuid::Uuid::new_v4().simple().to_string());
    }
    s.truncate(bytes * 2);
    s
}

/// `sha256(salt || secret)` in hex; `salt_hex` is the recorded salt.
pub fn secret_digest(salt_hex: &str, secret: &[u8]) -> [u8; 32] {
    let salt = hex::decode(salt_hex).unwrap_or_default();
    let mut h = Sha256::new();
    h.update(&salt);
    h.update(secret);
    h.finalize().into()
}

/// Splits `stk_{key id}_{secret}` into its key id and secret; `None` for
/// anything else (a config-file key, or garbage).
pub fn parse_token(token: &[u8]) -> Option<(KeyId, &[u8])> {
    let rest = token.strip_prefix(KEY_PREFIX.as_bytes())?;
    let cut = rest.iter().rposition(|&b| b == b'_')?;
    let (id, secret) = (&rest[..cut], &rest[cut + 1..]);
    if secret.is_empty() {
        return None;
    }
    let id = std::str::from_utf8(id).ok()?;
    Some((id.parse().ok()?, secret))
}

/// A command on a tenant never created names the tenant (the aggregate of an
/// empty stream does not know its id).
fn name_missing(tenant_id: &TenantId) -> impl FnOnce(CpError) -> CpError + '_ {
    move |e| match e {
        CpError::Domain(DomainError::NotFound { kind: "tenant", .. }) => CpError::NotFound {
            what: "tenant",
            id: tenant_id.to_string(),
        },
        other => other,
    }
}

impl ControlPlane {
    pub async fn create_tenant(
        &self,
        tenant_id: &TenantId,
        display_name: Option<String>,
        meta: &Meta,
    ) -> Result<Vec<Recorded>, CpError> {
        let cmd = TenantCommand::Create {
            tenant_id: tenant_id.clone(),
            display_name,
        };
        self.run::<Tenant>(tenant_id, cmd, meta).await
    }

    /// Issues a key to `tenant_id`: mints the id, the secret and the salt,
    /// records the salted digest, and returns the token once.
    pub async fn issue_key(
        &self,
        tenant_id: &TenantId,
        name: String,
        scopes: Vec<KeyScope>,
        meta: &Meta,
    ) -> Result<IssuedKey, CpError> {
        let key_id = KeyId::generate();
        let secret = random_hex(32);
        let salt = random_hex(16);
        let digest = hex::encode(secret_digest(&salt, secret.as_bytes()));
        let cmd = TenantCommand::IssueKey {
            key_id: key_id.clone(),
            name,
            scopes,
            salt,
            secret_sha256: digest,
        };
        let events = self
            .run::<Tenant>(tenant_id, cmd, meta)
            .await
            .map_err(name_missing(tenant_id))?;
        Ok(IssuedKey {
            token: format!("{KEY_PREFIX}{key_id}_{secret}"),
            key_id,
            events,
        })
    }

    /// Revokes a key; the tenant is looked up in the read models.
    pub async fn revoke_key(&self, key_id: &KeyId, meta: &Meta) -> Result<Vec<Recorded>, CpError> {
        let mut tenant = self
            .projector()
            .views()
            .await
            .tenant_of_key(key_id)
            .cloned();
        if tenant.is_none() {
            // Issued by another instance since this one's last refresh.
            self.refresh().await?;
            tenant = self
                .projector()
                .views()
                .await
                .tenant_of_key(key_id)
                .cloned();
        }
        let tenant = tenant.ok_or_else(|| CpError::NotFound {
            what: "API key",
            id: key_id.to_string(),
        })?;
        let cmd = TenantCommand::RevokeKey {
            key_id: key_id.clone(),
        };
        self.run::<Tenant>(&tenant, cmd, meta).await
    }

    pub async fn set_tenant_quota(
        &self,
        tenant_id: &TenantId,
        quota: TenantQuota,
        meta: &Meta,
    ) -> Result<Vec<Recorded>, CpError> {
        self.run::<Tenant>(tenant_id, TenantCommand::SetQuota { quota }, meta)
            .await
            .map_err(name_missing(tenant_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_back_to_their_key_id_and_nothing_else_does() {
        let (id, secret) = parse_token(b"stk_k0123456789abcdef_deadbeef").unwrap();
        assert_eq!(id.as_str(), "k0123456789abcdef");
        assert_eq!(secret, b"deadbeef");
        for bad in [
            &b"sk-config-key-123"[..],
            b"stk_",
            b"stk_k01_",
            b"stk__secret",
            b"stk_x01_secret",
            b"stk_k/../x_secret",
            &[b's', b't', b'k', b'_', 0xff, b'_', b'a'],
        ] {
            assert!(parse_token(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn the_digest_depends_on_salt_and_secret() {
        let a = secret_digest("00112233445566778899aabbccddeeff", b"s1");
        assert_eq!(a, secret_digest("00112233445566778899aabbccddeeff", b"s1"));
        assert_ne!(a, secret_digest("ff112233445566778899aabbccddeeff", b"s1"));
        assert_ne!(a, secret_digest("00112233445566778899aabbccddeeff", b"s2"));
        assert_eq!(random_hex(32).len(), 64);
        assert_ne!(random_hex(16), random_hex(16));
    }
}
