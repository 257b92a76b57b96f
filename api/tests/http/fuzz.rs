//! A property-based HTTP fuzzer over every route of `schemas/openapi.json`,
//! against a real server in this process: documented and hostile path ids,
//! query strings, headers and bodies (JSON built from each route's documented
//! fields with plausible and hostile values, malformed JSON, multipart parts).
//!
//! Each response must be a status the document lists for that route, never a
//! 5xx other than a documented, typed refusal (`server_overloaded`,
//! `deadline_infeasible`), every 4xx and 5xx in OpenAI's error shape, and
//! every stream framed as server-sent events ending in `[DONE]`.
//!
//! Generation is kept short (`max_tokens` at most 3 whenever it is valid) so
//! a case takes milliseconds.
//!
//! The run is reproducible: it starts from a fixed seed and first replays
//! every failure ever found (`proptest-regressions/http/fuzz.txt`, committed).
//! `scripts/fuzz.sh MINUTES` explores with fresh seeds and prints any new
//! failure as the line to commit there (see `stoker_test_support::property`).

use proptest::prelude::*;
use proptest::test_runner::{FileFailurePersistence, RngSeed, TestCaseError, TestRunner};
use serde_json::{Map, Value, json};
use stoker_test_support::property;

use super::{MODEL_ID, config, rt, start, url};

/// One route of the document: method, path template, documented statuses,
/// query parameters, and its JSON body's fields (if it takes JSON).
#[derive(Clone, Debug)]
struct Route {
    method: String,
    path: String,
    statuses: Vec<u16>,
    query: Vec<String>,
    headers: Vec<String>,
    fields: Option<Vec<String>>,
    multipart: bool,
}

fn routes() -> Vec<Route> {
    let doc: Value = serde_json::from_str(include_str!("../../../schemas/openapi.json")).unwrap();
    let schemas = &doc["components"]["schemas"];
    let mut out = Vec::new();
    for (path, ops) in doc["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let params = op["parameters"].as_array().cloned().unwrap_or_default();
            let named = |place: &str| -> Vec<String> {
                params
                    .iter()
                    .filter(|p| p["in"] == place)
                    .map(|p| p["name"].as_str().unwrap().to_owned())
                    .collect()
            };
            let content = &op["requestBody"]["content"];
            let fields = content["application/json"]["schema"]["$ref"]
                .as_str()
                .map(|r| {
                    let name = r.rsplit('/').next().unwrap();
                    schemas[name]["properties"]
                        .as_object()
                        .map(|p| p.keys().cloned().collect())
                        .unwrap_or_default()
                });
            out.push(Route {
                method: method.to_uppercase(),
                path: path.clone(),
                statuses: op["responses"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .map(|k| k.parse().unwrap())
                    .collect(),
                query: named("query"),
                headers: named("header"),
                fields,
                multipart: content.get("multipart/form-data").is_some(),
            });
        }
    }
    assert!(out.len() >= 15, "routes: {out:?}");
    out
}

fn hostile_string() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("../../etc/passwd".to_owned()),
        Just("%00%ff%2e%2e".to_owned()),
        Just("x".repeat(5000)),
        Just("é\u{0}\u{202e}\u{fffd}🦀".to_owned()),
        Just(MODEL_ID.to_owned()),
        Just("file-00000000000000000000000000000000".to_owned()),
        Just("batch_00000000000000000000000000000000".to_owned()),
        "[a-z0-9_-]{1,24}",
        any::<String>(),
    ]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!(0)),
        Just(json!(-1)),
        Just(json!(1)),
        Just(json!(2)),
        Just(json!(i64::MAX)),
        Just(json!(u64::MAX)),
        Just(json!(1e308)),
        Just(json!(-0.5)),
        Just(json!(0.7)),
        any::<i32>().prop_map(|v| json!(v)),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        hostile_string().prop_map(Value::String),
    ]
}

