//! The server's own view of a level, from its Prometheus `/metrics`: mean
//! queue time and prefill rate from histogram sums taken before and after,
//! and KV-cache usage sampled while the level runs.
//!
//! Names are matched by suffix so the same scrape reads stoker (`stoker_`),
//! vLLM (`vllm:`) and llama.cpp (`llamacpp:`); a server without `/metrics`
//! simply yields no server figures.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Serialize;

/// Metric totals by name, summed over label sets (gauges: the largest).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Scrape {
    sums: BTreeMap<String, f64>,
    maxes: BTreeMap<String, f64>,
}

/// Largest `/metrics` body read.
const MAX_BODY: usize = 8 << 20;

impl Scrape {
    /// Parses the Prometheus text format; malformed lines are skipped.
    pub fn parse(text: &str) -> Scrape {
        let mut s = Scrape::default();
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (name, rest) = match line.find(['{', ' ']) {
                Some(i) if line.as_bytes()[i] == b'{' => match line[i..].find('}') {
                    Some(j) => (&line[..i], &line[i + j + 1..]),
                    None => continue,
                },
                Some(i) => (&line[..i], &line[i..]),
                None => continue,
            };
            let Some(value) = rest.split_whitespace().next() else {
                continue;
            };
            let Ok(v) = value.parse::<f64>() else {
                continue;
            };
            if !v.is_finite() {
                continue;
            }
            *s.sums.entry(name.to_owned()).or_insert(0.0) += v;
            let m = s.maxes.entry(name.to_owned()).or_insert(f64::MIN);
            *m = m.max(v);
        }
        s
    }

    fn find<'a>(map: &'a BTreeMap<String, f64>, suffixes: &[&str]) -> Option<&'a f64> {
        suffixes.iter().find_map(|suf| {
            map.iter()
                .find(|(k, _)| k.ends_with(suf) && is_prefix(&k[..k.len() - suf.len()]))
                .map(|(_, v)| v)
        })
    }

    pub fn sum(&self, suffixes: &[&str]) -> Option<f64> {
        Self::find(&self.sums, suffixes).copied()
    }

    pub fn max(&self, suffixes: &[&str]) -> Option<f64> {
        Self::find(&self.maxes, suffixes).copied()
    }
}

/// The part before a metric's own name: a namespace such as `stoker_` or `vllm:`.
fn is_prefix(p: &str) -> bool {
    p.is_empty() || p.ends_with('_') || p.ends_with(':')
}

const QUEUE_SUM: &[&str] = &["request_queue_time_seconds_sum"];
const QUEUE_COUNT: &[&str] = &["request_queue_time_seconds_count"];
const PREFILL_SUM: &[&str] = &["request_prefill_time_seconds_sum", "prompt_seconds_total"];
const PROMPT_TOKENS: &[&str] = &["prompt_tokens_total"];
const KV_USAGE: &[&str] = &[
    "kv_cache_usage_perc",
    "gpu_cache_usage_perc",
    "kv_cache_usage_ratio",
];

/// What the server's metrics said over one level.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ServerFigures {
    /// Mean time requests waited in the server's queue.
    pub queue_time_ms_mean: Option<f64>,
    /// Prompt tokens over the sum of per-request prefill times.
    pub prefill_tok_s: Option<f64>,
    /// KV-cache usage (0 to 1) over the level's samples.
    pub kv_usage_mean: Option<f64>,
    pub kv_usage_max: Option<f64>,
}

impl ServerFigures {
    pub fn between(before: &Scrape, after: &Scrape, kv_samples: &[f64]) -> ServerFigures {
        let delta = |k: &[&str]| Some(after.sum(k)? - before.sum(k).unwrap_or(0.0));
        let queue_n = delta(QUEUE_COUNT).filter(|n| *n > 0.0);
        let prefill_s = delta(PREFILL_SUM).filter(|s| *s > 0.0);
        ServerFigures {
            queue_time_ms_mean: queue_n.and_then(|n| Some(delta(QUEUE_SUM)? / n * 1e3)),
            prefill_tok_s: prefill_s.and_then(|s| Some(delta(PROMPT_TOKENS)? / s)),
            kv_usage_mean: (!kv_samples.is_empty())
                .then(|| kv_samples.iter().sum::<f64>() / kv_samples.len() as f64),
            kv_usage_max: kv_samples.iter().copied().reduce(f64::max),
        }
    }

    pub fn kv_usage(s: &Scrape) -> Option<f64> {
        s.max(KV_USAGE)
    }
}

/// Reads `/metrics`; `None` when the server has none or it cannot be read.
pub async fn fetch(client: &reqwest::Client, url: &str, key: Option<&str>) -> Option<Scrape> {
    let mut req = client
        .get(format!("{}/metrics", url.trim_end_matches('/')))
        .timeout(Duration::from_secs(5));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let resp = req.send().await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let body = resp.bytes().await.ok()?;
    if body.len() > MAX_BODY {
        return None;
    }
    Some(Scrape::parse(&String::from_utf8_lossy(&body)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_label_sets_and_matches_any_namespace() {
        let before = Scrape::parse(
            "# HELP x\nstoker_request_queue_time_seconds_sum{lane=\"interactive\"} 1.0\n\
             stoker_request_queue_time_seconds_count{lane=\"interactive\"} 10\n",
        );
        let after = Scrape::parse(
            "stoker_request_queue_time_seconds_sum{lane=\"interactive\"} 1.5\n\
             stoker_request_queue_time_seconds_sum{lane=\"batch\"} 0.5\n\
             stoker_request_queue_time_seconds_count{lane=\"interactive\"} 20\n\
             stoker_request_queue_time_seconds_count{lane=\"batch\"} 10\n\
             vllm:kv_cache_usage_perc{model=\"m\"} 0.25\n\
             garbage line here\nbad{ 3\nnan_metric NaN\n",
        );
        let f = ServerFigures::between(&before, &after, &[0.2, 0.4]);
        assert!((f.queue_time_ms_mean.unwrap() - 50.0).abs() < 1e-9);
        assert!((f.kv_usage_mean.unwrap() - 0.3).abs() < 1e-9);
        assert_eq!(f.kv_usage_max, Some(0.4));
        assert_eq!(ServerFigures::kv_usage(&after), Some(0.25));
        assert_eq!(f.prefill_tok_s, None);
        // `my_kv_cache_usage_perc_other` must not match by accident.
        assert_eq!(Scrape::parse("xkv_cache_usage_perc 1").max(KV_USAGE), None);
    }
}
