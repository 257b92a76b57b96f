//! Temporary folders for tests: `tempfile`'s [`TempDir`] (already in the
//! dependency tree), created under the system temp dir with a recognisable
//! `stoker-` prefix and removed, with everything in it, when dropped, even when
//! the test panics.

pub use tempfile::TempDir;

/// A fresh, empty folder named `stoker-{prefix}-XXXXXX` under the system temp
/// dir, removed on drop.
pub fn temp_dir(prefix: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(&format!("stoker-{prefix}-"))
        .tempdir()
        .unwrap_or_else(|e| panic!("create a temp dir for {prefix}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removed_on_drop() {
        let dir = temp_dir("tmp-test");
        let path = dir.path().to_path_buf();
        std::fs::write(path.join("f"), b"x").unwrap();
        assert!(path.is_dir());
        assert!(
            path.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("stoker-tmp-test-")
        );
        drop(dir);
        assert!(!path.exists());
    }

    #[test]
    fn each_call_is_a_new_folder() {
        let (a, b) = (temp_dir("tmp-test"), temp_dir("tmp-test"));
        assert_ne!(a.path(), b.path());
    }
}