fn any_json() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(("[a-z_]{1,12}", inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// JSON schemas for `response_format` and tool parameters: plausible ones
/// and the hostile classes (references that only refer to themselves, deep
/// nesting, a huge `enum`, pathological `pattern`s, unsatisfiable schemas),
/// and any JSON at all.
fn schema() -> BoxedStrategy<Value> {
    let nested = |depth: usize, leaf: Value| {
        (0..depth).fold(leaf, |inner, _| json!({"type": "array", "items": inner}))
    };
    prop_oneof![
        Just(json!({"type": "object", "properties": {"a": {"type": "integer"}}})),
        Just(json!({"$ref": "#/$defs/loop", "$defs": {"loop": {"$ref": "#/$defs/loop"}}})),
        Just(json!({"$ref": "#/$defs/a",
            "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}}})),
        Just(json!({"not": {}})),
        Just(json!(false)),
        Just(json!({"enum": []})),
        Just(json!({"type": "object", "properties": {"a": false}, "required": ["a"]})),
        Just(json!({"allOf": [{"type": "string"}, {"type": "integer"}]})),
        (1usize..300).prop_map(move |d| nested(d, json!({"type": "integer"}))),
        (1usize..8000)
            .prop_map(|n| json!({"enum": (0..n).map(|i| format!("v{i}")).collect::<Vec<_>>()})),
        prop_oneof![
            Just("^(a+)+$"),
            Just("^(x{1000}){1000}$"),
            Just("(?<=a)b"),
            Just("^((a|aa)*|b*)*c{50}$"),
            Just("["),
            Just("\\p{Greek}{1,99999}"),
        ]
        .prop_map(|p| json!({"type": "string", "pattern": p})),
        any_json(),
    ]
    .boxed()
}

/// Plausible values for the fields whose names say what they hold, hostile
/// ones otherwise and some of the time.
fn field_value(name: &str) -> BoxedStrategy<Value> {
    let plausible: BoxedStrategy<Value> = match name {
        "model" => prop_oneof![
            Just(json!(MODEL_ID)),
            hostile_string().prop_map(Value::String)
        ]
        .boxed(),
        "messages" => prop_oneof![
            Just(json!([{"role": "user", "content": "Hi"}])),
            Just(json!([{"role": "system", "content": "Be brief."},
                        {"role": "user", "content": [{"type": "text", "text": "Hi"}]}])),
            Just(json!([{"role": "assistant", "content": null,
                         "tool_calls": [{"id": "c", "type": "function",
                                         "function": {"name": "f", "arguments": "{"}}]}])),
            Just(json!([{"role": "tool", "content": "x"}])),
            Just(json!([])),
        ]
        .boxed(),
        "prompt" => prop_oneof![
            Just(json!("Once upon a time")),
            Just(json!([1, 2, 3])),
            Just(json!([[1, 2], [3]])),
            Just(json!(["a", "b"])),
            Just(json!([-1, 4_000_000_000u64])),
        ]
        .boxed(),
        "tokens" => prop_oneof![Just(json!([1, 2, 3])), Just(json!([u32::MAX]))].boxed(),
        "max_tokens" | "max_completion_tokens" => prop_oneof![
            (0u32..4).prop_map(|v| json!(v)),
            Just(json!(-1)),
            Just(json!(u64::MAX)),
            Just(json!("3")),
        ]
        .boxed(),
        "n" => prop_oneof![
            (1u32..4).prop_map(|v| json!(v)),
            Just(json!(0)),
            Just(json!(17))
        ]
        .boxed(),
        "stream" | "echo" | "logprobs" | "ignore_eos" | "add_special_tokens" => {
            any::<bool>().prop_map(Value::Bool).boxed()
        }
        "response_format" => prop_oneof![
            Just(json!({"type": "json_object"})),
            Just(json!({"type": "regex"})),
            schema().prop_map(|schema| json!({"type": "json_schema",
                "json_schema": {"name": "x", "schema": schema}})),
        ]
        .boxed(),
        "tools" => prop_oneof![
            Just(json!([{"type": "function", "function": {"name": "f",
                "parameters": {"type": "object"}}}])),
            Just(json!([{"type": "function", "function": {"name": ""}}])),
            schema().prop_map(|parameters| json!([{"type": "function",
                "function": {"name": "f", "parameters": parameters}}])),
        ]
        .boxed(),
        "tool_choice" => prop_oneof![
            Just(json!("auto")),
            Just(json!("required")),
            Just(json!("none")),
            Just(json!({"type": "function", "function": {"name": "g"}})),
        ]
        .boxed(),
        "endpoint" => prop_oneof![
            Just(json!("/v1/chat/completions")),
            Just(json!("/v1/completions")),
            Just(json!("/v1/embeddings")),
        ]
        .boxed(),
        "completion_window" => prop_oneof![Just(json!("24h")), Just(json!("1h"))].boxed(),
        "temperature" | "top_p" | "presence_penalty" | "frequency_penalty"
        | "repetition_penalty" | "min_p" => (0.0f64..2.0).prop_map(|v| json!(v)).boxed(),
        "top_logprobs" | "top_k" | "min_tokens" => (0u32..6).prop_map(|v| json!(v)).boxed(),
        "seed" => any::<u32>().prop_map(|v| json!(v)).boxed(),
        "stop" => prop_oneof![Just(json!(".")), Just(json!(["\n", "the"]))].boxed(),
        "logit_bias" => prop_oneof![Just(json!({"1": 5})), Just(json!({"x": 1}))].boxed(),
        "stream_options" => Just(json!({"include_usage": true})).boxed(),
        "user" => "[a-z]{1,8}".prop_map(Value::String).boxed(),
        _ => leaf().boxed(),
    };
    prop_oneof![9 => plausible, 1 => any_json()].boxed()
}

/// The fields a request needs to be valid at all.
const CORE: [&str; 6] = [
    "model",
    "messages",
    "prompt",
    "tokens",
    "input_file_id",
    "endpoint",
];

/// A body from the route's documented fields: its core fields, usually
/// plausible, and up to three others, each plausible or hostile; so a good
/// share of bodies is valid and reaches generation. `max_tokens` is small
/// whenever it is valid.
fn json_body(fields: Vec<String>) -> BoxedStrategy<Value> {
    let core: Vec<BoxedStrategy<Option<(String, Value)>>> = fields
        .iter()
        .filter(|f| CORE.contains(&f.as_str()))
        .map(|f| {
            let name = f.clone();
            prop::option::weighted(0.9, field_value(f).prop_map(move |v| (name.clone(), v))).boxed()
        })
        .collect();
    let others: Vec<String> = fields
        .into_iter()
        .filter(|f| !CORE.contains(&f.as_str()))
        .collect();
    let extra = if others.is_empty() {
        Just(Vec::new()).boxed()
    } else {
        prop::sample::subsequence(others.clone(), 0..=3.min(others.len()))
            .prop_flat_map(|names| {
                names
                    .into_iter()
                    .map(|n| field_value(&n).prop_map(move |v| (n.clone(), v)))
                    .collect::<Vec<_>>()
            })
            .boxed()
    };
    (core, extra)
        .prop_map(|(core, extra)| {
            let mut m: Map<String, Value> = core.into_iter().flatten().collect();
            m.extend(extra);
            if m.contains_key("messages") || m.contains_key("prompt") {
                m.entry("max_tokens").or_insert(json!(2));
            }
            Value::Object(m)
        })
        .boxed()
}

#[derive(Clone, Debug)]
enum Body {
    None,
    Json(Value),
    Raw(Vec<u8>),
    Multipart(Vec<(String, String)>),
}

#[derive(Clone, Debug)]
struct Case {
    route: usize,
    path_id: String,
    query: Vec<(String, String)>,
    deadline: Option<String>,
    body: Body,
}

fn query_value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("-1".to_owned()),
        Just("0".to_owned()),
        Just("1".to_owned()),
        Just("10001".to_owned()),
        Just("99999999999999999999".to_owned()),
        Just("batch".to_owned()),
        Just("fine-tune".to_owned()),
        hostile_string(),
    ]
}

fn case(routes: &[Route]) -> impl Strategy<Value = Case> + use<> {
    let routes = routes.to_vec();
    (0..routes.len()).prop_flat_map(move |i| {
        let r = routes[i].clone();
        let body: BoxedStrategy<Body> = if let Some(fields) = r.fields.clone() {
            prop_oneof![
                6 => json_body(fields).prop_map(Body::Json),
                1 => any_json().prop_map(Body::Json),
                1 => prop::collection::vec(any::<u8>(), 0..64).prop_map(Body::Raw),
            ]
            .boxed()
        } else if r.multipart {
            let line = prop_oneof![
                Just(format!(
                    r#"{{"custom_id":"a","method":"POST","url":"/v1/chat/completions","body":{{"model":"{MODEL_ID}","messages":[{{"role":"user","content":"x"}}],"max_tokens":1}}}}"#
                )),
                Just("{\"custom_id\": 1}".to_owned()),
                Just("not json".to_owned()),
                hostile_string(),
            ];
            let lines = prop::collection::vec(line, 0..4).prop_map(|l| l.join("\n"));
            let purpose = prop_oneof![Just("batch".to_owned()), hostile_string()];
            (prop::option::of(purpose), prop::option::of(lines), any::<bool>())
                .prop_map(|(p, f, junk)| {
                    let mut parts = Vec::new();
                    if let Some(p) = p {
                        parts.push(("purpose".to_owned(), p));
                    }
                    if let Some(f) = f {
                        parts.push(("file".to_owned(), f));
                    }
                    if junk {
                        parts.push(("extra".to_owned(), "x".to_owned()));
                    }
                    Body::Multipart(parts)
                })
                .boxed()
        } else {
            prop_oneof![
                4 => Just(Body::None),
                1 => prop::collection::vec(any::<u8>(), 0..32).prop_map(Body::Raw),
            ]
            .boxed()
        };
        // The documented names (or a hostile one), with hostile values.
        let names = if r.query.is_empty() {
            vec!["limit".to_owned()]
        } else {
            r.query.clone()
        };
        let name = prop_oneof![3 => prop::sample::select(names), 1 => hostile_string()];
        let query = prop::collection::vec((name, query_value()), 0..3);
        let has_query = !r.query.is_empty();
        let deadline = if r.headers.iter().any(|h| h == "x-stoker-deadline-ms") {
            prop::option::weighted(0.2, prop_oneof![
                Just("1".to_owned()),
                Just("60000".to_owned()),
                Just("-5".to_owned()),
                Just("abc".to_owned()),
                Just("99999999999999999999".to_owned()),
            ])
            .boxed()
        } else {
            Just(None).boxed()
        };
        // A path id of "." or ".." is a dot segment: every client removes it
        // (RFC 3986 5.2.4; the WHATWG URL parser reads `%2e` as a dot too), so
        // the request reaches another route, e.g. `POST /v1/batches/./cancel`
        // is `POST /v1/batches/cancel`, a 405 the intended route does not list.
        let path_id = hostile_string().prop_filter("not a dot segment", |s| s != "." && s != "..");
        (path_id, query, deadline, body).prop_map(move |(path_id, q, deadline, body)| {
            Case {
                route: i,
                path_id,
                query: if has_query { q } else { Vec::new() },
                deadline,
                body,
            }
        })
    })
}

fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Sends the case; returns (status, content type, body text).
async fn send(addr: &str, r: &Route, c: &Case) -> (u16, String, String) {
    let mut path = r.path.replace("{id}", &encode(&c.path_id));
    if !c.query.is_empty() {
        let q: Vec<String> = c
            .query
            .iter()
            .map(|(k, v)| format!("{}={}", encode(k), encode(v)))
            .collect();
        path = format!("{path}?{}", q.join("&"));
    }
    let client = reqwest::Client::new();
    let method = reqwest::Method::from_bytes(r.method.as_bytes()).unwrap();
    let mut req = client.request(method, format!("http://{addr}{path}"));
    if let Some(d) = &c.deadline {
        req = req.header("x-stoker-deadline-ms", d);
    }
    req = match &c.body {
        Body::None => req,
        Body::Json(v) => req.json(v),
        Body::Raw(b) => req
            .header("content-type", "application/json")
            .body(b.clone()),
        Body::Multipart(parts) => {
            let mut form = reqwest::multipart::Form::new();
            for (name, value) in parts {
                form = if name == "file" {
                    form.part(
                        name.clone(),
                        reqwest::multipart::Part::bytes(value.clone().into_bytes())
                            .file_name("in.jsonl"),
                    )
                } else {
                    form.text(name.clone(), value.clone())
                };
            }
            req.multipart(form)
        }
    };
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let ctype = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap_or("").to_owned())
        .unwrap_or_default();
    let text = resp.text().await.unwrap_or_default();
    (status, ctype, text)
}

fn check(r: &Route, status: u16, ctype: &str, text: &str) -> Result<(), String> {
    let head = || format!("{} {} -> {status}", r.method, r.path);
    if !r.statuses.contains(&status) {
        return Err(format!(
            "{}: not a documented status ({:?}); body {}",
            head(),
            r.statuses,
            &text[..text.len().min(300)]
        ));
    }
    if status >= 400 {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| format!("{}: error body is not JSON ({e}): {text:.300}", head()))?;
        let e = &v["error"];
        if !(e["message"].is_string() && e["type"].is_string() && e.get("param").is_some()) {
            return Err(format!("{}: not OpenAI's error shape: {v}", head()));
        }
        let msg = e["message"].as_str().unwrap();
        if msg.contains("expected struct") || msg.contains("untagged enum") {
            return Err(format!("{}: the message names a Rust type: {msg}", head()));
        }
        if status >= 500 {
            let code = e["code"].as_str().unwrap_or_default();
            if !(status == 503 && matches!(code, "server_overloaded" | "deadline_infeasible")) {
                return Err(format!("{}: a server error: {v}", head()));
            }
        }
    } else if ctype.starts_with("text/event-stream") {
        let data: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .collect();
        if data.last() != Some(&"[DONE]") {
            return Err(format!(
                "{}: stream does not end in [DONE]: {text:.300}",
                head()
            ));
        }
        for d in &data[..data.len() - 1] {
            serde_json::from_str::<Value>(d)
                .map_err(|e| format!("{}: an SSE frame is not JSON ({e}): {d:.200}", head()))?;
        }
    }
    Ok(())
}

/// Every failure found so far, replayed first on every run.
const REGRESSIONS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/http/proptest-regressions/fuzz.txt"
);

#[test]
fn every_route_answers_hostile_input_as_documented() {
    let mut c = config();
    c.limits.max_body_bytes = 64 * 1024;
    let server = rt().block_on(start(c));
    let addr = url(&server, "").trim_start_matches("http://").to_owned();
    let routes = routes();
    let mut runner = TestRunner::new(ProptestConfig {
        cases: property::cases(400),
        rng_seed: match property::seed() {
            Some(s) => RngSeed::Fixed(s),
            None => RngSeed::Random,
        },
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(REGRESSIONS))),
        ..ProptestConfig::default()
    });
    let result = runner.run(&case(&routes), |c| {
        let r = &routes[c.route];
        let (status, ctype, text) = rt().block_on(send(&addr, r, &c));
        check(r, status, &ctype, &text).map_err(TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    server.begin_shutdown();
    rt().block_on(server.wait()).unwrap();
}
