//! What the simulated clients send: arrival times (Poisson, or on/off
//! modulated bursts with the same mean rate), a prompt-length mix, an
//! output-length mix, and a share of requests that open with one of a few
//! shared system prompts (so routing to the executor caching it pays).

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::events::{Micros, SECOND};

/// The request mix: a share of short prompts and outputs (uniform in their
/// ranges), the rest long, and a share opening with one of a few system
/// prompts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Mix {
    pub short_share: f64,
    pub short_prompt: (u32, u32),
    pub long_prompt: (u32, u32),
    pub short_output: (u32, u32),
    pub long_output: (u32, u32),
    pub shared_share: f64,
    pub system_prompts: u16,
    pub system_prompt_len: u32,
}

impl Default for Mix {
    /// 70% short prompts of 50-200 tokens, 30% long ones of 400-1,500; 70%
    /// short answers of 16-128 tokens, 30% long ones of 128-512; half the
    /// requests open with one of 16 system prompts of 256 tokens.
    fn default() -> Self {
        Mix {
            short_share: 0.7,
            short_prompt: (50, 200),
            long_prompt: (400, 1500),
            short_output: (16, 128),
            long_output: (128, 512),
            shared_share: 0.5,
            system_prompts: 16,
            system_prompt_len: 256,
        }
    }
}

impl Mix {
    /// Every request `prompt` tokens in and `output` out, none shared: what
    /// `stoker bench serve --input P --output O` sends.
    pub fn fixed(prompt: u32, output: u32) -> Self {
        Mix {
            short_share: 1.0,
            short_prompt: (prompt, prompt),
            long_prompt: (prompt, prompt),
            short_output: (output, output),
            long_output: (output, output),
            shared_share: 0.0,
            system_prompts: 0,
            system_prompt_len: 0,
        }
    }

    /// Mean prompt tokens (system prompt included) and mean output tokens.
    pub fn mean_tokens(&self) -> (f64, f64) {
        let s = self.short_share;
        let prompt = s * mean(self.short_prompt)
            + (1.0 - s) * mean(self.long_prompt)
            + self.shared_share * self.system_prompt_len as f64;
        let output = s * mean(self.short_output) + (1.0 - s) * mean(self.long_output);
        (prompt, output)
    }

    /// Mean attention pairs a request costs, prefill and decode, taking
    /// each class at its mean lengths: `P²/2 + O·P + O²/2`.
    pub fn mean_attention_pairs(&self) -> f64 {
        let system = self.shared_share * self.system_prompt_len as f64;
        let pairs = |prompt: (u32, u32), output: (u32, u32)| {
            let (p, o) = (mean(prompt) + system, mean(output));
            p * p / 2.0 + o * p + o * o / 2.0
        };
        let s = self.short_share;
        s * pairs(self.short_prompt, self.short_output)
            + (1.0 - s) * pairs(self.long_prompt, self.long_output)
    }
}
/// Bursty arrivals: rate × 1.6 for an on phase, × 0.4 for an off phase,
/// each lasting 5 s on average (exponential).
pub const BURST_HIGH: f64 = 1.6;
pub const BURST_LOW: f64 = 0.4;
pub const BURST_PHASE_MEAN_S: f64 = 5.0;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrivals {
    Poisson,
    Bursty,
}

/// One request, as routing and the executor model see it.
#[derive(Clone, Debug)]
pub struct Request {
    /// Tokens after the system prompt.
    pub unique: u32,
    pub output: u32,
    pub prefix: Option<u16>,
    pub prefix_len: u32,
    pub api: u32,
    pub arrived: Micros,
    pub first_token: Option<Micros>,
    pub finished: Option<Micros>,
    /// Executors offered the job, in order.
    pub tried: Vec<u32>,
    pub refused: bool,
}

impl Request {
    pub fn prompt_len(&self) -> u32 {
        self.prefix_len + self.unique
    }

