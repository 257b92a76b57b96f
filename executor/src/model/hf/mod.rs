//! Hugging Face model directories, served as they are published.
//!
//! A directory holds `config.json`, `tokenizer.json`, usually
//! `tokenizer_config.json` (special tokens, chat template) and
//! `generation_config.json` (sampling defaults, end-of-sequence ids), and
//! the weights as `model.safetensors` or shards named by
//! `model.safetensors.index.json`. [`HfArtifact::open`] reads and checks all
//! of it and hashes the files into the directory's identity
//! ([`manifest`]); its [`TensorSource`] answers llama.cpp's tensor names
//! from the checkpoint's (see [`names`]), so the weights load through the
//! same loader, into the same matrices, as the directory's converted GGUF.

pub mod config;
pub mod manifest;
pub mod names;
pub mod safetensors;

use std::path::{Path, PathBuf};

use crate::chat_template::ChatTemplate;
use crate::error::ModelError;
use crate::kernels::{KernelError, QMatrix};
use crate::model::generation::GenerationDefaults;
use crate::model::source::TensorSource;
use crate::tokenizer::{HfSpecialIds, HfTokenizerConfig, ModelTokenizer};

pub use config::HfConfig;
pub use manifest::{Manifest, ManifestEntry};

pub const CONFIG_FILE: &str = "config.json";
pub const TOKENIZER_FILE: &str = "tokenizer.json";
pub const TOKENIZER_CONFIG_FILE: &str = "tokenizer_config.json";
pub const GENERATION_CONFIG_FILE: &str = "generation_config.json";
/// Where transformers 4.43+ saves the chat template instead of
/// `tokenizer_config.json`.
pub const CHAT_TEMPLATE_FILE: &str = "chat_template.jinja";
/// Largest JSON file read whole (configs; `tokenizer.json` is at most a few
/// tens of MB for the largest vocabularies).
const MAX_JSON_BYTES: u64 = 256 << 20;

/// Whether `path` is a model directory (rather than a GGUF file).
pub fn is_model_dir(path: &Path) -> bool {
    path.is_dir()
}

/// An opened directory: configuration, tokenizer, template, defaults,
/// identity and the mapped tensors.
pub struct HfArtifact {
    pub dir: PathBuf,
    pub hf: HfConfig,
    pub manifest: Manifest,
    pub tokenizer: ModelTokenizer,
    pub chat_template: ChatTemplate,
    pub generation: GenerationDefaults,
    shards: safetensors::Shards,
    names: names::Names,
}

impl std::fmt::Debug for HfArtifact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HfArtifact")
            .field("dir", &self.dir)
            .field("sha256", &self.manifest.sha256)
            .finish_non_exhaustive()
    }
}

fn read_json(dir: &Path, name: &str) -> Result<Option<Vec<u8>>, ModelError> {
    let path = dir.join(name);
    let io = |source| ModelError::Io {
        path: path.clone(),
        source,
    };
    let meta = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    if !meta.is_file() {
        return Err(ModelError::BadMetadata(
            name.to_owned(),
            "is not a regular file".into(),
        ));
    }
    if meta.len() > MAX_JSON_BYTES {
        return Err(ModelError::BadMetadata(
            name.to_owned(),
            format!("{} bytes; at most {MAX_JSON_BYTES} are read", meta.len()),
        ));
    }
    std::fs::read(&path).map(Some).map_err(io)
}

