//! Prometheus metrics, named as vLLM names them with the `stoker_` prefix so
//! dashboards port by prefix. Request histograms are observed when a request
//! ends; engine gauges and counters are copied from the engine's published
//! stats at scrape time, so scraping never talks to the engine thread.

mod steps;

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use stoker_executor::Lane;
use stoker_executor::engine::{EngineStats, Timings, Usage};
use stoker_schemas::codes::ErrorCode;

use crate::admission::AdmissionSnapshot;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LaneLabels {
    pub model: String,
    pub revision: String,
    pub lane: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelLabels {
    pub model: String,
    pub revision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FinishLabels {
    pub model: String,
    pub revision: String,
    pub lane: String,
    pub finished_reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EnvelopeLabels {
    pub model: String,
    pub revision: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RejectLabels {
    pub model: String,
    pub revision: String,
    pub code: String,
}

fn latency_histogram() -> Histogram {
    Histogram::new([
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
        20.0, 40.0, 80.0, 160.0,
    ])
}

fn itl_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
        0.75, 1.0, 2.5,
    ])
}

/// Observed / predicted time to first token: 1 is a perfect estimate,
/// above 1 an optimistic one (the objective then does not hold).
fn ratio_histogram() -> Histogram {
    Histogram::new([
        0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0,
    ])
}

/// Below this predicted TTFT the ratio says nothing (a few ms of scheduling
/// noise over a 1 ms estimate would read as 5x): not observed.
const RATIO_FROM: Duration = Duration::from_millis(10);

type Hist = Family<LaneLabels, Histogram, fn() -> Histogram>;

pub struct Metrics {
    registry: Registry,
    model: ModelLabels,
    ttft: Hist,
    itl: Hist,
    e2e: Hist,
    queue: Hist,
    prefill: Hist,
    decode: Hist,
    running: Family<LaneLabels, Gauge>,
    waiting: Family<LaneLabels, Gauge>,
    kv_usage: Family<ModelLabels, Gauge<f64, AtomicU64>>,
    preemptions: Family<LaneLabels, Counter>,
    prompt_tokens: Family<ModelLabels, Counter>,
    generation_tokens: Family<ModelLabels, Counter>,
    success: Family<FinishLabels, Counter>,
    prefix_queries: Family<ModelLabels, Counter>,
    prefix_hits: Family<ModelLabels, Counter>,
    rejected: Family<RejectLabels, Counter>,
    out_of_envelope: Family<EnvelopeLabels, Counter>,
    edge_waiting: Family<ModelLabels, Gauge>,
    ttft_prediction: Family<ModelLabels, Histogram, fn() -> Histogram>,
    /// Engine counters as last copied, to turn totals into increments.
    last: Mutex<EngineStats>,
    /// The step planner's figures, encoded by [`steps::StepCollector`].
    steps: Arc<Mutex<steps::StepFigures>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("model", &self.model)
            .finish()
    }
}

impl Metrics {
    pub fn new(model: &str, revision: &str) -> Self {
        let mut registry = Registry::with_prefix("stoker");
        let hist = || Hist::new_with_constructor(latency_histogram as fn() -> Histogram);
        let ttft = hist();
        let e2e = hist();
        let queue = hist();
        let prefill = hist();
        let decode = hist();
        let itl = Hist::new_with_constructor(itl_histogram as fn() -> Histogram);
        let m = Metrics {
            model: ModelLabels {
                model: model.to_string(),
                revision: revision.to_string(),
            },
            ttft,
            itl,
            e2e,
            queue,
            prefill,
            decode,
            running: Family::default(),
            waiting: Family::default(),
            kv_usage: Family::default(),
            preemptions: Family::default(),
            prompt_tokens: Family::default(),
            generation_tokens: Family::default(),
            success: Family::default(),
            prefix_queries: Family::default(),
            prefix_hits: Family::default(),
            rejected: Family::default(),
            out_of_envelope: Family::default(),
            edge_waiting: Family::default(),
            ttft_prediction: Family::new_with_constructor(ratio_histogram as fn() -> Histogram),
            last: Mutex::new(EngineStats::default()),
            steps: Arc::default(),
            registry: Registry::default(),
        };
        registry.register_collector(Box::new(steps::StepCollector {
            model: m.model.clone(),
            latest: m.steps.clone(),
        }));
        registry.register(
            "time_to_first_token_seconds",
            "Time from request arrival at the engine to its first token",
            m.ttft.clone(),
        );
        registry.register(
            "inter_token_latency_seconds",
            "Time between consecutive output tokens",
            m.itl.clone(),
        );
        registry.register(
            "e2e_request_latency_seconds",
            "Time from request arrival at the engine to its end",
            m.e2e.clone(),
        );
        registry.register(
            "request_queue_time_seconds",
            "Time a request waited before its first step",
            m.queue.clone(),
        );
        registry.register(
            "request_prefill_time_seconds",
            "Time from the first step to the first token",
            m.prefill.clone(),
        );
        registry.register(
            "request_decode_time_seconds",
            "Time from the first token to the end",
            m.decode.clone(),
        );
        registry.register(
            "num_requests_running",
            "Sequences in the running batch",
            m.running.clone(),
        );
        registry.register(
            "num_requests_waiting",
            "Sequences waiting in the engine",
            m.waiting.clone(),
        );
        registry.register(
            "kv_cache_usage_perc",
            "Share of KV cache blocks in use (0 to 1)",
            m.kv_usage.clone(),
        );
        registry.register(
            "num_preemptions",
            "Sequences preempted for recompute",
            m.preemptions.clone(),
        );
        registry.register(
            "prompt_tokens",
            "Prompt tokens computed",
            m.prompt_tokens.clone(),
        );
        registry.register(
            "generation_tokens",
            "Tokens generated",
            m.generation_tokens.clone(),
        );
        registry.register(
            "request_success",
            "Requests finished, by finish reason",
            m.success.clone(),
        );
        registry.register(
            "prefix_cache_queries",
            "Prompt tokens looked up in the prefix cache",
            m.prefix_queries.clone(),
        );
        registry.register(
            "prefix_cache_hits",
            "Prompt tokens found in the prefix cache",
            m.prefix_hits.clone(),
        );
        registry.register(
            "requests_rejected",
            "Requests refused, by error code",
            m.rejected.clone(),
        );
        registry.register(
            "out_of_envelope_requests",
            "Requests far outside the capacity profile's measured workload, by reason",
            m.out_of_envelope.clone(),
        );
        registry.register(
            "admission_ttft_prediction_ratio",
            "Observed time to first token over the one edge admission estimated when it \
             admitted the request (estimates under 10 ms are not observed)",
            m.ttft_prediction.clone(),
        );
        registry.register(
            "api_requests_waiting",
            "Requests admitted at the edge and not yet scheduled",
            m.edge_waiting.clone(),
        );
        Metrics { registry, ..m }
    }

