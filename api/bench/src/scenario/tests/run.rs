//! Whole scenario runs against fakes with known delays on tokio's virtual
//! clock: the ratios, the verdicts, retries, the TTFT estimate and a batch
//! job's rows per second come out as computed by hand.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::super::batch::{BatchJobs, JobStatus};
use super::super::report::{phase_table, verdict_table};
use super::super::run::unreachable;
use super::super::run::{Backends, RunConfig, run};
use super::super::spec::{Scenario, Tenant};
use super::super::{build_report, plot};
use crate::prompts::PromptSource;
use crate::target::{Failure, Outcome, Planned, Target};

/// Sends `tokens` chunks 5 ms apart after `ttft(...)`.
async fn stream(p: &Planned, ttft: Duration) -> Outcome {
    let mut o = Outcome::new(p);
    tokio::time::sleep(ttft).await;
    for k in 0..p.max_tokens {
        if k > 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        o.chunks.push(Instant::now());
    }
    o.output_tokens = Some(p.max_tokens);
    o.end = Instant::now();
    o
}

/// Tenant A: TTFT 20 ms with an estimate of 10 ms; requests 5, 15, 25, ...
/// are refused, 3 ms after the send, with Retry-After 1 s the first time
/// they are sent.
struct Flood {
    refused: Mutex<HashSet<u64>>,
    started: Arc<AtomicU64>,
}

impl Target for Flood {
    fn send(&self, p: Planned) -> BoxFuture<'_, Outcome> {
        Box::pin(async move {
            self.started.fetch_add(1, Ordering::Relaxed);
            if p.index % 10 == 5 && self.refused.lock().unwrap().insert(p.index) {
                let mut o = Outcome::new(&p);
                tokio::time::sleep(Duration::from_millis(3)).await;
                o.end = Instant::now();
                o.failure = Some(Failure {
                    code: "server_overloaded".into(),
                    status: Some(503),
                    retry_after: Some(Duration::from_secs(1)),
                });
                return o;
            }
            let mut o = stream(&p, Duration::from_millis(20)).await;
            o.predicted_ttft_ms = Some(10.0);
            o
        })
    }
}

/// Tenant B: TTFT 10 ms until A has sent anything, 30 ms after.
struct Victim {
    flood_started: Arc<AtomicU64>,
}

impl Target for Victim {
    fn send(&self, p: Planned) -> BoxFuture<'_, Outcome> {
        Box::pin(async move {
            let slow = self.flood_started.load(Ordering::Relaxed) > 0;
            stream(&p, Duration::from_millis(if slow { 30 } else { 10 })).await
        })
    }
}

/// A Batch API whose one job completes 10 rows a second from its creation.
#[derive(Default)]
struct FakeJobs {
    created: Mutex<Option<Instant>>,
    creates: AtomicU64,
    cancels: AtomicU64,
    rows: AtomicU64,
}

impl BatchJobs for FakeJobs {
    fn create<'a>(
        &'a self,
        _: &'a Tenant,
        rows: Vec<Planned>,
    ) -> BoxFuture<'a, Result<String, String>> {
        Box::pin(async move {
            self.creates.fetch_add(1, Ordering::Relaxed);
            self.rows.store(rows.len() as u64, Ordering::Relaxed);
            *self.created.lock().unwrap() = Some(Instant::now());
            Ok("batch_1".into())
        })
    }

    fn status<'a>(&'a self, _: &'a Tenant, _: &'a str) -> BoxFuture<'a, Result<JobStatus, String>> {
        Box::pin(async move {
            let since = self.created.lock().unwrap().expect("created").elapsed();
            let total = self.rows.load(Ordering::Relaxed);
            let completed = ((since.as_secs_f64() * 10.0) as u64).min(total);
            Ok(JobStatus {
                status: if completed == total {
                    "completed"
                } else {
                    "in_progress"
                }
                .into(),
                completed,
                failed: 0,
                total,
            })
        })
    }

    fn cancel<'a>(&'a self, _: &'a Tenant, _: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            self.cancels.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
    }
}

const TWO_TENANTS: &str = r#"
name = "pair"
seed = 3
[[tenant]]
name = "A"
arrival = "closed:2"
input = "fixed:16"
output = "fixed:8"
retry = true
[tenant.slo]
ttft_p99_ms = 25
max_refused = 0
refusal_p99_ms = 50

[[tenant]]
name = "B"
arrival = "closed:1"
input = "fixed:16"
output = "fixed:8"
start_after_secs = 0.1
[tenant.slo]
ttft_p99_ratio = 2.0
itl_p50_ratio = 1.5
throughput_ratio_min = 0.6
max_refused = 0

