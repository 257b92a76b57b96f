//! A tenant's life: created once, keys issued (only their salted digests are
//! events) and revoked with a reason, quotas set whole and checked.

use stoker_controlplane::domain::{DomainError, Tenant, TenantCommand as C};
use stoker_schemas::events::*;

use super::given::*;

const SALT: &str = "00112233445566778899aabbccddeeff";
const DIGEST: &str = "aa00000000000000000000000000000000000000000000000000000000000000";

fn created() -> TenantEvent {
    TenantCreated {
        tenant_id: "acme".parse().unwrap(),
        display_name: Some("Acme Corp".into()),
    }
    .into()
}

fn issue(key: &str) -> C {
    C::IssueKey {
        key_id: key.parse().unwrap(),
        name: "acme-prod".into(),
        scopes: vec![KeyScope::Inference, KeyScope::Batch, KeyScope::Inference],
        salt: SALT.into(),
        secret_sha256: DIGEST.into(),
    }
}

fn issued(key: &str) -> TenantEvent {
    ApiKeyIssued {
        tenant_id: "acme".parse().unwrap(),
        key_id: key.parse().unwrap(),
        name: "acme-prod".into(),
        scopes: vec![KeyScope::Batch, KeyScope::Inference],
        salt: SALT.into(),
        secret_sha256: DIGEST.into(),
    }
    .into()
}

fn revoked(key: &str) -> TenantEvent {
    ApiKeyRevoked {
        tenant_id: "acme".parse().unwrap(),
        key_id: key.parse().unwrap(),
    }
    .into()
}

#[test]
fn a_tenant_is_created_once() {
    let state = given::<Tenant>([])
        .when(
            C::Create {
                tenant_id: "acme".parse().unwrap(),
                display_name: Some("Acme Corp".into()),
            },
            &alice(),
        )
        .then_events(vec![created()]);
    assert!(state.exists());
    given::<Tenant>([created()])
        .when(
            C::Create {
                tenant_id: "acme".parse().unwrap(),
                display_name: None,
            },
            &alice(),
        )
        .then_refused(refused!(DomainError::AlreadyExists { kind: "tenant", .. }));
    given::<Tenant>([])
        .when(
            C::Create {
                tenant_id: "acme".parse().unwrap(),
                display_name: Some("bell\u{7}".into()),
            },
            &alice(),
        )
        .then_refused(refused!(DomainError::InvalidTenant(_)));
}

#[test]
fn a_key_is_issued_with_its_scopes_sorted_once_each() {
    let state = given::<Tenant>([created()])
        .when(issue("k01"), &alice())
        .then_events(vec![issued("k01")]);
    assert_eq!(state.active_keys(), 1);
    given::<Tenant>([created(), issued("k01")])
        .when(issue("k01"), &alice())
        .then_refused(refused!(DomainError::AlreadyExists {
            kind: "API key",
            ..
        }));
}

#[test]
fn keys_need_a_tenant_a_name_scopes_and_a_well_formed_digest() {
    given::<Tenant>([])
        .when(issue("k01"), &alice())
        .then_refused(refused!(DomainError::NotFound { kind: "tenant", .. }));
    for bad in [
        C::IssueKey {
            key_id: "k02".parse().unwrap(),
            name: String::new(),
            scopes: vec![KeyScope::Inference],
            salt: SALT.into(),
            secret_sha256: DIGEST.into(),
        },
        C::IssueKey {
            key_id: "k02".parse().unwrap(),
            name: "x".repeat(65),
            scopes: vec![KeyScope::Inference],
            salt: SALT.into(),
            secret_sha256: DIGEST.into(),
        },
        C::IssueKey {
            key_id: "k02".parse().unwrap(),
            name: "ok".into(),
            scopes: vec![],
            salt: SALT.into(),
            secret_sha256: DIGEST.into(),
        },
        C::IssueKey {
            key_id: "k02".parse().unwrap(),
            name: "ok".into(),
            scopes: vec![KeyScope::Admin],
            salt: "zz".into(),
            secret_sha256: DIGEST.into(),
        },
    ] {
        given::<Tenant>([created()])
            .when(bad, &alice())
            .then_refused(refused!(DomainError::InvalidKey(_)));
    }
}

#[test]
fn revoking_needs_a_reason_and_happens_once() {
    given::<Tenant>([created(), issued("k01")])
        .when(
            C::RevokeKey {
                key_id: "k01".parse().unwrap(),
            },
            &alice(),
        )
        .then_refused(refused!(DomainError::ReasonRequired { .. }));
    let state = given::<Tenant>([created(), issued("k01")])
        .when(
            C::RevokeKey {
                key_id: "k01".parse().unwrap(),
            },
            &because("leaked in a log"),
        )
        .then_events(vec![revoked("k01")]);
    assert_eq!(state.active_keys(), 0);
    given::<Tenant>([created(), issued("k01"), revoked("k01")])
        .when(
            C::RevokeKey {
                key_id: "k01".parse().unwrap(),
            },
            &because("again"),
        )
        .then_refused(refused!(DomainError::KeyRevoked { .. }));
    given::<Tenant>([created()])
        .when(
            C::RevokeKey {
                key_id: "k99".parse().unwrap(),
            },
            &because("typo"),
        )
        .then_refused(refused!(DomainError::NotFound {
            kind: "API key",
            ..
        }));
}

#[test]
fn quotas_are_set_whole_and_checked() {
    let quota = TenantQuota {
        max_concurrent_requests: Some(4),
        tokens_per_minute: Some(120_000),
        weight: 3,
        ..TenantQuota::default()
    };
    let state = given::<Tenant>([created()])
        .when(
            C::SetQuota {
                quota: quota.clone(),
            },
            &alice(),
        )
        .then_events(vec![
            TenantQuotaSet {
                tenant_id: "acme".parse().unwrap(),
                quota: quota.clone(),
            }
            .into(),
        ]);
    assert_eq!(state.quota(), &quota);
    for bad in [
        TenantQuota {
            tokens_per_minute: Some(0),
            ..TenantQuota::default()
        },
        TenantQuota {
            weight: 0,
            ..TenantQuota::default()
        },
        TenantQuota {
            weight: 1001,
            ..TenantQuota::default()
        },
    ] {
        given::<Tenant>([created()])
            .when(C::SetQuota { quota: bad }, &alice())
            .then_refused(refused!(DomainError::InvalidQuota(_)));
    }
}
