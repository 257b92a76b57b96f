//! Tenants and their API keys: create a tenant, set its quotas and weight,
//! issue a key (its secret shown once, in the answer), revoke one, and read
//! each tenant's quotas with its live usage.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use stoker_controlplane::projection::{KeyView, TenantView, Views};
use stoker_schemas::codes::ErrorCode;
use stoker_schemas::events::{KeyScope, TenantQuota};
use stoker_schemas::ids::{KeyId, TenantId};

use super::{Admin, check_reason, written};
use crate::edge::tenant_sync;
use crate::error::ApiError;
use crate::http::extract::{ApiJson, ApiQuery};
use crate::http::path_id::PathId;
use crate::state::AppState;
use crate::tenancy::UsageOut;

/// A key as the admin API shows it: never its salt or digest.
#[derive(Debug, Serialize)]
pub struct KeyOut {
    pub key_id: KeyId,
    pub tenant_id: TenantId,
    pub name: String,
    pub scopes: Vec<KeyScope>,
    /// What the key's holder sees at the start of the key.
    pub prefix: String,
    pub status: &'static str,
    pub issued_at: String,
    pub issued_by: String,
    pub revoked_at: Option<String>,
    pub revoked_by: Option<String>,
    pub revoke_reason: Option<String>,
}

fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl From<&KeyView> for KeyOut {
    fn from(k: &KeyView) -> Self {
        KeyOut {
            key_id: k.key_id.clone(),
            tenant_id: k.tenant_id.clone(),
            name: k.name.clone(),
            scopes: k.scopes.clone(),
            prefix: format!("{}{}", stoker_controlplane::tenants::KEY_PREFIX, k.key_id),
            status: if k.is_active() { "active" } else { "revoked" },
            issued_at: rfc3339(k.issued_at),
            issued_by: k.issued_by.clone(),
            revoked_at: k.revoked_at.map(rfc3339),
            revoked_by: k.revoked_by.clone(),
            revoke_reason: k.revoke_reason.clone(),
        }
    }
}

#[derive(Debug, Serialize)]
pub struct TenantOut {
    pub tenant_id: TenantId,
    pub display_name: Option<String>,
    pub quota: TenantQuota,
    pub keys_active: usize,
    pub created_at: String,
    pub created_by: String,
    pub usage: UsageOut,
}

async fn tenant_out(state: &AppState, admin: &Admin, v: &Views, t: &TenantView) -> TenantOut {
    let id = t.tenant_id.as_str();
    // Stored bytes are a query; a store that cannot answer shows 0 rather
    // than failing the read.
    let file_bytes = admin
        .control
        .batches
        .tenant_file_bytes(id)
        .await
        .unwrap_or_default();
    TenantOut {
        tenant_id: t.tenant_id.clone(),
        display_name: t.display_name.clone(),
        quota: t.quota.clone(),
        keys_active: t.keys.values().filter(|k| k.is_active()).count(),
        created_at: rfc3339(t.created_at),
        created_by: t.created_by.clone(),
        usage: state.tenancy.usage(id, v, file_bytes),
    }
}

fn not_found(what: &str, id: &str) -> ApiError {
    ApiError::NotFound {
        message: format!("{what} {:?} does not exist", crate::error::truncate(id, 64)),
        code: ErrorCode::NotFound,
    }
}

pub async fn list(State(state): State<AppState>, admin: Admin) -> Response {
    let v = admin.cp().views().await;
    let mut data = Vec::with_capacity(v.tenants.len());
    for t in v.tenants.values() {
        data.push(tenant_out(&state, &admin, &v, t).await);
    }
    super::list(data).into_response()
}

