//! Hugging Face model directories (`config.json`, safetensors weights,
//! `tokenizer.json`, `tokenizer_config.json`, `generation_config.json`):
//! the tiny random-weight checkpoints of tests/fixtures/hf, written by
//! `scripts/make_hf_fixtures.py` as the checkpoints that llama.cpp's converter
//! turns into the GGUF fixtures of tests/fixtures/arch.
//!
//! Each directory is loaded with `Model::load` and run as `architectures.rs`
//! runs the GGUF files (a 20-token prompt in one step, then four one-token
//! decode steps); the logits of every step must agree within 1e-3 with
//! candle-transformers' non-quantized model of the architecture, built from
//! the same directory (its `config.json`, its safetensors files read as F32).
//! The candle quirks `architectures.rs` describes apply here too: `gemma3` is
//! fed one token at a time, and the gemma2 fixture's window is longer than the
//! test's sequences.
//!
//! Three directories cover other layouts: `qwen2` is split into two shards
//! with an index, `qwen3` is stored in bfloat16, and `mistral` holds the llama
//! fixture's weights under `MistralForCausalLM`.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use candle_transformers::models as ct;
use stoker_executor::{LoadOptions, Model};

use crate::architectures::{Forward, fixture, max_abs_diff, oracle, ours, tensor_from, theirs};

/// Each directory and the GGUF fixture it was converted from.
const CASES: [(&str, &str); 8] = [
    ("llama", "llama.gguf"),
    ("llama3", "llama3.gguf"),
    ("mistral", "llama.gguf"),
    ("qwen2", "qwen2.gguf"),
    ("qwen3", "qwen3.gguf"),
    ("phi3", "phi3.gguf"),
    ("gemma2", "gemma2.gguf"),
    ("gemma3", "gemma3.gguf"),
];

const TOLERANCE: f32 = 1e-3;

fn hf_dir(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hf")
        .join(name)
}

fn load(path: &Path) -> Model {
    Model::load(path, LoadOptions::default())
        .unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
}

/// The directory's safetensors files: the shards its index names, else
/// `model.safetensors`.
fn safetensors_files(dir: &Path) -> Vec<PathBuf> {
    let index = dir.join("model.safetensors.index.json");
    if !index.exists() {
        return vec![dir.join("model.safetensors")];
    }
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(index).unwrap()).unwrap();
    let mut files: Vec<PathBuf> = v["weight_map"]
        .as_object()
        .unwrap()
        .values()
        .map(|f| dir.join(f.as_str().unwrap()))
        .collect();
    files.sort();
    files.dedup();
    files
}

fn config<T: serde::de::DeserializeOwned>(dir: &Path) -> T {
    serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap()
}

/// candle-transformers' non-quantized model of a directory, and whether it
/// must be fed one token at a time.
fn candle_model(name: &str) -> (Forward, bool) {
    let dir = hf_dir(name);
    let dev = Device::Cpu;
    // SAFETY: the fixtures are not modified while the test maps them.
    let vb =
        unsafe { VarBuilder::from_mmaped_safetensors(&safetensors_files(&dir), DType::F32, &dev) }
            .unwrap();
    match name {
        "llama" | "llama3" => {
            let cfg = config::<ct::llama::LlamaConfig>(&dir).into_config(false);
            let model = ct::llama::Llama::load(vb, &cfg).unwrap();
            let mut cache = ct::llama::Cache::new(true, DType::F32, &cfg, &dev).unwrap();
            (
                Box::new(move |t, p| model.forward(&tensor_from(t), p, &mut cache)),
                false,
            )
        }
        "mistral" => {
            let mut m = ct::mistral::Model::new(&config(&dir), vb).unwrap();
            (Box::new(move |t, p| m.forward(&tensor_from(t), p)), false)
        }
        "qwen2" => {
            let mut m = ct::qwen2::ModelForCausalLM::new(&config(&dir), vb).unwrap();
            (Box::new(move |t, p| m.forward(&tensor_from(t), p)), false)
        }
        "qwen3" => {
            let mut m = ct::qwen3::ModelForCausalLM::new(&config(&dir), vb).unwrap();
            (Box::new(move |t, p| m.forward(&tensor_from(t), p)), false)
        }
        "phi3" => {
            let mut m = ct::phi3::Model::new(&config(&dir), vb).unwrap();
            (Box::new(move |t, p| m.forward(&tensor_from(t), p)), false)
        }
        "gemma2" => {
            let mut m = ct::gemma2::Model::new(false, &config(&dir), vb).unwrap();
            (Box::new(move |t, p| m.forward(&tensor_from(t), p)), false)
        }
        "gemma3" => {
            // Its prompt mask keeps one position too many; decode slides right.
            let mut m = ct::gemma3::Model::new(false, &config(&dir), vb).unwrap();
            (Box::new(move |t, p| m.forward(&tensor_from(t), p)), true)
        }
        other => panic!("no candle model for {other}"),
    }
}

