//! A directory's safetensors files, memory-mapped, as one table of tensors.
//!
//! One file (`model.safetensors`) or shards named by
//! `model.safetensors.index.json`'s `weight_map`. Every header is parsed and
//! validated by the `safetensors` crate (offsets inside the file, sizes that
//! match shapes and types, no overlaps) before any tensor is used, so a cut
//! or hostile file is a typed error naming it. Tensor bytes stay in the map:
//! float weights multiplied as stored are read from it directly, shared with
//! every process serving the same files through the page cache.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};

use crate::error::ModelError;
use crate::kernels::{QDtype, SharedBytes};

pub const SINGLE_FILE: &str = "model.safetensors";
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// Largest index file read (a 400B model's index is about 100 KB).
const MAX_INDEX_BYTES: u64 = 64 << 20;

/// Where one tensor's bytes lie.
#[derive(Clone, Debug)]
pub struct Entry {
    pub shard: usize,
    pub dtype: QDtype,
    pub shape: Vec<usize>,
    pub range: Range<usize>,
}

pub struct Shards {
    /// File names, in `maps` order.
    pub files: Vec<String>,
    maps: Vec<Arc<Mmap>>,
    pub tensors: HashMap<String, Entry>,
}

fn bad(file: &str, why: impl std::fmt::Display) -> ModelError {
    ModelError::BadTensor(file.to_owned(), why.to_string())
}

/// The safetensors files a directory's weights are in: the index's shards,
/// else `model.safetensors`.
pub fn shard_names(dir: &Path) -> Result<Vec<String>, ModelError> {
    let index = dir.join(INDEX_FILE);
    if index.is_file() {
        let len = std::fs::metadata(&index).map_or(0, |m| m.len());
        if len > MAX_INDEX_BYTES {
            return Err(bad(
                INDEX_FILE,
                format!("{len} bytes is too large an index"),
            ));
        }
        let text = std::fs::read(&index).map_err(|source| ModelError::Io {
            path: index.clone(),
            source,
        })?;
        let v: serde_json::Value = serde_json::from_slice(&text).map_err(|e| bad(INDEX_FILE, e))?;
        let Some(map) = v.get("weight_map").and_then(|m| m.as_object()) else {
            return Err(bad(INDEX_FILE, "no `weight_map` object"));
        };
        let mut names = BTreeSet::new();
        for (tensor, file) in map {
            let Some(file) = file.as_str() else {
                return Err(bad(INDEX_FILE, format!("`{tensor}` maps to a non-string")));
            };
            // A shard is a file beside the index, never a path elsewhere.
            let plain = !file.is_empty()
                && !file.contains(['/', '\\'])
                && file != ".."
                && file.ends_with(".safetensors");
            if !plain {
                return Err(bad(
                    INDEX_FILE,
                    format!("shard `{file}` is not a `.safetensors` file name in the directory"),
                ));
            }
            names.insert(file.to_owned());
        }
        if names.is_empty() {
            return Err(bad(INDEX_FILE, "the `weight_map` is empty"));
        }
        return Ok(names.into_iter().collect());
    }
    if dir.join(SINGLE_FILE).is_file() {
        return Ok(vec![SINGLE_FILE.to_owned()]);
    }
    Err(ModelError::MissingTensor(format!(
        "{SINGLE_FILE} or {INDEX_FILE} in {}",
        dir.display()
    )))
}

