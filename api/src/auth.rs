//! API keys: each key maps to a tenant and a set of scopes. Two kinds exist:
//! keys from the config file (the bootstrap), compared as SHA-256 digests in
//! constant time against every configured key, so neither timing nor early
//! exit tells a caller how close a guess was; and keys issued through the
//! control plane (`stk_{key id}_{secret}`), looked up by their key id and
//! checked against their salted digest in constant time. The issued keys'
//! table is rebuilt from the read models on every refresh, which is how a
//! revocation reaches every API instance. The tenant always comes from the
//! key, never from the request body.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use stoker_controlplane::tenants::{parse_token, secret_digest};
use stoker_schemas::ids::KeyId;
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// What a key may do (the control plane's `KeyScope`, one type for both).
pub use stoker_schemas::events::KeyScope as Scope;

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyConfig {
    /// Who holds the key: the actor recorded on every admin write made with it.
    /// Defaults to the tenant.
    #[serde(default)]
    pub name: Option<String>,
    pub key: String,
    pub tenant: String,
    pub scopes: Vec<Scope>,
}

impl std::fmt::Debug for ApiKeyConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key itself never reaches a log line.
        f.debug_struct("ApiKeyConfig")
            .field("name", &self.name)
            .field("tenant", &self.tenant)
            .field("scopes", &self.scopes)
            .finish()
    }
}

impl ApiKeyConfig {
    pub fn check(&self) -> Result<(), String> {
        if self.key.len() < 8 {
            return Err("key must be at least 8 characters".into());
        }
        if self.tenant.is_empty() || self.tenant.len() > 64 {
            return Err("tenant must be 1 to 64 characters".into());
        }
        if self.scopes.is_empty() {
            return Err("scopes must not be empty".into());
        }
        if let Some(n) = &self.name
            && (n.is_empty() || n.len() > 64 || n.chars().any(char::is_control))
        {
            return Err("name must be 1 to 64 printable characters".into());
        }
        Ok(())
    }
}

/// Who is calling: the tenant and scopes of the presented key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The key's name: the actor of admin writes.
    pub name: String,
    pub tenant: String,
    pub scopes: Vec<Scope>,
}

impl Principal {
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.scopes.contains(&scope) {
            Ok(())
        } else {
            Err(ApiError::InsufficientScope(scope.as_str()))
        }
    }
}

/// A scope a route needs, as a type, for [`Scoped`].
pub trait ScopeMarker {
    const SCOPE: Scope;
}

/// The inference routes' scope.
pub struct ForInference;
/// The batch and file routes' scope.
pub struct ForBatch;

impl ScopeMarker for ForInference {
    const SCOPE: Scope = Scope::Inference;
}

impl ScopeMarker for ForBatch {
    const SCOPE: Scope = Scope::Batch;
}

/// A caller that holds scope `S`. As a handler's first extractor it
/// authenticates and checks the scope before the path, query or body is
/// read, so a caller without the key or the scope gets 401 or 403 whatever
/// else it sent (not a 400 that tells it about the route's input).
pub struct Scoped<S>(pub Principal, pub std::marker::PhantomData<S>);

struct KeyEntry {
    digest: [u8; 32],
    principal: Principal,
}

/// A key issued through the control plane, as the read models hold it.
#[derive(Clone, Debug)]
pub struct IssuedKey {
    /// Hex, as recorded.
    pub salt: String,
    pub digest: [u8; 32],
    pub principal: Principal,
}

/// Checks `Authorization: Bearer` keys. With no keys configured (allowed
/// only on loopback) every caller gets every scope as tenant `default`,
/// except one presenting an issued key, who is that key's tenant (and one
/// presenting a revoked or unknown issued key, who is refused).
pub struct Authenticator {
    keys: Vec<KeyEntry>,
    issued: RwLock<Arc<HashMap<KeyId, IssuedKey>>>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Authenticator({} keys)", self.keys.len())
    }
}

impl Authenticator {
    pub fn new(keys: &[ApiKeyConfig]) -> Self {
        Authenticator {
            keys: keys
                .iter()
                .map(|k| KeyEntry {
                    digest: Sha256::digest(k.key.as_bytes()).into(),
                    principal: Principal {
                        name: k.name.clone().unwrap_or_else(|| k.tenant.clone()),
                        tenant: k.tenant.clone(),
                        scopes: k.scopes.clone(),
                    },
                })
                .collect(),
            issued: RwLock::default(),
        }
    }

    pub fn is_open(&self) -> bool {
        self.keys.is_empty()
    }

    /// Replaces the issued keys' table (the active keys of the read models).
    pub fn set_issued(&self, keys: HashMap<KeyId, IssuedKey>) {
        *self.issued.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(keys);
    }

