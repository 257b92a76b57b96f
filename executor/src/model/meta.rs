//! What a GGUF file's header says of its model, without the weights: the
//! configuration, tokenizer, chat template and identity. [`Model::load`]
//! builds on it; [`ModelMeta::read`] stops there, for a process that
//! tokenizes and routes but never runs the model (`stoker api`), so such a
//! host needs neither the weights' memory nor their load time.
//!
//! [`Model::load`]: super::Model::load

use std::path::Path;

use super::config::ModelConfig;
use super::file_type::file_type_name;
use super::generation::GenerationDefaults;
use super::hf::HfArtifact;
use super::loader::GgufArtifact;
use super::weights::WeightMode;
use crate::chat_template::ChatTemplate;
use crate::error::ModelError;
use crate::kernels::QDtype;
use crate::tokenizer::ModelTokenizer;

/// The identity of a loaded artifact: what a revision record stores.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelIdentity {
    pub sha256: String,
    pub file_size: u64,
    pub tokenizer_sha256: String,
    pub chat_template_sha256: String,
    pub name: String,
    pub precision: String,
}

/// The header's part of a model, shared by [`Model::load`] and
/// [`ModelMeta::read`].
///
/// [`Model::load`]: super::Model::load
pub(crate) struct Header {
    pub config: ModelConfig,
    pub tokenizer: ModelTokenizer,
    pub chat_template: ChatTemplate,
    name: String,
    /// llama.cpp's name of the file's type (`Q4_K_M`), when the file says.
    file_type: Option<&'static str>,
}

impl Header {
    pub(crate) fn read(art: &GgufArtifact, path: &Path) -> Result<Self, ModelError> {
        let md = art.metadata();
        let config = ModelConfig::from_metadata(md)?;
        let tokenizer = ModelTokenizer::from_gguf_metadata(md)
            .map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        let chat_template = ChatTemplate::from_gguf_metadata(md, &tokenizer)
            .map_err(|e| ModelError::Template(e.to_string()))?;
        let name = md
            .get("general.name")
            .and_then(|v| v.to_string().ok())
            .cloned()
            .unwrap_or_else(|| {
                path.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            });
        let file_type = md
            .get("general.file_type")
            .and_then(|v| v.to_u32().ok())
            .and_then(file_type_name);
        Ok(Header {
            config,
            tokenizer,
            chat_template,
            name,
            file_type,
        })
    }

    /// The precision a revision records: `f32` for dequantized weights, else
    /// the file's type, else `qkv` (the first layer's attention input).
    pub(crate) fn precision(&self, mode: WeightMode, qkv: impl FnOnce() -> QDtype) -> String {
        match (mode, self.file_type) {
            (WeightMode::DequantizedF32, _) => "f32".to_string(),
            (WeightMode::Native, Some(name)) => name.to_lowercase(),
            (WeightMode::Native | WeightMode::Quantize(_), _) => qkv().name().to_lowercase(),
        }
    }

    pub(crate) fn identity(&self, art: &GgufArtifact, precision: String) -> ModelIdentity {
        ModelIdentity {
            sha256: art.sha256.clone(),
            file_size: art.file_size,
            tokenizer_sha256: self.tokenizer.sha256_hex(),
            chat_template_sha256: self.chat_template.sha256_hex(),
            name: self.name.clone(),
            precision,
        }
    }
}

/// The precision a directory's revision records: the loaded type of layer
/// 0's attention input (`bf16` as published, `q8_0` under `--quantize`).
pub(crate) fn dir_precision(mode: WeightMode, qkv: impl FnOnce() -> QDtype) -> String {
    match mode {
        WeightMode::DequantizedF32 => "f32".to_string(),
        WeightMode::Native | WeightMode::Quantize(_) => qkv().name().to_lowercase(),
    }
}

/// A directory's identity: the manifest's digest and total size.
pub(crate) fn dir_identity(art: &HfArtifact, precision: String) -> ModelIdentity {
    ModelIdentity {
        sha256: art.manifest.sha256.clone(),
        file_size: art.manifest.size(),
        tokenizer_sha256: art.tokenizer.sha256_hex(),
        chat_template_sha256: art.chat_template.sha256_hex(),
        name: art.name(),
        precision,
    }
}