impl Shards {
    pub fn open(dir: &Path, files: Vec<String>) -> Result<Self, ModelError> {
        let mut maps = Vec::with_capacity(files.len());
        let mut tensors = HashMap::new();
        for (shard, name) in files.iter().enumerate() {
            let path = dir.join(name);
            let io = |source| ModelError::Io {
                path: path.clone(),
                source,
            };
            let file = File::open(&path).map_err(io)?;
            // SAFETY: a read-only map of a model file, as for GGUF files (see
            // `loader`): files are replaced by renaming, never rewritten in place.
            let map = unsafe { Mmap::map(&file) }.map_err(io)?;
            let st = SafeTensors::deserialize(&map).map_err(|e| ModelError::BadSafetensors {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            let base = map.as_ptr() as usize;
            for (tname, view) in st.iter() {
                let dtype = match view.dtype() {
                    Dtype::F32 => QDtype::F32,
                    Dtype::F16 => QDtype::F16,
                    Dtype::BF16 => QDtype::BF16,
                    other => {
                        return Err(ModelError::UnsupportedTensorType(format!(
                            "{other:?} (tensor `{tname}` in {name}; safetensors weights must be F32, F16 or BF16)"
                        )));
                    }
                };
                let start = view.data().as_ptr() as usize - base;
                let entry = Entry {
                    shard,
                    dtype,
                    shape: view.shape().to_vec(),
                    range: start..start + view.data().len(),
                };
                if tensors.insert(tname.to_owned(), entry).is_some() {
                    return Err(ModelError::BadSafetensors {
                        path: path.clone(),
                        reason: format!("tensor `{tname}` is also in an earlier shard"),
                    });
                }
            }
            maps.push(Arc::new(map));
        }
        Ok(Shards {
            files,
            maps,
            tensors,
        })
    }

    pub fn get(&self, name: &str) -> Option<&Entry> {
        self.tensors.get(name)
    }

    /// The mapped file tensor `e` lies in.
    pub fn bytes(&self, e: &Entry) -> Arc<SharedBytes> {
        Arc::clone(&self.maps[e.shard]) as Arc<SharedBytes>
    }

    /// The bytes of tensor `e`.
    pub fn slice(&self, e: &Entry) -> &[u8] {
        &self.maps[e.shard][e.range.clone()]
    }

    /// Total bytes of tensor data.
    pub fn data_bytes(&self) -> u64 {
        self.tensors.values().map(|e| e.range.len() as u64).sum()
    }

    /// Drops the maps' pages from the resident set (see
    /// `GgufArtifact::release_pages`).
    pub fn release_pages(&self) {
        for m in &self.maps {
            // SAFETY: a read-only private file mapping: pages are refilled from the file.
            let _ = unsafe { m.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(files: &[(&str, &[u8])]) -> std::path::PathBuf {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("stoker-st-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        for (n, b) in files {
            std::fs::write(d.join(n), b).unwrap();
        }
        d
    }

    #[test]
    fn an_index_may_only_name_safetensors_files_beside_it() {
        for map in [
            r#"{"weight_map": {"a": "../../etc/passwd.safetensors"}}"#,
            r#"{"weight_map": {"a": "/abs.safetensors"}}"#,
            r#"{"weight_map": {"a": "model.bin"}}"#,
            r#"{"weight_map": {"a": 3}}"#,
            r#"{"weight_map": {}}"#,
            r#"{"nothing": 1}"#,
            "not json",
        ] {
            let d = dir_with(&[(INDEX_FILE, map.as_bytes())]);
            let e = shard_names(&d).unwrap_err().to_string();
            assert!(e.contains(INDEX_FILE), "{map}: {e}");
            std::fs::remove_dir_all(&d).unwrap();
        }
    }

    #[test]
    fn truncated_hostile_and_integer_files_are_typed_errors() {
        // A header claiming more bytes than the file has.
        let mut cut = 1_000_000u64.to_le_bytes().to_vec();
        cut.extend_from_slice(b"{}");
        // A tensor whose data lies past the end.
        let header = br#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
        let mut short = (header.len() as u64).to_le_bytes().to_vec();
        short.extend_from_slice(header);
        short.extend_from_slice(&[0u8; 8]);
        // An integer tensor: refused by name.
        let header = br#"{"w":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}}"#;
        let mut ints = (header.len() as u64).to_le_bytes().to_vec();
        ints.extend_from_slice(header);
        ints.extend_from_slice(&[0u8; 8]);
        for (bytes, needle) in [
            (&b""[..], SINGLE_FILE),
            (&cut[..], SINGLE_FILE),
            (&short[..], SINGLE_FILE),
            (&ints[..], "I32"),
        ] {
            let d = dir_with(&[(SINGLE_FILE, bytes)]);
            let names = shard_names(&d).unwrap();
            let e = Shards::open(&d, names).err().expect("refused").to_string();
            assert!(e.contains(needle), "{e}");
            std::fs::remove_dir_all(&d).unwrap();
        }
    }
}
