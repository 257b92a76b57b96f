//! Scenario files: what a good one becomes, and every refusal naming the
//! file, the line and the field before any request is sent.

use std::path::PathBuf;
use std::time::Duration;

use super::super::file;
use super::super::file::Lane;
use super::super::spec::Scenario;
use super::super::{ScenarioArgs, load, scenario};
use crate::Fail;
use crate::spec::{Arrival, Endpoint, LengthDist};

/// Line numbers matter: the refusal cases below name them.
const BASE: &str = r#"name = "s"
seed = 1

[[tenant]]
name = "A"
api_key_env = "KEY_A"
arrival = "closed:4"
input = "fixed:400"
output = "fixed:32"

[[tenant]]
name = "B"
api_key = "literal"
arrival = "closed:2"
input = "uniform:16-48"
start_after_secs = 3
[tenant.slo]
ttft_p99_ratio = 2.0
max_refused = 0

[[phase]]
name = "b-alone"
tenants = ["B"]
duration_secs = 20

[[phase]]
name = "together"
tenants = ["A", "B"]
duration_secs = 25
"#;

fn env(k: &str) -> Option<String> {
    match k {
        "KEY_A" => Some("key-a".into()),
        "KEY_EMPTY" => Some(String::new()),
        _ => None,
    }
}

fn parse(text: &str) -> Result<Scenario, crate::spec::SpecError> {
    Scenario::parse("s.toml", text, &env)
}

#[test]
fn a_scenario_parses_with_its_defaults() {
    let s = parse(BASE).unwrap();
    assert_eq!(s.name, "s");
    assert_eq!(s.endpoint, Endpoint::Chat);
    assert_eq!((s.seed, s.ignore_eos), (1, false));
    let a = &s.tenants[0];
    assert_eq!(a.key.as_ref().unwrap().0, "key-a");
    assert_eq!(a.lane, Lane::Interactive);
    assert_eq!(a.arrival, Some(Arrival::Closed { concurrency: 4 }));
    assert_eq!(a.output, LengthDist::Fixed(32));
    assert!(a.stream && !a.retry);
    assert_eq!(a.baseline, 1, "A's first phase is `together`");
    let b = &s.tenants[1];
    assert_eq!(b.input, LengthDist::Uniform { min: 16, max: 48 });
    assert_eq!(b.start_after, Duration::from_secs(3));
    assert_eq!(b.slo.ttft_p99_ratio, Some(2.0));
    assert_eq!(b.slo.max_refused, Some(0));
    assert_eq!(b.baseline, 0);
    assert_eq!(s.phases[1].tenants, [0, 1]);
    assert_eq!(s.phases[1].duration, Duration::from_secs(25));
    assert!(!format!("{a:?}").contains("key-a"), "keys never print");
}