/// A model as its header describes it: all a process that does not run it
/// needs. Its identity is the one [`Model::load`] gives the same file with
/// native weights (same sha256, tokenizer and template hashes), so executors
/// and API instances agree on revisions.
///
/// [`Model::load`]: super::Model::load
#[derive(Debug)]
pub struct ModelMeta {
    pub config: ModelConfig,
    pub identity: ModelIdentity,
    pub tokenizer: ModelTokenizer,
    pub chat_template: ChatTemplate,
    pub generation: GenerationDefaults,
}

impl ModelMeta {
    /// Reads the header and hashes the file (or a directory's configuration
    /// and manifest); no tensor data is loaded.
    pub fn read(path: &Path) -> Result<Self, ModelError> {
        Self::read_as(path, WeightMode::Native)
    }

    /// As [`Self::read`], naming the precision the executors load with
    /// (`--quantize`), so API and executors record the same identity.
    pub fn read_as(path: &Path, mode: WeightMode) -> Result<Self, ModelError> {
        if super::hf::is_model_dir(path) {
            let art = HfArtifact::open(path)?;
            let mut config = art.hf.config.clone();
            config.vocab_size = art.vocab_rows()?;
            check_vocab_rows(config.vocab_size, &art.tokenizer)?;
            let stored = art.stored_dtype().unwrap_or(QDtype::F32);
            let precision = dir_precision(mode, || match mode {
                WeightMode::Quantize(t) => t,
                _ => stored,
            });
            let identity = dir_identity(&art, precision);
            let HfArtifact {
                tokenizer,
                chat_template,
                generation,
                ..
            } = art;
            return Ok(ModelMeta {
                config,
                identity,
                tokenizer,
                chat_template,
                generation,
            });
        }
        let art = GgufArtifact::open(path)?;
        let mut h = Header::read(&art, path)?;
        // The vocabulary the model scores, as `Model::load` takes it from the
        // embedding's rows.
        h.config.vocab_size = art.tensor_view("token_embd.weight")?.dims[0];
        check_vocab_rows(h.config.vocab_size, &h.tokenizer)?;
        let precision = h.precision(mode, || {
            let stored = first_qkv_dtype(&art);
            match mode {
                WeightMode::Quantize(t)
                    if matches!(stored, QDtype::F32 | QDtype::F16 | QDtype::BF16) =>
                {
                    t
                }
                _ => stored,
            }
        });
        let identity = h.identity(&art, precision);
        Ok(ModelMeta {
            config: h.config,
            identity,
            tokenizer: h.tokenizer,
            chat_template: h.chat_template,
            generation: GenerationDefaults::default(),
        })
    }
}

/// The type of layer 0's fused or query projection as stored.
fn first_qkv_dtype(art: &GgufArtifact) -> QDtype {
    ["blk.0.attn_qkv.weight", "blk.0.attn_q.weight"]
        .iter()
        .find_map(|n| art.tensor_view(n).ok())
        .and_then(|v| QDtype::try_from(v.dtype).ok())
        .unwrap_or(QDtype::F32)
}

/// `source` compiled with `current`'s BOS and EOS strings, described as
/// coming from `origin`.
pub(crate) fn replace_template(
    current: &ChatTemplate,
    source: &str,
    origin: &str,
) -> Result<ChatTemplate, ModelError> {
    ChatTemplate::new(source, current.bos_token(), current.eos_token())
        .map(|t| t.with_origin(origin))
        .map_err(|e| ModelError::Template(format!("{origin}: {e}")))
}

impl ModelMeta {
    /// As [`super::Model::override_chat_template`], for a process that only
    /// reads the header: both name the same template hash.
    pub fn override_chat_template(&mut self, source: &str, origin: &str) -> Result<(), ModelError> {
        self.chat_template = replace_template(&self.chat_template, source, origin)?;
        self.identity.chat_template_sha256 = self.chat_template.sha256_hex();
        Ok(())
    }
}

/// The embedding must have a row for every token the tokenizer can produce
/// (more is fine: checkpoints pad their vocabulary), or a prompt's ids would
/// index past it. llama.cpp refuses such a file by the tensor's shape; so do
/// we, at load and when only the header is read alike.
pub(crate) fn check_vocab_rows(rows: usize, tokenizer: &ModelTokenizer) -> Result<(), ModelError> {
    let tokens = tokenizer.vocab_size();
    if rows < tokens.max(1) {
        return Err(ModelError::BadTensor(
            "token_embd.weight".into(),
            format!("{rows} rows, fewer than the tokenizer's {tokens} tokens"),
        ));
    }
    Ok(())
}
