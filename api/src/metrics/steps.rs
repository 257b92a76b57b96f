//! The step planner's metrics: per-step histograms of duration, prefill tokens
//! and decode rows per lane, the latency limits the last step ran under, and
//! the step-cost model's fit.
//!
//! The engine keeps these as cumulative counters in its published stats; a
//! collector encodes the latest copy at scrape time, so no histogram is
//! observed twice and the engine thread is never asked.

use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
use stoker_executor::Lane;
use stoker_executor::engine::step_stats::{StepHistogram, StepHistograms};
use stoker_executor::scheduler::PlannerSnapshot;

use super::{LaneLabels, ModelLabels, lane_name};

/// A term of the step-cost model.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TermLabels {
    model: String,
    revision: String,
    term: &'static str,
}

/// The latest planner figures the engine published.
#[derive(Debug, Clone, Default)]
pub struct StepFigures {
    pub steps: Option<StepHistograms>,
    pub planner: Option<PlannerSnapshot>,
}

#[derive(Debug)]
pub struct StepCollector {
    pub model: ModelLabels,
    pub latest: Arc<Mutex<StepFigures>>,
}

impl StepCollector {
    fn lane(&self, lane: Lane) -> LaneLabels {
        LaneLabels {
            model: self.model.model.clone(),
            revision: self.model.revision.clone(),
            lane: lane_name(lane).to_string(),
        }
    }
}

fn encode_histograms(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    per_lane: [(&LaneLabels, &StepHistogram); 2],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, h) in per_lane {
        m.encode_family(labels)?.encode_histogram::<NoLabelSet>(
            h.sum,
            h.count,
            &h.cumulative(),
            None,
        )?;
    }
    Ok(())
}

fn encode_gauges(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    values: &[(&LaneLabels, f64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in values {
        ConstGauge::new(*v).encode(m.encode_family(*labels)?)?;
    }
    Ok(())
}

impl Collector for StepCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let figures = self.latest.lock().unwrap().clone();
        let (i, b) = (self.lane(Lane::Interactive), self.lane(Lane::Batch));
        if let Some(s) = figures.steps {
            encode_histograms(
                &mut enc,
                "engine_step_duration_seconds",
                "Duration of engine steps; lane=interactive for steps carrying interactive work, batch for batch-only steps",
                [(&i, &s.seconds.interactive), (&b, &s.seconds.batch)],
            )?;
            encode_histograms(
                &mut enc,
                "engine_step_prefill_tokens",
                "Prompt tokens a lane computed in a step, for steps where it had any",
                [
                    (&i, &s.prefill_tokens.interactive),
                    (&b, &s.prefill_tokens.batch),
                ],
            )?;
            encode_histograms(
                &mut enc,
                "engine_step_decode_rows",
                "Decode rows a lane had in a step, for steps where it had any",
                [(&i, &s.decode_rows.interactive), (&b, &s.decode_rows.batch)],
            )?;
        }
        if let Some(p) = figures.planner {
            // NaN where the last step ran without a time limit for the lane.
            let ms = |v: Option<f64>| v.map_or(f64::NAN, |ms| ms / 1e3);
            encode_gauges(
                &mut enc,
                "engine_step_limit_seconds",
                "Predicted-duration limit the last step packed each lane's work to (NaN: tokens only)",
                &[(&i, ms(p.last.interactive_ms)), (&b, ms(p.last.batch_ms))],
            )?;
            let m = &self.model;
            let mut g = enc.encode_descriptor(
                "engine_step_cost_relative_error",
                "Smoothed |predicted - measured| / measured step duration of the step-cost model",
                None,
                MetricType::Gauge,
            )?;
            ConstGauge::new(p.cost.relative_error).encode(g.encode_family(m)?)?;
            // What a step costs here, for capacity planning and for the
            // routing simulator's calibration against this executor.
            let mut g = enc.encode_descriptor(
                "engine_step_cost_ms",
                "The step-cost model's fitted terms, ms: fixed per step, per token computed, per row sampled, per 1,000 attention pairs",
                None,
                MetricType::Gauge,
            )?;
            let c = &p.cost;
            for (term, v) in [
                ("fixed", c.fixed_ms),
                ("per_token", c.per_token_ms),
                ("per_sampled_row", c.per_sampled_row_ms),
                ("per_1k_attention_pairs", c.per_1k_attention_pairs_ms),
            ] {
                let labels = TermLabels {
                    model: m.model.clone(),
                    revision: m.revision.clone(),
                    term,
                };
                ConstGauge::new(v).encode(g.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}
