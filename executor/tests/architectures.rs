//! Every supported architecture against candle-transformers' model of it, on
//! tiny random-weight GGUF files written by `scripts/make_arch_fixtures.py`
//! under llama.cpp's names: the last-position logits of a 20-token prompt and
//! of four one-token decode steps after it must agree within 1e-3.
//!
//! The oracles, and where candle's code departs from llama.cpp's definition
//! (we follow llama.cpp and pick fixtures or call patterns where the two agree):
//! - llama, llama-mixed: `quantized_llama`.
//! - llama3 (`rope_freqs.weight`): `quantized_llama` ignores the tensor, so the
//!   oracle is the safetensors-style `llama` with `rope_scaling: llama3`, fed
//!   the same tensors with q/k rows un-permuted (the GGUF converter permutes
//!   them for the interleaved rope; candle's `llama` rotates halves).
//! - qwen2: `quantized_qwen2`; qwen3: `quantized_qwen3` (it builds its rope
//!   tables in f16 unless `general.dtype` says f32, so the fixture says so).
//! - phi3: `quantized_phi3`, which ignores `rope.freq_base` (always 10000) and
//!   cannot do partial rotary; the fixture uses base 10000 and full rotary.
//! - gemma2, gemma3: `quantized_gemma3` uses SiLU instead of GELU and has no
//!   soft-capping, so the oracles are the safetensors-style `gemma2` and
//!   `gemma3`, fed the GGUF tensors with 1 subtracted from every norm weight
//!   (llama.cpp's converter adds it; these models add it back). Their prompt
//!   masks keep `window + 1` positions where llama.cpp (and Hugging Face)
//!   keep `window`, and `gemma2` does not slide at all in decode; `gemma3`
//!   slides correctly in decode (a rotating KV cache of `window` entries), so
//!   its prompt is fed one token at a time, and the gemma2 fixture's window is
//!   longer than the test's sequences.

use std::collections::HashMap;
use std::path::PathBuf;

use candle_core::quantized::gguf_file;
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models as ct;
use stoker_executor::model::weights::Proj;
use stoker_executor::model::{ForwardChunk, KvStorage, SUPPORTED_ARCHITECTURES, Workspace};
use stoker_executor::{BLOCK_SIZE, BlockId, LoadOptions, Model, ModelError};

const PROMPT_LEN: usize = 20;
const DECODE: [u32; 4] = [42, 7, 256, 100];

pub(crate) fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/arch")
        .join(name)
}

fn prompt() -> Vec<u32> {
    (0..PROMPT_LEN as u32)
        .map(|i| (i * 37 + 11) % 257)
        .collect()
}

/// Our logits: the prompt in one step, then one step per decode token.
pub(crate) fn ours(model: &Model) -> Vec<Vec<f32>> {
    let prompt = prompt();
    let total = prompt.len() + DECODE.len();
    let blocks: Vec<BlockId> = (0..total.div_ceil(BLOCK_SIZE) as u32)
        .map(BlockId)
        .collect();
    let mut kv = KvStorage::new(&model.config, blocks.len());
    let mut ws = Workspace::default();
    let mut out = Vec::new();
    let mut run = |tokens: &[u32], start_pos: usize, kv: &mut KvStorage| {
        let chunk = ForwardChunk {
            tokens,
            start_pos,
            block_table: &blocks,
            logits: true,
            score: None,
            prompt_len: prompt.len(),
        };
        model.forward(&[chunk], kv, &mut ws).unwrap().remove(0)
    };
    out.push(run(&prompt, 0, &mut kv));
    for (i, &t) in DECODE.iter().enumerate() {
        out.push(run(&[t], prompt.len() + i, &mut kv));
    }
    out
}

/// An oracle's forward: `(tokens, index_pos) -> last-position logits`.
pub(crate) type Forward = Box<dyn FnMut(&[u32], usize) -> candle_core::Result<Tensor>>;

