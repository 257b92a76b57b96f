//! A loaded model: configuration, weights, rope tables and identity.
//!
//! [`Model::load`] turns a GGUF file or a Hugging Face directory into
//! everything the engine needs, including the tokenizer and chat template
//! (from the file's metadata, or the directory's tokenizer files), with
//! typed [`ModelError`]s for every way an artifact can be wrong;
//! [`ModelMeta::read`] stops before the weights.

pub mod attention;
pub mod config;
pub mod file_type;
pub mod forward;
pub mod generation;
pub mod hf;
pub mod kv_storage;
pub mod loader;
pub mod meta;
pub mod rope;
pub mod row_order;
pub mod source;
pub mod weights;

use std::path::Path;

use crate::chat_template::ChatTemplate;
use crate::error::ModelError;
use crate::tokenizer::ModelTokenizer;

pub use config::{Arch, ModelConfig, SUPPORTED_ARCHITECTURES};
pub use forward::{ForwardChunk, ForwardOutput, ScoreRows, Workspace};
pub use generation::GenerationDefaults;
pub use kv_storage::KvStorage;
pub use meta::{ModelIdentity, ModelMeta};
pub use weights::WeightMode;

/// Where the model runs. CUDA is a cargo feature we have not built yet; the
/// device stays a parameter so callers already pass it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Device {
    #[default]
    Cpu,
    Cuda(usize),
}

#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions {
    pub weights: WeightMode,
    pub device: Device,
}

/// Hands the heap pages freed during loading (the tokenizer's build, the GGUF
/// header's arrays, fused parts) back to the system. glibc keeps freed memory
/// below the top of its heap mapped; after a load that is about 5 MB of a
/// SmolLM2 process's resident set (measured with the engine bench).
fn release_freed_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        unsafe extern "C" {
            fn malloc_trim(pad: usize) -> std::ffi::c_int;
        }
        // SAFETY: glibc's malloc_trim takes no pointers and may be called at any time.
        unsafe { malloc_trim(0) };
    }
}

pub struct Model {
    pub config: ModelConfig,
    pub weights: weights::ModelWeights,
    /// Rope of full-attention layers.
    pub rope: rope::Rope,
    /// Rope of sliding-window layers when it differs (Gemma 3).
    pub rope_local: Option<rope::Rope>,
    pub identity: ModelIdentity,
    pub tokenizer: ModelTokenizer,
    pub chat_template: ChatTemplate,
    /// Sampling defaults for fields a request leaves out.
    pub generation: GenerationDefaults,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("config", &self.config)
            .field("identity", &self.identity)
            .finish()
    }
}

impl Model {
    /// Loads a GGUF file, or the Hugging Face directory `path` names.
    pub fn load(path: &Path, opts: LoadOptions) -> Result<Self, ModelError> {
        if let Device::Cuda(i) = opts.device {
            return Err(ModelError::DeviceUnavailable(format!("cuda:{i}")));
        }
        if hf::is_model_dir(path) {
            return Self::load_dir(path, opts);
        }
        let art = loader::GgufArtifact::open(path)?;
        let mut h = meta::Header::read(&art, path)?;
        let weights = weights::ModelWeights::load(&art, &h.config, opts.weights)?;
        art.release_pages();
        h.config.vocab_size = weights.embed.rows();
        meta::check_vocab_rows(h.config.vocab_size, &h.tokenizer)?;
        let precision = h.precision(opts.weights, || weights.layers[0].qkv.dtype());
        let identity = h.identity(&art, precision);
        let meta::Header {
            config,
            tokenizer,
            chat_template,
            ..
        } = h;
        drop(art);
        Ok(Self::assemble(
            config,
            weights,
            identity,
            tokenizer,
            chat_template,
            GenerationDefaults::default(),
        ))
    }

    fn load_dir(path: &Path, opts: LoadOptions) -> Result<Self, ModelError> {
        let art = hf::HfArtifact::open(path)?;
        let mut config = art.hf.config.clone();
        let weights = weights::ModelWeights::load(&art, &config, opts.weights)?;
        art.release_pages();
        config.vocab_size = weights.embed.rows();
        meta::check_vocab_rows(config.vocab_size, &art.tokenizer)?;
        let precision = meta::dir_precision(opts.weights, || weights.layers[0].qkv.dtype());
        let identity = meta::dir_identity(&art, precision);
        let hf::HfArtifact {
            tokenizer,
            chat_template,
            generation,
            ..
        } = art;
        Ok(Self::assemble(
            config,
            weights,
            identity,
            tokenizer,
            chat_template,
            generation,
        ))
    }

    fn assemble(
        config: ModelConfig,
        weights: weights::ModelWeights,
        identity: ModelIdentity,
        tokenizer: ModelTokenizer,
        chat_template: ChatTemplate,
        generation: GenerationDefaults,
    ) -> Self {
        let rope = rope::Rope::with(
            config.rope_dim,
            config.rope_base,
            config.context_length,
            config.rope_style,
            config.rope_freq_scale,
            weights.rope_freqs.as_deref(),
        );
        let rope_local = config.rope_local.map(|p| {
            rope::Rope::with(
                config.rope_dim,
                p.base,
                config.context_length,
                config.rope_style,
                p.freq_scale,
                None,
            )
        });
        release_freed_heap();
        Model {
            config,
            weights,
            rope,
            rope_local,
            identity,
            tokenizer,
            chat_template,
            generation,
        }
    }

    /// Serves `source` instead of the file's chat template (an operator's
    /// `--chat-template`, as vLLM's): the identity's template hash then names
    /// it, so the revision records what renders the prompts.
    pub fn override_chat_template(&mut self, source: &str, origin: &str) -> Result<(), ModelError> {
        self.chat_template = meta::replace_template(&self.chat_template, source, origin)?;
        self.identity.chat_template_sha256 = self.chat_template.sha256_hex();
        Ok(())
    }
}
