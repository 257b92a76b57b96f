//! The default model (SmolLM2-135M-Instruct) as a Hugging Face directory
//! against the same weights as a GGUF file: `scripts/make-hf-smollm2.sh`
//! dequantizes models/SmolLM2-135M-Instruct.Q4_1.gguf into
//! models/hf/SmolLM2-135M-Instruct.F16.gguf and writes the same F16 values as
//! the directory models/hf/SmolLM2-135M-Instruct-f16 the way the original
//! checkpoint stores them (Hugging Face names, q/k rows un-permuted,
//! `tokenizer.json` and `tokenizer_config.json` from the GGUF's tokenizer
//! metadata), plus a BF16 directory and a Q8_0 GGUF for the speed benchmark.
//!
//! Loaded with `Model::load`, the directory and the F16 file must give the
//! same configuration (every field: `architecture` is llama.cpp's name,
//! `llama`, for both; the directory's `config.json` class is
//! `LlamaForCausalLM`), the same token ids, the same rendered chat prompts
//! and the same greedy tokens, 40 of them on each of three chat prompts (the
//! prompt in one step, then one token per step, the argmax of the logits).

use std::path::PathBuf;
use std::sync::OnceLock;

use stoker_executor::chat_template::ChatMessage;
use stoker_executor::kernels::QDtype;
use stoker_executor::model::weights::Proj;
use stoker_executor::model::{ForwardChunk, KvStorage, Workspace};
use stoker_executor::{BLOCK_SIZE, BlockId, LoadOptions, Model};

const HOW_TO_MAKE: &str = "run scripts/make-hf-smollm2.sh (scripts/test.sh runs it)";
const F16_DIR: &str = "SmolLM2-135M-Instruct-f16";
const BF16_DIR: &str = "SmolLM2-135M-Instruct-bf16";
const F16_GGUF: &str = "SmolLM2-135M-Instruct.F16.gguf";
const Q8_0_GGUF: &str = "SmolLM2-135M-Instruct.Q8_0.gguf";
const DIR_FILES: [&str; 5] = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
];
const GENERATED: usize = 40;

fn hf_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../models/hf")
        .join(name)
}

/// Loads `models/hf/<name>`, a directory or a GGUF file; a missing file
/// names the script that makes it.
fn load(name: &str) -> Model {
    let path = hf_path(name);
    let needed: Vec<PathBuf> = if name.ends_with(".gguf") {
        vec![path.clone()]
    } else {
        DIR_FILES.iter().map(|f| path.join(f)).collect()
    };
    for p in needed {
        assert!(p.is_file(), "missing {}: {HOW_TO_MAKE}", p.display());
    }
    Model::load(&path, LoadOptions::default()).unwrap_or_else(|e| {
        panic!(
            "loading {}: {e} (if the file is stale, {HOW_TO_MAKE})",
            path.display()
        )
    })
}

/// The F16 directory and the F16 GGUF file, loaded once for every test here.
fn pair() -> &'static (Model, Model) {
    static PAIR: OnceLock<(Model, Model)> = OnceLock::new();
    PAIR.get_or_init(|| (load(F16_DIR), load(F16_GGUF)))
}

/// A dozen varied texts: chat markup, digits, unicode, code, whitespace.
const TEXTS: [&str; 14] = [
    "Hello, world!",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "The year 2024 had 366 days; π ≈ 3.14159 and e ≈ 2.71828.",
    "1234567890 12 345,678.90 -0.5e-10 0x1F",
    "fn main() {\n    println!(\"{}\", 1 + 2);\n}\n",
    "def f(x):\n\treturn x ** 2  # square\n",
    "Ünïcödé: café, naïve, Zürich, 東京タワー, 😀👍🏽",
    "Привет, мир! مرحبا بالعالم שלום",
    "   leading and trailing spaces   ",
    "\n\n\r\n\t mixed\u{a0}whitespace\u{3000}end",
    "<repo_name>stoker<file_sep>src/main.rs<filename>x<|endoftext|>",
    "emails: a.b@example.com, URLs: https://example.org/a?b=c&d=e",
    "",
    "I'm sure they'll've done it—isn't it? DON'T SHOUT!!!",
];

#[test]
fn hf_smollm2_directory_has_the_gguf_configuration() {
    let (dir, gguf) = pair();
    // Every field, `architecture` included: the directory's config.json
    // class (`LlamaForCausalLM`) is named by llama.cpp's architecture, as the
    // file's `general.architecture` names it.
    assert_eq!(gguf.config.architecture, "llama");
    assert_eq!(dir.config, gguf.config, "the directory's configuration");
    assert_eq!(gguf.config.vocab_size, 49152);
    assert_eq!(gguf.config.n_layers, 30);

    let bf16 = load(BF16_DIR);
    assert_eq!(
        bf16.config, gguf.config,
        "the BF16 directory's configuration"
    );
}

