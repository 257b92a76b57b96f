//! Structural validation of a batch input file (JSONL), before anything is
//! stored: every line a JSON object with a unique `custom_id` of at most 64
//! characters, `method` POST, a supported `url` that all lines share, and a
//! `body` object. What the body asks for (token limits, sampling ranges, the
//! model) is checked per row when it runs, exactly as the online API does.
//!
//! A refusal names the lines at fault (the first [`MAX_REPORTED`] of them) so
//! a client can fix the file without bisecting it.

use std::collections::HashSet;

use serde_json::Value;

/// The endpoints a batch may target.
pub const ENDPOINTS: [&str; 2] = ["/v1/chat/completions", "/v1/completions"];
/// Longest `custom_id`, in characters.
pub const MAX_CUSTOM_ID_CHARS: usize = 64;
/// How many faulty lines one refusal lists.
pub const MAX_REPORTED: usize = 20;
/// Output tokens assumed for a chat row that sets no `max_tokens`, for the
/// backlog estimate only.
pub const CHAT_DEFAULT_OUTPUT_ESTIMATE: u64 = 256;
/// `max_tokens` of a completion row that sets none (OpenAI's default).
pub const COMPLETION_DEFAULT_OUTPUT: u64 = 16;

/// Limits an upload is held to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputLimits {
    pub max_bytes: usize,
    pub max_lines: usize,
}

/// One line of an input file, as a runner needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct InputLine {
    pub custom_id: String,
    pub body: Value,
}

/// What a valid file holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputSummary {
    pub lines: usize,
    /// The url every line names.
    pub endpoint: String,
    /// Prompt plus output tokens the rows may need: prompt text counted at
    /// four bytes a token, output at the row's `max_tokens` or a default.
    pub estimated_tokens: u64,
}

/// Why a file is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("the file is empty; a batch input file has one JSON request per line")]
    Empty,
    #[error("the file is {bytes} bytes; at most {max} are allowed")]
    TooLarge { bytes: usize, max: usize },
    #[error("the file has {lines} lines; at most {max} are allowed")]
    TooManyLines { lines: usize, max: usize },
    #[error("{}", render(.0, *.1))]
    BadLines(Vec<LineFault>, usize),
}

/// One faulty line: 1-based number and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LineFault {
    pub line: usize,
    pub problem: String,
}

fn render(faults: &[LineFault], total: usize) -> String {
    let mut s = String::from("the batch input file has invalid lines: ");
    let shown: Vec<String> = faults
        .iter()
        .map(|f| format!("line {}: {}", f.line, f.problem))
        .collect();
    s.push_str(&shown.join("; "));
    if total > faults.len() {
        s.push_str(&format!(" (and {} more)", total - faults.len()));
    }
    s
}

impl InputError {
    /// The faulty line numbers, for tests and clients.
    pub fn lines(&self) -> Vec<usize> {
        match self {
            InputError::BadLines(f, _) => f.iter().map(|f| f.line).collect(),
            _ => Vec::new(),
        }
    }
}

/// The non-blank lines of a file with their 1-based numbers. A trailing
/// newline and blank lines are allowed, as OpenAI allows them.
pub fn lines(bytes: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    bytes
        .split(|&b| b == b'\n')
        .enumerate()
        .map(|(i, l)| (i + 1, l.strip_suffix(b"\r").unwrap_or(l)))
        .filter(|(_, l)| !l.iter().all(u8::is_ascii_whitespace))
}

