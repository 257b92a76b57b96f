//! The files the real-model suites need outside the repository's sources: the
//! default model (fetched by `scripts/fetch-model.sh`) and the Python venv
//! (`scripts/setup-venv.sh`). Looked up in one place so that every suite
//! honours the same override and fails with the same fix.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The environment variable that names another GGUF file to test against.
pub const MODEL_ENV: &str = "STOKER_MODEL";

/// The default model, relative to the repository root: the file
/// `scripts/fetch-model.sh` puts under `models/`.
pub const DEFAULT_MODEL: &str = "models/SmolLM2-135M-Instruct.Q4_1.gguf";

/// The Python interpreter of the repository's venv, relative to its root.
pub const VENV_PYTHON: &str = ".venv/bin/python";

/// The workspace root (the folder holding `Cargo.lock`, `models/`, `scripts/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("tests/support sits two folders below the root")
        .to_path_buf()
}

/// The model to test against: `$STOKER_MODEL` when set, else [`DEFAULT_MODEL`].
///
/// # Panics
///
/// When the file does not exist, with the script that fetches it: a suite that
/// needs the model fails rather than skips.
pub fn model_path() -> PathBuf {
    resolve_model(std::env::var_os(MODEL_ENV), &repo_root())
}

fn resolve_model(env: Option<OsString>, root: &Path) -> PathBuf {
    let (path, from_env) = match env {
        Some(p) if !p.is_empty() => (PathBuf::from(p), true),
        _ => (root.join(DEFAULT_MODEL), false),
    };
    if !path.is_file() {
        if from_env {
            panic!(
                "model file {} (from {MODEL_ENV}) not found: point {MODEL_ENV} at a GGUF \
                 file, or unset it and run scripts/fetch-model.sh",
                path.display()
            );
        }
        panic!(
            "model file {} not found: run scripts/fetch-model.sh (or set {MODEL_ENV} to \
             another GGUF file)",
            path.display()
        );
    }
    path
}

/// The venv's Python (`.venv/bin/python`), which has the OpenAI SDK and the
/// fixture scripts' packages.
///
/// # Panics
///
/// When it does not exist, with the script that sets the venv up.
pub fn python_bin() -> PathBuf {
    resolve_python(&repo_root())
}

fn resolve_python(root: &Path) -> PathBuf {
    let python = root.join(VENV_PYTHON);
    assert!(
        python.is_file(),
        "{} not found: run scripts/setup-venv.sh",
        python.display()
    );
    python
}

#[cfg(test)]
mod tests {
    use super::*;

    fn panic_message(f: impl FnOnce() -> PathBuf + std::panic::UnwindSafe) -> String {
        let err = std::panic::catch_unwind(f).expect_err("should panic");
        err.downcast_ref::<String>()
            .cloned()
            .or_else(|| err.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default()
    }

    #[test]
    fn the_root_holds_the_workspace() {
        let root = repo_root();
        assert!(root.join("Cargo.lock").is_file(), "{}", root.display());
        assert!(root.join("scripts/fetch-model.sh").is_file());
        assert!(root.join("scripts/setup-venv.sh").is_file());
    }

    #[test]
    fn the_default_model_is_the_one_the_fetch_script_writes() {
        let script = std::fs::read_to_string(repo_root().join("scripts/fetch-model.sh")).unwrap();
        let name = DEFAULT_MODEL.strip_prefix("models/").unwrap();
        assert!(script.contains(&format!("NAME=\"{name}\"")), "{script}");
    }

    #[test]
    fn a_missing_model_fails_with_the_fix() {
        let empty = crate::temp_dir("paths-test");
        let root = empty.path().to_path_buf();
        let m = panic_message(move || resolve_model(None, &root));
        assert!(m.contains("scripts/fetch-model.sh"), "{m}");
        assert!(m.contains(DEFAULT_MODEL), "{m}");

        let missing = empty.path().join("nope.gguf");
        let root = empty.path().to_path_buf();
        let m = panic_message(move || resolve_model(Some(missing.into()), &root));
        assert!(m.contains(MODEL_ENV) && m.contains("nope.gguf"), "{m}");
    }

    #[test]
    fn the_env_var_overrides_the_default() {
        let dir = crate::temp_dir("paths-test");
        let other = dir.path().join("other.gguf");
        std::fs::write(&other, b"GGUF").unwrap();
        assert_eq!(resolve_model(Some(other.clone().into()), dir.path()), other);
        // Empty counts as unset.
        let m = panic_message({
            let root = dir.path().to_path_buf();
            move || resolve_model(Some(OsString::new()), &root)
        });
        assert!(m.contains("scripts/fetch-model.sh"), "{m}");
    }

    #[test]
    fn a_missing_venv_fails_with_the_fix() {
        let dir = crate::temp_dir("paths-test");
        let root = dir.path().to_path_buf();
        let m = panic_message(move || resolve_python(&root));
        assert!(m.contains("scripts/setup-venv.sh"), "{m}");
    }
}
