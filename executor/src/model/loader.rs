//! Opening a GGUF artifact: identity (sha256), header checks and typed errors.
//!
//! The revision id of a model is the sha256 of its file, computed while the
//! file is read. A file that is missing, is not GGUF, is cut short or holds an
//! architecture we do not implement is refused here with a [`ModelError`]
//! before any tensor is materialised.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::{Path, PathBuf};

use candle_core::quantized::gguf_file::{Content, Value};
use sha2::{Digest, Sha256};

use crate::error::ModelError;

const GGUF_MAGIC: &[u8; 4] = b"GGUF";

/// The parsed header of a GGUF file plus its identity.
pub struct GgufArtifact {
    pub path: PathBuf,
    pub sha256: String,
    pub file_size: u64,
    pub content: Content,
    reader: BufReader<File>,
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
        let content = Content::read(&mut reader).map_err(|e| classify_header_error(&e))?;
        check_extents(&content, file_size)?;
        let sha256 = sha256_of(&mut reader).map_err(io)?;
        Ok(GgufArtifact {
            path: path.to_path_buf(),
            sha256,
            file_size,
            content,
            reader,
        })
    }

    pub fn metadata(&self) -> &HashMap<String, Value> {
        &self.content.metadata
    }

    pub fn has_tensor(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    pub fn tensor(&mut self, name: &str) -> Result<candle_core::quantized::QTensor, ModelError> {
        if !self.has_tensor(name) {
            return Err(ModelError::MissingTensor(name.to_string()));
        }
        self.content
            .tensor(&mut self.reader, name, &candle_core::Device::Cpu)
            .map_err(|e| ModelError::BadTensor(name.to_string(), e.to_string()))
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
        let elems = info.shape.elem_count() as u64;
        let block = info.ggml_dtype.block_size() as u64;
        if block == 0 || !elems.is_multiple_of(block) {
            return Err(ModelError::BadTensor(
                name.clone(),
                "element count is not a multiple of the block size".into(),
            ));
        }
        let bytes = elems / block * info.ggml_dtype.type_size() as u64;
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