/// Checks every line of `bytes`. `endpoint`, when given, is the url the
/// lines must name (creating a batch); otherwise they must agree with each
/// other (uploading).
pub fn validate(
    bytes: &[u8],
    endpoint: Option<&str>,
    limits: InputLimits,
) -> Result<InputSummary, InputError> {
    if bytes.len() > limits.max_bytes {
        return Err(InputError::TooLarge {
            bytes: bytes.len(),
            max: limits.max_bytes,
        });
    }
    let mut seen = HashSet::new();
    let mut faults = Vec::new();
    let mut total_faults = 0;
    let mut count = 0;
    let mut url: Option<String> = endpoint.map(str::to_owned);
    let mut estimate = 0u64;
    for (no, line) in lines(bytes) {
        count += 1;
        if count > limits.max_lines {
            return Err(InputError::TooManyLines {
                lines: lines(bytes).count(),
                max: limits.max_lines,
            });
        }
        match check_line(line, &mut seen, &mut url) {
            Ok(tokens) => estimate = estimate.saturating_add(tokens),
            Err(problem) => {
                total_faults += 1;
                if faults.len() < MAX_REPORTED {
                    faults.push(LineFault { line: no, problem });
                }
            }
        }
    }
    if count == 0 {
        return Err(InputError::Empty);
    }
    if !faults.is_empty() {
        return Err(InputError::BadLines(faults, total_faults));
    }
    Ok(InputSummary {
        lines: count,
        endpoint: url.unwrap_or_default(),
        estimated_tokens: estimate,
    })
}

fn check_line(
    line: &[u8],
    seen: &mut HashSet<String>,
    url: &mut Option<String>,
) -> Result<u64, String> {
    let v: Value = serde_json::from_slice(line).map_err(|e| format!("not valid JSON ({e})"))?;
    let Value::Object(o) = v else {
        return Err("not a JSON object".into());
    };
    let custom_id = match o.get("custom_id") {
        None => return Err("missing `custom_id`".into()),
        Some(Value::String(s)) => s,
        Some(_) => return Err("`custom_id` must be a string".into()),
    };
    if custom_id.is_empty() {
        return Err("`custom_id` must not be empty".into());
    }
    let chars = custom_id.chars().count();
    if chars > MAX_CUSTOM_ID_CHARS {
        return Err(format!(
            "`custom_id` has {chars} characters; at most {MAX_CUSTOM_ID_CHARS} are allowed"
        ));
    }
    match o.get("method") {
        Some(Value::String(m)) if m == "POST" => {}
        Some(Value::String(m)) => {
            return Err(format!("`method` must be POST, not {:?}", clip(m)));
        }
        Some(_) => return Err("`method` must be the string POST".into()),
        None => return Err("missing `method`".into()),
    }
    let line_url = match o.get("url") {
        Some(Value::String(u)) => u,
        Some(_) => return Err("`url` must be a string".into()),
        None => return Err("missing `url`".into()),
    };
    if !ENDPOINTS.contains(&line_url.as_str()) {
        return Err(format!(
            "`url` {:?} is not supported; use /v1/chat/completions or /v1/completions",
            clip(line_url)
        ));
    }
    match url {
        Some(u) if u != line_url => {
            return Err(format!(
                "`url` is {line_url} but the batch's endpoint is {u}; all lines must match it"
            ));
        }
        Some(_) => {}
        None => *url = Some(line_url.clone()),
    }
    let body = match o.get("body") {
        Some(Value::Object(b)) => b,
        Some(_) => return Err("`body` must be a JSON object".into()),
        None => return Err("missing `body`".into()),
    };
    if !seen.insert(custom_id.clone()) {
        return Err(format!("duplicate `custom_id` {:?}", clip(custom_id)));
    }
    Ok(estimate_tokens(line_url, body))
}

fn clip(s: &str) -> String {
    if s.chars().count() <= 40 {
        s.to_owned()
    } else {
        format!("{}...", s.chars().take(40).collect::<String>())
    }
}

/// Prompt and output tokens one row may need, cheaply: the body's text at
/// four bytes a token plus its output cap.
fn estimate_tokens(url: &str, body: &serde_json::Map<String, Value>) -> u64 {
    let prompt_bytes: usize = ["messages", "prompt"]
        .iter()
        .filter_map(|k| body.get(*k))
        .map(text_bytes)
        .sum();
    let cap = ["max_completion_tokens", "max_tokens"]
        .iter()
        .find_map(|k| body.get(*k).and_then(Value::as_u64));
    let output = cap.unwrap_or(if url == "/v1/completions" {
        COMPLETION_DEFAULT_OUTPUT
    } else {
        CHAT_DEFAULT_OUTPUT_ESTIMATE
    });
    (prompt_bytes as u64).div_ceil(4).saturating_add(output)
}