fn candle_logits(name: &str) -> Vec<Vec<f32>> {
    let (forward, one_at_a_time) = candle_model(name);
    theirs(forward, one_at_a_time)
}

fn argmax(v: &[f32]) -> usize {
    v.iter()
        .enumerate()
        .fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &x)| {
            if x > bv { (i, x) } else { (bi, bv) }
        })
        .0
}

/// The largest difference of two runs' logits over all steps; panics naming
/// the step and the token where they differ by more than `tolerance`.
fn compare(what: &str, mine: &[Vec<f32>], reference: &[Vec<f32>], tolerance: f32) -> f32 {
    assert_eq!(mine.len(), reference.len(), "{what}: number of steps");
    let mut worst = 0f32;
    let mut failures = Vec::new();
    for (step, (a, b)) in mine.iter().zip(reference).enumerate() {
        assert_eq!(a.len(), b.len(), "{what} step {step}: vocabulary sizes");
        let d = max_abs_diff(a, b);
        let at = a
            .iter()
            .zip(b)
            .position(|(x, y)| (x - y).abs() == d)
            .unwrap_or(0);
        eprintln!(
            "{what} step {step}: max |Δlogit| = {d:e} at token {at} ({} vs {})",
            a[at], b[at]
        );
        if d > tolerance || d.is_nan() {
            failures.push(format!(
                "step {step}: max |Δlogit| {d} at token {at} ({} vs {})",
                a[at], b[at]
            ));
        }
        worst = worst.max(d);
    }
    assert!(
        failures.is_empty(),
        "{what}: logits differ by more than {tolerance}: {}",
        failures.join("; ")
    );
    worst
}

fn check(name: &str) -> f32 {
    let model = load(&hf_dir(name));
    let mine = ours(&model);
    let reference = candle_logits(name);
    compare(
        &format!("{name} (directory vs candle)"),
        &mine,
        &reference,
        TOLERANCE,
    )
}

#[test]
fn llama_directory_matches_candle() {
    check("llama");
}

#[test]
fn llama3_directory_rope_scaling_matches_candle() {
    check("llama3");
}

#[test]
fn mistral_directory_matches_candle() {
    check("mistral");
}

#[test]
fn sharded_qwen2_directory_matches_candle() {
    check("qwen2");
}

#[test]
fn bf16_qwen3_directory_matches_candle() {
    check("qwen3");
}

#[test]
fn phi3_directory_matches_candle() {
    check("phi3");
}

#[test]
fn gemma2_directory_matches_candle() {
    check("gemma2");
}

#[test]
fn gemma3_directory_matches_candle() {
    check("gemma3");
}

