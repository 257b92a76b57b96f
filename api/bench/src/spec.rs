//! The workload a benchmark run offers: token-length distributions, the
//! arrival pattern, the lane mix, how long it runs and the SLOs it is judged
//! by. Flags and a TOML file describe the same fields in the same short
//! syntax (`uniform:64-256`, `poisson:5`); flags win over the file.
//!
//! Every parser here returns a [`SpecError`] naming the field and the accepted
//! forms: a benchmark that silently ran another workload than asked would
//! measure the wrong thing.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// A refused flag, workload file or prompts file.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{0}")]
pub struct SpecError(pub String);

fn err<T>(m: impl Into<String>) -> Result<T, SpecError> {
    Err(SpecError(m.into()))
}

/// Longest prompt or output the generator builds, in tokens.
pub const MAX_LENGTH: u32 = 1 << 20;

/// A distribution of token counts.
#[derive(Clone, Debug, PartialEq)]
pub enum LengthDist {
    Fixed(u32),
    Uniform {
        min: u32,
        max: u32,
    },
    /// Rounded and clamped to [1, mean + 6 stddev].
    Normal {
        mean: f64,
        stddev: f64,
    },
}

impl LengthDist {
    pub fn sample(&self, rng: &mut impl Rng) -> u32 {
        match *self {
            LengthDist::Fixed(n) => n,
            LengthDist::Uniform { min, max } => rng.random_range(min..=max),
            LengthDist::Normal { mean, stddev } => {
                let hi = (mean + 6.0 * stddev).min(MAX_LENGTH as f64);
                normal(mean, stddev, rng).round().clamp(1.0, hi.max(1.0)) as u32
            }
        }
    }
}

/// A normal draw (Box-Muller; two uniforms per draw).
fn normal(mean: f64, stddev: f64, rng: &mut impl Rng) -> f64 {
    // `1 - u` is in (0, 1]: its logarithm is finite.
    let u1: f64 = 1.0 - rng.random::<f64>();
    let u2: f64 = rng.random();
    mean + stddev * (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// An exponential draw with rate `rate` (> 0, checked at parse), by the
/// inverse of its distribution function.
fn exponential(rate: f64, rng: &mut impl Rng) -> f64 {
    -(1.0 - rng.random::<f64>()).ln() / rate
}

impl std::fmt::Display for LengthDist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LengthDist::Fixed(n) => write!(f, "fixed:{n}"),
            LengthDist::Uniform { min, max } => write!(f, "uniform:{min}-{max}"),
            LengthDist::Normal { mean, stddev } => write!(f, "normal:{mean},{stddev}"),
        }
    }
}

const LENGTH_FORMS: &str =
    "N, fixed:N, uniform:MIN-MAX or normal:MEAN,STDDEV (tokens, 1 to 1048576)";

fn length(s: &str) -> Result<u32, SpecError> {
    match s.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_LENGTH).contains(&n) => Ok(n),
        _ => err(format!("`{s}` is not a token count from 1 to {MAX_LENGTH}")),
    }
}

fn number(s: &str, what: &str) -> Result<f64, SpecError> {
    match s.trim().parse::<f64>() {
        Ok(x) if x.is_finite() => Ok(x),
        _ => err(format!("{what} `{s}` is not a finite number")),
    }
}

impl FromStr for LengthDist {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        let bad = |why: String| SpecError(format!("length `{s}`: {why}; use {LENGTH_FORMS}"));
        let (kind, rest) = s.split_once(':').unwrap_or(("fixed", s));
        match kind.trim() {
            "fixed" => length(rest).map(LengthDist::Fixed).map_err(|e| bad(e.0)),
            "uniform" => {
                let (a, b) = rest
                    .split_once(['-', ','])
                    .ok_or_else(|| bad("uniform needs MIN-MAX".into()))?;
                let (min, max) = (
                    length(a).map_err(|e| bad(e.0))?,
                    length(b).map_err(|e| bad(e.0))?,
                );
                if min > max {
                    return Err(bad(format!("MIN {min} is above MAX {max}")));
                }
                Ok(LengthDist::Uniform { min, max })
            }
            "normal" => {
                let (a, b) = rest
                    .split_once(',')
                    .ok_or_else(|| bad("normal needs MEAN,STDDEV".into()))?;
                let mean = number(a, "MEAN").map_err(|e| bad(e.0))?;
                let stddev = number(b, "STDDEV").map_err(|e| bad(e.0))?;
                if !(1.0..=MAX_LENGTH as f64).contains(&mean) || stddev < 0.0 {
                    return Err(bad(
                        "MEAN must be from 1 to 1048576 and STDDEV at least 0".into()
                    ));
                }
                Ok(LengthDist::Normal { mean, stddev })
            }
            other => Err(bad(format!("unknown distribution `{other}`"))),
        }
    }
}

