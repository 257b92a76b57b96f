//! The generator against a fake endpoint with known delays, on tokio's
//! virtual clock: every figure it reports can be computed by hand.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use tokio::time::Instant;

use super::driver::{Progress, plan, run_level};
use super::prompts::PromptSource;
use super::spec::{Arrival, Slo, Workload};
use super::stats::{Dist, percentile, summarize};
use super::target::{Failure, Outcome, Planned, Target};
use super::*;

/// First token after `10 + i % 100` ms, then one token every 5 ms; every
/// tenth request (from 5 on) is refused at once when `refuse` is set.
struct Fake {
    refuse: bool,
}

impl Target for Fake {
    fn send(&self, p: Planned) -> BoxFuture<'_, Outcome> {
        Box::pin(async move {
            let mut o = Outcome::new(&p);
            if self.refuse && p.index % 10 == 5 {
                o.failure = Some(Failure {
                    code: "server_overloaded".into(),
                    status: Some(503),
                    retry_after: Some(Duration::from_secs(1)),
                });
                return o;
            }
            tokio::time::sleep(Duration::from_millis(10 + p.index % 100)).await;
            for k in 0..p.max_tokens {
                if k > 0 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                o.chunks.push(Instant::now());
            }
            o.output_tokens = Some(p.max_tokens);
            o.end = Instant::now();
            o
        })
    }
}

fn workload(arrival: Arrival, requests: u64) -> Workload {
    Workload {
        arrival,
        requests: Some(requests),
        input: "16".parse().unwrap(),
        output: "8".parse().unwrap(),
        slo: Slo {
            ttft_ms: Some(60.0),
            attainment: 0.9,
            ..Slo::default()
        },
        ..Workload::default()
    }
}

async fn level(w: Workload, refuse: bool) -> Vec<Outcome> {
    let arrival = w.arrival.clone();
    run_level(
        Arc::new(Fake { refuse }),
        Arc::new(w),
        Arc::new(PromptSource::generated(None).unwrap()),
        arrival,
        0,
        Arc::new(Progress::default()),
    )
    .await
    .outcomes
}

fn near(a: f64, b: f64) -> bool {
    (a - b).abs() < 1.0
}

#[tokio::test(start_paused = true)]
async fn statistics_of_known_delays_are_exact_within_a_millisecond() {
    let w = workload(Arrival::Closed { concurrency: 4 }, 200);
    let slo = w.slo.clone();
    let outcomes = level(w, false).await;
    assert_eq!(outcomes.len(), 200);
    let s = summarize("closed:4".into(), 4.0, &outcomes, &slo, None);
    let mut ttft: Vec<f64> = (0..200u64).map(|i| (10 + i % 100) as f64).collect();
    ttft.sort_by(f64::total_cmp);
    let want = Dist {
        mean: ttft.iter().sum::<f64>() / 200.0,
        p50: percentile(&ttft, 0.5),
        p90: percentile(&ttft, 0.9),
        p95: percentile(&ttft, 0.95),
        p99: percentile(&ttft, 0.99),
        max: 109.0,
    };
    let got = s.ttft_ms.unwrap();
    for (g, w) in [
        (got.mean, want.mean),
        (got.p50, want.p50),
        (got.p90, want.p90),
        (got.p95, want.p95),
        (got.p99, want.p99),
        (got.max, want.max),
    ] {
        assert!(near(g, w), "TTFT {g} vs {w}");
    }
    // Seven 5 ms gaps after the first token.
    let tpot = s.tpot_ms.unwrap();
    assert!(near(tpot.p50, 5.0) && near(tpot.p99, 5.0), "{tpot:?}");
    let itl = s.itl_ms.unwrap();
    assert!(near(itl.mean, 5.0) && near(itl.max, 5.0), "{itl:?}");
    let e2e = s.e2e_ms.unwrap();
    assert!(near(e2e.p50, want.p50 + 35.0), "{e2e:?}");
    // TTFT <= 60 ms: indices with i % 100 <= 50, 51 of each 100.
    assert!(
        (s.slo_attainment - 0.51).abs() < 1e-9,
        "{}",
        s.slo_attainment
    );
    assert!(!s.meets_slo);
    assert_eq!(s.output_tokens.unwrap().total, 1600);
    // Four clients kept four requests in flight throughout.
    assert!(
        (s.mean_in_flight - 4.0).abs() < 0.05,
        "{}",
        s.mean_in_flight
    );
}

#[tokio::test(start_paused = true)]
async fn refusals_are_counted_by_code_and_miss_the_slo() {
    let w = workload(Arrival::Closed { concurrency: 2 }, 100);
    let slo = w.slo.clone();
    let outcomes = level(w, true).await;
    let s = summarize("closed:2".into(), 2.0, &outcomes, &slo, None);
    assert_eq!(s.failed, 10);
    assert_eq!(s.failures.get("server_overloaded"), Some(&10));
    assert_eq!(s.retry_after, 10);
    assert_eq!(s.completed, 90);
}