    /// How many issued keys are active here.
    pub fn issued_count(&self) -> usize {
        self.issued.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The issued key `token` names, when its secret matches.
    fn check_issued(&self, token: &[u8]) -> Option<Option<Principal>> {
        let (key_id, secret) = parse_token(token)?;
        let table = self
            .issued
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let Some(k) = table.get(&key_id) else {
            return Some(None);
        };
        let digest = secret_digest(&k.salt, secret);
        Some(bool::from(k.digest.ct_eq(&digest)).then(|| k.principal.clone()))
    }

    /// `authorization` is the raw header value, if any.
    pub fn authenticate(&self, authorization: Option<&[u8]>) -> Result<Principal, ApiError> {
        let token = authorization.and_then(|raw| {
            raw.strip_prefix(b"Bearer ")
                .or_else(|| raw.strip_prefix(b"bearer "))
        });
        // An issued key (`stk_…`): one lookup and one digest.
        if let Some(found) = token.and_then(|t| self.check_issued(t)) {
            return found.ok_or(ApiError::InvalidApiKey(
                "invalid API key (unknown or revoked)",
            ));
        }
        if self.keys.is_empty() {
            return Ok(Principal {
                name: "anonymous".into(),
                tenant: "default".into(),
                scopes: vec![Scope::Inference, Scope::Batch, Scope::Admin],
            });
        }
        let Some(raw) = authorization else {
            return Err(ApiError::InvalidApiKey(
                "missing API key; send `Authorization: Bearer <key>`",
            ));
        };
        let token = raw
            .strip_prefix(b"Bearer ")
            .or_else(|| raw.strip_prefix(b"bearer "))
            .ok_or(ApiError::InvalidApiKey(
                "malformed Authorization header; expected `Bearer <key>`",
            ))?;
        let digest: [u8; 32] = Sha256::digest(token).into();
        let mut found: Option<&Principal> = None;
        for k in &self.keys {
            // Every key is compared; the match is remembered without branching
            // on secret data inside the comparison itself.
            if bool::from(k.digest.ct_eq(&digest)) {
                found = Some(&k.principal);
            }
        }
        found
            .cloned()
            .ok_or(ApiError::InvalidApiKey("invalid API key"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoker_schemas::codes::ErrorCode;

    fn auth() -> Authenticator {
        Authenticator::new(&[
            ApiKeyConfig {
                name: None,
                key: "sk-alpha-123".into(),
                tenant: "alpha".into(),
                scopes: vec![Scope::Inference],
            },
            ApiKeyConfig {
                name: None,
                key: "sk-ops-4567".into(),
                tenant: "ops".into(),
                scopes: vec![Scope::Admin],
            },
        ])
    }

    #[test]
    fn good_key_gives_its_tenant_and_scopes() {
        let p = auth().authenticate(Some(b"Bearer sk-alpha-123")).unwrap();
        assert_eq!(p.tenant, "alpha");
        p.require(Scope::Inference).unwrap();
        let e = p.require(Scope::Admin).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InsufficientScope);
    }

    #[test]
    fn bad_missing_and_hostile_keys_are_refused() {
        let a = auth();
        for h in [
            None,
            Some(&b"Bearer sk-alpha-12"[..]),
            Some(b"Bearer "),
            Some(b"Basic c2stYWxwaGEtMTIz"),
            Some(b"sk-alpha-123"),
            Some(b"Bearer sk-alpha-123\0"),
            Some(&[0xff, 0xfe, 0x00][..]),
        ] {
            let e = a.authenticate(h).unwrap_err();
            assert_eq!(e.code(), ErrorCode::InvalidApiKey, "{h:?}");
        }
        let huge = [b"Bearer ".to_vec(), vec![b'k'; 100_000]].concat();
        assert!(a.authenticate(Some(&huge)).is_err());
    }

    #[test]
    fn issued_keys_are_checked_by_id_and_salted_digest() {
        let a = auth();
        let salt = "00112233445566778899aabbccddeeff";
        let mut table = HashMap::new();
        table.insert(
            "k0123456789abcdef".parse().unwrap(),
            IssuedKey {
                salt: salt.into(),
                digest: secret_digest(salt, b"s3cr3t"),
                principal: Principal {
                    name: "acme-prod".into(),
                    tenant: "acme".into(),
                    scopes: vec![Scope::Batch],
                },
            },
        );
        a.set_issued(table);
        let p = a
            .authenticate(Some(b"Bearer stk_k0123456789abcdef_s3cr3t"))
            .unwrap();
        assert_eq!((p.tenant.as_str(), p.name.as_str()), ("acme", "acme-prod"));
        for bad in [
            &b"Bearer stk_k0123456789abcdef_s3cr3T"[..],
            b"Bearer stk_k0123456789abcde0_s3cr3t",
            b"Bearer stk_k0123456789abcdef_",
        ] {
            let e = a.authenticate(Some(bad)).unwrap_err();
            assert_eq!(e.code(), ErrorCode::InvalidApiKey);
        }
        // Revoked: gone from the table, refused even in open mode.
        a.set_issued(HashMap::new());
        assert!(
            a.authenticate(Some(b"Bearer stk_k0123456789abcdef_s3cr3t"))
                .is_err()
        );
        let open = Authenticator::new(&[]);
        assert!(
            open.authenticate(Some(b"Bearer stk_k0123456789abcdef_s3cr3t"))
                .is_err()
        );
        assert!(open.authenticate(None).is_ok());
    }

    #[test]
    fn open_mode_grants_everything() {
        let p = Authenticator::new(&[]).authenticate(None).unwrap();
        p.require(Scope::Admin).unwrap();
    }

    #[test]
    fn debug_never_prints_the_key() {
        let k = ApiKeyConfig {
            name: None,
            key: "sk-secret-999".into(),
            tenant: "t".into(),
            scopes: vec![Scope::Batch],
        };
        assert!(!format!("{k:?}").contains("secret"));
    }
}