pub(crate) fn theirs(mut forward: Forward, one_at_a_time: bool) -> Vec<Vec<f32>> {
    let mut call = |tokens: &[u32], pos: usize| -> Vec<f32> {
        forward(tokens, pos)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    let prompt = prompt();
    let mut out = Vec::new();
    if one_at_a_time {
        let mut last = Vec::new();
        for (i, &t) in prompt.iter().enumerate() {
            last = call(&[t], i);
        }
        out.push(last);
    } else {
        out.push(call(&prompt, 0));
    }
    for (i, &t) in DECODE.iter().enumerate() {
        out.push(call(&[t], prompt.len() + i));
    }
    out
}

fn content(name: &str) -> (gguf_file::Content, std::fs::File) {
    let mut file = std::fs::File::open(fixture(name)).unwrap();
    let c = gguf_file::Content::read(&mut file).unwrap();
    (c, file)
}

/// Every tensor of a fixture, dequantized, by GGUF name.
fn tensors(name: &str) -> HashMap<String, Tensor> {
    let (c, mut file) = content(name);
    c.tensor_infos
        .keys()
        .map(|n| {
            let t = c.tensor(&mut file, n, &Device::Cpu).unwrap();
            (n.clone(), t.dequantize(&Device::Cpu).unwrap())
        })
        .collect()
}

pub(crate) fn tensor_from(ids: &[u32]) -> Tensor {
    Tensor::new(ids, &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap()
}

pub(crate) fn oracle(name: &str) -> (Forward, bool) {
    let dev = Device::Cpu;
    match name {
        "llama.gguf" | "llama-mixed.gguf" => {
            let (c, mut f) = content(name);
            let mut m = ct::quantized_llama::ModelWeights::from_gguf(c, &mut f, &dev).unwrap();
            (Box::new(move |t, p| m.forward(&tensor_from(t), p)), false)
        }
        "qwen2.gguf" => {
            let (c, mut f) = content(name);
            let mut m = ct::quantized_qwen2::ModelWeights::from_gguf(c, &mut f, &dev).unwrap();
            (Box::new(move |t, p| m.forward(&tensor_from(t), p)), false)
        }
        "qwen3.gguf" => {
            let (c, mut f) = content(name);
            let mut m = ct::quantized_qwen3::ModelWeights::from_gguf(c, &mut f, &dev).unwrap();
            (Box::new(move |t, p| m.forward(&tensor_from(t), p)), false)
        }
        "phi3.gguf" => {
            let (c, mut f) = content(name);
            let mut m =
                ct::quantized_phi3::ModelWeights::from_gguf(false, c, &mut f, &dev).unwrap();
            (Box::new(move |t, p| m.forward(&tensor_from(t), p)), false)
        }
        "llama3.gguf" => llama3_oracle(),
        "gemma2.gguf" => gemma_oracle(2),
        "gemma3.gguf" => gemma_oracle(3),
        other => panic!("no oracle for {other}"),
    }
}

/// Undoes the GGUF converter's q/k row permutation for one projection.
fn unpermute(w: &Tensor, heads: usize) -> Tensor {
    let (rows, cols) = w.dims2().unwrap();
    let d = rows / heads;
    w.reshape((heads, d / 2, 2, cols))
        .unwrap()
        .transpose(1, 2)
        .unwrap()
        .reshape((rows, cols))
        .unwrap()
        .contiguous()
        .unwrap()
}

fn llama3_oracle() -> (Forward, bool) {
    let t = tensors("llama3.gguf");
    let layers = 2;
    let mut hf = HashMap::new();
    hf.insert(
        "model.embed_tokens.weight".to_string(),
        t["token_embd.weight"].clone(),
    );
    hf.insert("model.norm.weight".into(), t["output_norm.weight"].clone());
    for i in 0..layers {
        let g = |n: &str| t[&format!("blk.{i}.{n}.weight")].clone();
        let p = format!("model.layers.{i}");
        hf.insert(
            format!("{p}.self_attn.q_proj.weight"),
            unpermute(&g("attn_q"), 4),
        );
        hf.insert(
            format!("{p}.self_attn.k_proj.weight"),
            unpermute(&g("attn_k"), 2),
        );
        hf.insert(format!("{p}.self_attn.v_proj.weight"), g("attn_v"));
        hf.insert(format!("{p}.self_attn.o_proj.weight"), g("attn_output"));
        hf.insert(format!("{p}.mlp.gate_proj.weight"), g("ffn_gate"));
        hf.insert(format!("{p}.mlp.up_proj.weight"), g("ffn_up"));
        hf.insert(format!("{p}.mlp.down_proj.weight"), g("ffn_down"));
        hf.insert(format!("{p}.input_layernorm.weight"), g("attn_norm"));
        hf.insert(
            format!("{p}.post_attention_layernorm.weight"),
            g("ffn_norm"),
        );
    }
    let cfg: ct::llama::LlamaConfig = serde_json::from_value(serde_json::json!({
        "hidden_size": 64, "intermediate_size": 128, "vocab_size": 257,
        "num_hidden_layers": layers, "num_attention_heads": 4, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "max_position_embeddings": 64,
        "tie_word_embeddings": true,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 64, "rope_type": "llama3"},
    }))
    .unwrap();
    let cfg = cfg.into_config(false);
    let vb = VarBuilder::from_tensors(hf, DType::F32, &Device::Cpu);
    let model = ct::llama::Llama::load(vb, &cfg).unwrap();
    let mut cache = ct::llama::Cache::new(true, DType::F32, &cfg, &Device::Cpu).unwrap();
    (
        Box::new(move |t, p| model.forward(&tensor_from(t), p, &mut cache)),
        false,
    )
}

fn gemma_oracle(version: u8) -> (Forward, bool) {
    let name = format!("gemma{version}.gguf");
    let t = tensors(&name);
    let (hidden, heads, kv_heads, ffn, layers, head_dim) = if version == 2 {
        (64, 4, 2, 128, 2, 32)
    } else {
        (32, 2, 1, 64, 6, 32)
    };
    // llama.cpp's converter stores Gemma's norm weights with 1 added.
    let norm = |x: &Tensor| (x - 1.0).unwrap();
    let mut hf = HashMap::new();
    hf.insert(
        "model.embed_tokens.weight".to_string(),
        t["token_embd.weight"].clone(),
    );
    hf.insert("model.norm.weight".into(), norm(&t["output_norm.weight"]));
    for i in 0..layers {
        let g = |n: &str| t[&format!("blk.{i}.{n}.weight")].clone();
        let p = format!("model.layers.{i}");
        for (ours, theirs) in [
            ("attn_q", "self_attn.q_proj"),
            ("attn_k", "self_attn.k_proj"),
            ("attn_v", "self_attn.v_proj"),
            ("attn_output", "self_attn.o_proj"),
            ("ffn_gate", "mlp.gate_proj"),
            ("ffn_up", "mlp.up_proj"),
            ("ffn_down", "mlp.down_proj"),
        ] {
            hf.insert(format!("{p}.{theirs}.weight"), g(ours));
        }
        let mut norms = vec![
            ("attn_norm", "input_layernorm"),
            ("post_attention_norm", "post_attention_layernorm"),
            ("ffn_norm", "pre_feedforward_layernorm"),
            ("post_ffw_norm", "post_feedforward_layernorm"),
        ];
        if version == 3 {
            norms.push(("attn_q_norm", "self_attn.q_norm"));
            norms.push(("attn_k_norm", "self_attn.k_norm"));
        }
        for (ours, theirs) in norms {
            hf.insert(format!("{p}.{theirs}.weight"), norm(&g(ours)));
        }
    }
    let vb = VarBuilder::from_tensors(hf, DType::F32, &Device::Cpu);
    let common = serde_json::json!({
        "attention_bias": false, "head_dim": head_dim,
        "hidden_activation": "gelu_pytorch_tanh", "hidden_size": hidden,
        "intermediate_size": ffn, "num_attention_heads": heads,
        "num_hidden_layers": layers, "num_key_value_heads": kv_heads,
        "rms_norm_eps": 1e-6, "vocab_size": 257, "query_pre_attn_scalar": head_dim,
        "max_position_embeddings": 64,
    });
    let with = |extra: serde_json::Value| {
        let mut v = common.clone();
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    if version == 2 {
        let cfg: ct::gemma2::Config = serde_json::from_value(with(serde_json::json!({
            "rope_theta": 10000.0, "final_logit_softcapping": 15.0,
            "attn_logit_softcapping": 2.0, "sliding_window": 4096,
        })))
        .unwrap();
        let mut m = ct::gemma2::Model::new(false, &cfg, vb).unwrap();
        (Box::new(move |t, p| m.forward(&tensor_from(t), p)), false)
    } else {
        let cfg: ct::gemma3::Config = serde_json::from_value(with(serde_json::json!({
            "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
            "final_logit_softcapping": null, "attn_logit_softcapping": null,
            "sliding_window": 5, "sliding_window_pattern": 6,
        })))
        .unwrap();
        let mut m = ct::gemma3::Model::new(false, &cfg, vb).unwrap();
        (Box::new(move |t, p| m.forward(&tensor_from(t), p)), true)
    }
}

pub(crate) fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

fn check(name: &str) -> f32 {
    let model = Model::load(&fixture(name), LoadOptions::default()).unwrap();
    let mine = ours(&model);
    let (forward, one_at_a_time) = oracle(name);
    let reference = theirs(forward, one_at_a_time);
    let mut worst = 0f32;
    for (step, (a, b)) in mine.iter().zip(&reference).enumerate() {
        let d = max_abs_diff(a, b);
        let scale = b.iter().fold(0f32, |m, x| m.max(x.abs()));
        eprintln!("{name} step {step}: max |Δlogit| = {d:e} (max |logit| {scale:.3})");
        worst = worst.max(d);
    }
    assert!(
        worst <= 1e-3,
        "{name}: max logit difference {worst} exceeds 1e-3"
    );
    worst
}

#[test]
fn llama_matches_candle() {
    check("llama.gguf");
}

#[test]
fn llama3_rope_freqs_match_candle() {
    let m = Model::load(&fixture("llama3.gguf"), LoadOptions::default()).unwrap();
    assert!(m.weights.rope_freqs.is_some() && m.weights.output.is_none());
    check("llama3.gguf");
}

#[test]
fn mixed_type_projections_stay_split_and_match_candle() {
    let m = Model::load(&fixture("llama-mixed.gguf"), LoadOptions::default()).unwrap();
    let layer = &m.weights.layers[0];
    assert!(matches!(&layer.qkv, Proj::Split(p) if p.len() == 3));
    assert!(matches!(&layer.gate_up, Proj::Split(p) if p.len() == 2));
    check("llama-mixed.gguf");
}

#[test]
fn float_weights_are_read_from_the_mapped_file_and_tiled_ones_owned() {
    let m = Model::load(&fixture("llama-mixed.gguf"), LoadOptions::default()).unwrap();
    let layer = &m.weights.layers[0];
    // F32 weights are multiplied as stored: they point into the map.
    assert!(layer.wo.is_mapped() && layer.down.is_mapped() && m.weights.embed.is_mapped());
    // q and k are Q8_0, rebuilt into tiles; v is F32.
    let Proj::Split(parts) = &layer.qkv else {
        panic!("mixed q/k/v must stay split");
    };
    let mapped: Vec<bool> = parts.iter().map(|p| p.is_mapped()).collect();
    assert_eq!(mapped, [false, false, true]);
    // All-F32 parts stay split rather than be copied out of the map to be fused.
    let f = Model::load(&fixture("llama.gguf"), LoadOptions::default()).unwrap();
    assert!(matches!(&f.weights.layers[0].qkv, Proj::Split(p) if p.iter().all(|p| p.is_mapped())));
    // The dequantized mode owns every matrix.
    let d = Model::load(
        &fixture("llama-mixed.gguf"),
        LoadOptions {
            weights: stoker_executor::model::WeightMode::DequantizedF32,
            ..LoadOptions::default()
        },
    )
    .unwrap();
    assert!(!d.weights.layers[0].wo.is_mapped());
    assert!(matches!(&d.weights.layers[0].qkv, Proj::Fused(_)));
}

#[test]
fn qwen2_matches_candle() {
    check("qwen2.gguf");
}

#[test]
fn qwen3_matches_candle() {
    check("qwen3.gguf");
}

#[test]
fn phi3_matches_candle() {
    check("phi3.gguf");
}

#[test]
fn gemma2_matches_candle() {
    check("gemma2.gguf");
}

#[test]
fn gemma3_matches_candle() {
    check("gemma3.gguf");
}

#[test]
fn every_fixture_loads_with_its_features() {
    use stoker_executor::model::Arch;
    for (name, arch) in [
        ("llama.gguf", Arch::Llama),
        ("llama3.gguf", Arch::Llama),
        ("llama-mixed.gguf", Arch::Llama),
        ("qwen2.gguf", Arch::Qwen2),
        ("qwen3.gguf", Arch::Qwen3),
        ("phi3.gguf", Arch::Phi3),
        ("gemma2.gguf", Arch::Gemma2),
        ("gemma3.gguf", Arch::Gemma3),
    ] {
        let m = Model::load(&fixture(name), LoadOptions::default()).unwrap();
        assert_eq!(m.config.arch, arch, "{name}");
        assert!(SUPPORTED_ARCHITECTURES.contains(&m.config.architecture.as_str()));
        assert_eq!(m.config.vocab_size, 257, "{name}");
    }
    let q3 = Model::load(&fixture("qwen3.gguf"), LoadOptions::default()).unwrap();
    assert_eq!((q3.config.head_dim, q3.config.q_width()), (32, 128));
    let phi = Model::load(&fixture("phi3.gguf"), LoadOptions::default()).unwrap();
    assert!(matches!(phi.weights.layers[0].qkv, Proj::Fused(_)));
    assert_eq!(phi.config.sliding_window, None);
    let g2 = Model::load(&fixture("gemma2.gguf"), LoadOptions::default()).unwrap();
    assert_eq!(
        (g2.config.attn_softcap, g2.config.final_softcap),
        (Some(2.0), Some(15.0))
    );
    // Gemma 2 slides on even layers, Gemma 3 on five of every six.
    assert!(g2.config.is_sliding(0) && !g2.config.is_sliding(1));
    let g3 = Model::load(&fixture("gemma3.gguf"), LoadOptions::default()).unwrap();
    let sliding: Vec<bool> = (0..6).map(|l| g3.config.is_sliding(l)).collect();
    assert_eq!(sliding, [true, true, true, true, true, false]);
    assert!(g3.rope_local.is_some());
}

#[test]
fn an_unknown_architecture_is_refused_with_the_supported_list() {
    let err = Model::load(&fixture("mamba.gguf"), LoadOptions::default()).unwrap_err();
    assert!(
        matches!(err, ModelError::UnsupportedArchitecture(ref a) if a == "mamba"),
        "{err}"
    );
    let msg = err.to_string();
    assert!(msg.contains("`mamba`"), "{msg}");
    for arch in SUPPORTED_ARCHITECTURES {
        assert!(msg.contains(arch), "{msg} does not list {arch}");
    }
}
