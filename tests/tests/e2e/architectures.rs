//! One end-to-end run per architecture: `stoker serve` on a small model of each
//! family stoker implements besides SmolLM2's (Llama 3, Qwen 2, Qwen 3, Phi-3,
//! Gemma 2, Gemma 3), each with its family's special tokens, its real chat
//! template (llama.cpp's copy) and a mix of tensor types
//! (`tests/fixtures/models/`, written by `scripts/make_arch_fixtures.py`).
//!
//! The weights are random, so the text is noise; what is checked is what a
//! user of each family relies on: the chat route renders the model's own
//! template and tokenizes it as llama-server does (special tokens as single
//! ids, exactly one BOS where the model wants one, a system message folded
//! into the first user turn where the template has no system role), streaming and
//! non-streaming answers agree byte for byte, a repeated prompt hits the
//! prefix cache and gives the same tokens, a prompt gives the same tokens
//! alone and batched with others (batch invariance), the batch lane answers
//! as the interactive lane does, and the request log records each request.
//! Forward-pass arithmetic per architecture is checked against
//! candle-transformers in the executor's `architectures` test.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::batch::{
    completion_line, create_batch, file_form, file_lines, get, jsonl, ok, post, upload,
    wait_terminal,
};
use crate::harness::{Server, ServerOptions, Sse, chunk_text, http, metric_sum, repo_root};

const KEY: &str = "sk-arch-ops-0001";
const KEYS: &str = r#"
[[api_keys]]
name = "arch-ops"
key = "sk-arch-ops-0001"
tenant = "acme"
scopes = ["admin", "inference", "batch"]
"#;

/// What a family's rendered chat prompt must look like.
struct Family {
    file: &'static str,
    /// `general.architecture`, as `stoker inspect` reports it.
    arch: &'static str,
    /// Whether the template has a system role (Gemma's has none: the system
    /// text goes before the first user message, as llama-server puts it).
    system: bool,
    /// The BOS token's text when the model adds one (`add_bos_token`).
    bos: Option<&'static str>,
    /// Pieces that must appear in the detokenized prompt, in order.
    pieces: &'static [&'static str],
    /// Special tokens that must each be a single id in the prompt.
    specials: &'static [&'static str],
    /// How the prompt must end (the generation prompt).
    ends: &'static str,
}

/// The conversation in ChatML, as both Qwen templates render it.
const CHATML: &[&str] = &[
    "<|im_start|>system\nYou are terse.<|im_end|>\n",
    "<|im_start|>user\nHi there<|im_end|>\n",
    "<|im_start|>assistant\nHello!<|im_end|>\n",
    "<|im_start|>user\nCount to three.<|im_end|>\n",
];