#[test]
fn hf_smollm2_directory_tokenizes_as_the_gguf() {
    let (dir, gguf) = pair();
    let (dt, gt) = (&dir.tokenizer, &gguf.tokenizer);
    assert_eq!(dt.vocab_size(), gt.vocab_size(), "vocab_size");
    assert_eq!(dt.bos_token_id(), gt.bos_token_id(), "bos");
    assert_eq!(dt.eos_token_id(), gt.eos_token_id(), "eos");
    assert_eq!(dt.pad_token_id(), gt.pad_token_id(), "pad");
    assert_eq!(dt.add_bos_token(), gt.add_bos_token(), "add_bos_token");
    assert_eq!(dt.stop_token_ids(), gt.stop_token_ids(), "stop tokens");
    for id in 0..20u32 {
        assert_eq!(dt.is_special(id), gt.is_special(id), "is_special({id})");
    }
    for text in TEXTS {
        let ids = gt.encode(text).unwrap();
        assert_eq!(dt.encode(text).unwrap(), ids, "encoding {text:?}");
        assert_eq!(
            dt.encode_chat(text).unwrap(),
            gt.encode_chat(text).unwrap(),
            "chat-encoding {text:?}"
        );
        assert_eq!(
            dt.decode(&ids, false).unwrap(),
            gt.decode(&ids, false).unwrap(),
            "decoding {ids:?}"
        );
        assert_eq!(
            dt.decode(&ids, true).unwrap(),
            gt.decode(&ids, true).unwrap(),
            "decoding {ids:?} without special tokens"
        );
    }
    // Not vacuous: the markup is single tokens, the digits are split.
    assert_eq!(gt.encode("<|im_start|>user").unwrap()[0], 1);
    assert_eq!(gt.encode("2024").unwrap().len(), 4);
}

fn conversation() -> Vec<ChatMessage> {
    vec![
        ChatMessage::new("system", "You answer in one short paragraph."),
        ChatMessage::new("user", "What does a tokenizer do? Give 2 examples."),
    ]
}

#[test]
fn hf_smollm2_directory_renders_the_gguf_chat_prompt() {
    let (dir, gguf) = pair();
    let (dc, gc) = (&dir.chat_template, &gguf.chat_template);
    assert!(
        !dc.is_fallback(),
        "the directory's template is the ChatML fallback"
    );
    assert_eq!(dc.source(), gc.source(), "template source");
    assert_eq!(dc.bos_token(), gc.bos_token(), "bos_token");
    assert_eq!(dc.eos_token(), gc.eos_token(), "eos_token");
    for generation_prompt in [false, true] {
        let d = dc.render(&conversation(), generation_prompt).unwrap();
        let g = gc.render(&conversation(), generation_prompt).unwrap();
        assert_eq!(d, g, "add_generation_prompt = {generation_prompt}");
        assert_eq!(
            dir.tokenizer.encode_chat(&d).unwrap(),
            gguf.tokenizer.encode_chat(&g).unwrap()
        );
    }
    let rendered = gc.render(&conversation(), true).unwrap();
    assert!(
        rendered.starts_with("<|im_start|>system\nYou answer")
            && rendered.ends_with("<|im_start|>assistant\n"),
        "{rendered:?}"
    );
}

fn proj_dtypes(p: &Proj) -> Vec<QDtype> {
    match p {
        Proj::Fused(m) => vec![m.dtype()],
        Proj::Split(parts) => parts.iter().map(|m| m.dtype()).collect(),
    }
}

/// Every matrix of every layer, the embedding and the (absent: tied) output.
fn assert_matrices(model: &Model, want: QDtype, what: &str) {
    let w = &model.weights;
    assert_eq!(w.embed.dtype(), want, "{what}: embedding");
    assert!(
        w.output.is_none(),
        "{what}: the output is tied to the embedding"
    );
    assert_eq!(w.layers.len(), 30, "{what}: layers");
    for (i, l) in w.layers.iter().enumerate() {
        assert_eq!(l.qkv.dtype(), want, "{what}: layer {i} qkv");
        for d in proj_dtypes(&l.qkv)
            .into_iter()
            .chain(proj_dtypes(&l.gate_up))
        {
            assert_eq!(d, want, "{what}: layer {i} q/k/v/gate/up");
        }
        assert_eq!(l.wo.dtype(), want, "{what}: layer {i} o");
        assert_eq!(l.down.dtype(), want, "{what}: layer {i} down");
    }
}

#[test]
fn hf_smollm2_exports_keep_their_storage_types() {
    let (dir, gguf) = pair();
    assert_matrices(dir, QDtype::F16, F16_DIR);
    assert_matrices(gguf, QDtype::F16, F16_GGUF);
    assert_matrices(&load(BF16_DIR), QDtype::BF16, BF16_DIR);
    let q8 = load(Q8_0_GGUF);
    assert_matrices(&q8, QDtype::Q8_0, Q8_0_GGUF);
    assert_eq!(q8.config, gguf.config, "the Q8_0 file's configuration");
}

