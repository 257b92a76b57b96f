//! A scenario as checked: tenants (who sends what, in which lane, judged by
//! which SLOs) and phases (who runs together, for how long). Every check
//! that needs more than a TOML type happens here, before any request is
//! sent, and each refusal names the file, the line and the field
//! (`flood.toml:14: tenant "A": arrival `closed:x`: ...`), since a scenario
//! that ran something else than written would measure the wrong thing.
//!
//! Lengths and arrivals reuse the workload syntax (`crate::spec`). Relative
//! `tokenizer` paths resolve against the current directory (the repository
//! root, where the scripts run), not the scenario file's directory.

use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;
use toml::Spanned;

use super::file::{Lane, RawPhase, RawScenario, Source};
use crate::spec::{Arrival, Endpoint, LengthDist, SpecError};

/// An API key; never printed.
#[derive(Clone, PartialEq)]
pub struct ApiKey(pub String);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(..)")
    }
}

/// A tenant's SLOs; absolute ones hold in every phase it is in, ratios in
/// every phase but its baseline.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TenantSlo {
    pub ttft_p99_ms: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
    pub ttft_p99_ratio: Option<f64>,
    pub itl_p50_ratio: Option<f64>,
    pub itl_p99_ratio: Option<f64>,
    pub throughput_ratio_min: Option<f64>,
    pub max_refused: Option<u64>,
    /// How fast a refusal must come: p99 of the time from the send to a
    /// 4xx/5xx status. A phase with no refusal meets it.
    pub refusal_p99_ms: Option<f64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Tenant {
    pub name: String,
    pub key: Option<ApiKey>,
    pub lane: Lane,
    /// `None` for a batch tenant.
    pub arrival: Option<Arrival>,
    pub input: LengthDist,
    pub output: LengthDist,
    pub stream: bool,
    pub start_after: Duration,
    pub retry: bool,
    /// Rows of the Batch API job (batch lane only).
    pub rows: Option<u32>,
    pub slo: TenantSlo,
    /// The phase whose figures the ratios divide by.
    pub baseline: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    pub name: String,
    /// Indices into [`Scenario::tenants`].
    pub tenants: Vec<usize>,
    pub duration: Duration,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    pub name: String,
    /// The file, as given on the command line.
    pub file: String,
    pub endpoint: Endpoint,
    pub model: Option<String>,
    pub seed: u64,
    pub ignore_eos: bool,
    pub tokenizer: Option<PathBuf>,
    /// `file:line` of the `tokenizer` field, for a refusal when it is loaded.
    pub tokenizer_at: String,
    pub tenants: Vec<Tenant>,
    pub phases: Vec<Phase>,
}

/// Most rows a batch tenant may ask for.
pub const MAX_ROWS: i64 = 1_000_000;

fn safe_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

const NAME_RULE: &str = "1 to 64 letters, digits, `.`, `_` or `-` (it names files)";

impl Scenario {
    /// Checks `text` (the file shown as `shown`); `env` reads variables.
    pub fn parse(
        shown: &str,
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Scenario, SpecError> {
        let src = Source {
            shown: shown.to_owned(),
            text,
        };
        let raw = src.parse()?;
        Check { src: &src, env }.scenario(raw)
    }
}

/// The checks, with the text they locate refusals in.
pub(super) struct Check<'a> {
    pub(super) src: &'a Source<'a>,
    pub(super) env: &'a dyn Fn(&str) -> Option<String>,
}