#[test]
fn every_refusal_names_the_file_line_and_field() {
    let cases: &[(&str, &str, &[&str])] = &[
        ("seed = 1", "seed = = 1", &["s.toml:2: "]),
        (
            "name = \"s\"",
            "name = \"a b\"",
            &["s.toml:1: name: \"a b\""],
        ),
        (
            "arrival = \"closed:4\"",
            "arrival = \"closed:x\"",
            &["s.toml:7: tenant \"A\": arrival `closed:x`: N must be a whole number"],
        ),
        (
            "arrival = \"closed:4\"",
            "",
            &["s.toml:5: tenant \"A\": arrival: missing"],
        ),
        (
            "input = \"fixed:400\"",
            "input = \"fixed:zero\"",
            &["s.toml:8: tenant \"A\": input: length `fixed:zero`"],
        ),
        (
            "output = \"fixed:32\"",
            "outptu = \"fixed:32\"",
            &["s.toml:9: ", "unknown field `outptu`"],
        ),
        (
            "duration_secs = 20",
            "duration_secs = \"long\"",
            &["s.toml:24: `duration_secs`: invalid type"],
        ),
        (
            "duration_secs = 20",
            "duration_secs = 0",
            &["s.toml:24: phase \"b-alone\": duration_secs: duration 0 must be above 0"],
        ),
        (
            "tenants = [\"A\", \"B\"]",
            "tenants = [\"A\", \"C\"]",
            &["s.toml:28: phase \"together\": tenants: unknown tenant \"C\"; the tenants are A, B"],
        ),
        (
            "tenants = [\"B\"]",
            "tenants = []",
            &["s.toml:23: phase \"b-alone\": tenants: name at least one tenant"],
        ),
        (
            "name = \"B\"",
            "name = \"A\"",
            &["s.toml:12: tenant name: \"A\" is used twice"],
        ),
        (
            "name = \"together\"",
            "name = \"b-alone\"",
            &["s.toml:27: phase name: \"b-alone\" is used twice"],
        ),
        (
            "input = \"fixed:400\"",
            "input = \"fixed:400\"\nrows = 10",
            &["s.toml:9: tenant \"A\": rows: only a tenant with lane = \"batch\""],
        ),
        (
            "tenants = [\"A\", \"B\"]",
            "tenants = [\"A\"]",
            &["s.toml:18: tenant \"B\": slo.ttft_p99_ratio: a ratio needs a baseline phase"],
        ),
        (
            "tenants = [\"A\", \"B\"]",
            "tenants = [\"B\"]",
            &["s.toml:5: tenant \"A\": phases: the tenant is in no phase"],
        ),
        (
            "KEY_A",
            "KEY_UNSET",
            &["s.toml:6: tenant \"A\": api_key_env: $KEY_UNSET is not set"],
        ),
        (
            "KEY_A",
            "KEY_EMPTY",
            &["s.toml:6: tenant \"A\": api_key_env: $KEY_EMPTY is empty"],
        ),
        (
            "api_key = \"literal\"",
            "api_key = \"literal\"\napi_key_env = \"KEY_A\"",
            &["s.toml:14: tenant \"B\": api_key_env: give api_key or api_key_env, not both"],
        ),
        (
            "api_key_env = \"KEY_A\"",
            "api_key_env = \"KEY_A\"\nlane = \"bulk\"",
            &["s.toml:7: `lane`: ", "unknown variant `bulk`"],
        ),
        (
            "api_key_env = \"KEY_A\"",
            "api_key_env = \"KEY_A\"\nlane = \"batch\"\nrows = 100",
            &["s.toml:9: tenant \"A\": arrival: a batch tenant runs one Batch API job"],
        ),
        (
            "arrival = \"closed:4\"",
            "lane = \"batch\"",
            &["s.toml:5: tenant \"A\": rows: missing"],
        ),
        (
            "arrival = \"closed:4\"",
            "lane = \"batch\"\nrows = 0",
            &["s.toml:8: tenant \"A\": rows: 0 must be from 1 to 1000000"],
        ),
        (
            "start_after_secs = 3",
            "start_after_secs = 20",
            &[
                "s.toml:16: tenant \"B\": start_after_secs: 20 s leaves the tenant no time in phase \"b-alone\"",
            ],
        ),
        (
            "ttft_p99_ratio = 2.0",
            "ttft_p99_ratio = -1",
            &["s.toml:18: tenant \"B\": slo.ttft_p99_ratio: -1 must be a number above 0"],
        ),
        (
            "max_refused = 0",
            "max_refused = 0\nbaseline = \"nope\"",
            &["s.toml:20: tenant \"B\": slo.baseline: unknown phase \"nope\""],
        ),
        (
            "output = \"fixed:32\"",
            "output = \"fixed:32\"\n[tenant.slo]\nbaseline = \"b-alone\"",
            &["s.toml:11: tenant \"A\": slo.baseline: the tenant is not in phase \"b-alone\""],
        ),
        (
            "max_refused = 0",
            "max_refused = 0\nttft_p99 = 3",
            &["s.toml:20: ", "unknown field `ttft_p99`"],
        ),
    ];
    for (from, to, want) in cases {
        assert!(BASE.contains(from), "{from}");
        let text = BASE.replacen(from, to, 1);
        let e = parse(&text).expect_err(to).0;
        for w in *want {
            assert!(e.contains(w), "{to:?}: {w:?} not in {e:?}");
        }
    }
}

