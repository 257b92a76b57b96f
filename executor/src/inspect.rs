//! What a GGUF file or a Hugging Face directory is and whether stoker can serve
//! it, without loading its weights.
//!
//! `stoker inspect FILE` is the first thing an operator runs on a downloaded model: it
//! must say what the file holds (architecture, size, tensor types by role, context,
//! tokenizer, chat template) and, when stoker cannot serve it, every reason why, in
//! the words of the checks [`crate::Model::load`] itself runs (hyper-parameters,
//! tokenizer, chat template, tensor types). Only the header and metadata are read,
//! plus one pass over the file for its sha256 (the revision id).

use std::collections::BTreeMap;
use std::path::Path;

use candle_core::quantized::gguf_file::Value;
use serde::Serialize;

use crate::chat_template::ChatTemplate;
use crate::error::ModelError;
use crate::kernels::{QDtype, SUPPORTED_TENSOR_TYPES};
use crate::model::ModelConfig;
use crate::model::hf::{self, HfArtifact, HfConfig, ManifestEntry};
use crate::model::loader::GgufArtifact;
use crate::tokenizer::{KEY_MODEL, KEY_PRE, KEY_TOKENS, ModelTokenizer};

pub use crate::model::file_type::file_type_name;

/// The report on one file.
#[derive(Clone, Debug, Serialize)]
pub struct Inspection {
    pub path: String,
    pub sha256: String,
    pub file_size: u64,
    pub name: Option<String>,
    pub architecture: Option<String>,
    /// llama.cpp's name of `general.file_type` (e.g. `Q4_K_M`), when recorded.
    pub file_type: Option<String>,
    pub parameters: u64,
    pub tensors: usize,
    /// Tensor role (the name without its `blk.N.` prefix) → ggml type → count.
    pub tensor_types: BTreeMap<String, BTreeMap<String, usize>>,
    pub context_length: Option<u64>,
    pub tokenizer_model: Option<String>,
    pub pre_tokenizer: Option<String>,
    pub vocab_size: Option<usize>,
    pub chat_template_sha256: Option<String>,
    /// Whether the file ships its own chat template (else stoker's ChatML fallback).
    pub has_chat_template: bool,
    pub servable: bool,
    /// Every reason stoker cannot serve the file; empty when it can.
    pub problems: Vec<String>,
    /// A directory's files and their sha256, whose listing `sha256` hashes.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<ManifestEntry>,
}

fn string(md: &std::collections::HashMap<String, Value>, key: &str) -> Option<String> {
    md.get(key).and_then(|v| v.to_string().ok()).cloned()
}

fn integer(v: &Value) -> Option<u64> {
    v.to_u64()
        .ok()
        .or_else(|| v.to_u32().ok().map(u64::from))
        .or_else(|| v.to_i32().ok().and_then(|x| u64::try_from(x).ok()))
}

/// The role of a tensor: its name without the `blk.N.` prefix.
fn role(name: &str) -> String {
    match name.strip_prefix("blk.") {
        Some(rest) => rest.split_once('.').map_or(rest, |(_, r)| r).to_string(),
        None => name.to_string(),
    }
}

/// Inspects `path`. A file that cannot be opened or parsed at all is an error; a file
/// that parses but cannot be served is an [`Inspection`] with `servable: false`.
pub fn inspect(path: &Path) -> Result<Inspection, ModelError> {
    if crate::model::hf::is_model_dir(path) {
        return inspect_dir(path);
    }
    let art = GgufArtifact::open(path)?;
    let md = art.metadata();
    let mut problems = Vec::new();

    let mut tensor_types: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    let mut parameters = 0u64;
    let mut unsupported = BTreeMap::new();
    for (name, info) in &art.content.tensor_infos {
        parameters += info.shape.elem_count() as u64;
        let ty = match QDtype::try_from(info.ggml_dtype) {
            Ok(d) => d.name().to_string(),
            Err(_) => {
                let n = format!("{:?}", info.ggml_dtype);
                *unsupported.entry(n.clone()).or_insert(0usize) += 1;
                n
            }
        };
        *tensor_types
            .entry(role(name))
            .or_default()
            .entry(ty)
            .or_default() += 1;
    }
    for (ty, n) in unsupported {
        problems.push(format!(
            "{n} tensors of type {ty}, which stoker does not read (supported: {})",
            SUPPORTED_TENSOR_TYPES.join(", ")
        ));
    }

    let architecture = string(md, "general.architecture");
    if let Err(e) = ModelConfig::from_metadata(md) {
        problems.push(e.to_string());
    }
    let context_length = architecture
        .as_ref()
        .and_then(|a| md.get(&format!("{a}.context_length")))
        .and_then(integer);

    let (mut chat_template_sha256, mut has_chat_template) = (None, false);
    match ModelTokenizer::from_gguf_metadata(md) {
        Ok(tok) => match ChatTemplate::from_gguf_metadata(md, &tok) {
            Ok(t) => {
                has_chat_template = !t.is_fallback();
                chat_template_sha256 = Some(t.sha256_hex());
            }
            Err(e) => problems.push(format!("chat template: {e}")),
        },
        Err(e) => problems.push(format!("tokenizer: {e}")),
    }
    let vocab_size = match md.get(KEY_TOKENS) {
        Some(Value::Array(a)) => Some(a.len()),
        _ => None,
    };

    Ok(Inspection {
        path: path.display().to_string(),
        sha256: art.sha256.clone(),
        file_size: art.file_size,
        name: string(md, "general.name"),
        file_type: md.get("general.file_type").and_then(integer).map(|v| {
            u32::try_from(v)
                .ok()
                .and_then(file_type_name)
                .map_or_else(|| format!("unknown ({v})"), str::to_string)
        }),
        architecture,
        parameters,
        tensors: art.content.tensor_infos.len(),
        tensor_types,
        context_length,
        tokenizer_model: string(md, KEY_MODEL),
        pre_tokenizer: string(md, KEY_PRE),
        vocab_size,
        chat_template_sha256,
        has_chat_template,
        servable: problems.is_empty(),
        problems,
        files: Vec::new(),
    })
}