/// A closed-loop client refused with `Retry-After: 1` sends its next request
/// a second later, as the SDKs do, not at once.
#[tokio::test(start_paused = true)]
async fn a_closed_loop_client_waits_out_retry_after() {
    let outcomes = level(workload(Arrival::Closed { concurrency: 1 }, 20), true).await;
    let by = |i: u64| outcomes.iter().find(|o| o.index == i).unwrap();
    for refused in [5, 15] {
        assert!(by(refused).failure.is_some());
        let gap = by(refused + 1).start - by(refused).end;
        assert!(
            gap >= Duration::from_secs(1) && gap < Duration::from_millis(1_010),
            "{gap:?}"
        );
    }
    let served_gap = by(3).start - by(2).end;
    assert!(served_gap < Duration::from_millis(10), "{served_gap:?}");
}

#[tokio::test(start_paused = true)]
async fn poisson_arrivals_mean_rate_within_five_percent_over_2000() {
    let w = workload(Arrival::Poisson { rate: 50.0 }, 2000);
    let outcomes = level(w, false).await;
    assert_eq!(outcomes.len(), 2000);
    let first = outcomes.iter().map(|o| o.start).min().unwrap();
    let last = outcomes.iter().map(|o| o.start).max().unwrap();
    let rate = 1999.0 / (last - first).as_secs_f64();
    assert!((rate / 50.0 - 1.0).abs() < 0.05, "rate {rate}");
}

#[tokio::test(start_paused = true)]
async fn bursts_and_duration_bound_a_level() {
    let mut w = workload("burst:5/1".parse().unwrap(), 1_000_000);
    w.duration = Some(Duration::from_millis(3500));
    let outcomes = level(w, false).await;
    // Bursts at 0, 1, 2 and 3 s; the one at 4 s is past the duration.
    assert_eq!(outcomes.len(), 20);
}

#[test]
fn requests_are_planned_from_the_seed_alone() {
    let w = Workload {
        input: "uniform:5-50".parse().unwrap(),
        batch_share: 0.5,
        seed: 9,
        ..workload(Arrival::Closed { concurrency: 1 }, 10)
    };
    let p = PromptSource::generated(None).unwrap();
    let a: Vec<_> = (0..20).map(|i| plan(&w, &p, 0, i)).collect();
    let b: Vec<_> = (0..20).map(|i| plan(&w, &p, 0, i)).collect();
    // Another level of a sweep gets other prompts: a prefix cache must not
    // make later levels look faster by replaying earlier ones.
    let c: Vec<_> = (0..20).map(|i| plan(&w, &p, 1, i)).collect();
    assert!(a.iter().zip(&c).all(|(x, y)| x.prompt != y.prompt));
    assert!(
        a.iter()
            .zip(&b)
            .all(|(x, y)| x.prompt == y.prompt && x.batch == y.batch)
    );
    let batch = a.iter().filter(|p| p.batch).count();
    assert!((3..=17).contains(&batch), "{batch}");
}

fn args(f: impl FnOnce(&mut ServeArgs)) -> ServeArgs {
    let mut a = ServeArgs {
        url: "http://127.0.0.1:1".into(),
        requests: Some(10),
        request_timeout: 300.0,
        ..ServeArgs::default()
    };
    f(&mut a);
    a
}

#[test]
fn flags_fold_into_a_workload() {
    let w = workload_of(&args(|a| {
        a.rate = Some(4.0);
        a.arrival = Some("constant".into());
        a.input = Some("normal:64,8".into());
        a.slo_ttft_ms = Some(100.0);
    }))
    .unwrap();
    assert_eq!(w.arrival, Arrival::Constant { rate: 4.0 });
    assert_eq!(w.slo.ttft_ms, Some(100.0));
}

#[test]
fn bad_flags_are_clear_errors() {
    let cases: Vec<(ServeArgs, &str)> = vec![
        (
            args(|a| {
                a.rate = Some(1.0);
                a.concurrency = Some(2);
            }),
            "choose one arrival pattern",
        ),
        (
            args(|a| a.arrival = Some("poisson".into())),
            "--arrival only shapes --rate",
        ),
        (
            args(|a| {
                a.rate = Some(1.0);
                a.arrival = Some("gamma".into());
            }),
            "use poisson or constant",
        ),
        (args(|a| a.rate = Some(-1.0)), "RATE must be from 0.001"),
        (
            args(|a| a.concurrency = Some(0)),
            "N must be a whole number",
        ),
        (
            args(|a| a.burst = Some("3".into())),
            "burst needs N/SECONDS",
        ),
        (args(|a| a.input = Some("lots".into())), "length `lots`"),
        (args(|a| a.requests = None), "--requests N or --duration"),
        (args(|a| a.duration = Some(f64::NAN)), "duration"),
        (args(|a| a.batch_share = Some(2.0)), "batch share"),
        (args(|a| a.slo_attainment = Some(1.5)), "attainment"),
        (
            args(|a| a.workload = Some("/nonexistent/w.toml".into())),
            "workload file",
        ),
    ];
    for (a, want) in cases {
        let e = workload_of(&a).unwrap_err();
        assert!(e.0.contains(want), "{want:?} not in {e}");
    }
}

