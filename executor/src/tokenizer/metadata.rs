//! Typed reads of GGUF metadata values (strings, arrays, token ids, flags,
//! SentencePiece scores), each refusing a wrong type with a [`TokenizerError`]
//! that names the key; and reading a file's metadata without its tensors.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use candle_core::quantized::gguf_file;

use super::TokenizerError;
use super::keys::KEY_SCORES;

type Metadata = HashMap<String, gguf_file::Value>;

pub(super) fn type_name(v: &gguf_file::Value) -> String {
    format!("{:?}", v.value_type())
}

pub(super) fn get_string<'a>(
    md: &'a Metadata,
    key: &'static str,
) -> Result<Option<&'a str>, TokenizerError> {
    match md.get(key) {
        None => Ok(None),
        Some(gguf_file::Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(TokenizerError::WrongType {
            key,
            expected: "a string",
            found: type_name(v),
        }),
    }
}

pub(super) fn get_array<'a>(
    md: &'a Metadata,
    key: &'static str,
) -> Result<Option<&'a [gguf_file::Value]>, TokenizerError> {
    match md.get(key) {
        None => Ok(None),
        Some(gguf_file::Value::Array(a)) => Ok(Some(a)),
        Some(v) => Err(TokenizerError::WrongType {
            key,
            expected: "an array",
            found: type_name(v),
        }),
    }
}

pub(super) fn get_string_array<'a>(
    md: &'a Metadata,
    key: &'static str,
) -> Result<Option<Vec<&'a str>>, TokenizerError> {
    let Some(items) = get_array(md, key)? else {
        return Ok(None);
    };
    items
        .iter()
        .map(|v| match v {
            gguf_file::Value::String(s) => Ok(s.as_str()),
            other => Err(TokenizerError::WrongType {
                key,
                expected: "an array of strings",
                found: format!("an array holding {}", type_name(other)),
            }),
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

/// Any GGUF integer as `i64`; `None` for non-integers.
pub(super) fn as_integer(v: &gguf_file::Value) -> Option<i64> {
    use gguf_file::Value as V;
    Some(match v {
        V::U8(x) => i64::from(*x),
        V::I8(x) => i64::from(*x),
        V::U16(x) => i64::from(*x),
        V::I16(x) => i64::from(*x),
        V::U32(x) => i64::from(*x),
        V::I32(x) => i64::from(*x),
        V::U64(x) => i64::try_from(*x).unwrap_or(i64::MAX),
        V::I64(x) => *x,
        _ => return None,
    })
}

pub(super) fn get_token_id(
    md: &Metadata,
    key: &'static str,
    vocab_size: usize,
) -> Result<Option<u32>, TokenizerError> {
    let Some(v) = md.get(key) else {
        return Ok(None);
    };
    let n = as_integer(v).ok_or_else(|| TokenizerError::WrongType {
        key,
        expected: "an integer token id",
        found: type_name(v),
    })?;
    match u32::try_from(n) {
        Ok(id) if (id as usize) < vocab_size => Ok(Some(id)),
        _ => Err(TokenizerError::IdOutOfRange {
            id: u32::try_from(n).unwrap_or(u32::MAX),
            vocab_size,
        }),
    }
}

pub(super) fn get_bool(md: &Metadata, key: &'static str) -> Result<Option<bool>, TokenizerError> {
    match md.get(key) {
        None => Ok(None),
        Some(gguf_file::Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(TokenizerError::WrongType {
            key,
            expected: "a boolean",
            found: type_name(v),
        }),
    }
}

/// The per-token SentencePiece scores, as `f64` (GGUF stores `f32`, or `i32`).
pub(super) fn get_scores(md: &Metadata, vocab_size: usize) -> Result<Vec<f64>, TokenizerError> {
    let items = get_array(md, KEY_SCORES)?.ok_or(TokenizerError::MissingKey(KEY_SCORES))?;
    if items.len() != vocab_size {
        return Err(TokenizerError::LengthMismatch {
            key: KEY_SCORES,
            expected: vocab_size,
            found: items.len(),
        });
    }
    items
        .iter()
        .enumerate()
        .map(|(id, v)| {
            let value = match v {
                gguf_file::Value::F32(x) => f64::from(*x),
                gguf_file::Value::F64(x) => *x,
                other => as_integer(other).map(|x| x as f64).ok_or_else(|| {
                    TokenizerError::WrongType {
                        key: KEY_SCORES,
                        expected: "an array of numbers",
                        found: format!("an array holding {}", type_name(other)),
                    }
                })?,
            };
            if value.is_finite() {
                Ok(value)
            } else {
                Err(TokenizerError::BadScore { id, value })
            }
        })
        .collect()
}

/// Reads only the metadata of a GGUF file.
pub fn read_gguf_metadata(
    path: &Path,
) -> Result<HashMap<String, gguf_file::Value>, TokenizerError> {
    let file =
        File::open(path).map_err(|e| TokenizerError::Io(format!("{}: {e}", path.display())))?;
    let content = gguf_file::Content::read(&mut BufReader::new(file))
        .map_err(|e| TokenizerError::Io(format!("{}: {e}", path.display())))?;
    Ok(content.metadata)
}
