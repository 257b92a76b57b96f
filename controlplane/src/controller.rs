//! The rollout controller: on each tick it judges every running rollout that
//! has SLO gates against what the request log measured for the new revision
//! since the rollout's last step, and advances, completes or rolls it back.
//! Each decision is an event with actor `rollout-controller` and the measured
//! figures in its reason, so an auditor sees why traffic moved.
//!
//! A rollout with no gates is manual: the controller never touches it.

use std::time::Duration;

use stoker_schemas::events::{GateFigures, SloGates};
use stoker_schemas::ids::RolloutId;

use crate::projection::{RolloutStatus, RolloutView};
use crate::requestlog::{RequestLog, RevisionFigures};
use crate::service::{CONTROLLER_ACTOR, ControlPlane, CpError, RolloutAction, meta};

/// What the controller did to one rollout on one tick.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub rollout_id: RolloutId,
    pub action: &'static str,
    pub reason: String,
}

fn has_gates(g: &SloGates) -> bool {
    g.ttft_p99_ms.is_some() || g.max_error_rate.is_some() || g.max_overload_rate.is_some()
}

fn figures(f: &RevisionFigures) -> GateFigures {
    GateFigures {
        requests: f.requests,
        ttft_p99_ms: f.ttft_p99_ms,
        error_rate: f.error_rate,
        overload_rate: f.overload_rate,
    }
}

/// The gates `f` breaks, as sentences; empty when all hold.
pub fn violations(g: &SloGates, f: &RevisionFigures) -> Vec<String> {
    let mut out = Vec::new();
    if let (Some(limit), Some(p99)) = (g.ttft_p99_ms, f.ttft_p99_ms)
        && p99 > limit
    {
        out.push(format!("ttft_p99 {p99:.1} ms > gate {limit:.1} ms"));
    }
    if let Some(limit) = g.max_error_rate
        && f.error_rate > limit
    {
        out.push(format!("error_rate {:.4} > gate {limit:.4}", f.error_rate));
    }
    if let Some(limit) = g.max_overload_rate
        && f.overload_rate > limit
    {
        out.push(format!(
            "overload_rate {:.4} > gate {limit:.4}",
            f.overload_rate
        ));
    }
    out
}

fn describe(f: &RevisionFigures) -> String {
    let ttft = f
        .ttft_p99_ms
        .map(|v| format!("{v:.1} ms"))
        .unwrap_or_else(|| "n/a".into());
    format!(
        "{} requests, ttft_p99 {ttft}, error_rate {:.4}, overload_rate {:.4}",
        f.requests, f.error_rate, f.overload_rate
    )
}

/// Judges one rollout; `None` when it is not the controller's to move yet.
pub fn judge(r: &RolloutView, f: &RevisionFigures) -> Option<(RolloutAction, String)> {
    if r.status != RolloutStatus::Running || !has_gates(&r.gates) {
        return None;
    }
    if f.requests < u64::from(r.gates.min_requests.max(1)) {
        return None;
    }
    let broken = violations(&r.gates, f);
    let figs = Some(figures(f));
    Some(if !broken.is_empty() {
        (
            RolloutAction::RollBack(figs),
            format!(
                "gate broken at {} %: {} (measured {})",
                r.percent,
                broken.join("; "),
                describe(f)
            ),
        )
    } else if r.percent >= 100 {
        (
            RolloutAction::Complete,
            format!("gates held at 100 %: {}", describe(f)),
        )
    } else {
        (
            RolloutAction::Advance(figs),
            format!("gates held at {} %: {}", r.percent, describe(f)),
        )
    })
}

/// One pass over every running rollout.
pub async fn tick(cp: &ControlPlane, log: &RequestLog) -> Result<Vec<Decision>, CpError> {
    cp.refresh().await?;
    let running: Vec<RolloutView> = cp
        .views()
        .await
        .rollouts
        .values()
        .filter(|r| r.status == RolloutStatus::Running && has_gates(&r.gates))
        .cloned()
        .collect();
    let mut out = Vec::new();
    for r in running {
        let f = match log
            .revision_figures(&r.deployment_id, &r.to_revision, r.updated_at)
            .await
        {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(rollout = %r.rollout_id, error = %e, "request log unreadable; skipping");
                continue;
            }
        };
        let Some((action, reason)) = judge(&r, &f) else {
            continue;
        };
        let name = match &action {
            RolloutAction::Advance(_) => "advance",
            RolloutAction::RollBack(_) => "roll_back",
            RolloutAction::Complete => "complete",
            RolloutAction::Pause => "pause",
            RolloutAction::Resume => "resume",
        };
        match cp
            .rollout_action(
                &r.rollout_id,
                action,
                &meta(CONTROLLER_ACTOR, Some(reason.clone())),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(rollout = %r.rollout_id, action = name, %reason, "rollout controller decided");
                out.push(Decision {
                    rollout_id: r.rollout_id.clone(),
                    action: name,
                    reason,
                });
            }
            // An operator acted in between: their write wins; judge again next tick.
            Err(e) => {
                tracing::info!(rollout = %r.rollout_id, error = %e, "rollout controller skipped")
            }
        }
    }
    Ok(out)
}

/// Runs [`tick`] every `every` until the task is dropped.
pub async fn run(cp: ControlPlane, log: RequestLog, every: Duration) {
    let mut t = tokio::time::interval(every);
    t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        t.tick().await;
        if let Err(e) = tick(&cp, &log).await {
            tracing::warn!(error = %e, "rollout controller tick failed");
        }
    }
}