[[phase]]
name = "alone"
tenants = ["B"]
duration_secs = 2

[[phase]]
name = "together"
tenants = ["A", "B"]
duration_secs = 2
"#;

fn near(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[tokio::test(start_paused = true)]
async fn ratios_and_verdicts_of_two_tenants_in_two_phases() {
    let s = Scenario::parse("pair.toml", TWO_TENANTS, &|_| None).unwrap();
    let started = Arc::new(AtomicU64::new(0));
    let b = Backends {
        targets: vec![
            Some(Arc::new(Flood {
                refused: Mutex::default(),
                started: started.clone(),
            }) as Arc<dyn Target>),
            Some(Arc::new(Victim {
                flood_started: started,
            }) as Arc<dyn Target>),
        ],
        batch: Arc::new(FakeJobs::default()),
    };
    let prompts = Arc::new(PromptSource::generated(None).unwrap());
    let cfg = RunConfig {
        scale: 1.0,
        bars: false,
    };
    let runs = run(&s, prompts, &b, cfg).await.unwrap();
    let r = build_report(&s, &runs, "http://fake", "m", 1.0, false);

    let alone = &r.phases[0].tenants[0];
    let (a, b_together) = (&r.phases[1].tenants[0], &r.phases[1].tenants[1]);
    assert_eq!((alone.tenant.as_str(), a.tenant.as_str()), ("B", "A"));
    let ttft = |t: &super::super::figures::TenantFigures| t.ttft_ms.unwrap();
    assert!(near(ttft(alone).p99, 10.0, 0.5), "{:?}", alone.ttft_ms);
    assert!(
        near(ttft(b_together).p90, 30.0, 0.5),
        "{:?}",
        b_together.ttft_ms
    );
    assert!(near(ttft(a).p99, 20.0, 0.5), "{:?}", a.ttft_ms);

    // B: 45 ms a request alone, 65 ms beside A; 8 tokens each.
    let ratio = r.ratios.iter().find(|x| x.tenant == "B").unwrap();
    assert_eq!(
        (ratio.phase.as_str(), ratio.baseline.as_str()),
        ("together", "alone")
    );
    assert!(near(ratio.ttft_p99.unwrap(), 3.0, 0.05), "{ratio:?}");
    assert!(near(ratio.itl_p50.unwrap(), 1.0, 0.01), "{ratio:?}");
    assert!(
        near(ratio.throughput.unwrap(), 45.0 / 65.0, 0.03),
        "{ratio:?}"
    );
    assert!(
        r.ratios.iter().all(|x| x.tenant != "A"),
        "A has one phase, its baseline"
    );

    // A's refusals were retried after Retry-After and accepted.
    assert!(a.retried > 0);
    assert_eq!(a.accepted_on_first_retry, a.retried);
    assert_eq!((a.refused, a.completed), (0, a.requests));
    // Each refusal took 3 ms; retried ones count.
    let refusals = a.refusal_ms.unwrap();
    assert!(near(refusals.p99, 3.0, 0.01), "{refusals:?}");
    assert!(b_together.refusal_ms.is_none());
    let p = a.ttft_over_predicted.unwrap();
    assert!(near(p.p50, 2.0, 0.05) && near(p.p99, 2.0, 0.05), "{p:?}");
    assert!(b_together.ttft_over_predicted.is_none());

    let verdicts: Vec<(&str, &str, &str, bool)> = r
        .verdicts
        .iter()
        .map(|v| (v.tenant.as_str(), v.phase.as_str(), v.slo, v.pass))
        .collect();
    assert_eq!(
        verdicts,
        [
            ("B", "alone", "max_refused", true),
            ("A", "together", "ttft_p99_ms", true),
            ("A", "together", "max_refused", true),
            ("A", "together", "refusal_p99_ms", true),
            ("B", "together", "max_refused", true),
            ("B", "together", "ttft_p99_ratio", false),
            ("B", "together", "itl_p50_ratio", true),
            ("B", "together", "throughput_ratio_min", true),
        ]
    );
    assert!(!r.passed);

    let text = verdict_table(&r);
    assert!(
        text.contains("FAIL  B          together     ttft_p99_ratio        3.0"),
        "{text}"
    );
    assert!(text.contains("FAIL: 7 of 8 SLOs held"), "{text}");
    let table = phase_table(&r.phases[1]);
    assert!(
        table.contains("TTFT observed / predicted: p50 2.00"),
        "{table}"
    );
    assert!(table.contains("accepted on the retry"), "{table}");

    let doc: serde_json::Value = serde_json::to_value(&r).unwrap();
    let b_json = &doc["phases"][1]["tenants"][1];
    assert!(b_json.get("ttft_over_predicted").is_none());
    assert!(b_json["ttft_ms"]["p90"].is_number());
    assert_eq!(doc["passed"], false);

    let dir = std::env::temp_dir().join(format!("stoker-scenario-plot-{}", std::process::id()));
    let written = plot::write_all(&dir, &r).unwrap();
    assert_eq!(written.len(), 2);
    let svg = std::fs::read_to_string(dir.join("pair-B.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("together"));
    std::fs::remove_dir_all(&dir).unwrap();
}

const BATCH_BESIDE_CHAT: &str = r#"
name = "bb"
[[tenant]]
name = "J"
lane = "batch"
rows = 1000
[tenant.slo]
throughput_ratio_min = 0.9

[[tenant]]
name = "B"
arrival = "closed:1"
output = "fixed:4"

[[phase]]
name = "b-alone"
tenants = ["B"]
duration_secs = 2

[[phase]]
name = "j-alone"
tenants = ["J"]
duration_secs = 4

[[phase]]
name = "together"
tenants = ["J", "B"]
duration_secs = 3

[[phase]]
name = "after"
tenants = ["B"]
duration_secs = 1
"#;

#[tokio::test(start_paused = true)]
async fn a_batch_job_is_counted_in_its_phases_and_cancelled_after_its_last() {
    let s = Scenario::parse("bb.toml", BATCH_BESIDE_CHAT, &|_| None).unwrap();
    let jobs = Arc::new(FakeJobs::default());
    let b = Backends {
        targets: vec![
            None,
            Some(Arc::new(Victim {
                flood_started: Arc::new(AtomicU64::new(0)),
            }) as Arc<dyn Target>),
        ],
        batch: jobs.clone(),
    };
    let prompts = Arc::new(PromptSource::generated(None).unwrap());
    let cfg = RunConfig {
        scale: 0.5,
        bars: false,
    };
    let runs = run(&s, prompts, &b, cfg).await.unwrap();
    assert_eq!(jobs.creates.load(Ordering::Relaxed), 1);
    assert_eq!(jobs.rows.load(Ordering::Relaxed), 1000);
    assert_eq!(jobs.cancels.load(Ordering::Relaxed), 1);
    let r = build_report(&s, &runs, "http://fake", "m", 0.5, false);
    assert_eq!(r.phases[1].duration_s, 2.0, "scaled by 0.5");
    let alone = r.phases[1].tenants[0].batch.clone().unwrap();
    // The phase started once the job had finished its first rows (one
    // second of them: the first poll after creation).
    assert_eq!(alone.completed_at_start, 10);
    assert!(near(alone.rows_per_s, 10.0, 0.6), "{alone:?}");
    let together = r.phases[2].tenants[0].batch.clone().unwrap();
    assert!(together.completed_at_start >= alone.completed_at_end);
    assert!(near(together.rows_per_s, 10.0, 0.6), "{together:?}");
    assert!(!together.exhausted);
    assert!(r.phases[3].tenants.iter().all(|t| t.batch.is_none()));
    let v = r
        .verdicts
        .iter()
        .find(|v| v.slo == "throughput_ratio_min")
        .unwrap();
    assert_eq!(
        (v.tenant.as_str(), v.phase.as_str(), v.pass),
        ("J", "together", true)
    );
    assert!(r.passed);
}

#[test]
fn a_run_where_nothing_answered_is_unreachable() {
    use super::super::run::{PhaseRun, TenantRun};
    let p = Planned {
        index: 0,
        prompt: "x".into(),
        prompt_tokens: None,
        max_tokens: 1,
        batch: false,
    };
    let mut o = Outcome::new(&p);
    o.failure = Some(Failure {
        code: "connect".into(),
        status: None,
        retry_after: None,
    });
    let phase = |outcomes: Vec<Outcome>| PhaseRun {
        phase: 0,
        duration: Duration::from_secs(1),
        elapsed: Duration::from_secs(1),
        tenants: vec![TenantRun {
            tenant: 0,
            outcomes,
            retried: 0,
            accepted_on_first_retry: 0,
            batch: None,
        }],
    };
    let why = unreachable(&[phase(vec![o.clone(), o.clone()])]).unwrap();
    assert!(why.contains("connect 2"), "{why}");
    let mut refused = o.clone();
    refused.failure.as_mut().unwrap().status = Some(503);
    assert!(unreachable(&[phase(vec![o, refused])]).is_none());
    assert!(unreachable(&[phase(vec![])]).is_none());
}
