//! The checks of one `[[tenant]]`: its lane and the fields that lane allows,
//! its key (literal or from the environment), its lengths and arrival, its
//! start delay against the phases it is in, and its SLOs and baseline. Split
//! from `spec.rs`, which checks the scenario as a whole and its phases.

use std::time::Duration;

use toml::Spanned;

use super::file::{Lane, RawPhase, RawSlo, RawTenant};
use super::spec::{ApiKey, Check, MAX_ROWS, Phase, Tenant, TenantSlo};
use crate::spec::{Arrival, LengthDist, SpecError};

impl Check<'_> {
    pub(super) fn tenant(
        &self,
        t: RawTenant,
        index: usize,
        raw_phases: &[RawPhase],
        phases: &[Phase],
    ) -> Result<Tenant, SpecError> {
        let src = self.src;
        let name = t.name.get_ref().clone();
        let what = |field: &str| format!("tenant {name:?}: {field}");
        let lane = t.lane.as_ref().map_or(Lane::Interactive, |l| *l.get_ref());
        let key = self.key(&t, &what)?;
        let in_phases: Vec<usize> = (0..phases.len())
            .filter(|&p| phases[p].tenants.contains(&index))
            .collect();
        if in_phases.is_empty() {
            return Err(src.refuse(
                t.name.span(),
                &what("phases"),
                "the tenant is in no phase; add it to one or remove it",
            ));
        }
        let length = |v: &Option<Spanned<String>>, field: &str, default: &str| match v {
            Some(s) => s
                .get_ref()
                .parse::<LengthDist>()
                .map_err(|e| src.refuse(s.span(), &what(field), e.0)),
            None => Ok(default.parse().expect("a valid default")),
        };
        let input = length(&t.input, "input", "fixed:128")?;
        let output = length(&t.output, "output", "fixed:64")?;
        let batch = lane == Lane::Batch;
        // Fields that mean nothing in the tenant's lane are refused, not ignored.
        let only_online: [(&str, Option<std::ops::Range<usize>>); 4] = [
            ("arrival", t.arrival.as_ref().map(Spanned::span)),
            ("stream", t.stream.as_ref().map(Spanned::span)),
            ("retry", t.retry.as_ref().map(Spanned::span)),
            (
                "start_after_secs",
                t.start_after_secs.as_ref().map(Spanned::span),
            ),
        ];
        if batch {
            if let Some((field, Some(span))) = only_online.iter().find(|(_, s)| s.is_some()) {
                return Err(src.refuse(span.clone(), &what(field), "a batch tenant runs one Batch API job; this field is for lanes interactive and flex"));
            }
        } else if let Some(r) = &t.rows {
            return Err(src.refuse(
                r.span(),
                &what("rows"),
                "only a tenant with lane = \"batch\" has rows",
            ));
        }
        let arrival = match (&t.arrival, batch) {
            (_, true) => None,
            (Some(a), false) => Some(
                a.get_ref()
                    .parse::<Arrival>()
                    // The message starts "arrival `...`": it names the field.
                    .map_err(|e| src.refuse(a.span(), &format!("tenant {name:?}"), e.0))?,
            ),
            (None, false) => {
                return Err(src.refuse(
                    t.name.span(),
                    &what("arrival"),
                    "missing; use closed:N, constant:RATE, poisson:RATE or burst:N/SECONDS",
                ));
            }
        };
        let rows = match (&t.rows, batch) {
            (Some(r), _) => match *r.get_ref() {
                n @ 1..=MAX_ROWS => Some(n as u32),
                n => {
                    return Err(src.refuse(
                        r.span(),
                        &what("rows"),
                        format!("{n} must be from 1 to {MAX_ROWS}"),
                    ));
                }
            },
            (None, true) => {
                return Err(src.refuse(
                    t.name.span(),
                    &what("rows"),
                    "missing: a batch tenant needs the rows of its job",
                ));
            }
            (None, false) => None,
        };
        let start_after = match &t.start_after_secs {
            None => Duration::ZERO,
            Some(s) => {
                let v = *s.get_ref();
                if !(v.is_finite() && v >= 0.0) {
                    return Err(src.refuse(
                        s.span(),
                        &what("start_after_secs"),
                        format!("{v} must be a number of seconds, at least 0"),
                    ));
                }
                if let Some(p) = in_phases
                    .iter()
                    .find(|&&p| v >= phases[p].duration.as_secs_f64())
                {
                    return Err(src.refuse(
                        s.span(),
                        &what("start_after_secs"),
                        format!(
                            "{v} s leaves the tenant no time in phase {:?} ({} s)",
                            phases[*p].name,
                            phases[*p].duration.as_secs_f64()
                        ),
                    ));
                }
                Duration::from_secs_f64(v)
            }
        };
        let raw_slo = t.slo.unwrap_or_default();
        let (slo, baseline) = self.slo(&raw_slo, &name, lane, &in_phases, raw_phases)?;
        Ok(Tenant {
            name,
            key,
            lane,
            arrival,
            input,
            output,
            stream: t.stream.as_ref().is_none_or(|s| *s.get_ref()),
            start_after,
            retry: t.retry.is_some_and(|r| *r.get_ref()),
            rows,
            slo,
            baseline,
        })
    }

    fn key(
        &self,
        t: &RawTenant,
        what: &dyn Fn(&str) -> String,
    ) -> Result<Option<ApiKey>, SpecError> {
        let src = self.src;
        match (&t.api_key, &t.api_key_env) {
            (Some(_), Some(e)) => Err(src.refuse(
                e.span(),
                &what("api_key_env"),
                "give api_key or api_key_env, not both",
            )),
            (Some(k), None) if k.get_ref().is_empty() => {
                Err(src.refuse(k.span(), &what("api_key"), "the key is empty"))
            }
            (Some(k), None) => Ok(Some(ApiKey(k.get_ref().clone()))),
            (None, Some(e)) => match (self.env)(e.get_ref()) {
                Some(v) if !v.is_empty() => Ok(Some(ApiKey(v))),
                Some(_) => Err(src.refuse(
                    e.span(),
                    &what("api_key_env"),
                    format!("${} is empty", e.get_ref()),
                )),
                None => Err(src.refuse(
                    e.span(),
                    &what("api_key_env"),
                    format!("${} is not set", e.get_ref()),
                )),
            },
            (None, None) => Ok(None),
        }
    }

    fn slo(
        &self,
        s: &RawSlo,
        name: &str,
        lane: Lane,
        in_phases: &[usize],
        raw_phases: &[RawPhase],
    ) -> Result<(TenantSlo, usize), SpecError> {
        let src = self.src;
        let what = |field: &str| format!("tenant {name:?}: slo.{field}");
        let positive = |v: &Option<Spanned<f64>>, field: &str| -> Result<Option<f64>, SpecError> {
            match v {
                None => Ok(None),
                Some(x) if x.get_ref().is_finite() && *x.get_ref() > 0.0 => Ok(Some(*x.get_ref())),
                Some(x) => Err(src.refuse(
                    x.span(),
                    &what(field),
                    format!("{} must be a number above 0", x.get_ref()),
                )),
            }
        };
        let slo = TenantSlo {
            ttft_p99_ms: positive(&s.ttft_p99_ms, "ttft_p99_ms")?,
            itl_p50_ms: positive(&s.itl_p50_ms, "itl_p50_ms")?,
            itl_p99_ms: positive(&s.itl_p99_ms, "itl_p99_ms")?,
            refusal_p99_ms: positive(&s.refusal_p99_ms, "refusal_p99_ms")?,
            ttft_p99_ratio: positive(&s.ttft_p99_ratio, "ttft_p99_ratio")?,
            itl_p50_ratio: positive(&s.itl_p50_ratio, "itl_p50_ratio")?,
            itl_p99_ratio: positive(&s.itl_p99_ratio, "itl_p99_ratio")?,
            throughput_ratio_min: positive(&s.throughput_ratio_min, "throughput_ratio_min")?,
            max_refused: match &s.max_refused {
                None => None,
                Some(n) if *n.get_ref() >= 0 => Some(*n.get_ref() as u64),
                Some(n) => {
                    return Err(src.refuse(
                        n.span(),
                        &what("max_refused"),
                        format!("{} must be at least 0", n.get_ref()),
                    ));
                }
            },
        };
        if lane == Lane::Batch {
            let latency = [
                ("ttft_p99_ms", &s.ttft_p99_ms),
                ("itl_p50_ms", &s.itl_p50_ms),
                ("itl_p99_ms", &s.itl_p99_ms),
                ("ttft_p99_ratio", &s.ttft_p99_ratio),
                ("itl_p50_ratio", &s.itl_p50_ratio),
                ("itl_p99_ratio", &s.itl_p99_ratio),
                ("refusal_p99_ms", &s.refusal_p99_ms),
            ];
            if let Some((field, Some(v))) = latency.iter().find(|(_, v)| v.is_some()) {
                return Err(src.refuse(
                    v.span(),
                    &what(field),
                    "a batch tenant has no latencies; judge it by throughput_ratio_min",
                ));
            }
            if let Some(n) = &s.max_refused {
                return Err(src.refuse(
                    n.span(),
                    &what("max_refused"),
                    "a batch tenant sends no online requests to refuse",
                ));
            }
        }
        let baseline = match &s.baseline {
            None => in_phases[0],
            Some(b) => match raw_phases
                .iter()
                .position(|p| p.name.get_ref() == b.get_ref())
            {
                None => {
                    return Err(src.refuse(
                        b.span(),
                        &what("baseline"),
                        format!("unknown phase {:?}", b.get_ref()),
                    ));
                }
                Some(p) if !in_phases.contains(&p) => {
                    return Err(src.refuse(
                        b.span(),
                        &what("baseline"),
                        format!("the tenant is not in phase {:?}", b.get_ref()),
                    ));
                }
                Some(p) => p,
            },
        };
        if let Some((field, span)) = first_ratio(s)
            && in_phases.len() < 2
        {
            return Err(src.refuse(span, &what(field), format!(
                "a ratio needs a baseline phase and another to compare, but the tenant is only in phase {:?}",
                raw_phases[in_phases[0]].name.get_ref()
            )));
        }
        Ok((slo, baseline))
    }
}

/// The first ratio the SLO table sets and where, for a refusal.
fn first_ratio(s: &RawSlo) -> Option<(&'static str, std::ops::Range<usize>)> {
    [
        ("ttft_p99_ratio", &s.ttft_p99_ratio),
        ("itl_p50_ratio", &s.itl_p50_ratio),
        ("itl_p99_ratio", &s.itl_p99_ratio),
        ("throughput_ratio_min", &s.throughput_ratio_min),
    ]
    .into_iter()
    .find_map(|(f, v)| v.as_ref().map(|v| (f, v.span())))
}