pub async fn get_one(
    State(state): State<AppState>,
    admin: Admin,
    PathId(id): PathId<TenantId>,
) -> Result<Response, ApiError> {
    let v = admin.cp().views().await;
    let t = v
        .tenants
        .get(id.as_str())
        .ok_or_else(|| not_found("tenant", &id))?;
    Ok(Json(tenant_out(&state, &admin, &v, t).await).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTenant {
    pub tenant_id: TenantId,
    #[serde(default)]
    pub display_name: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

pub async fn create(
    State(state): State<AppState>,
    admin: Admin,
    ApiJson(b): ApiJson<CreateTenant>,
) -> Result<Response, ApiError> {
    let id = b.tenant_id;
    check_reason(&b.reason)?;
    let events = admin
        .cp()
        .create_tenant(&id, b.display_name, &admin.meta(b.reason))
        .await?;
    tenant_sync::now(&state).await;
    let v = admin.cp().views().await;
    let t = v
        .tenants
        .get(id.as_str())
        .ok_or_else(|| ApiError::Internal(format!("tenant {id} missing after create")))?;
    let data = tenant_out(&state, &admin, &v, t).await;
    let mut resp = written(events, data).into_response();
    *resp.status_mut() = axum::http::StatusCode::CREATED;
    Ok(resp)
}

/// The quota body: the events' type with unknown fields refused.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaIn {
    #[serde(default)]
    pub max_concurrent_requests: Option<u32>,
    #[serde(default)]
    pub tokens_per_minute: Option<u64>,
    #[serde(default)]
    pub max_batch_queued_rows: Option<u64>,
    #[serde(default)]
    pub max_batch_queued_tokens: Option<u64>,
    #[serde(default)]
    pub max_file_bytes: Option<u64>,
    #[serde(default)]
    pub weight: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetQuota {
    pub quota: QuotaIn,
    #[serde(default)]
    pub reason: Option<String>,
}

pub async fn set_quota(
    State(state): State<AppState>,
    admin: Admin,
    PathId(id): PathId<TenantId>,
    ApiJson(b): ApiJson<SetQuota>,
) -> Result<Response, ApiError> {
    check_reason(&b.reason)?;
    let q = b.quota;
    let quota = TenantQuota {
        max_concurrent_requests: q.max_concurrent_requests,
        tokens_per_minute: q.tokens_per_minute,
        max_batch_queued_rows: q.max_batch_queued_rows,
        max_batch_queued_tokens: q.max_batch_queued_tokens,
        max_file_bytes: q.max_file_bytes,
        weight: q.weight.unwrap_or(1),
    };
    let events = admin
        .cp()
        .set_tenant_quota(&id, quota, &admin.meta(b.reason))
        .await?;
    tenant_sync::now(&state).await;
    let v = admin.cp().views().await;
    let t = v
        .tenants
        .get(id.as_str())
        .ok_or_else(|| not_found("tenant", &id))?;
    let data = tenant_out(&state, &admin, &v, t).await;
    Ok(written(events, data).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyFilter {
    #[serde(default)]
    pub tenant: Option<String>,
}

pub async fn list_keys(admin: Admin, ApiQuery(f): ApiQuery<KeyFilter>) -> Response {
    let v = admin.cp().views().await;
    let data: Vec<KeyOut> = v
        .tenants
        .values()
        .filter(|t| f.tenant.as_ref().is_none_or(|id| t.tenant_id == *id))
        .flat_map(|t| t.keys.values().map(KeyOut::from))
        .collect();
    super::list(data).into_response()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssueKey {
    pub tenant_id: TenantId,
    pub name: String,
    pub scopes: Vec<KeyScope>,
    #[serde(default)]
    pub reason: Option<String>,
}

/// A key just issued: the only answer that carries its secret.
#[derive(Debug, Serialize)]
pub struct IssuedOut {
    #[serde(flatten)]
    pub key: KeyOut,
    pub secret: String,
}

pub async fn issue(
    State(state): State<AppState>,
    admin: Admin,
    ApiJson(b): ApiJson<IssueKey>,
) -> Result<Response, ApiError> {
    let tenant = b.tenant_id;
    check_reason(&b.reason)?;
    if b.scopes.len() > 8 {
        return Err(ApiError::invalid(
            "`scopes` names each of inference, batch, admin at most once",
            "scopes",
        ));
    }
    let issued = admin
        .cp()
        .issue_key(&tenant, b.name, b.scopes, &admin.meta(b.reason))
        .await?;
    tenant_sync::now(&state).await;
    let v = admin.cp().views().await;
    let k = v
        .tenants
        .get(tenant.as_str())
        .and_then(|t| t.keys.get(&issued.key_id))
        .ok_or_else(|| ApiError::Internal("issued key missing from the read models".into()))?;
    let data = IssuedOut {
        key: KeyOut::from(k),
        secret: issued.token,
    };
    let mut resp = written(issued.events, data).into_response();
    *resp.status_mut() = axum::http::StatusCode::CREATED;
    // The secret must not linger in caches between here and the operator.
    resp.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        axum::http::HeaderValue::from_static("no-store"),
    );
    Ok(resp)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevokeBody {
    #[serde(default)]
    pub reason: Option<String>,
}

pub async fn revoke(
    State(state): State<AppState>,
    admin: Admin,
    PathId(key_id): PathId<KeyId>,
    ApiJson(b): ApiJson<RevokeBody>,
) -> Result<Response, ApiError> {
    check_reason(&b.reason)?;
    let events = admin
        .cp()
        .revoke_key(&key_id, &admin.meta(b.reason))
        .await?;
    tenant_sync::now(&state).await;
    let v = admin.cp().views().await;
    let k = v
        .tenant_of_key(&key_id)
        .and_then(|t| v.tenants.get(t.as_str()))
        .and_then(|t| t.keys.get(&key_id))
        .ok_or_else(|| not_found("API key", &key_id))?;
    Ok(written(events, KeyOut::from(k)).into_response())
}
