//! Opening a GGUF artifact: identity (sha256), header checks and typed errors.
//!
//! The revision id of a model is the sha256 of its file, computed while the
//! file is read. A file that is missing, is not GGUF, is cut short or holds an
//! architecture we do not implement is refused here with a [`ModelError`]
//! before any tensor is materialised.
//!
//! Tensor data is read through a read-only memory map of the file. Weights in
//! a format the kernels multiply as stored keep pointing into the map (shared
//! with every process serving the file, faulted in as read); the tiled formats
//! are rebuilt from it. [`GgufArtifact::release_pages`] then drops the pages
//! the rebuild touched from this process's resident set.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::quantized::GgmlDType;
use candle_core::quantized::gguf_file::{Content, Value};
use memmap2::Mmap;
use sha2::{Digest, Sha256};

use crate::error::ModelError;
use crate::kernels::SharedBytes;

const GGUF_MAGIC: &[u8; 4] = b"GGUF";

/// The parsed header of a GGUF file plus its identity.
pub struct GgufArtifact {
    pub path: PathBuf,
    pub sha256: String,
    pub file_size: u64,
    pub content: Content,
    map: Arc<Mmap>,
}

/// Where one tensor's data lies in the file.
#[derive(Clone, Debug)]
pub struct TensorView {
    pub dtype: GgmlDType,
    /// Dimensions in candle's order (a matrix is `[rows, cols]`).
    pub dims: Vec<usize>,
    /// Byte range in the file (and in [`GgufArtifact::bytes`]).
    pub range: Range<usize>,
}

impl std::fmt::Debug for GgufArtifact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufArtifact")
            .field("path", &self.path)
            .field("sha256", &self.sha256)
            .field("file_size", &self.file_size)
            .finish()
    }
}

impl GgufArtifact {
    pub fn open(path: &Path) -> Result<Self, ModelError> {
        let io = |source| ModelError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ModelError::NotFound(path.to_path_buf()));
            }
            Err(e) => return Err(io(e)),
        };
        let file_size = file.metadata().map_err(io)?.len();
        if file.metadata().map_err(io)?.is_dir() {
            return Err(ModelError::NotGguf(format!(
                "{} is a directory",
                path.display()
            )));
        }
        let mut reader = BufReader::with_capacity(1 << 20, file);
        let mut magic = [0u8; 4];
        if file_size < 4 {
            return Err(ModelError::NotGguf(format!(
                "{} is {file_size} bytes long",
                path.display()
            )));
        }
        reader.read_exact(&mut magic).map_err(io)?;
        if &magic != GGUF_MAGIC {
            return Err(ModelError::NotGguf(format!(
                "{} starts with {:02x?}, not the GGUF magic",
                path.display(),
                magic
            )));
        }
        reader.rewind().map_err(io)?;
        let content = read_header(&mut reader)?;
        check_extents(&content, file_size)?;
        let sha256 = sha256_of(&mut reader).map_err(io)?;
        // SAFETY: the map is read-only. Another process truncating or rewriting the
        // file while it is served would change what the weights read (or fault), as
        // for every server that maps its model (llama.cpp, safetensors); model files
        // are written once and replaced by renaming, which leaves this map intact.
        let map = unsafe { Mmap::map(reader.get_ref()) }.map_err(io)?;
        Ok(GgufArtifact {
            path: path.to_path_buf(),
            sha256,
            file_size,
            content,
            map: Arc::new(map),
        })
    }

    pub fn metadata(&self) -> &HashMap<String, Value> {
        &self.content.metadata
    }

    pub fn has_tensor(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    /// Where tensor `name` lies (extents were checked when the file was opened).
    pub fn tensor_view(&self, name: &str) -> Result<TensorView, ModelError> {
        let info = self
            .content
            .tensor_infos
            .get(name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        let elems = info.shape.elem_count();
        let len = elems / info.ggml_dtype.block_size() * info.ggml_dtype.type_size();
        let start = self.content.tensor_data_offset as usize + info.offset as usize;
        Ok(TensorView {
            dtype: info.ggml_dtype,
            dims: info.shape.dims().to_vec(),
            range: start..start + len,
        })
    }

    /// The whole file, mapped; matrices built from it may keep it alive.
    pub fn bytes(&self) -> Arc<SharedBytes> {
        Arc::clone(&self.map) as Arc<SharedBytes>
    }

    /// Drops every page of the map from this process's resident set. Called once the
    /// weights are built: the tiled formats own their copies, and pages that
    /// matrices still read are faulted back in from the page cache when used.
    pub fn release_pages(&self) {
        // SAFETY: the map is a read-only private file mapping, so MADV_DONTNEED
        // discards nothing: a later read refills the page from the file.
        let released = unsafe {
            self.map
                .unchecked_advise(memmap2::UncheckedAdvice::DontNeed)
        };
        if let Err(e) = released {
            tracing::debug!(error = %e, "madvise(DONTNEED) on the model map failed");
        }
    }
}

/// ggml's names of the tensor types stoker does not read, by type id: the IQ
/// (importance-matrix codebook) and ternary families and the integer and f64 types.
const UNSUPPORTED_TYPES: &[(u32, &str)] = &[
    (16, "IQ2_XXS"),
    (17, "IQ2_XS"),
    (18, "IQ3_XXS"),
    (19, "IQ1_S"),
    (20, "IQ4_NL"),
    (21, "IQ3_S"),
    (22, "IQ2_S"),
    (23, "IQ4_XS"),
    (24, "I8"),
    (25, "I16"),
    (26, "I32"),
    (27, "I64"),
    (28, "F64"),
    (29, "IQ1_M"),
    (34, "TQ1_0"),
    (35, "TQ2_0"),
    (39, "MXFP4"),
];

/// Reads the header with candle's reader, which bounds every count and
/// length by the file's size but divides by the file's own
/// `general.alignment`: a hostile 0 there would panic inside it. That and
/// any other panic of the reader become a typed error.
fn read_header(reader: &mut BufReader<File>) -> Result<Content, ModelError> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Content::read(reader))) {
        Ok(r) => r.map_err(|e| classify_header_error(&e)),
        Err(panic) => {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            Err(ModelError::NotGguf(format!(
                "bad GGUF header: the reader failed ({why}); \
                 is `general.alignment` zero?"
            )))
        }
    }
}

