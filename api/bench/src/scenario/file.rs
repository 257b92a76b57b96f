//! The scenario TOML file as written: serde structs that refuse unknown
//! fields, with [`Spanned`] on every value a later check may refuse; the
//! [`Lane`] a tenant names, which the checked scenario keeps as written; and
//! the one place that turns a byte offset into `file:line:` for a message.
//!
//! Nothing here judges a value beyond its TOML type; `spec.rs` does that with
//! the spans kept here, so every refusal can name the line and the field a
//! person has to fix.

use std::ops::Range;
use std::path::Path;

use serde::{Deserialize, Serialize};
use toml::Spanned;

use crate::spec::{Endpoint, SpecError};

/// How a tenant's work reaches the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lane {
    /// Online requests in the interactive lane.
    Interactive,
    /// Online requests with `service_tier: flex` (the batch lane).
    Flex,
    /// One Batch API job (`/v1/files` + `/v1/batches`).
    Batch,
}

/// Largest scenario file read.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScenario {
    pub name: Option<Spanned<String>>,
    pub endpoint: Option<Endpoint>,
    pub model: Option<String>,
    pub seed: Option<u64>,
    pub ignore_eos: Option<bool>,
    pub tokenizer: Option<Spanned<String>>,
    #[serde(default)]
    pub tenant: Vec<RawTenant>,
    #[serde(default)]
    pub phase: Vec<RawPhase>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTenant {
    pub name: Spanned<String>,
    pub api_key: Option<Spanned<String>>,
    pub api_key_env: Option<Spanned<String>>,
    pub lane: Option<Spanned<Lane>>,
    pub arrival: Option<Spanned<String>>,
    pub input: Option<Spanned<String>>,
    pub output: Option<Spanned<String>>,
    pub stream: Option<Spanned<bool>>,
    pub start_after_secs: Option<Spanned<f64>>,
    pub retry: Option<Spanned<bool>>,
    pub rows: Option<Spanned<i64>>,
    pub slo: Option<RawSlo>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSlo {
    pub ttft_p99_ms: Option<Spanned<f64>>,
    pub itl_p50_ms: Option<Spanned<f64>>,
    pub itl_p99_ms: Option<Spanned<f64>>,
    pub ttft_p99_ratio: Option<Spanned<f64>>,
    pub itl_p50_ratio: Option<Spanned<f64>>,
    pub itl_p99_ratio: Option<Spanned<f64>>,
    pub throughput_ratio_min: Option<Spanned<f64>>,
    pub max_refused: Option<Spanned<i64>>,
    pub refusal_p99_ms: Option<Spanned<f64>>,
    pub baseline: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPhase {
    pub name: Spanned<String>,
    pub tenants: Spanned<Vec<Spanned<String>>>,
    pub duration_secs: Spanned<f64>,
}

/// The text of a scenario file and the name it is shown by, for locating
/// refusals.
#[derive(Debug)]
pub struct Source<'a> {
    pub shown: String,
    pub text: &'a str,
}

impl Source<'_> {
    /// The 1-based line of byte `offset`.
    pub fn line(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1
    }

    /// `file:line: what: message`, the shape of every refusal.
    pub fn refuse(&self, span: Range<usize>, what: &str, message: impl AsRef<str>) -> SpecError {
        SpecError(format!(
            "{}:{}: {what}: {}",
            self.shown,
            self.line(span.start),
            message.as_ref()
        ))
    }

    /// A refusal about the file as a whole, placed on its first line.
    pub fn refuse_file(&self, what: &str, message: impl AsRef<str>) -> SpecError {
        self.refuse(0..0, what, message)
    }

    /// Parses the text; a TOML or type error names its line and, where the
    /// message does not already, the key written on that line.
    pub fn parse(&self) -> Result<RawScenario, SpecError> {
        toml::from_str(self.text).map_err(|e| {
            let start = e.span().map_or(0, |s| s.start);
            let message = e.message().trim().to_owned();
            let key = if message.contains("field `") {
                None
            } else {
                self.key_on_line(start)
            };
            let what = key.map_or("TOML".to_owned(), |k| format!("`{k}`"));
            self.refuse(start..start, &what, message)
        })
    }

    /// The `key` of a `key = value` line holding `offset`.
    fn key_on_line(&self, offset: usize) -> Option<String> {
        let offset = offset.min(self.text.len());
        let begin = self.text[..offset].rfind('\n').map_or(0, |i| i + 1);
        let line = self.text[begin..].lines().next()?;
        let (key, _) = line.split_once('=')?;
        let key = key.trim();
        let ok = !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        ok.then(|| key.to_owned())
    }
}

/// Reads a scenario file (at most [`MAX_FILE_BYTES`]).
pub fn read(path: &Path) -> Result<String, SpecError> {
    let shown = path.display();
    let meta =
        std::fs::metadata(path).map_err(|e| SpecError(format!("scenario file {shown}: {e}")))?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(SpecError(format!(
            "{shown}:1: file: {} bytes; at most {MAX_FILE_BYTES} are read",
            meta.len()
        )));
    }
    std::fs::read_to_string(path).map_err(|e| SpecError(format!("scenario file {shown}: {e}")))
}