/// When requests are sent.
#[derive(Clone, Debug, PartialEq)]
pub enum Arrival {
    /// A fixed number of clients, each sending its next request when the
    /// previous one ends.
    Closed { concurrency: u32 },
    /// Evenly spaced, `rate` per second.
    Constant { rate: f64 },
    /// Exponential gaps with mean 1/`rate`.
    Poisson { rate: f64 },
    /// `size` requests at once, every `every`.
    Burst { size: u32, every: Duration },
}

const ARRIVAL_FORMS: &str = "closed:N, constant:RATE, poisson:RATE or burst:N/SECONDS";
/// Most concurrent clients or requests per second a run may ask for.
pub const MAX_LEVEL: f64 = 100_000.0;
/// Fewest requests per second an open loop may ask for.
pub const MIN_RATE: f64 = 0.001;

/// Seconds as a `Duration`, saturating instead of panicking on overflow.
fn secs(x: f64) -> Duration {
    Duration::try_from_secs_f64(x).unwrap_or(Duration::MAX)
}

impl FromStr for Arrival {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        let bad = |why: &str| SpecError(format!("arrival `{s}`: {why}; use {ARRIVAL_FORMS}"));
        let (kind, rest) = s.split_once(':').ok_or_else(|| bad("missing `:`"))?;
        let rate = |r: &str| -> Result<f64, SpecError> {
            let x = number(r, "RATE").map_err(|e| bad(&e.0))?;
            if (MIN_RATE..=MAX_LEVEL).contains(&x) {
                Ok(x)
            } else {
                Err(bad("RATE must be from 0.001 to 100000 per second"))
            }
        };
        let count = |n: &str| -> Result<u32, SpecError> {
            match n.trim().parse::<u32>() {
                Ok(n) if n >= 1 && f64::from(n) <= MAX_LEVEL => Ok(n),
                _ => Err(bad("N must be a whole number from 1 to 100000")),
            }
        };
        match kind.trim() {
            "closed" => Ok(Arrival::Closed {
                concurrency: count(rest)?,
            }),
            "constant" => Ok(Arrival::Constant { rate: rate(rest)? }),
            "poisson" => Ok(Arrival::Poisson { rate: rate(rest)? }),
            "burst" => {
                let (n, t) = rest
                    .split_once('/')
                    .ok_or_else(|| bad("burst needs N/SECONDS"))?;
                let secs = number(t.trim_end_matches('s'), "SECONDS").map_err(|e| bad(&e.0))?;
                if !(0.001..=86_400.0).contains(&secs) {
                    return Err(bad("SECONDS must be from 0.001 to 86400"));
                }
                Ok(Arrival::Burst {
                    size: count(n)?,
                    every: Duration::from_secs_f64(secs),
                })
            }
            other => Err(bad(&format!("unknown pattern `{other}`"))),
        }
    }
}

impl std::fmt::Display for Arrival {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Arrival::Closed { concurrency } => write!(f, "closed:{concurrency}"),
            Arrival::Constant { rate } => write!(f, "constant:{rate}"),
            Arrival::Poisson { rate } => write!(f, "poisson:{rate}"),
            Arrival::Burst { size, every } => write!(f, "burst:{size}/{}", every.as_secs_f64()),
        }
    }
}

impl Arrival {
    /// The figure a sweep steps: clients, requests per second, or burst size.
    pub fn level(&self) -> f64 {
        match *self {
            Arrival::Closed { concurrency } => f64::from(concurrency),
            Arrival::Constant { rate } | Arrival::Poisson { rate } => rate,
            Arrival::Burst { size, .. } => f64::from(size),
        }
    }