/// The directories themselves, without our loader: candle's model of each
/// must compute what `architectures.rs`'s oracle computes on the GGUF file
/// it was converted from (qwen3's bfloat16 weights are rounded, hence its
/// looser bound).
#[test]
fn directories_are_the_gguf_fixtures() {
    for (name, gguf) in CASES {
        let (forward, one_at_a_time) = oracle(gguf);
        let reference = theirs(forward, one_at_a_time);
        let tolerance = if name == "qwen3" { 0.1 } else { TOLERANCE };
        compare(
            &format!("{name} (candle on the directory vs candle on {gguf})"),
            &candle_logits(name),
            &reference,
            tolerance,
        );
    }
}

#[test]
fn directories_load_with_the_gguf_fixtures_hyper_parameters() {
    for (name, gguf) in CASES {
        let d = load(&hf_dir(name));
        let g = load(&fixture(gguf));
        let (dc, gc) = (&d.config, &g.config);
        assert_eq!(dc.vocab_size, gc.vocab_size, "{name}: vocab_size");
        assert_eq!(dc.n_layers, gc.n_layers, "{name}: n_layers");
        assert_eq!(dc.n_heads, gc.n_heads, "{name}: n_heads");
        assert_eq!(dc.n_kv_heads, gc.n_kv_heads, "{name}: n_kv_heads");
        assert_eq!(dc.head_dim, gc.head_dim, "{name}: head_dim");
        assert_eq!(dc.hidden, gc.hidden, "{name}: hidden");
        assert_eq!(dc.ffn, gc.ffn, "{name}: ffn");
        // What the forward pass reads besides the sizes.
        assert_eq!(dc.context_length, gc.context_length, "{name}: context");
        assert_eq!(dc.rms_eps, gc.rms_eps, "{name}: rms_eps");
        assert_eq!(dc.rope_dim, gc.rope_dim, "{name}: rope_dim");
        assert_eq!(dc.rope_base, gc.rope_base, "{name}: rope_base");
        assert_eq!(dc.rope_local, gc.rope_local, "{name}: rope_local");
        assert_eq!(dc.attn_scale, gc.attn_scale, "{name}: attn_scale");
        assert_eq!(dc.attn_softcap, gc.attn_softcap, "{name}: attn_softcap");
        assert_eq!(dc.final_softcap, gc.final_softcap, "{name}: final_softcap");
        assert_eq!(dc.sliding_window, gc.sliding_window, "{name}: window");
        for l in 0..gc.n_layers {
            assert_eq!(
                dc.is_sliding(l),
                gc.is_sliding(l),
                "{name}: layer {l} slides"
            );
        }
        // The tokenizer built from tokenizer.json is the GGUF vocabulary's.
        let (dt, gt) = (&d.tokenizer, &g.tokenizer);
        assert_eq!(
            dt.vocab_size(),
            gt.vocab_size(),
            "{name}: tokenizer vocab_size"
        );
        assert_eq!(dt.eos_token_id(), gt.eos_token_id(), "{name}: eos");
        assert_eq!(dt.bos_token_id(), gt.bos_token_id(), "{name}: bos");
        for text in ["Hello, world!", " the tt t  t\n\tcafé 123 €"] {
            let ids = dt.encode(text).unwrap();
            assert_eq!(ids, gt.encode(text).unwrap(), "{name}: encoding {text:?}");
            assert_eq!(
                dt.decode(&ids, false).unwrap(),
                text,
                "{name}: decoding {ids:?}"
            );
        }
        // Only the llama directory's generation_config.json has sampling
        // defaults; a GGUF file has none.
        assert!(g.generation.is_empty(), "{gguf}: {:?}", g.generation);
        if name == "llama" {
            assert_eq!(
                (d.generation.temperature, d.generation.top_p),
                (Some(0.6), Some(0.9)),
                "{name}: {:?}",
                d.generation
            );
        } else {
            assert!(d.generation.is_empty(), "{name}: {:?}", d.generation);
        }
    }
}

