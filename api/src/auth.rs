//! API keys: each key maps to a tenant and a set of scopes. Keys are compared
//! as SHA-256 digests in constant time, against every configured key, so
//! neither timing nor early exit tells a caller how close a guess was. The
//! tenant always comes from the key, never from the request body.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Inference,
    Batch,
    Admin,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Inference => "inference",
            Scope::Batch => "batch",
            Scope::Admin => "admin",
        }
    }
}

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

/// Checks `Authorization: Bearer` keys. With no keys configured (allowed
/// only on loopback) every caller gets every scope as tenant `default`.
pub struct Authenticator {
    keys: Vec<KeyEntry>,
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
        }
    }

    pub fn is_open(&self) -> bool {
        self.keys.is_empty()
    }

    /// `authorization` is the raw header value, if any.
    pub fn authenticate(&self, authorization: Option<&[u8]>) -> Result<Principal, ApiError> {
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