    /// What [`Arrival::level`] counts, for tables and plots.
    pub fn level_name(&self) -> &'static str {
        match self {
            Arrival::Closed { .. } => "concurrency",
            Arrival::Constant { .. } | Arrival::Poisson { .. } => "rate (req/s)",
            Arrival::Burst { .. } => "burst size",
        }
    }

    /// The same pattern at another level (whole numbers for counts).
    pub fn at_level(&self, level: f64) -> Arrival {
        let count = level.round().clamp(1.0, MAX_LEVEL) as u32;
        match *self {
            Arrival::Closed { .. } => Arrival::Closed { concurrency: count },
            Arrival::Constant { .. } => Arrival::Constant { rate: level },
            Arrival::Poisson { .. } => Arrival::Poisson { rate: level },
            Arrival::Burst { every, .. } => Arrival::Burst { size: count, every },
        }
    }

    /// The send time of the next request after `prev` (open-loop patterns);
    /// `i` is the request's index. `None` for the closed loop.
    pub fn next_offset(&self, i: u64, prev: Duration, rng: &mut impl Rng) -> Option<Duration> {
        match *self {
            Arrival::Closed { .. } => None,
            Arrival::Constant { rate } => Some(secs(i as f64 / rate)),
            Arrival::Poisson { rate } => {
                let gap = exponential(rate, rng);
                Some(if i == 0 {
                    Duration::ZERO
                } else {
                    prev.saturating_add(secs(gap))
                })
            }
            Arrival::Burst { size, every } => {
                Some(every.saturating_mul(u32::try_from(i / u64::from(size)).unwrap_or(u32::MAX)))
            }
        }
    }
}

/// The random source of a run's open-loop send times, from its seed.
pub fn arrival_rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed.rotate_left(17) ^ 0xA5A5)
}

/// The first `n` send offsets of open-loop `arrival` under `seed`: the
/// schedule `stoker bench serve --seed` offers, for replaying it elsewhere
/// (the routing simulator's agreement bench). Empty for the closed loop.
pub fn open_loop_schedule(arrival: &Arrival, seed: u64, n: u64) -> Vec<Duration> {
    let mut rng = arrival_rng(seed);
    let mut offset = Duration::ZERO;
    (0..n)
        .map_while(|i| {
            offset = arrival.next_offset(i, offset, &mut rng)?;
            Some(offset)
        })
        .collect()
}

/// Which OpenAI route the requests go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    Completions,
    Chat,
}

impl Endpoint {
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Completions => "/v1/completions",
            Endpoint::Chat => "/v1/chat/completions",
        }
    }
}

/// The SLOs a request must meet to count toward goodput.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Slo {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
    /// Share of requests that must meet them for a load level to pass.
    pub attainment: f64,
}

impl Slo {
    pub fn is_empty(&self) -> bool {
        self.ttft_ms.is_none() && self.tpot_ms.is_none() && self.e2e_ms.is_none()
    }

    pub fn check(&self) -> Result<(), SpecError> {
        for (name, v) in [
            ("ttft_ms", self.ttft_ms),
            ("tpot_ms", self.tpot_ms),
            ("e2e_ms", self.e2e_ms),
        ] {
            if let Some(v) = v
                && !(v.is_finite() && v > 0.0)
            {
                return err(format!(
                    "SLO {name} must be a number of milliseconds above 0"
                ));
            }
        }
        if !(self.attainment > 0.0 && self.attainment <= 1.0) {
            return err("SLO attainment must be above 0 and at most 1");
        }
        Ok(())
    }
}

/// Everything one run offers the server.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// The name a recorded profile gets.
    pub name: String,
    pub endpoint: Endpoint,
    pub model: Option<String>,
    pub input: LengthDist,
    pub output: LengthDist,
    /// Prompts sampled from a JSONL file instead of generated ones.
    pub prompts: Option<PathBuf>,
    pub arrival: Arrival,
    /// Share of requests sent in the batch lane (`service_tier: flex`).
    pub batch_share: f64,
    pub requests: Option<u64>,
    pub duration: Option<Duration>,
    pub seed: u64,
    /// Ask the server to generate exactly `max_tokens` (`ignore_eos`).
    pub ignore_eos: bool,
    /// Open-loop patterns: most requests in flight at once.
    pub max_in_flight: Option<u32>,
    pub slo: Slo,
}

