//! The edge's tenant rules without a server: quotas refused with the quota
//! named and a refill time, reservations returned, quotas split between API
//! instances, and a metrics label set bounded by the tenants with a quota.

use std::collections::BTreeMap;

use chrono::Utc;
use stoker_controlplane::projection::{TenantView, Views};
use stoker_schemas::codes::ErrorCode;
use stoker_schemas::events::TenantQuota;

use super::*;

fn views(quotas: &[(&str, TenantQuota)]) -> Views {
    let mut v = Views::default();
    for (id, q) in quotas {
        v.tenants.insert(
            (*id).to_owned(),
            TenantView {
                tenant_id: id.parse().unwrap(),
                display_name: None,
                quota: q.clone(),
                quota_set: true,
                keys: BTreeMap::new(),
                created_at: Utc::now(),
                created_by: "ops".into(),
                updated_at: Utc::now(),
            },
        );
    }
    v
}

fn refused(r: Result<Option<Permit>, ApiError>) -> ApiError {
    match r {
        Err(e) => e,
        Ok(_) => panic!("admitted"),
    }
}

#[test]
fn concurrency_quota_refuses_the_extra_request_until_one_ends() {
    let t = Tenancy::new();
    t.set_table(&views(&[(
        "acme",
        TenantQuota {
            max_concurrent_requests: Some(2),
            ..TenantQuota::default()
        },
    )]));
    let a = t.admit("acme", 10).unwrap().expect("metered");
    let _b = t.admit("acme", 10).unwrap().expect("metered");
    let e = refused(t.admit("acme", 10));
    assert_eq!(e.code(), ErrorCode::TenantQuotaExceeded);
    assert_eq!(e.status(), axum::http::StatusCode::TOO_MANY_REQUESTS);
    assert!(e.to_string().contains("max_concurrent_requests"), "{e}");
    assert!(e.retry_after().is_some());
    // Another tenant, and a tenant without a quota, are not affected.
    assert!(t.admit("other", 10).unwrap().is_none());
    drop(a);
    t.admit("acme", 10).unwrap().expect("a slot came back");
}

#[test]
fn token_quota_refills_and_returns_what_was_not_used() {
    let t = Tenancy::new();
    t.set_table(&views(&[(
        "acme",
        TenantQuota {
            tokens_per_minute: Some(600),
            ..TenantQuota::default()
        },
    )]));
    let mut p = t.admit("acme", 400).unwrap().unwrap();
    let e = refused(t.admit("acme", 400));
    assert!(
        e.to_string().contains("tokens_per_minute quota (600)"),
        "{e}"
    );
    assert!(e.to_string().contains("200 are left"), "{e}");
    // 200 short at 10 tokens a second: 20 s.
    let secs = e.retry_after().unwrap().0.as_secs();
    assert!((19..=21).contains(&secs), "{secs}");
    // The first used 100 of its 400: 300 come back, so 400 fit again.
    p.settle(100);
    drop(p);
    t.admit("acme", 400).unwrap().unwrap();
    // One request larger than the whole minute can never pass.
    let e = refused(t.admit("acme", 601));
    assert!(e.to_string().contains("lower max_tokens"), "{e}");
    let v = views(&[]);
    let u = t.usage("acme", &v, 0);
    assert_eq!(u.concurrent_requests, 0);
}

#[test]
fn quotas_are_split_between_api_instances() {
    let t = Tenancy::new();
    t.set_instances(3);
    t.set_table(&views(&[(
        "acme",
        TenantQuota {
            max_concurrent_requests: Some(4),
            tokens_per_minute: Some(900),
            ..TenantQuota::default()
        },
    )]));
    // ceil(4 / 3) = 2 requests, 300 tokens here.
    let _a = t.admit("acme", 100).unwrap();
    let _b = t.admit("acme", 100).unwrap();
    let e = refused(t.admit("acme", 100));
    assert!(
        e.to_string().contains("split between 3 API instances"),
        "{e}"
    );
    drop((_a, _b));
    let e = refused(t.admit("acme", 150));
    assert!(e.to_string().contains("(300 of 900"), "{e}");
}

#[test]
fn batch_and_file_quotas_count_what_the_tenant_holds() {
    let t = Tenancy::new();
    let v = views(&[(
        "acme",
        TenantQuota {
            max_batch_queued_rows: Some(100),
            max_file_bytes: Some(1000),
            ..TenantQuota::default()
        },
    )]);
    t.set_table(&v);
    t.check_batch("acme", &v, 100, 5).unwrap();
    let e = t.check_batch("acme", &v, 101, 5).unwrap_err();
    assert!(e.to_string().contains("max_batch_queued_rows"), "{e}");
    t.check_batch("nobody", &v, 10_000, 5).unwrap();
    t.check_file("acme", 900, 100).unwrap();
    let e = t.check_file("acme", 900, 101).unwrap_err();
    assert_eq!(e.code(), ErrorCode::TenantQuotaExceeded);
    assert!(t.has_file_quota("acme") && !t.has_file_quota("nobody"));
}

#[test]
fn metrics_label_only_tenants_with_a_quota() {
    let t = Tenancy::new();
    let mut v = views(&[(
        "acme",
        TenantQuota {
            max_concurrent_requests: Some(1),
            ..TenantQuota::default()
        },
    )]);
    let mut plain = v.tenants["acme"].clone();
    plain.tenant_id = "plain".parse().unwrap();
    plain.quota_set = false;
    v.tenants.insert("plain".into(), plain);
    t.set_table(&v);
    let _a = t.admit("acme", 1).unwrap();
    let _p = t.admit("plain", 1).unwrap();
    let _ = t.admit("acme", 1);
    let m = t.render_metrics();
    assert!(
        m.contains("stoker_tenant_requests_in_flight{tenant=\"acme\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("stoker_tenant_requests_in_flight{tenant=\"other\"} 1"),
        "{m}"
    );
    assert!(
        m.contains(
            "stoker_tenant_quota_refusals_total{tenant=\"acme\",quota=\"max_concurrent_requests\"} 1"
        ),
        "{m}"
    );
    assert!(!m.contains("plain"), "{m}");
}

#[test]
fn the_weight_defaults_to_one() {
    let t = Tenancy::new();
    t.set_table(&views(&[(
        "heavy",
        TenantQuota {
            weight: 4,
            ..TenantQuota::default()
        },
    )]));
    assert_eq!(t.weight("heavy"), 4);
    assert_eq!(t.weight("unknown"), 1);
}