    /// The prompt's token ids: the system prompt's (the same for every
    /// request sharing it), then ids no other request uses.
    pub fn tokens(&self, index: u32) -> Vec<u32> {
        let mut t = Vec::with_capacity(self.prompt_len() as usize);
        if let Some(p) = self.prefix {
            t.extend((0..self.prefix_len).map(|i| (p as u32 + 1) << 20 | i));
        }
        let base = (index as u64) << 11;
        t.extend(
            (0..self.unique).map(|i| (0x8000_0000u64 | ((base + i as u64) & 0x7fff_ffff)) as u32),
        );
        t
    }
}

fn uniform(rng: &mut SmallRng, (lo, hi): (u32, u32)) -> u32 {
    rng.random_range(lo..=hi)
}

fn mean((lo, hi): (u32, u32)) -> f64 {
    (lo + hi) as f64 / 2.0
}

/// The arrival process and the request mix.
pub struct Workload {
    rate: f64,
    /// Arrival times to replay instead of the arrival process, and the
    /// index of the next.
    trace: Option<(Vec<Micros>, usize)>,
    last: Micros,
    arrivals: Arrivals,
    mix: Mix,
    high: bool,
    rng: SmallRng,
}

impl Workload {
    /// `rate` requests per second on average.
    pub fn new(rate: f64, arrivals: Arrivals, mix: Mix, seed: u64) -> Self {
        Workload {
            rate,
            trace: None,
            last: 0,
            arrivals,
            mix,
            high: true,
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    fn current_rate(&self) -> f64 {
        match (self.arrivals, self.high) {
            (Arrivals::Poisson, _) => self.rate,
            (Arrivals::Bursty, true) => self.rate * BURST_HIGH,
            (Arrivals::Bursty, false) => self.rate * BURST_LOW,
        }
    }

    fn exponential(&mut self, mean_s: f64) -> Micros {
        let u: f64 = self.rng.random::<f64>();
        (-(1.0 - u).ln() * mean_s * SECOND as f64) as Micros
    }

    /// Replays `times` (ascending, from the start of the run) as the
    /// arrivals, in place of the arrival process.
    pub fn replaying(mut self, times: Vec<Micros>) -> Self {
        self.trace = Some((times, 0));
        self
    }

    /// Time to the next arrival: at the current rate, or the trace's next;
    /// `None` once a trace is spent.
    pub fn gap(&mut self) -> Option<Micros> {
        let Some((times, next)) = &mut self.trace else {
            let mean = 1.0 / self.current_rate();
            return Some(self.exponential(mean).max(1));
        };
        let at = *times.get(*next)?;
        *next += 1;
        let gap = at.saturating_sub(self.last);
        self.last = at;
        Some(gap)
    }

    /// Switches the on/off phase; returns the time to the next switch, or
    /// `None` for Poisson arrivals.
    pub fn phase(&mut self) -> Option<Micros> {
        if self.arrivals == Arrivals::Poisson {
            return None;
        }
        self.high = !self.high;
        Some(self.exponential(BURST_PHASE_MEAN_S).max(1))
    }

    /// The next request, at `api`, arriving `now`.
    pub fn request(&mut self, api: u32, now: Micros) -> Request {
        let (rng, m) = (&mut self.rng, &self.mix);
        let unique = if rng.random_bool(m.short_share) {
            uniform(rng, m.short_prompt)
        } else {
            uniform(rng, m.long_prompt)
        };
        let output = if rng.random_bool(m.short_share) {
            uniform(rng, m.short_output)
        } else {
            uniform(rng, m.long_output)
        };
        let prefix = (m.system_prompts > 0 && rng.random_bool(m.shared_share))
            .then(|| rng.random_range(0..m.system_prompts));
        Request {
            unique,
            output,
            prefix,
            prefix_len: if prefix.is_some() {
                m.system_prompt_len
            } else {
                0
            },
            api,
            arrived: now,
            first_token: None,
            finished: None,
            tried: Vec::new(),
            refused: false,
        }
    }
}