impl Default for Workload {
    fn default() -> Self {
        Workload {
            name: "default".into(),
            endpoint: Endpoint::Completions,
            model: None,
            input: LengthDist::Fixed(128),
            output: LengthDist::Fixed(64),
            prompts: None,
            arrival: Arrival::Closed { concurrency: 1 },
            batch_share: 0.0,
            requests: None,
            duration: None,
            seed: 0,
            ignore_eos: false,
            max_in_flight: None,
            slo: Slo {
                attainment: 0.9,
                ..Slo::default()
            },
        }
    }
}

/// The TOML workload file: the same fields as the flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadFile {
    pub name: Option<String>,
    pub endpoint: Option<Endpoint>,
    pub model: Option<String>,
    pub input: Option<String>,
    pub output: Option<String>,
    pub prompts: Option<PathBuf>,
    pub arrival: Option<String>,
    pub batch_share: Option<f64>,
    pub requests: Option<u64>,
    pub duration_secs: Option<f64>,
    pub seed: Option<u64>,
    pub ignore_eos: Option<bool>,
    pub max_in_flight: Option<u32>,
    #[serde(default)]
    pub slo: SloFile,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SloFile {
    pub ttft_ms: Option<f64>,
    pub tpot_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
    pub attainment: Option<f64>,
}

/// Largest workload file read.
const MAX_FILE_BYTES: u64 = 1 << 20;

impl WorkloadFile {
    pub fn read(path: &Path) -> Result<WorkloadFile, SpecError> {
        let shown = path.display();
        let meta = std::fs::metadata(path)
            .map_err(|e| SpecError(format!("workload file {shown}: {e}")))?;
        if meta.len() > MAX_FILE_BYTES {
            return err(format!(
                "workload file {shown} is {} bytes; at most {MAX_FILE_BYTES} are read",
                meta.len()
            ));
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| SpecError(format!("workload file {shown}: {e}")))?;
        Self::parse(&text).map_err(|e| SpecError(format!("workload file {shown}: {}", e.0)))
    }

    pub fn parse(text: &str) -> Result<WorkloadFile, SpecError> {
        toml::from_str(text).map_err(|e| SpecError(e.to_string().trim().to_owned()))
    }

    /// Lays the file's fields over `w`.
    pub fn apply(self, w: &mut Workload) -> Result<(), SpecError> {
        if let Some(v) = self.name {
            w.name = v;
        }
        if let Some(v) = self.endpoint {
            w.endpoint = v;
        }
        if self.model.is_some() {
            w.model = self.model;
        }
        if let Some(v) = self.input {
            w.input = v.parse()?;
        }
        if let Some(v) = self.output {
            w.output = v.parse()?;
        }
        if self.prompts.is_some() {
            w.prompts = self.prompts;
        }
        if let Some(v) = self.arrival {
            w.arrival = v.parse()?;
        }
        if let Some(v) = self.batch_share {
            w.batch_share = v;
        }
        if self.requests.is_some() {
            w.requests = self.requests;
        }
        if let Some(s) = self.duration_secs {
            w.duration = Some(duration(s)?);
        }
        if let Some(v) = self.seed {
            w.seed = v;
        }
        if let Some(v) = self.ignore_eos {
            w.ignore_eos = v;
        }
        if self.max_in_flight.is_some() {
            w.max_in_flight = self.max_in_flight;
        }
        let s = self.slo;
        w.slo.ttft_ms = s.ttft_ms.or(w.slo.ttft_ms);
        w.slo.tpot_ms = s.tpot_ms.or(w.slo.tpot_ms);
        w.slo.e2e_ms = s.e2e_ms.or(w.slo.e2e_ms);
        if let Some(a) = s.attainment {
            w.slo.attainment = a;
        }
        Ok(())
    }
}

/// A run length in seconds.
pub fn duration(secs: f64) -> Result<Duration, SpecError> {
    if secs.is_finite() && secs > 0.0 && secs <= 7.0 * 86_400.0 {
        Ok(Duration::from_secs_f64(secs))
    } else {
        err(format!(
            "duration {secs} must be above 0 and at most a week of seconds"
        ))
    }
}

