//! The identity of a model directory: a sha256 over a manifest of its files.
//!
//! A GGUF revision is the sha256 of its one file. A directory's is the
//! sha256 of the text `sha256sum` prints for the files stoker reads, in
//! name order (`<hex>  <name>\n` per file), so an operator can recompute it
//! with `cd DIR && sha256sum $(ls FILES) | sha256sum` and see which file
//! changed by comparing the per-file digests, which are kept too. Files the
//! loader does not read (a README, `.git`, optimizer states) are not part of
//! the model and do not change its identity.

use std::io::Read;
use std::path::Path;

use rayon::prelude::*;
use sha2::{Digest, Sha256};

use crate::error::ModelError;

/// One file of the manifest.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ManifestEntry {
    pub name: String,
    pub sha256: String,
    pub size: u64,
}

/// The files of a directory artifact and the digest over them.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Manifest {
    pub sha256: String,
    pub files: Vec<ManifestEntry>,
}

impl Manifest {
    /// Total bytes of the files.
    pub fn size(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum()
    }

    /// Hashes `names` (files directly in `dir`), the large ones in parallel.
    pub fn compute(dir: &Path, names: &[String]) -> Result<Manifest, ModelError> {
        let mut files: Vec<ManifestEntry> = names
            .par_iter()
            .map(|name| hash_file(&dir.join(name)).map(|(sha256, size)| (name, sha256, size)))
            .map(|r| {
                r.map(|(name, sha256, size)| ManifestEntry {
                    name: name.clone(),
                    sha256,
                    size,
                })
            })
            .collect::<Result<_, _>>()?;
        files.sort_by(|a, b| a.name.cmp(&b.name));
        files.dedup_by(|a, b| a.name == b.name);
        Ok(Manifest {
            sha256: digest_of(&files),
            files,
        })
    }
}

/// The sha256 of the manifest's text.
pub fn digest_of(files: &[ManifestEntry]) -> String {
    let mut h = Sha256::new();
    for f in files {
        h.update(format!("{}  {}\n", f.sha256, f.name).as_bytes());
    }
    hex::encode(h.finalize())
}

fn hash_file(path: &Path) -> Result<(String, u64), ModelError> {
    let io = |source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut f = std::fs::File::open(path).map_err(io)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(io)?;
        if n == 0 {
            break;
        }
        size += n as u64;
        h.update(&buf[..n]);
    }
    Ok((hex::encode(h.finalize()), size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_sha256sum_of_the_sorted_listing() {
        let dir = std::env::temp_dir().join(format!("stoker-manifest-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("b.json"), b"{}").unwrap();
        std::fs::write(dir.join("a.txt"), b"hello\n").unwrap();
        let m = Manifest::compute(&dir, &["b.json".into(), "a.txt".into()]).unwrap();
        assert_eq!(m.files[0].name, "a.txt");
        // `sha256sum a.txt b.json`, then its sha256.
        let listing = "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03  a.txt\n\
                       44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a  b.json\n";
        assert_eq!(m.sha256, hex::encode(Sha256::digest(listing.as_bytes())));
        assert_eq!(m.size(), 8);
        // A changed file changes the digest.
        std::fs::write(dir.join("b.json"), b"{ }").unwrap();
        let m2 = Manifest::compute(&dir, &["b.json".into(), "a.txt".into()]).unwrap();
        assert_ne!(m.sha256, m2.sha256);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
