//! `--record-profile DEPLOYMENT`: the knee's figures recorded as the serving
//! revision's capacity profile through the admin API, so admission sizes
//! from what was measured rather than from static defaults.
//!
//! The envelope counts what admission counts: outstanding requests (the
//! closed loop's clients, or the mean in flight of an open-loop level) and
//! their prompt + `max_tokens`. The revision is the one that answered, as
//! the server named it in `x-stoker-revision`, unless given.

use serde::Serialize;
use serde_json::{Value, json};
use stoker_schemas::events::CapacityEnvelope;
use stoker_schemas::ids::{DeploymentId, RevisionId};

use super::spec::{Arrival, Workload};
use super::stats::Summary;

/// What was recorded.
#[derive(Clone, Debug, Serialize)]
pub struct Recorded {
    pub deployment_id: DeploymentId,
    pub revision_id: RevisionId,
    pub workload: String,
    pub envelope: CapacityEnvelope,
}

/// The envelope measured at `knee`.
pub fn envelope(knee: &Summary, arrival: &Arrival) -> Result<CapacityEnvelope, String> {
    let concurrency = match arrival {
        Arrival::Closed { concurrency } => *concurrency,
        _ => knee.mean_in_flight.ceil().max(1.0) as u32,
    };
    let prompt = knee.prompt_tokens.map_or(0.0, |t| t.mean);
    let active_tokens = (f64::from(concurrency) * (prompt + knee.max_tokens_mean)).ceil() as u64;
    let ttft = knee
        .ttft_ms
        .ok_or("no request at the knee produced a first token")?;
    // One-token outputs have no TPOT; their whole latency is the bound then.
    let tpot_p95 = knee
        .tpot_ms
        .map(|d| d.p95)
        .or(knee.e2e_ms.map(|d| d.p95))
        .filter(|v| *v > 0.0)
        .ok_or("no latency was measured at the knee")?;
    if knee.output_throughput <= 0.0 {
        return Err("no output tokens were measured at the knee".into());
    }
    Ok(CapacityEnvelope {
        concurrency,
        active_tokens: active_tokens.max(1),
        ttft_p95_ms: ttft.p95.max(0.001),
        tpot_p95_ms: tpot_p95,
        throughput_tok_s: knee.output_throughput,
        prefill_tok_s: knee
            .server
            .as_ref()
            .and_then(|s| s.prefill_tok_s)
            .filter(|r| r.is_finite() && *r > 0.0),
        decode_tok_s: knee
            .tpot_ms
            .map(|d| 1e3 / d.p50)
            .filter(|r| r.is_finite() && *r > 0.0),
        prompt_tokens_p95: knee.prompt_tokens.map(|t| t.p95.ceil() as u64),
        output_tokens_p95: knee.output_tokens.map(|t| t.p95.ceil() as u64),
    })
}

/// Records the profile; the error is for the operator to read.
#[allow(clippy::too_many_arguments)]
pub async fn record(
    client: &reqwest::Client,
    url: &str,
    admin_key: Option<&str>,
    deployment: &str,
    revision: Option<&str>,
    w: &Workload,
    knee: &Summary,
    arrival: &Arrival,
) -> Result<Recorded, String> {
    let revision = revision
        .map(str::to_owned)
        .or_else(|| knee.revision.clone())
        .ok_or(
            "the server did not name the revision that answered (no x-stoker-revision \
             header); give it with --revision",
        )?;
    let deployment: DeploymentId = deployment
        .parse()
        .map_err(|e| format!("--record-profile {deployment:?}: {e}"))?;
    let revision: RevisionId = revision
        .parse()
        .map_err(|e| format!("the revision {revision:?}: {e}"))?;
    let envelope = envelope(knee, arrival)?;
    let body = json!({
        "deployment_id": deployment,
        "revision_id": revision,
        "workload": w.name,
        "envelope": envelope,
        "reason": format!(
            "stoker bench serve: knee at {} ({} in, {} out) under SLO ttft_ms={:?} tpot_ms={:?} \
             e2e_ms={:?} at {:.0} %",
            arrival, w.input, w.output, w.slo.ttft_ms, w.slo.tpot_ms, w.slo.e2e_ms,
            w.slo.attainment * 100.0
        ),
    });
    let mut req = client
        .post(format!(
            "{}/admin/v1/capacity-profiles",
            url.trim_end_matches('/')
        ))
        .json(&body);
    if let Some(k) = admin_key {
        req = req.bearer_auth(k);
    }
    let resp = req
        .send()
        .await
        .map_err(|e| format!("recording the profile: {e}"))?;
    let status = resp.status();
    if !status.is_success() {
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        let msg = v
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or("no error body");
        return Err(format!("recording the profile: HTTP {status}: {msg}"));
    }
    Ok(Recorded {
        deployment_id: deployment,
        revision_id: revision,
        workload: w.name.clone(),
        envelope,
    })
}