#[test]
fn sweep_levels_double_or_follow_the_list() {
    let start = Arrival::Closed { concurrency: 2 };
    let a = args(|a| {
        a.sweep = true;
        a.sweep_max = Some(20.0);
    });
    assert_eq!(sweep_levels(&a, &start).unwrap(), [2.0, 4.0, 8.0, 16.0]);
    let a = args(|a| {
        a.sweep = true;
        a.sweep_levels = vec![1.0, 3.0, 9.0];
    });
    assert_eq!(sweep_levels(&a, &start).unwrap(), [1.0, 3.0, 9.0]);
    for bad in [
        args(|a| {
            a.sweep = true;
            a.sweep_levels = vec![4.0, 2.0];
        }),
        args(|a| {
            a.sweep = true;
            a.sweep_levels = vec![0.0];
        }),
        args(|a| {
            a.sweep = true;
            a.sweep_max = Some(1.0);
        }),
        args(|a| a.sweep_max = Some(8.0)),
    ] {
        assert!(sweep_levels(&bad, &start).is_err());
    }
}

#[tokio::test]
async fn usage_errors_exit_2_before_any_request() {
    for a in [
        args(|a| {
            a.sweep = true;
        }),
        args(|a| a.plot = Some("out.png".into())),
        args(|a| a.url = "ftp://x".into()),
        args(|a| a.request_timeout = 0.0),
        args(|a| a.request_timeout = 1e300),
        args(|a| a.request_timeout = f64::NAN),
        args(|a| a.tokenizer = Some("/nonexistent.gguf".into())),
        args(|a| a.prompts = Some("/nonexistent.jsonl".into())),
    ] {
        assert!(matches!(serve(a).await, Err(Fail::Usage(_))));
    }
}

#[test]
fn prompts_file_errors_name_the_line() {
    let dir = std::env::temp_dir().join(format!("stoker-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("p.jsonl");
    for (body, want) in [
        ("{\"prompt\":\"a\"}\nnot json\n", "line 2"),
        ("{\"prompt\":\"\"}\n", "empty"),
        ("{\"prompt\":\"a\",\"max_tokens\":0}\n", "max_tokens"),
        ("{\"text\":\"a\"}\n", "line 1"),
        ("\n\n", "no prompts"),
    ] {
        std::fs::write(&f, body).unwrap();
        let e = PromptSource::from_file(&f, None).unwrap_err();
        assert!(e.0.contains(want), "{want:?} not in {e}");
    }
    std::fs::write(&f, "{\"prompt\":\"hello\",\"max_tokens\":3}\n").unwrap();
    let p = PromptSource::from_file(&f, None).unwrap();
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(0);
    assert_eq!(p.prompt(99, &mut rng).max_tokens, Some(3));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn generated_prompts_have_exact_token_lengths() {
    let gguf = stoker_test_support::model_path();
    let tok =
        ModelTokenizer::from_gguf_file(&gguf).expect("the default model (scripts/fetch-model.sh)");
    let check = tok.clone();
    let p = PromptSource::generated(Some(tok)).unwrap();
    assert!(p.exact());
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(3);
    for len in [1u32, 2, 7, 32, 100, 513, 2000] {
        let prompt = p.prompt(len, &mut rng);
        assert_eq!(prompt.tokens, Some(len));
        assert_eq!(check.encode(&prompt.text).unwrap().len(), len as usize);
    }
}

#[tokio::test(start_paused = true)]
async fn with_a_lane_mix_latency_figures_describe_the_interactive_lane() {
    let mut w = workload(Arrival::Closed { concurrency: 2 }, 200);
    w.batch_share = 0.5;
    let slo = w.slo.clone();
    let outcomes = level(w, false).await;
    let s = summarize("closed:2".into(), 2.0, &outcomes, &slo, None);
    let b = s.batch.as_ref().expect("batch lane figures");
    assert_eq!(b.requests, s.batch_requests);
    assert!(b.requests > 50 && b.requests < 150, "{}", b.requests);
    let interactive: Vec<&Outcome> = outcomes.iter().filter(|o| !o.batch).collect();
    let worst = interactive
        .iter()
        .map(|o| o.ttft().unwrap().as_secs_f64() * 1e3)
        .fold(0.0, f64::max);
    assert!(near(s.ttft_ms.unwrap().max, worst));
    let good = interactive
        .iter()
        .filter(|o| super::stats::meets(o, &slo))
        .count();
    assert!((s.slo_attainment - good as f64 / interactive.len() as f64).abs() < 1e-9);
    assert_eq!(
        s.output_tokens.unwrap().total,
        1600,
        "throughput counts both lanes"
    );
}