const FAMILIES: &[Family] = &[
    Family {
        file: "llama3.gguf",
        arch: "llama",
        system: true,
        bos: Some("<|begin_of_text|>"),
        pieces: &[
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n",
            "You are terse.<|eot_id|>",
            "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>",
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>",
            "<|start_header_id|>user<|end_header_id|>\n\nCount to three.<|eot_id|>",
        ],
        specials: &["<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        ends: "<|start_header_id|>assistant<|end_header_id|>\n\n",
    },
    Family {
        file: "qwen2.gguf",
        arch: "qwen2",
        system: true,
        bos: None,
        pieces: CHATML,
        specials: &["<|im_start|>", "<|im_end|>"],
        ends: "<|im_start|>assistant\n",
    },
    Family {
        file: "qwen3.gguf",
        arch: "qwen3",
        system: true,
        bos: None,
        pieces: CHATML,
        specials: &["<|im_start|>", "<|im_end|>"],
        ends: "<|im_start|>assistant\n",
    },
    Family {
        file: "phi3.gguf",
        arch: "phi3",
        system: true,
        // Phi-3.5's template writes no BOS; llama.cpp adds the model's.
        bos: Some("<s>"),
        pieces: &[
            "<s><|system|>\nYou are terse.<|end|>\n",
            "<|user|>\nHi there<|end|>\n",
            "<|assistant|>\nHello!<|end|>\n",
            "<|user|>\nCount to three.<|end|>\n",
        ],
        specials: &["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"],
        ends: "<|assistant|>\n",
    },
    Family {
        file: "gemma2.gguf",
        arch: "gemma2",
        system: false,
        bos: Some("<bos>"),
        pieces: &[
            "<bos><start_of_turn>user\nYou are terse.\nHi there<end_of_turn>\n",
            "<start_of_turn>model\nHello!<end_of_turn>\n",
            "<start_of_turn>user\nCount to three.<end_of_turn>\n",
        ],
        specials: &["<start_of_turn>", "<end_of_turn>"],
        ends: "<start_of_turn>model\n",
    },
    Family {
        file: "gemma3.gguf",
        arch: "gemma3",
        system: false,
        bos: Some("<bos>"),
        pieces: &[
            "<bos><start_of_turn>user\nYou are terse.\nHi there<end_of_turn>\n",
            "<start_of_turn>model\nHello!<end_of_turn>\n",
            "<start_of_turn>user\nCount to three.<end_of_turn>\n",
        ],
        specials: &["<start_of_turn>", "<end_of_turn>"],
        ends: "<start_of_turn>model\n",
    },
];

/// Long enough to fill several KV blocks (and to pass Gemma's 16-position
/// window), so the prefix cache and the window both take part.
const PROMPT: &str = "In the morning the harbour was quiet, the boats rocked on a grey \
    tide and the gulls waited on the posts for the fishermen to come back in.";
const OTHERS: [&str; 3] = [
    "A list of rivers: the Thames, the Seine, the Danube, the Rhine",
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "Dear committee, I am writing to ask for a second review of the",
];
const MAX_TOKENS: u32 = 16;

fn fixture(file: &str) -> PathBuf {
    let p = repo_root().join("tests/fixtures/models").join(file);
    assert!(
        p.is_file(),
        "{} missing: it is committed; regenerate with scripts/make_arch_fixtures.py",
        p.display()
    );
    p
}

fn messages() -> Value {
    json!([
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Count to three."},
    ])
}

/// A completion at temperature 0: its text, its token count, its request id.
async fn complete(server: &Server, model: &str, prompt: &str) -> (String, u64, String) {
    let resp = http()
        .post(server.url("/v1/completions"))
        .bearer_auth(KEY)
        .json(
            &json!({"model": model, "prompt": prompt, "max_tokens": MAX_TOKENS,
                      "temperature": 0}),
        )
        .send()
        .await
        .expect("POST /v1/completions");
    let rid = resp
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let status = resp.status().as_u16();
    let body: Value = resp.json().await.expect("completion JSON");
    assert_eq!(status, 200, "completion: {body}");
    (
        body["choices"][0]["text"]
            .as_str()
            .unwrap_or_else(|| panic!("no text: {body}"))
            .to_owned(),
        body["usage"]["completion_tokens"].as_u64().unwrap_or(0),
        rid,
    )
}

async fn serve_one(f: &Family) {
    let path = fixture(f.file);
    println!("== {}", f.file);

    // `stoker inspect` says the file can be served and names its architecture.
    let out = std::process::Command::new(crate::harness::stoker_bin())
        .args(["inspect", "--json"])
        .arg(&path)
        .output()
        .expect("run stoker inspect");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "inspect --json: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert_eq!(out.status.code(), Some(0), "{}: {report}", f.file);
    assert_eq!(report["architecture"], f.arch, "{report}");

    let server = Server::start(
        &format!("arch-{}", f.arch),
        ServerOptions::default().config(KEYS).model(&path),
    )
    .await;
    let model = server.model_id(Some(KEY)).await;

    // The chat prompt: the model's template, tokenized as llama-server does.
    let msgs = messages();
    let tok = ok(
        &post(
            &server,
            Some(KEY),
            "/tokenize",
            &json!({"model": model, "messages": msgs, "return_token_strs": true}),
        )
        .await,
        "tokenize messages",
    );
    let ids: Vec<u64> = tok["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let strs: Vec<&str> = tok["token_strs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let text = ok(
        &post(
            &server,
            Some(KEY),
            "/detokenize",
            &json!({"model": model, "tokens": ids}),
        )
        .await,
        "detokenize",
    )["prompt"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut at = 0;
    for piece in f.pieces {
        let found = text[at..].find(piece).unwrap_or_else(|| {
            panic!(
                "{}: {piece:?} not found in order in the rendered prompt {text:?}",
                f.file
            )
        });
        at += found + piece.len();
    }
    assert!(text.ends_with(f.ends), "{}: {text:?}", f.file);
    for special in f.specials {
        assert!(
            strs.contains(special),
            "{}: {special} is not one token in {strs:?}",
            f.file
        );
    }
    let bos_count = |s: &str| strs.iter().filter(|t| **t == s).count();
    match f.bos {
        Some(bos) => {
            assert_eq!(strs.first(), Some(&bos), "{}: {strs:?}", f.file);
            assert_eq!(bos_count(bos), 1, "{}: one BOS: {strs:?}", f.file);
        }
        None => assert!(!text.starts_with("<|endoftext|>"), "{text:?}"),
    }
    if !f.system {
        // The template's own refusal (Gemma's: roles must alternate) reaches
        // the client as a typed 400.
        let a = post(
            &server,
            Some(KEY),
            "/v1/chat/completions",
            &json!({"model": model, "max_tokens": 4, "messages": [
                {"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}),
        )
        .await;
        assert_eq!(a.status, 400, "{}: {:?}", f.file, a.body);
        assert_eq!(a.body["error"]["param"], "messages", "{:?}", a.body);
    }

    // Chat, non-streaming and streaming: the same bytes, the prompt counted as
    // /tokenize counts it, and the request log has the row.
    let chat_body = json!({"model": model, "messages": msgs, "max_tokens": MAX_TOKENS,
                           "temperature": 0});
    let resp = http()
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&chat_body)
        .send()
        .await
        .expect("chat");
    let rid = resp
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let status = resp.status().as_u16();
    let chat: Value = resp.json().await.expect("chat JSON");
    assert_eq!(status, 200, "{}: {chat}", f.file);
    let content = chat["choices"][0]["message"]["content"]
        .as_str()
        .unwrap_or_else(|| panic!("no content: {chat}"))
        .to_owned();
    assert_eq!(chat["usage"]["prompt_tokens"], ids.len(), "{chat}");
    let completion_tokens = chat["usage"]["completion_tokens"].as_u64().unwrap();
    assert!(
        (1..=MAX_TOKENS as u64).contains(&completion_tokens),
        "{chat}"
    );

    let mut stream_body = chat_body.clone();
    stream_body["stream"] = json!(true);
    let resp = http()
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&stream_body)
        .send()
        .await
        .expect("chat stream");
    assert_eq!(resp.status().as_u16(), 200);
    let mut sse = Sse::new(resp);
    let mut streamed = String::new();
    while let Some(data) = sse.next().await {
        if data == "[DONE]" {
            break;
        }
        let chunk: Value = serde_json::from_str(&data).expect("chunk JSON");
        streamed.push_str(&chunk_text(&chunk));
    }
    assert!(sse.done, "{}: the stream ended without [DONE]", f.file);
    assert_eq!(streamed, content, "{}: stream and answer differ", f.file);

    // A repeated prompt: the prefix cache serves it and the tokens repeat.
    let before = server.metrics().await;
    let (alone, n_alone, _) = complete(&server, &model, PROMPT).await;
    let (again, n_again, _) = complete(&server, &model, PROMPT).await;
    let after = server.metrics().await;
    assert_eq!((&again, n_again), (&alone, n_alone), "{}", f.file);
    let hits = |m: &str| metric_sum(m, "stoker_prefix_cache_hits_total", &[]);
    assert!(
        hits(&after) > hits(&before),
        "{}: the repeated prompt did not hit the prefix cache",
        f.file
    );

    // Batch invariance: the same prompt among three others.
    let mut calls = vec![complete(&server, &model, PROMPT)];
    for other in OTHERS {
        calls.push(complete(&server, &model, other));
    }
    let results = futures_util::future::join_all(calls).await;
    assert_eq!(
        (&results[0].0, results[0].1),
        (&alone, n_alone),
        "{}: the prompt changed when batched with others",
        f.file
    );

    // The batch lane answers as the interactive lane does.
    let mut lines = vec![completion_line("r-0", &model, PROMPT, MAX_TOKENS)];
    for (i, other) in OTHERS.iter().enumerate() {
        lines.push(completion_line(
            &format!("r-{}", i + 1),
            &model,
            other,
            MAX_TOKENS,
        ));
    }
    let file = ok(
        &upload(
            &server,
            Some(KEY),
            file_form("in.jsonl", &jsonl(&lines), Some("batch")),
        )
        .await,
        "upload",
    );
    let id = create_batch(&server, Some(KEY), &file["id"], "/v1/completions").await;
    let done = wait_terminal(
        &server,
        Some(KEY),
        &id,
        Instant::now() + Duration::from_secs(180),
    )
    .await;
    assert_eq!(done["status"], "completed", "{}: {done}", f.file);
    let out = file_lines(&server, Some(KEY), &done["output_file_id"]).await;
    assert_eq!(out.len(), lines.len(), "{}: {out:?}", f.file);
    let mut by_id = std::collections::HashMap::new();
    for l in &out {
        by_id.insert(l["custom_id"].as_str().unwrap().to_owned(), l.clone());
    }
    let row = &by_id["r-0"]["response"];
    assert_eq!(row["status_code"], 200, "{row}");
    assert_eq!(
        row["body"]["choices"][0]["text"].as_str(),
        Some(alone.as_str()),
        "{}: the batch lane gave other tokens",
        f.file
    );
    for (i, r) in results.iter().enumerate().skip(1) {
        let row = &by_id[&format!("r-{i}")]["response"];
        assert_eq!(
            row["body"]["choices"][0]["text"].as_str(),
            Some(r.0.as_str()),
            "{}: row r-{i}",
            f.file
        );
    }

    // The request log names the chat request, its counts and its outcome.
    let deadline = Instant::now() + Duration::from_secs(20);
    let logged = loop {
        let a = get(&server, Some(KEY), &format!("/admin/v1/requests/{rid}")).await;
        if a.status == 200 {
            break a.body;
        }
        assert!(
            Instant::now() < deadline,
            "{}: request {rid} not in the log: {:?}",
            f.file,
            a
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(logged["status_code"], 200, "{logged}");
    assert_eq!(logged["prompt_tokens"], ids.len(), "{logged}");
    assert_eq!(logged["completion_tokens"], completion_tokens, "{logged}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_architecture_serves_chat_completions_batches_and_the_request_log() {
    for f in FAMILIES {
        serve_one(f).await;
    }
}