fn classify_header_error(e: &candle_core::Error) -> ModelError {
    let msg = e.to_string();
    if let Some(id) = msg
        .split("unknown dtype for tensor ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse::<u32>().ok())
    {
        let name = UNSUPPORTED_TYPES
            .iter()
            .find(|(i, _)| *i == id)
            .map_or_else(
                || format!("ggml type {id}"),
                |(_, n)| format!("{n} (ggml type {id})"),
            );
        return ModelError::UnsupportedTensorType(name);
    }
    let truncated = msg.contains("remaining")
        || msg.contains("failed to fill whole buffer")
        || msg.contains("UnexpectedEof");
    if truncated {
        ModelError::Truncated(msg)
    } else {
        ModelError::NotGguf(format!("bad GGUF header: {msg}"))
    }
}

/// Every tensor's bytes must lie inside the file; a download cut short is
/// reported as truncated instead of failing later inside a tensor read.
fn check_extents(content: &Content, file_size: u64) -> Result<(), ModelError> {
    for (name, info) in &content.tensor_infos {
        // The product of hostile dimensions would wrap: check it.
        let Some(elems) = info
            .shape
            .dims()
            .iter()
            .try_fold(1u64, |n, &d| n.checked_mul(d as u64))
        else {
            return Err(ModelError::BadTensor(
                name.clone(),
                format!("dimensions {:?} overflow", info.shape.dims()),
            ));
        };
        let block = info.ggml_dtype.block_size() as u64;
        if block == 0 || !elems.is_multiple_of(block) {
            return Err(ModelError::BadTensor(
                name.clone(),
                "element count is not a multiple of the block size".into(),
            ));
        }
        let Some(bytes) = (elems / block).checked_mul(info.ggml_dtype.type_size() as u64) else {
            return Err(ModelError::BadTensor(name.clone(), "size overflows".into()));
        };
        let end = content
            .tensor_data_offset
            .checked_add(info.offset)
            .and_then(|s| s.checked_add(bytes));
        match end {
            Some(end) if end <= file_size => {}
            _ => {
                return Err(ModelError::Truncated(format!(
                    "tensor `{name}` ends past the end of the file ({file_size} bytes)"
                )));
            }
        }
    }
    Ok(())
}

fn sha256_of(reader: &mut BufReader<File>) -> std::io::Result<String> {
    reader.rewind()?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    reader.rewind()?;
    Ok(hex::encode(hasher.finalize()))
}