#[test]
fn a_batch_tenant_is_judged_by_throughput_only() {
    let text = BASE
        .replacen("arrival = \"closed:4\"", "lane = \"batch\"\nrows = 10", 1)
        .replacen(
            "output = \"fixed:32\"",
            "output = \"fixed:32\"\n[tenant.slo]\nttft_p99_ms = 5",
            1,
        );
    let e = parse(&text).unwrap_err().0;
    assert!(
        e.contains("s.toml:12: tenant \"A\": slo.ttft_p99_ms: a batch tenant has no latencies"),
        "{e}"
    );
    let text = BASE.replacen("arrival = \"closed:4\"", "lane = \"batch\"\nrows = 10", 1);
    let s = parse(&text).unwrap();
    assert_eq!(
        (s.tenants[0].lane, s.tenants[0].rows),
        (Lane::Batch, Some(10))
    );
    assert_eq!(s.tenants[0].arrival, None);
}

#[test]
fn a_scenario_needs_tenants_and_phases() {
    let cut = BASE.find("[[phase]]").unwrap();
    let e = parse(&BASE[..cut]).unwrap_err().0;
    assert!(
        e.starts_with("s.toml:1: phase: the scenario has no [[phase]]"),
        "{e}"
    );
    let e = parse("[[phase]]\nname = \"p\"\ntenants = [\"A\"]\nduration_secs = 1\n")
        .unwrap_err()
        .0;
    assert!(
        e.starts_with("s.toml:1: tenant: the scenario has no [[tenant]]"),
        "{e}"
    );
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("stoker-scenario-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_file_over_one_mib_is_refused_unread() {
    let d = temp_dir("big");
    let f = d.join("big.toml");
    std::fs::write(&f, vec![b'#'; (file::MAX_FILE_BYTES + 1) as usize]).unwrap();
    let e = file::read(&f).unwrap_err().0;
    assert!(
        e.contains("big.toml:1: file: 1048577 bytes; at most 1048576"),
        "{e}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

fn args(file: PathBuf, f: impl FnOnce(&mut ScenarioArgs)) -> ScenarioArgs {
    let mut a = ScenarioArgs {
        file,
        url: "http://127.0.0.1:1".into(),
        duration_scale: 1.0,
        timeout_secs: 300.0,
        ..ScenarioArgs::default()
    };
    f(&mut a);
    a
}

#[tokio::test]
async fn bad_files_and_flags_exit_2_before_any_request() {
    let d = temp_dir("flags");
    let good = d.join("good.toml");
    std::fs::write(&good, BASE.replace("KEY_A", "PATH")).unwrap();
    let bad = d.join("bad.toml");
    let bad_text = BASE
        .replace("KEY_A", "PATH")
        .replace("closed:4", "closed:0");
    std::fs::write(&bad, bad_text).unwrap();
    load(&args(good.clone(), |_| {})).unwrap();
    for (a, want) in [
        (args(bad, |_| {}), "bad.toml:7: tenant \"A\": arrival"),
        (args(d.join("none.toml"), |_| {}), "scenario file"),
        (
            args(good.clone(), |a| a.duration_scale = 0.0),
            "--duration-scale",
        ),
        (
            args(good.clone(), |a| a.duration_scale = f64::NAN),
            "--duration-scale",
        ),
        (
            args(good.clone(), |a| a.timeout_secs = -1.0),
            "--timeout-secs",
        ),
        (args(good.clone(), |a| a.url = "ftp://x".into()), "--url"),
        (
            args(good.clone(), |a| a.plot_dir = Some(good.clone())),
            "--plot-dir",
        ),
        (
            args(good.clone(), |a| {
                a.tokenizer = Some("/nonexistent.gguf".into())
            }),
            "--tokenizer",
        ),
    ] {
        match scenario(a).await {
            Err(Fail::Usage(e)) => assert!(e.contains(want), "{want:?} not in {e:?}"),
            other => panic!("{want}: {other:?}"),
        }
    }
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn the_shipped_scenarios_parse() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../benchmarks/scenarios");
    let keys = |k: &str| k.starts_with("STOKER_KEY_").then(|| "k".to_owned());
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap();
            let s = Scenario::parse(&path.display().to_string(), &text, &keys)
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(!s.phases.is_empty());
            seen += 1;
        }
    }
    assert!(seen >= 7, "{seen} scenario files");
}