fn text_bytes(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len(),
        Value::Array(a) => a.iter().map(text_bytes).sum(),
        Value::Object(o) => o.values().map(text_bytes).sum(),
        Value::Number(_) => 1,
        _ => 0,
    }
}

/// Parses the rows `[from, to)` of an input file that passed [`validate`].
pub fn rows(bytes: &[u8], from: usize, to: usize) -> Result<Vec<InputLine>, String> {
    let Some(count) = to.checked_sub(from) else {
        return Err(format!("the row range {from}..{to} runs backwards"));
    };
    // The capacity is a hint; the file, not the range, bounds the rows.
    let mut out = Vec::with_capacity(count.min(4096));
    for (i, (no, line)) in lines(bytes).enumerate().skip(from).take(count) {
        let v: Value =
            serde_json::from_slice(line).map_err(|e| format!("line {no} (row {i}): {e}"))?;
        let custom_id = v
            .get("custom_id")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("line {no} (row {i}) has no custom_id"))?
            .to_owned();
        let body = v.get("body").cloned().unwrap_or(Value::Null);
        out.push(InputLine { custom_id, body });
    }
    if out.len() != count {
        return Err(format!(
            "the input file has fewer rows than the shard needs ({} of {})",
            out.len(),
            count
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIM: InputLimits = InputLimits {
        max_bytes: 1 << 20,
        max_lines: 100,
    };

    fn line(id: &str) -> String {
        format!(
            r#"{{"custom_id":"{id}","method":"POST","url":"/v1/chat/completions","body":{{"model":"m","messages":[{{"role":"user","content":"hello there"}}],"max_tokens":8}}}}"#
        )
    }

    #[test]
    fn a_good_file_passes_with_an_estimate() {
        let f = format!("{}\n{}\n\n", line("a"), line("b"));
        let s = validate(f.as_bytes(), None, LIM).unwrap();
        assert_eq!(s.lines, 2);
        assert_eq!(s.endpoint, "/v1/chat/completions");
        assert!(s.estimated_tokens >= 2 * 8 + 2, "{}", s.estimated_tokens);
        let r = rows(f.as_bytes(), 1, 2).unwrap();
        assert_eq!(r[0].custom_id, "b");
    }

    #[test]
    fn every_kind_of_broken_line_is_named() {
        let long = "x".repeat(65);
        let cases = [
            "not json".to_owned(),
            "[1,2]".to_owned(),
            r#"{"method":"POST","url":"/v1/completions","body":{}}"#.to_owned(),
            line(&long),
            r#"{"custom_id":"g","method":"GET","url":"/v1/chat/completions","body":{}}"#.to_owned(),
            r#"{"custom_id":"e","method":"POST","url":"/v1/embeddings","body":{}}"#.to_owned(),
            r#"{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":"x"}"#
                .to_owned(),
            r#"{"custom_id":7,"method":"POST","url":"/v1/chat/completions","body":{}}"#.to_owned(),
        ];
        for bad in &cases {
            let f = format!("{}\n{bad}\n", line("ok"));
            let e = validate(f.as_bytes(), None, LIM).unwrap_err();
            assert_eq!(e.lines(), vec![2], "{bad}: {e}");
            assert!(e.to_string().contains("line 2:"), "{e}");
        }
    }

    #[test]
    fn duplicates_and_mixed_urls_are_refused() {
        let f = format!("{}\n{}\n", line("a"), line("a"));
        assert!(
            validate(f.as_bytes(), None, LIM)
                .unwrap_err()
                .to_string()
                .contains("duplicate")
        );
        let other = r#"{"custom_id":"c","method":"POST","url":"/v1/completions","body":{}}"#;
        let f = format!("{}\n{other}\n", line("a"));
        assert_eq!(
            validate(f.as_bytes(), None, LIM).unwrap_err().lines(),
            vec![2]
        );
        let f = line("a");
        let e = validate(f.as_bytes(), Some("/v1/completions"), LIM).unwrap_err();
        assert_eq!(e.lines(), vec![1]);
    }

    #[test]
    fn empty_large_and_long_files_are_refused() {
        assert_eq!(validate(b"", None, LIM), Err(InputError::Empty));
        assert_eq!(validate(b"\n \n", None, LIM), Err(InputError::Empty));
        let big = vec![b' '; 10];
        let small = InputLimits {
            max_bytes: 5,
            max_lines: 1,
        };
        assert!(matches!(
            validate(&big, None, small),
            Err(InputError::TooLarge { bytes: 10, max: 5 })
        ));
        let f = format!("{}\n{}\n", line("a"), line("b"));
        let two = InputLimits {
            max_bytes: 1 << 20,
            max_lines: 1,
        };
        assert!(matches!(
            validate(f.as_bytes(), None, two),
            Err(InputError::TooManyLines { lines: 2, max: 1 })
        ));
    }

    #[test]
    fn only_the_first_faults_are_listed() {
        let f = "x\n".repeat(50);
        let e = validate(f.as_bytes(), None, LIM).unwrap_err();
        assert_eq!(e.lines().len(), MAX_REPORTED);
        assert!(e.to_string().contains("and 30 more"), "{e}");
    }

    mod properties {
        //! Any bytes at all: a typed answer, never a panic; and what passes
        //! reads back as exactly its rows.
        use super::*;
        use proptest::prelude::*;

        fn fragment() -> impl Strategy<Value = String> {
            prop_oneof![
                (0..40usize).prop_map(|i| line(&format!("id{i}"))),
                Just(r#"{"custom_id":"c","method":"POST","url":"/v1/completions","body":{"prompt":"x","max_tokens":-3}}"#.to_owned()),
                Just(r#"{"custom_id":"\u0000","method":"POST","url":"/v1/chat/completions","body":{}}"#.to_owned()),
                Just("{".repeat(200)),
                Just("\r".to_owned()),
                Just(String::new()),
                Just("\u{feff}{}".to_owned()),
                any::<String>(),
            ]
        }

        proptest! {
            // A fixed seed, after every failure found so far (committed
            // beside this file); scripts/fuzz.sh explores with fresh ones.
            #![proptest_config(ProptestConfig {
                cases: stoker_test_support::property::cases(512),
                rng_seed: match stoker_test_support::property::seed() {
                    Some(s) => proptest::test_runner::RngSeed::Fixed(s),
                    None => proptest::test_runner::RngSeed::Random,
                },
                failure_persistence: Some(Box::new(
                    proptest::test_runner::FileFailurePersistence::Direct(concat!(
                        env!("CARGO_MANIFEST_DIR"),
                        "/src/batch/proptest-regressions/input.txt"
                    )),
                )),
                ..ProptestConfig::default()
            })]

            #[test]
            fn any_file_is_a_typed_answer_and_a_valid_one_reads_back_whole(
                parts in prop::collection::vec(fragment(), 0..12),
                crlf in any::<bool>(),
                raw in prop::collection::vec(any::<u8>(), 0..64),
                use_raw in any::<bool>(),
            ) {
                let bytes = if use_raw {
                    raw
                } else {
                    parts.join(if crlf { "\r\n" } else { "\n" }).into_bytes()
                };
                let lim = InputLimits { max_bytes: 1 << 16, max_lines: 8 };
                match validate(&bytes, None, lim) {
                    Ok(s) => {
                        let r = rows(&bytes, 0, s.lines).unwrap();
                        prop_assert_eq!(r.len(), s.lines);
                        let ids: HashSet<_> = r.iter().map(|l| l.custom_id.clone()).collect();
                        prop_assert_eq!(ids.len(), s.lines);
                        prop_assert!(s.lines <= lim.max_lines);
                        prop_assert!(ENDPOINTS.contains(&s.endpoint.as_str()));
                        // Past the end, or a range the wrong way round, is an error.
                        prop_assert!(rows(&bytes, 0, s.lines + 1).is_err());
                        prop_assert!(rows(&bytes, 1, 0).is_err());
                    }
                    Err(InputError::BadLines(faults, total)) => {
                        prop_assert!(!faults.is_empty() && faults.len() <= MAX_REPORTED);
                        prop_assert!(total >= faults.len());
                    }
                    Err(_) => {}
                }
            }
        }
    }
}