/// Greedy decoding picks the same token at every step from a directory as
/// from the GGUF file it was converted from.
#[test]
fn directories_pick_the_gguf_fixtures_greedy_tokens() {
    for (name, gguf) in CASES {
        let from_dir = ours(&load(&hf_dir(name)));
        let from_gguf = ours(&load(&fixture(gguf)));
        for (step, (a, b)) in from_dir.iter().zip(&from_gguf).enumerate() {
            eprintln!(
                "{name} step {step}: argmax {} vs {}, max |Δlogit| = {:e}",
                argmax(a),
                argmax(b),
                max_abs_diff(a, b)
            );
            assert_eq!(
                argmax(a),
                argmax(b),
                "{name} step {step}: the directory's greedy token differs from {gguf}'s"
            );
        }
    }
}

/// A copy of a fixture directory under the system's temporary directory,
/// removed when dropped.
struct TempCopy(PathBuf);

impl TempCopy {
    fn of(name: &str, label: &str) -> Self {
        let dst = std::env::temp_dir().join(format!(
            "stoker-hf-directories-{}-{name}-{label}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dst);
        std::fs::create_dir_all(&dst).unwrap();
        for entry in std::fs::read_dir(hf_dir(name)).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), dst.join(entry.file_name())).unwrap();
        }
        TempCopy(dst)
    }

    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }

    fn load_err(&self) -> String {
        match Model::load(&self.0, LoadOptions::default()) {
            Ok(_) => panic!("{} loaded", self.0.display()),
            Err(e) => {
                eprintln!("{}: {e}", self.0.display());
                e.to_string()
            }
        }
    }
}

impl Drop for TempCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn broken_directories_are_refused_naming_the_problem() {
    // The unmodified copy loads: what fails below is what each case breaks.
    let ok = TempCopy::of("llama", "unmodified");
    Model::load(&ok.0, LoadOptions::default()).unwrap();

    let missing = TempCopy::of("llama", "no-config");
    std::fs::remove_file(missing.path("config.json")).unwrap();
    let msg = missing.load_err();
    assert!(msg.contains("config.json"), "missing config.json: {msg}");

    let garbled = TempCopy::of("llama", "not-json");
    std::fs::write(garbled.path("config.json"), "{\"architectures\": [\"Llama").unwrap();
    let msg = garbled.load_err();
    assert!(msg.contains("config.json"), "config.json not JSON: {msg}");

    let bert = TempCopy::of("llama", "bert");
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bert.path("config.json")).unwrap()).unwrap();
    cfg["architectures"] = serde_json::json!(["BertModel"]);
    cfg["model_type"] = serde_json::json!("bert");
    std::fs::write(bert.path("config.json"), cfg.to_string()).unwrap();
    let msg = bert.load_err();
    assert!(msg.contains("BertModel"), "unknown architecture: {msg}");

    let lacking = TempCopy::of("llama", "no-tensor");
    let file = lacking.path("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&file, &Device::Cpu).unwrap();
    let gone = "model.layers.1.mlp.down_proj.weight";
    assert!(tensors.remove(gone).is_some());
    candle_core::safetensors::save(&tensors, &file).unwrap();
    let msg = lacking.load_err();
    assert!(msg.contains(gone), "missing tensor: {msg}");

    // Cut in the data, in the JSON header, and in the header's length.
    let len = std::fs::metadata(hf_dir("llama").join("model.safetensors"))
        .unwrap()
        .len();
    for cut in [len / 2, 100, 4] {
        let truncated = TempCopy::of("llama", &format!("truncated-{cut}"));
        std::fs::OpenOptions::new()
            .write(true)
            .open(truncated.path("model.safetensors"))
            .unwrap()
            .set_len(cut)
            .unwrap();
        let msg = truncated.load_err();
        assert!(
            msg.contains("model.safetensors"),
            "safetensors file cut to {cut} bytes: {msg}"
        );
    }

    // A shard the index names is missing.
    let shard = "model-00002-of-00002.safetensors";
    let unsharded = TempCopy::of("qwen2", "missing-shard");
    std::fs::remove_file(unsharded.path(shard)).unwrap();
    let msg = unsharded.load_err();
    assert!(msg.contains(shard), "missing shard: {msg}");
}