impl Workload {
    /// The checks no single field can make.
    pub fn check(&self) -> Result<(), SpecError> {
        if !(0.0..=1.0).contains(&self.batch_share) {
            return err(format!(
                "batch share {} must be from 0 to 1",
                self.batch_share
            ));
        }
        if self.requests.is_none() && self.duration.is_none() {
            return err("say how long to run: --requests N or --duration SECONDS");
        }
        if self.requests == Some(0) {
            return err("--requests must be at least 1");
        }
        if self.max_in_flight == Some(0) {
            return err("--max-in-flight must be at least 1");
        }
        let ok_name = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !ok_name {
            return err(format!(
                "workload name {:?} must be 1 to 64 letters, digits, `.`, `_` or `-`",
                self.name
            ));
        }
        self.slo.check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn lengths_parse_and_sample_in_range() {
        assert_eq!("128".parse(), Ok(LengthDist::Fixed(128)));
        assert_eq!("fixed:7".parse(), Ok(LengthDist::Fixed(7)));
        assert_eq!(
            "uniform:10-20".parse(),
            Ok(LengthDist::Uniform { min: 10, max: 20 })
        );
        let mut rng = StdRng::seed_from_u64(1);
        let n: LengthDist = "normal:100,10".parse().unwrap();
        let xs: Vec<u32> = (0..4000).map(|_| n.sample(&mut rng)).collect();
        let mean = xs.iter().map(|&x| f64::from(x)).sum::<f64>() / xs.len() as f64;
        assert!((mean - 100.0).abs() < 1.0, "{mean}");
        let u: LengthDist = "uniform:3,5".parse().unwrap();
        assert!((0..100).all(|_| (3..=5).contains(&u.sample(&mut rng))));
    }

    #[test]
    fn bad_lengths_say_what_is_accepted() {
        for bad in [
            "",
            "0",
            "-3",
            "abc",
            "fixed:",
            "uniform:9-3",
            "uniform:5",
            "normal:1",
            "normal:0,1",
            "normal:5,-1",
            "normal:NaN,1",
            "zipf:3",
            "2000000",
            "uniform:1-99999999999",
        ] {
            let e = bad.parse::<LengthDist>().unwrap_err();
            assert!(e.0.contains("use N, fixed:N"), "{bad}: {e}");
        }
    }

    #[test]
    fn arrivals_parse_and_refuse() {
        assert_eq!("closed:8".parse(), Ok(Arrival::Closed { concurrency: 8 }));
        assert_eq!("poisson:2.5".parse(), Ok(Arrival::Poisson { rate: 2.5 }));
        assert_eq!(
            "burst:4/0.5s".parse(),
            Ok(Arrival::Burst {
                size: 4,
                every: Duration::from_millis(500)
            })
        );
        for bad in [
            "constant:1e-300",
            "poisson:0.0000001",
            "closed",
            "closed:0",
            "closed:-1",
            "poisson:0",
            "poisson:inf",
            "constant:1e9",
            "burst:4",
            "burst:0/1",
            "burst:4/0",
            "storm:3",
            "closed:1.5",
        ] {
            let e = bad.parse::<Arrival>().unwrap_err();
            assert!(e.0.contains("use closed:N"), "{bad}: {e}");
        }
    }

    /// The schedule a replay reads is the one the driver sends by: the
    /// same seed gives the same times, another seed others, and a constant
    /// rate its own grid.
    #[test]
    fn the_open_loop_schedule_is_the_seeds_own() {
        let a = Arrival::Poisson { rate: 2.5 };
        let s = open_loop_schedule(&a, 1, 200);
        assert_eq!(s.len(), 200);
        assert_eq!(s[0], Duration::ZERO);
        assert!(s.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(s, open_loop_schedule(&a, 1, 200));
        assert_ne!(s, open_loop_schedule(&a, 2, 200));
        let mut rng = arrival_rng(1);
        let mut offset = Duration::ZERO;
        for (i, &t) in s.iter().enumerate() {
            offset = a.next_offset(i as u64, offset, &mut rng).unwrap();
            assert_eq!(t, offset);
        }
        let c = open_loop_schedule(&Arrival::Constant { rate: 4.0 }, 1, 3);
        assert_eq!(c, [0.0, 0.25, 0.5].map(Duration::from_secs_f64));
        assert!(open_loop_schedule(&Arrival::Closed { concurrency: 2 }, 1, 3).is_empty());
    }

    #[test]
    fn poisson_mean_rate_within_five_percent_over_2000_arrivals() {
        let a = Arrival::Poisson { rate: 40.0 };
        let mut rng = StdRng::seed_from_u64(42);
        let mut t = Duration::ZERO;
        for i in 0..2001 {
            t = a.next_offset(i, t, &mut rng).unwrap();
        }
        let rate = 2000.0 / t.as_secs_f64();
        assert!((rate / 40.0 - 1.0).abs() < 0.05, "rate {rate}");
    }

    #[test]
    fn normal_lengths_have_the_asked_mean_and_spread() {
        let d = LengthDist::Normal {
            mean: 200.0,
            stddev: 40.0,
        };
        let mut rng = StdRng::seed_from_u64(7);
        let xs: Vec<f64> = (0..20_000).map(|_| f64::from(d.sample(&mut rng))).collect();
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!((mean - 200.0).abs() < 1.5, "mean {mean}");
        assert!((var.sqrt() - 40.0).abs() < 1.5, "stddev {}", var.sqrt());
        // About 68% within one standard deviation, as a normal has.
        let within = xs.iter().filter(|x| (*x - 200.0).abs() <= 40.0).count();
        let share = within as f64 / xs.len() as f64;
        assert!((share - 0.683).abs() < 0.02, "share within 1 sd {share}");
    }

    #[test]
    fn schedules_far_in_the_future_saturate_instead_of_panicking() {
        let mut rng = StdRng::seed_from_u64(0);
        let slow = Arrival::Constant { rate: MIN_RATE };
        assert!(
            slow.next_offset(u64::MAX, Duration::ZERO, &mut rng)
                .is_some()
        );
        let b = Arrival::Burst {
            size: 1,
            every: Duration::from_secs(86_400),
        };
        assert_eq!(
            b.next_offset(u64::MAX, Duration::ZERO, &mut rng),
            Some(Duration::from_secs(86_400).saturating_mul(u32::MAX))
        );
        let p = Arrival::Poisson { rate: MIN_RATE };
        assert!(p.next_offset(5, Duration::MAX, &mut rng).is_some());
    }

    #[test]
    fn constant_and_burst_schedules() {
        let mut rng = StdRng::seed_from_u64(0);
        let c = Arrival::Constant { rate: 4.0 };
        assert_eq!(
            c.next_offset(3, Duration::ZERO, &mut rng),
            Some(Duration::from_millis(750))
        );
        let b: Arrival = "burst:3/2".parse().unwrap();
        let offs: Vec<_> = (0..7)
            .map(|i| {
                b.next_offset(i, Duration::ZERO, &mut rng)
                    .unwrap()
                    .as_secs()
            })
            .collect();
        assert_eq!(offs, [0, 0, 0, 2, 2, 2, 4]);
    }

    #[test]
    fn workload_file_fields_and_errors() {
        let f = WorkloadFile::parse(
            "name = \"chat-short\"\nendpoint = \"chat\"\ninput = \"uniform:8-16\"\n\
             arrival = \"poisson:3\"\nrequests = 50\n[slo]\nttft_ms = 200\n",
        )
        .unwrap();
        let mut w = Workload::default();
        f.apply(&mut w).unwrap();
        assert_eq!(w.endpoint, Endpoint::Chat);
        assert_eq!(w.arrival, Arrival::Poisson { rate: 3.0 });
        assert_eq!(w.slo.ttft_ms, Some(200.0));
        w.check().unwrap();

        let e = WorkloadFile::parse("inptu = \"3\"").unwrap_err();
        assert!(e.0.contains("unknown field `inptu`"), "{e}");
        let e = WorkloadFile::parse("requests = \"many\"").unwrap_err();
        assert!(e.0.contains("invalid type"), "{e}");
        let e = WorkloadFile::parse("[[[").unwrap_err();
        assert!(!e.0.is_empty());
        let mut w = Workload::default();
        let e = WorkloadFile::parse("arrival = \"closed:zero\"")
            .unwrap()
            .apply(&mut w)
            .unwrap_err();
        assert!(e.0.contains("arrival"), "{e}");
    }

    #[test]
    fn workload_checks() {
        let mut w = Workload::default();
        assert!(w.check().unwrap_err().0.contains("--requests"));
        w.requests = Some(10);
        w.check().unwrap();
        w.batch_share = 1.5;
        assert!(w.check().is_err());
        w.batch_share = 0.5;
        w.name = "has space".into();
        assert!(w.check().is_err());
        w.name = "ok".into();
        w.slo.ttft_ms = Some(-1.0);
        assert!(w.check().is_err());
        w.slo.ttft_ms = Some(100.0);
        w.slo.attainment = 0.0;
        assert!(w.check().is_err());
    }
}