impl HfArtifact {
    pub fn open(dir: &Path) -> Result<Self, ModelError> {
        let Some(config_text) = read_json(dir, CONFIG_FILE)? else {
            return Err(ModelError::NotModelDirectory(format!(
                "{} has no {CONFIG_FILE}: a model is a GGUF file or a Hugging Face \
                 directory (config.json, tokenizer.json, *.safetensors)",
                dir.display()
            )));
        };
        let hf = HfConfig::parse(&config_text)?;
        let shard_files = safetensors::shard_names(dir)?;
        let shards = safetensors::Shards::open(dir, shard_files)?;
        let names = names::Names::new(&hf, |n| shards.get(n).is_some())?;

        let tokenizer_json = read_json(dir, TOKENIZER_FILE)?.ok_or_else(|| {
            ModelError::Tokenizer(format!(
                "{} has no {TOKENIZER_FILE} (a directory's vocabulary is read from it)",
                dir.display()
            ))
        })?;
        let tok_cfg_text = read_json(dir, TOKENIZER_CONFIG_FILE)?;
        let tok_cfg = match &tok_cfg_text {
            Some(b) => {
                HfTokenizerConfig::parse(b).map_err(|e| ModelError::Tokenizer(e.to_string()))?
            }
            None => HfTokenizerConfig::default(),
        };
        let gen_text = read_json(dir, GENERATION_CONFIG_FILE)?;
        let (generation, gen_eos) = match &gen_text {
            Some(b) => GenerationDefaults::parse(b)
                .map_err(|e| ModelError::BadMetadata(GENERATION_CONFIG_FILE.into(), e))?,
            None => (GenerationDefaults::default(), Vec::new()),
        };
        let mut eos = hf.eos_token_ids.clone();
        eos.extend(gen_eos.iter().filter(|id| !hf.eos_token_ids.contains(id)));
        let ids = HfSpecialIds {
            bos: hf.bos_token_id,
            eos,
            pad: hf.pad_token_id,
        };
        let mut tokenizer = ModelTokenizer::from_hf_parts(&tokenizer_json, &tok_cfg, &ids)
            .map_err(|e| ModelError::Tokenizer(e.to_string()))?;
        let rows = vocab_rows(&shards, &names)?;
        if rows < tokenizer.vocab_size() {
            return Err(ModelError::Tokenizer(format!(
                "{TOKENIZER_FILE} has {} tokens but the embedding only {rows} rows",
                tokenizer.vocab_size()
            )));
        }
        tokenizer.pad_to(rows);

        let jinja = dir.join(CHAT_TEMPLATE_FILE);
        let jinja_text = if tok_cfg.chat_template.is_none() && jinja.is_file() {
            Some(
                std::fs::read_to_string(&jinja).map_err(|source| ModelError::Io {
                    path: jinja.clone(),
                    source,
                })?,
            )
        } else {
            None
        };
        let (bos, eos) = tokenizer.bos_eos_text();
        let chat_template = match (&tok_cfg.chat_template, &jinja_text) {
            (Some(src), _) => ChatTemplate::new(src.clone(), bos, eos)
                .map(|t| t.with_origin(format!("the directory's {TOKENIZER_CONFIG_FILE}"))),
            (None, Some(src)) => ChatTemplate::new(src.clone(), bos, eos)
                .map(|t| t.with_origin(format!("the directory's {CHAT_TEMPLATE_FILE}"))),
            (None, None) => ChatTemplate::fallback(bos, eos),
        }
        .map_err(|e| ModelError::Template(e.to_string()))?;

        let mut files: Vec<String> = [CONFIG_FILE, TOKENIZER_FILE]
            .iter()
            .map(|s| s.to_string())
            .collect();
        files.extend(
            tok_cfg_text
                .as_ref()
                .map(|_| TOKENIZER_CONFIG_FILE.to_owned()),
        );
        files.extend(gen_text.as_ref().map(|_| GENERATION_CONFIG_FILE.to_owned()));
        files.extend(jinja_text.as_ref().map(|_| CHAT_TEMPLATE_FILE.to_owned()));
        if dir.join(safetensors::INDEX_FILE).is_file() {
            files.push(safetensors::INDEX_FILE.to_owned());
        }
        files.extend(shards.files.iter().cloned());
        let manifest = Manifest::compute(dir, &files)?;
        Ok(HfArtifact {
            dir: dir.to_path_buf(),
            hf,
            manifest,
            tokenizer,
            chat_template,
            generation,
            shards,
            names,
        })
    }