/// One sequence on one model: the prompt in one step, then one token per
/// step, as `architectures.rs`'s `ours` runs it.
struct Run<'a> {
    model: &'a Model,
    blocks: Vec<BlockId>,
    kv: KvStorage,
    ws: Workspace,
    prompt_len: usize,
    pos: usize,
}

impl<'a> Run<'a> {
    fn new(model: &'a Model, prompt_len: usize, max_len: usize) -> Self {
        let blocks: Vec<BlockId> = (0..max_len.div_ceil(BLOCK_SIZE) as u32)
            .map(BlockId)
            .collect();
        Run {
            model,
            kv: KvStorage::new(&model.config, blocks.len()),
            blocks,
            ws: Workspace::default(),
            prompt_len,
            pos: 0,
        }
    }

    /// The last position's logits after `tokens`.
    fn step(&mut self, tokens: &[u32]) -> Vec<f32> {
        let chunk = ForwardChunk {
            tokens,
            start_pos: self.pos,
            block_table: &self.blocks,
            logits: true,
            score: None,
            prompt_len: self.prompt_len,
        };
        self.pos += tokens.len();
        self.model
            .forward(&[chunk], &mut self.kv, &mut self.ws)
            .unwrap()
            .remove(0)
    }
}

/// The first index of the largest logit.
fn argmax(l: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &x) in l.iter().enumerate() {
        if x > l[best] {
            best = i;
        }
    }
    best as u32
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "vocabulary sizes");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn hf_smollm2_directory_picks_the_gguf_greedy_tokens() {
    let (dir, gguf) = pair();
    let prompts: [Vec<ChatMessage>; 3] = [
        vec![ChatMessage::new(
            "user",
            "Write a Python function that returns the n-th Fibonacci number.",
        )],
        vec![
            ChatMessage::new("system", "You are a concise assistant."),
            ChatMessage::new("user", "Explain why the sky is blue in two sentences."),
        ],
        vec![ChatMessage::new(
            "user",
            "List the first ten prime numbers, separated by commas, then add them up.",
        )],
    ];
    let mut failures = Vec::new();
    for (p, messages) in prompts.iter().enumerate() {
        let text = gguf.chat_template.render(messages, true).unwrap();
        let prompt = gguf.tokenizer.encode_chat(&text).unwrap();
        let dir_text = dir.chat_template.render(messages, true).unwrap();
        assert_eq!(
            dir.tokenizer.encode_chat(&dir_text).unwrap(),
            prompt,
            "prompt {p}: the directory's prompt ids"
        );
        let max_len = prompt.len() + GENERATED;
        let mut a = Run::new(dir, prompt.len(), max_len);
        let mut b = Run::new(gguf, prompt.len(), max_len);
        let (mut la, mut lb) = (a.step(&prompt), b.step(&prompt));
        let mut generated = Vec::new();
        let mut worst = 0f32;
        for step in 0..GENERATED {
            let d = max_abs_diff(&la, &lb);
            worst = worst.max(d);
            let (ta, tb) = (argmax(&la), argmax(&lb));
            if ta != tb {
                failures.push(format!(
                    "prompt {p}: step {step} (after {generated:?}): the directory picks {ta}, \
                     the GGUF {tb}; max |Δlogit| there {d:e}"
                ));
                break;
            }
            generated.push(ta);
            if step + 1 < GENERATED {
                la = a.step(&[ta]);
                lb = b.step(&[tb]);
            }
        }
        eprintln!(
            "prompt {p}: {} prompt tokens, {} of {GENERATED} greedy tokens agree, \
             max |Δlogit| {worst:e}: {:?}",
            prompt.len(),
            generated.len(),
            gguf.tokenizer.decode(&generated, false).unwrap()
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every matrix of a model as ggml bytes, in load order.
fn matrix_bytes(m: &Model) -> Vec<Vec<u8>> {
    m.weights
        .matrices()
        .into_iter()
        .map(|x| x.to_ggml_bytes())
        .collect()
}

/// `--quantize q8_0` on the F16 directory writes the matrices gguf-py's
/// Q8_0 quantizer (ggml's reference) wrote into the Q8_0 file from the same
/// F16 values, byte for byte; the identity names the precision loaded.
#[test]
fn hf_smollm2_directory_quantized_at_load_is_the_q8_0_file() {
    use stoker_executor::model::WeightMode;
    let path = hf_path(F16_DIR);
    assert!(
        path.join("config.json").is_file(),
        "missing {}: {HOW_TO_MAKE}",
        path.display()
    );
    let opts = LoadOptions {
        weights: WeightMode::Quantize(QDtype::Q8_0),
        ..Default::default()
    };
    let dir = Model::load(&path, opts).unwrap();
    let file = load(Q8_0_GGUF);
    assert_eq!(dir.identity.precision, "q8_0");
    let (a, b) = (matrix_bytes(&dir), matrix_bytes(&file));
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(x == y, "matrix {i} differs from the Q8_0 file's");
    }
    // The same directory as stored keeps F16 and its own identity digest.
    assert_eq!(pair().0.identity.precision, "f16");
    assert_eq!(pair().0.identity.sha256, dir.identity.sha256);
}
