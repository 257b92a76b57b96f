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
            &h.per_bucket(),
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

#[cfg(test)]
mod tests {
    use prometheus_client::registry::Registry;
    use stoker_executor::scheduler::PerLane;

    use super::*;

    /// The text a scrape reads: every `+Inf` bucket holds the histogram's
    /// count, and no bucket holds more than the one above it.
    #[test]
    fn step_histograms_encode_as_prometheus_reads_them() {
        let mut steps = StepHistograms::default();
        for (secs, rows) in [(0.004, 1), (0.012, 2), (0.012, 2), (0.6, 8), (9.0, 40)] {
            steps.record(
                secs,
                PerLane {
                    interactive: 0,
                    batch: 0,
                },
                PerLane {
                    interactive: rows,
                    batch: 0,
                },
            );
        }
        let mut registry = Registry::with_prefix("stoker");
        registry.register_collector(Box::new(StepCollector {
            model: ModelLabels {
                model: "m".into(),
                revision: "r".into(),
            },
            latest: Arc::new(Mutex::new(StepFigures {
                steps: Some(steps),
                planner: None,
            })),
        }));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        let value = |line: &str| line.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap();
        for name in [
            "stoker_engine_step_duration_seconds",
            "stoker_engine_step_decode_rows",
        ] {
            let series = |suffix: &str| -> Vec<f64> {
                text.lines()
                    .filter(|l| {
                        l.starts_with(&format!("{name}_{suffix}{{")) && l.contains("interactive")
                    })
                    .map(value)
                    .collect()
            };
            let buckets = series("bucket");
            assert_eq!(series("count"), [5.0], "{text}");
            assert_eq!(buckets.last(), Some(&5.0), "{name} +Inf: {text}");
            assert!(
                buckets.windows(2).all(|w| w[0] <= w[1]),
                "{name}: {buckets:?}"
            );
        }
        assert!(
            text.contains("stoker_engine_step_duration_seconds_bucket{le=\"0.005\",model=\"m\",revision=\"r\",lane=\"interactive\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("stoker_engine_step_duration_seconds_bucket{le=\"0.015\",model=\"m\",revision=\"r\",lane=\"interactive\"} 3"),
            "{text}"
        );
    }
}