    /// The directory's name, as a model name.
    pub fn name(&self) -> String {
        self.dir
            .canonicalize()
            .unwrap_or_else(|_| self.dir.clone())
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Rows of the embedding: the vocabulary the model scores.
    pub fn vocab_rows(&self) -> Result<usize, ModelError> {
        vocab_rows(&self.shards, &self.names)
    }

    /// The type most weights are stored in (that of layer 0's q projection).
    pub fn stored_dtype(&self) -> Option<crate::kernels::QDtype> {
        let q = self.names.hf("blk.0.attn_q.weight");
        let qkv = self.names.hf("blk.0.attn_qkv.weight");
        self.shards
            .get(&q)
            .or_else(|| self.shards.get(&qkv))
            .map(|e| e.dtype)
    }

    pub fn shards(&self) -> &safetensors::Shards {
        &self.shards
    }

    pub fn release_pages(&self) {
        self.shards.release_pages();
    }
}

fn vocab_rows(shards: &safetensors::Shards, names: &names::Names) -> Result<usize, ModelError> {
    let name = names.hf("token_embd.weight");
    let e = shards.get(&name).ok_or(ModelError::MissingTensor(name))?;
    Ok(e.shape.first().copied().unwrap_or(0))
}

impl TensorSource for HfArtifact {
    fn has_tensor(&self, name: &str) -> bool {
        match name {
            "rope_freqs.weight" => self.hf.rope_freqs.is_some(),
            "output.weight" if self.hf.tie_word_embeddings => false,
            _ => self.shards.get(&self.names.hf(name)).is_some(),
        }
    }

    fn matrix(&self, name: &str, rows: Option<usize>, cols: usize) -> Result<QMatrix, ModelError> {
        let hf = self.names.hf(name);
        let e = self
            .shards
            .get(&hf)
            .ok_or(ModelError::MissingTensor(hf.clone()))?;
        let ok = e.shape.len() == 2 && e.shape[1] == cols && rows.is_none_or(|r| e.shape[0] == r);
        if !ok {
            return Err(ModelError::BadTensorShape {
                name: hf,
                got: e.shape.clone(),
                expected: vec![rows.unwrap_or(0), cols],
            });
        }
        let bad = |err: KernelError| ModelError::BadTensor(hf.clone(), err.to_string());
        let n_rows = e.shape[0];
        match self.names.rope_heads(name) {
            // Llama's q/k rows in llama.cpp's rope order: a copy.
            Some(heads) => {
                let permuted = names::permute_rows(self.shards.slice(e), n_rows, heads)
                    .map_err(|why| ModelError::BadTensor(hf.clone(), why))?;
                QMatrix::from_ggml_bytes(e.dtype, &permuted, n_rows, cols).map_err(bad)
            }
            None => QMatrix::from_ggml_shared(
                e.dtype,
                &self.shards.bytes(e),
                e.range.clone(),
                n_rows,
                cols,
            )
            .map_err(bad),
        }
    }

    fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
        if name == "rope_freqs.weight"
            && let Some(f) = &self.hf.rope_freqs
        {
            if f.len() != len {
                return Err(ModelError::BadTensorShape {
                    name: "rope_scaling (llama3)".into(),
                    got: vec![f.len()],
                    expected: vec![len],
                });
            }
            return Ok(f.clone());
        }
        let hf = self.names.hf(name);
        let e = self
            .shards
            .get(&hf)
            .ok_or(ModelError::MissingTensor(hf.clone()))?;
        if e.shape.iter().product::<usize>() != len || len == 0 {
            return Err(ModelError::BadTensorShape {
                name: hf,
                got: e.shape.clone(),
                expected: vec![len],
            });
        }
        let mut v =
            QMatrix::from_ggml_shared(e.dtype, &self.shards.bytes(e), e.range.clone(), 1, len)
                .and_then(|m| m.row_f32(0))
                .map_err(|err| ModelError::BadTensor(hf.clone(), err.to_string()))?;
        if self.names.adds_one(name) {
            v.iter_mut().for_each(|x| *x += 1.0);
        }
        Ok(v)
    }
}