impl Check<'_> {
    fn scenario(&self, raw: RawScenario) -> Result<Scenario, SpecError> {
        let src = self.src;
        let name = match &raw.name {
            Some(n) if !safe_name(n.get_ref()) => {
                return Err(src.refuse(
                    n.span(),
                    "name",
                    format!("{:?}: use {NAME_RULE}", n.get_ref()),
                ));
            }
            Some(n) => n.get_ref().clone(),
            None => {
                let stem = shown_stem(&src.shown).to_owned();
                if !safe_name(&stem) {
                    return Err(src.refuse_file(
                        "name",
                        format!("the file name {stem:?} cannot name the scenario; give `name`, {NAME_RULE}"),
                    ));
                }
                stem
            }
        };
        if raw.tenant.is_empty() {
            return Err(
                src.refuse_file("tenant", "the scenario has no [[tenant]]; add at least one")
            );
        }
        if raw.phase.is_empty() {
            return Err(src.refuse_file("phase", "the scenario has no [[phase]]; add at least one"));
        }
        let tokenizer_at = match &raw.tokenizer {
            Some(t) => format!("{}:{}", src.shown, src.line(t.span().start)),
            None => String::new(),
        };
        if let Some(t) = &raw.tokenizer
            && t.get_ref().trim().is_empty()
        {
            return Err(src.refuse(t.span(), "tokenizer", "the path is empty"));
        }
        // Tenant names first: phases refer to them.
        let mut names: Vec<&Spanned<String>> = Vec::new();
        for t in &raw.tenant {
            let n = &t.name;
            if !safe_name(n.get_ref()) {
                return Err(src.refuse(
                    n.span(),
                    "tenant name",
                    format!("{:?}: use {NAME_RULE}", n.get_ref()),
                ));
            }
            if names.iter().any(|m| m.get_ref() == n.get_ref()) {
                return Err(src.refuse(
                    n.span(),
                    "tenant name",
                    format!("{:?} is used twice", n.get_ref()),
                ));
            }
            names.push(n);
        }
        let phases = raw
            .phase
            .iter()
            .enumerate()
            .map(|(i, p)| self.phase(p, &raw.phase[..i], &names))
            .collect::<Result<Vec<_>, _>>()?;
        let tenants = raw
            .tenant
            .into_iter()
            .enumerate()
            .map(|(i, t)| self.tenant(t, i, &raw.phase, &phases))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Scenario {
            name,
            file: src.shown.clone(),
            endpoint: raw.endpoint.unwrap_or(Endpoint::Chat),
            model: raw.model,
            seed: raw.seed.unwrap_or(0),
            ignore_eos: raw.ignore_eos.unwrap_or(false),
            tokenizer: raw.tokenizer.map(|t| PathBuf::from(t.into_inner())),
            tokenizer_at,
            tenants,
            phases,
        })
    }

    fn phase(
        &self,
        p: &RawPhase,
        earlier: &[RawPhase],
        names: &[&Spanned<String>],
    ) -> Result<Phase, SpecError> {
        let src = self.src;
        let name = p.name.get_ref();
        if !safe_name(name) {
            return Err(src.refuse(
                p.name.span(),
                "phase name",
                format!("{name:?}: use {NAME_RULE}"),
            ));
        }
        if earlier.iter().any(|e| e.name.get_ref() == name) {
            return Err(src.refuse(
                p.name.span(),
                "phase name",
                format!("{name:?} is used twice"),
            ));
        }
        let what = format!("phase {name:?}");
        if p.tenants.get_ref().is_empty() {
            return Err(src.refuse(
                p.tenants.span(),
                &format!("{what}: tenants"),
                "name at least one tenant",
            ));
        }
        let mut tenants = Vec::new();
        for t in p.tenants.get_ref() {
            let Some(i) = names.iter().position(|n| n.get_ref() == t.get_ref()) else {
                let known: Vec<&str> = names.iter().map(|n| n.get_ref().as_str()).collect();
                return Err(src.refuse(
                    t.span(),
                    &format!("{what}: tenants"),
                    format!(
                        "unknown tenant {:?}; the tenants are {}",
                        t.get_ref(),
                        known.join(", ")
                    ),
                ));
            };
            if tenants.contains(&i) {
                return Err(src.refuse(
                    t.span(),
                    &format!("{what}: tenants"),
                    format!("tenant {:?} is named twice", t.get_ref()),
                ));
            }
            tenants.push(i);
        }
        let duration = crate::spec::duration(*p.duration_secs.get_ref()).map_err(|e| {
            src.refuse(
                p.duration_secs.span(),
                &format!("{what}: duration_secs"),
                e.0,
            )
        })?;
        Ok(Phase {
            name: name.clone(),
            tenants,
            duration,
        })
    }
}

/// The file name without directories or extension.
fn shown_stem(shown: &str) -> &str {
    let base = shown.rsplit(['/', '\\']).next().unwrap_or(shown);
    base.strip_suffix(".toml").unwrap_or(base)
}