/// Inspects a Hugging Face directory: what its `config.json` and safetensors
/// headers say, and every reason the loader would refuse it.
fn inspect_dir(dir: &Path) -> Result<Inspection, ModelError> {
    let config = std::fs::read(dir.join(hf::CONFIG_FILE)).map_err(|_| {
        ModelError::NotModelDirectory(format!("{} has no {}", dir.display(), hf::CONFIG_FILE))
    })?;
    let mut problems = Vec::new();
    let parsed = HfConfig::parse(&config)
        .map_err(|e| problems.push(e.to_string()))
        .ok();
    let mut tensor_types: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    let (mut parameters, mut tensors) = (0u64, 0usize);
    match hf::safetensors::shard_names(dir).and_then(|f| hf::safetensors::Shards::open(dir, f)) {
        Ok(shards) => {
            for (name, e) in &shards.tensors {
                parameters += e.shape.iter().product::<usize>() as u64;
                tensors += 1;
                let role = match name.split_once(".layers.") {
                    Some((_, rest)) => rest.split_once('.').map_or(rest, |(_, r)| r).to_string(),
                    None => name.clone(),
                };
                *tensor_types
                    .entry(role)
                    .or_default()
                    .entry(e.dtype.name().to_string())
                    .or_default() += 1;
            }
        }
        Err(e) => problems.push(e.to_string()),
    }
    let art = match HfArtifact::open(dir) {
        Ok(a) => Some(a),
        Err(e) => {
            let msg = e.to_string();
            if !problems.contains(&msg) {
                problems.push(msg);
            }
            None
        }
    };
    // The stored type of the weights (layer 0's attention input), else what
    // config.json says it is.
    let dtype = art
        .as_ref()
        .and_then(HfArtifact::stored_dtype)
        .map(|d| d.name().to_string())
        .or_else(|| parsed.as_ref().and_then(|c| c.dtype.clone()));
    Ok(Inspection {
        path: dir.display().to_string(),
        sha256: art
            .as_ref()
            .map(|a| a.manifest.sha256.clone())
            .unwrap_or_default(),
        file_size: art.as_ref().map_or(0, |a| a.manifest.size()),
        name: art.as_ref().map(HfArtifact::name),
        architecture: parsed
            .as_ref()
            .map(|c| format!("{} ({})", c.config.architecture, c.class)),
        file_type: dtype,
        parameters,
        tensors,
        tensor_types,
        context_length: parsed.as_ref().map(|c| c.config.context_length as u64),
        tokenizer_model: art
            .as_ref()
            .map(|a| format!("tokenizer.json ({:?})", a.tokenizer.family())),
        pre_tokenizer: None,
        vocab_size: art.as_ref().map(|a| a.tokenizer.vocab_size()),
        chat_template_sha256: art.as_ref().map(|a| a.chat_template.sha256_hex()),
        has_chat_template: art.as_ref().is_some_and(|a| !a.chat_template.is_fallback()),
        servable: problems.is_empty(),
        problems,
        files: art.map(|a| a.manifest.files).unwrap_or_default(),
    })
}

impl Inspection {
    /// A human-readable report, one fact per line.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let or = |o: &Option<String>| o.clone().unwrap_or_else(|| "-".into());
        let mut s = String::new();
        let _ = writeln!(s, "file            {}", self.path);
        let _ = writeln!(s, "sha256          {}", self.sha256);
        let _ = writeln!(s, "size            {} bytes", self.file_size);
        let _ = writeln!(s, "name            {}", or(&self.name));
        let _ = writeln!(s, "architecture    {}", or(&self.architecture));
        let _ = writeln!(s, "file type       {}", or(&self.file_type));
        let _ = writeln!(
            s,
            "parameters      {} ({:.1} M) in {} tensors",
            self.parameters,
            self.parameters as f64 / 1e6,
            self.tensors
        );
        let ctx = self.context_length.map_or("-".into(), |c| c.to_string());
        let _ = writeln!(s, "context         {ctx}");
        let _ = writeln!(
            s,
            "tokenizer       {} (pre-tokenizer {}, {} tokens)",
            or(&self.tokenizer_model),
            or(&self.pre_tokenizer),
            self.vocab_size.map_or("-".into(), |v| v.to_string())
        );
        let _ = writeln!(
            s,
            "chat template   {}{}",
            or(&self.chat_template_sha256),
            if self.has_chat_template {
                ""
            } else {
                " (none in the file: ChatML fallback)"
            }
        );
        if !self.files.is_empty() {
            let _ = writeln!(s, "files (sha256 over this listing):");
            for f in &self.files {
                let _ = writeln!(s, "  {}  {} ({} bytes)", f.sha256, f.name, f.size);
            }
        }
        let _ = writeln!(s, "tensor types by role:");
        for (role, types) in &self.tensor_types {
            let list: Vec<String> = types.iter().map(|(t, n)| format!("{t} x{n}")).collect();
            let _ = writeln!(s, "  {role:<28} {}", list.join(", "));
        }
        if self.servable {
            let _ = writeln!(s, "servable        yes");
        } else {
            let _ = writeln!(s, "servable        no");
            for p in &self.problems {
                let _ = writeln!(s, "  - {p}");
            }
        }
        s
    }
}