    fn lane(&self, lane: Lane) -> LaneLabels {
        LaneLabels {
            model: self.model.model.clone(),
            revision: self.model.revision.clone(),
            lane: lane_name(lane).to_string(),
        }
    }

    pub fn record_rejected(&self, code: ErrorCode) {
        self.rejected
            .get_or_create(&RejectLabels {
                model: self.model.model.clone(),
                revision: self.model.revision.clone(),
                code: code.as_str().to_string(),
            })
            .inc();
    }

    /// Observes how the time to first token compared with admission's
    /// estimate for it.
    pub fn record_ttft_prediction(&self, observed: Duration, predicted: Duration) {
        if predicted < RATIO_FROM {
            return;
        }
        self.ttft_prediction
            .get_or_create(&self.model)
            .observe(observed.as_secs_f64() / predicted.as_secs_f64());
    }

    /// Counts a request outside the capacity profile's measured workload.
    pub fn record_out_of_envelope(&self, reason: &str) {
        self.out_of_envelope
            .get_or_create(&EnvelopeLabels {
                model: self.model.model.clone(),
                revision: self.model.revision.clone(),
                reason: reason.to_string(),
            })
            .inc();
    }

    /// Observes a finished request's timings (measured by the engine).
    pub fn record_finished(&self, lane: Lane, reason: &str, usage: &Usage, t: &Timings) {
        let l = self.lane(lane);
        self.ttft.get_or_create(&l).observe(t.ttft.as_secs_f64());
        self.e2e.get_or_create(&l).observe(t.total.as_secs_f64());
        self.queue.get_or_create(&l).observe(t.queue.as_secs_f64());
        self.prefill
            .get_or_create(&l)
            .observe(t.prefill.as_secs_f64());
        self.decode
            .get_or_create(&l)
            .observe(t.decode.as_secs_f64());
        if usage.completion_tokens > 1 {
            let itl = t.decode / (usage.completion_tokens as u32 - 1);
            let h = self.itl.get_or_create(&l);
            for _ in 1..usage.completion_tokens {
                h.observe(itl.as_secs_f64());
            }
        }
        self.success
            .get_or_create(&FinishLabels {
                model: l.model,
                revision: l.revision,
                lane: l.lane,
                finished_reason: reason.to_string(),
            })
            .inc();
    }

    /// Copies the engine's gauges and counter increments, then encodes.
    pub fn render(&self, engine: Option<&EngineStats>, edge: AdmissionSnapshot) -> String {
        if let Some(s) = engine {
            let mut last = self.last.lock().unwrap();
            for lane in [Lane::Interactive, Lane::Batch] {
                let l = self.lane(lane);
                self.running
                    .get_or_create(&l)
                    .set(s.lane(lane).running as i64);
                self.waiting
                    .get_or_create(&l)
                    .set(s.lane(lane).waiting as i64);
                let d = s
                    .lane(lane)
                    .preemptions_total
                    .saturating_sub(last.lane(lane).preemptions_total);
                self.preemptions.get_or_create(&l).inc_by(d);
            }
            self.kv_usage.get_or_create(&self.model).set(s.kv_usage());
            let inc = |c: &Family<ModelLabels, Counter>, now: u64, before: u64| {
                c.get_or_create(&self.model)
                    .inc_by(now.saturating_sub(before));
            };
            inc(
                &self.prompt_tokens,
                s.prompt_tokens_total,
                last.prompt_tokens_total,
            );
            inc(
                &self.generation_tokens,
                s.generation_tokens_total,
                last.generation_tokens_total,
            );
            inc(
                &self.prefix_queries,
                s.prefix_cache_queries,
                last.prefix_cache_queries,
            );
            inc(
                &self.prefix_hits,
                s.prefix_cache_hits,
                last.prefix_cache_hits,
            );
            *last = s.clone();
            // An API in front of remote executors has no steps of its own.
            if s.steps_total > 0 {
                *self.steps.lock().unwrap() = steps::StepFigures {
                    steps: Some(s.steps),
                    planner: Some(s.planner),
                };
            }
        }
        self.edge_waiting
            .get_or_create(&self.model)
            .set(edge.waiting as i64);
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

pub fn lane_name(lane: Lane) -> &'static str {
    match lane {
        Lane::Interactive => "interactive",
        Lane::Batch => "batch",
    }
}

/// Seconds as a histogram takes them; kept here so callers need no conversion.
pub fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}
