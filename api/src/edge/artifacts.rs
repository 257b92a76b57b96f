//! Artifacts beside the primary and the capacity profile in force: loading a
//! revision's model file (unless the same bytes are loaded already), and
//! putting the profile recorded for the primary artifact into admission,
//! again after each read-model refresh.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use stoker_executor::{Engine, Model};

use crate::backend::Served;
use crate::state::AppState;

/// Loads and warms up the model at `path` next to the primary, unless an
/// artifact with the same hash is loaded already.
pub async fn load_artifact(state: &AppState, path: &Path) -> anyhow::Result<Arc<Served>> {
    let st = state.clone();
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || -> anyhow::Result<Arc<Served>> {
        let opts = st.config.load_options()?;
        let model = Model::load(&path, opts)
            .with_context(|| format!("loading model {}", path.display()))?;
        if let Some(s) = st.model_by_sha(&model.identity.sha256) {
            return Ok(s);
        }
        let engine = Arc::new(
            Engine::start(model, st.config.engine_config()).context("starting the engine")?,
        );
        engine.warm_up().context("warm-up generation")?;
        Ok(st.install(engine))
    })
    .await
    .context("model loader panicked")?
}

/// Puts in force the capacity profile recorded for the primary artifact (or
/// the static limits when there is none). Reads only the in-memory views.
pub async fn apply_capacity_profile(state: &AppState) {
    let (Some(c), Some(served)) = (state.control(), state.served()) else {
        return;
    };
    // Under the read lock, without cloning every read model.
    let profile = {
        let views = c.cp.projector().views().await;
        crate::admission::envelope::select(&views, &served.provenance.sha256)
    };
    served
        .backend
        .set_planner(planner_for(&state.config.engine, profile.as_ref()));
    state.admission.set_profile(profile);
}

/// Re-applies the capacity profile after each read-model refresh, so a
/// profile recorded by another API instance takes effect here too.
pub fn spawn_profile_watch(state: &AppState) {
    let every = Duration::from_millis(state.config.control.refresh_interval_ms.max(50));
    let state = state.clone();
    tokio::spawn(async move {
        let mut t = tokio::time::interval(every);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            t.tick().await;
            apply_capacity_profile(&state).await;
        }
    });
}

/// The step planner's targets: the configuration's, except that a recorded
/// capacity profile's TPOT p95 becomes the interactive target when the
/// operator set no absolute one (`engine.itl_target_ms` 0).
pub fn planner_for(
    engine: &crate::config::EngineSection,
    profile: Option<&crate::admission::envelope::EnvelopeLimits>,
) -> stoker_executor::scheduler::PlannerConfig {
    let mut p = engine.planner();
    if let Some(profile) = profile
        && p.interactive_itl_ms == 0.0
        && profile.tpot_p95_ms.is_finite()
        && profile.tpot_p95_ms > 0.0
    {
        p.interactive_itl_ms = profile.tpot_p95_ms;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::envelope::EnvelopeLimits;
    use crate::config::EngineSection;

    fn profile(tpot: f64) -> EnvelopeLimits {
        EnvelopeLimits {
            tpot_p95_ms: tpot,
            ..EnvelopeLimits::for_test()
        }
    }

    #[test]
    fn a_profile_sets_the_interactive_target_unless_the_operator_did() {
        let engine = EngineSection::default();
        assert_eq!(planner_for(&engine, None), engine.planner());
        let p = planner_for(&engine, Some(&profile(28.5)));
        assert_eq!(p.interactive_itl_ms, 28.5);
        assert_eq!(p.batch_step_ms, engine.planner().batch_step_ms);
        let set = EngineSection {
            itl_target_ms: 40.0,
            ..EngineSection::default()
        };
        assert_eq!(
            planner_for(&set, Some(&profile(28.5))).interactive_itl_ms,
            40.0
        );
    }
}
