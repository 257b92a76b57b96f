//! `POST /tokenize` and `POST /detokenize`: the ids the generation routes would
//! use, round trips, and typed refusals of malformed and hostile bodies.

use serde_json::{Value, json};

use super::{MODEL_ID, chat, client, post, rt, shared, url};

#[test]
fn tokenize_counts_what_the_generation_routes_use() {
    let s = shared();
    rt().block_on(async {
        // A prompt: the ids a completion would see, and the context window.
        let r = post(s, "/tokenize", json!({"prompt": "Hello, world! 123"})).await;
        assert_eq!(r.status(), 200);
        let v: Value = r.json().await.unwrap();
        let ids: Vec<u64> = serde_json::from_value(v["tokens"].clone()).unwrap();
        assert_eq!(v["count"], ids.len());
        assert!(!ids.is_empty());
        let models: Value = client()
            .get(url(s, "/v1/models"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(v["max_model_len"], models["data"][0]["max_model_len"]);
        assert!(v.get("token_strs").is_none());

        // Back to the same text.
        let r = post(s, "/detokenize", json!({"model": MODEL_ID, "tokens": ids})).await;
        assert_eq!(r.status(), 200);
        let d: Value = r.json().await.unwrap();
        assert_eq!(d["prompt"], "Hello, world! 123");

        // Chat messages: the count equals the prompt usage the chat route reports.
        let body = chat("What is the capital of France?", 1);
        let r = post(
            s,
            "/tokenize",
            json!({"model": MODEL_ID, "messages": body["messages"], "return_token_strs": true}),
        )
        .await;
        assert_eq!(r.status(), 200);
        let t: Value = r.json().await.unwrap();
        let r = post(s, "/v1/chat/completions", body).await;
        assert_eq!(r.status(), 200);
        let c: Value = r.json().await.unwrap();
        assert_eq!(t["count"], c["usage"]["prompt_tokens"]);
        let strs = t["token_strs"].as_array().unwrap();
        assert_eq!(strs.len(), t["count"].as_u64().unwrap() as usize);
        assert_eq!(strs[0], "<|im_start|>");
    });
}

#[test]
fn tokenize_refuses_malformed_and_hostile_bodies_typed() {
    let s = shared();
    rt().block_on(async {
        let cases = [
            (json!({}), 400, "prompt"),
            (
                json!({"prompt": "a", "messages": [{"role": "user", "content": "b"}]}),
                400,
                "prompt",
            ),
            (json!({"prompt": 7}), 400, "prompt"),
            (json!({"messages": []}), 400, "messages"),
            (
                json!({"messages": [{"role": "wizard", "content": "b"}]}),
                400,
                "messages[0].role",
            ),
            (
                json!({"model": "no-such-model", "prompt": "a"}),
                404,
                "model",
            ),
        ];
        for (body, status, param) in cases {
            let r = post(s, "/tokenize", body.clone()).await;
            assert_eq!(r.status(), status, "{body}");
            let e: Value = r.json().await.unwrap();
            assert!(e["error"]["message"].is_string(), "{body}: {e}");
            if status == 400 {
                assert_eq!(e["error"]["param"], param, "{body}: {e}");
            }
        }
        let cases = [
            (json!({"tokens": [-1]}), "tokens"),
            (json!({"tokens": [49152]}), "tokens"),
            (json!({"tokens": [1, 2, 1e30]}), "tokens"),
            (json!({"tokens": "abc"}), "tokens"),
        ];
        for (body, param) in cases {
            let r = post(s, "/detokenize", body.clone()).await;
            assert_eq!(r.status(), 400, "{body}");
            let e: Value = r.json().await.unwrap();
            let got = e["error"]["param"].as_str().unwrap_or_default();
            assert!(got.starts_with(param), "{body}: {e}");
        }
        // Over the body limit: 413 before any tokenizer work.
        let big = "x".repeat(100 * 1024);
        let r = post(s, "/tokenize", json!({"prompt": big})).await;
        assert_eq!(r.status(), 413);
        // Not JSON at all.
        let r = client()
            .post(url(s, "/tokenize"))
            .header("content-type", "application/json")
            .body("{\"prompt\":")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400);
    });
}
