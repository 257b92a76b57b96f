//! The local side of `stoker batch submit`: the JSONL file read and checked
//! before anything is sent, `--metadata` pairs with OpenAI's limits, and the
//! endpoint a file's first line names.

use std::path::Path;

use serde_json::{Map, Value};

/// The endpoint of a submitted file whose first line names none.
pub const DEFAULT_ENDPOINT: &str = "/v1/chat/completions";
/// OpenAI's limits on batch metadata.
const MAX_METADATA_PAIRS: usize = 16;
const MAX_METADATA_KEY: usize = 64;
const MAX_METADATA_VALUE: usize = 512;

/// Parses repeated `KEY=VALUE` arguments into the batch's metadata object,
/// with OpenAI's limits (16 pairs, keys up to 64 and values up to 512 chars).
pub fn parse_metadata(pairs: &[String]) -> Result<Map<String, Value>, String> {
    if pairs.len() > MAX_METADATA_PAIRS {
        return Err(format!(
            "--metadata: at most {MAX_METADATA_PAIRS} pairs, got {}",
            pairs.len()
        ));
    }
    let mut out = Map::new();
    for pair in pairs {
        let Some((key, value)) = pair.split_once('=') else {
            return Err(format!("--metadata {pair:?}: expected KEY=VALUE"));
        };
        if key.trim().is_empty() {
            return Err(format!("--metadata {pair:?}: the key is empty"));
        }
        if key.chars().count() > MAX_METADATA_KEY {
            return Err(format!(
                "--metadata {pair:?}: keys are at most {MAX_METADATA_KEY} characters"
            ));
        }
        if value.chars().count() > MAX_METADATA_VALUE {
            return Err(format!(
                "--metadata key {key:?}: values are at most {MAX_METADATA_VALUE} characters"
            ));
        }
        if out
            .insert(key.to_owned(), Value::String(value.to_owned()))
            .is_some()
        {
            return Err(format!("--metadata: key {key:?} given twice"));
        }
    }
    Ok(out)
}

/// Reads the file to submit, with a message that names it on any failure.
/// An empty file is refused here: a batch needs at least one line.
pub fn read_input(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::ErrorKind;
    let shown = path.display();
    let data = std::fs::read(path).map_err(|e| match e.kind() {
        ErrorKind::NotFound => format!("{shown}: no such file"),
        ErrorKind::PermissionDenied => format!("{shown}: permission denied"),
        ErrorKind::IsADirectory => format!("{shown} is a directory, not a JSONL file"),
        _ => format!("reading {shown}: {e}"),
    })?;
    if data.iter().all(u8::is_ascii_whitespace) {
        return Err(format!(
            "{shown} is empty; a batch needs at least one request line"
        ));
    }
    Ok(data)
}

/// The `url` of the first non-blank line, if it is a JSON object naming one.
pub fn first_line_url(data: &[u8]) -> Option<String> {
    let line = data
        .split(|&b| b == b'\n')
        .find(|l| !l.iter().all(u8::is_ascii_whitespace))?;
    let v: Value = serde_json::from_slice(line).ok()?;
    v.get("url")?.as_str().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use serde_json::json;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn metadata_pairs_become_an_object() {
        let m = parse_metadata(&strings(&["team=search", "run=2026-01-31", "note=a=b"])).unwrap();
        assert_eq!(
            Value::Object(m),
            json!({"team": "search", "run": "2026-01-31", "note": "a=b"})
        );
        assert!(parse_metadata(&[]).unwrap().is_empty());
        // An empty value is a value.
        assert_eq!(parse_metadata(&strings(&["k="])).unwrap()["k"], "");
    }

    #[test]
    fn bad_metadata_is_refused_with_the_pair_named() {
        for (args, needle) in [
            (vec!["novalue"], "expected KEY=VALUE"),
            (vec!["=v"], "key is empty"),
            (vec!["  =v"], "key is empty"),
            (vec!["a=1", "a=2"], "given twice"),
        ] {
            let e = parse_metadata(&strings(&args)).unwrap_err();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
        let long_key = format!("{}=v", "k".repeat(65));
        assert!(
            parse_metadata(&[long_key])
                .unwrap_err()
                .contains("at most 64")
        );
        let long_value = format!("k={}", "v".repeat(513));
        assert!(
            parse_metadata(&[long_value])
                .unwrap_err()
                .contains("at most 512")
        );
        let many: Vec<String> = (0..17).map(|i| format!("k{i}=v")).collect();
        assert!(parse_metadata(&many).unwrap_err().contains("at most 16"));
    }

    fn temp_path(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("stoker-batch-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn input_files_that_cannot_be_submitted_are_named_in_the_error() {
        let dir = temp_path("inputs");
        let missing = dir.join("missing.jsonl");
        let e = read_input(&missing).unwrap_err();
        assert!(
            e.contains("missing.jsonl") && e.contains("no such file"),
            "{e}"
        );

        let e = read_input(&dir).unwrap_err();
        assert!(e.contains("is a directory"), "{e}");

        let empty = dir.join("empty.jsonl");
        std::fs::write(&empty, "").unwrap();
        assert!(read_input(&empty).unwrap_err().contains("is empty"));
        std::fs::write(&empty, "\n \n").unwrap();
        assert!(read_input(&empty).unwrap_err().contains("is empty"));

        let good = dir.join("good.jsonl");
        std::fs::write(&good, "{\"custom_id\":\"a\"}\n").unwrap();
        assert_eq!(read_input(&good).unwrap(), b"{\"custom_id\":\"a\"}\n");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[cfg(unix)]
    #[test]
    fn an_unreadable_file_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = temp_path("unreadable");
        let path = dir.join("secret.jsonl");
        std::fs::write(&path, "{}\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
        // root reads anything; the check only means something for other users.
        if std::fs::read(&path).is_err() {
            let e = read_input(&path).unwrap_err();
            assert!(
                e.contains("secret.jsonl") && e.contains("permission denied"),
                "{e}"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_endpoint_defaults_to_the_first_lines_url() {
        let data = b"\n{\"custom_id\":\"a\",\"url\":\"/v1/completions\"}\n{\"url\":\"x\"}\n";
        assert_eq!(first_line_url(data).as_deref(), Some("/v1/completions"));
        assert_eq!(first_line_url(b"not json\n"), None);
        assert_eq!(first_line_url(b"{\"url\": 3}\n"), None);
        assert_eq!(first_line_url(b""), None);
    }
}
