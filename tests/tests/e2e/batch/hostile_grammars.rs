//! A batch line whose grammar cannot be enforced (a `response_format` schema
//! whose `$ref` only refers to itself, an unsatisfiable schema, a tool whose
//! parameters nothing satisfies) fails that line with the online API's typed
//! 400, and only that line: the batch completes, its good lines are answered,
//! and each line is written exactly once.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{
    chat_line, create_batch, each_exactly_once, file_form, file_lines, ok, status_of, upload,
    wait_terminal,
};
use crate::harness::{Server, ServerOptions};

fn with_format(custom_id: &str, model: &str, schema: Value) -> Value {
    let mut line = chat_line(custom_id, model, "Give me JSON.", 4);
    line["body"]["response_format"] =
        json!({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}});
    line
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_with_a_hostile_grammar_fails_alone_with_a_typed_error() {
    let server = Server::start("batch-grammar", ServerOptions::default()).await;
    let model = server.model_id(None).await;
    let mut tool_line = chat_line("bad-tool", &model, "Call it.", 4);
    tool_line["body"]["tools"] = json!([{"type": "function", "function": {
        "name": "f", "parameters": {"not": {}}}}]);
    tool_line["body"]["tool_choice"] = json!("required");
    let lines = vec![
        chat_line("good-1", &model, "Say hi.", 3),
        with_format(
            "bad-loop",
            &model,
            json!({"$ref": "#/$defs/loop", "$defs": {"loop": {"$ref": "#/$defs/loop"}}}),
        ),
        with_format("bad-not", &model, json!({"not": {}})),
        tool_line,
        with_format("good-2", &model, json!({"type": "object"})),
    ];
    let ids: Vec<String> = lines
        .iter()
        .map(|l| l["custom_id"].as_str().unwrap().to_owned())
        .collect();
    let file = ok(
        &upload(
            &server,
            None,
            file_form("grammars.jsonl", &super::jsonl(&lines), Some("batch")),
        )
        .await,
        "upload",
    );
    let id = create_batch(&server, None, &file["id"], "/v1/chat/completions").await;
    let done = wait_terminal(
        &server,
        None,
        &id,
        Instant::now() + Duration::from_secs(120),
    )
    .await;
    assert_eq!(status_of(&done), "completed", "{done}");
    let out = file_lines(&server, None, &done["output_file_id"]).await;
    let err = file_lines(&server, None, &done["error_file_id"]).await;
    let all: Vec<&Value> = out.iter().chain(err.iter()).collect();
    each_exactly_once(&ids, &all, "a batch with hostile grammars");
    for line in all {
        let custom_id = line["custom_id"].as_str().unwrap();
        let status = &line["response"]["status_code"];
        let error = &line["response"]["body"]["error"];
        match custom_id {
            "good-1" | "good-2" => assert_eq!(status, 200, "{line}"),
            _ => {
                assert_eq!(status, 400, "{line}");
                assert_eq!(error["code"], "invalid_value", "{line}");
                let param = error["param"].as_str().unwrap_or_default();
                let expected = if custom_id == "bad-tool" {
                    "tools"
                } else {
                    "response_format"
                };
                assert!(param.starts_with(expected), "{line}");
            }
        }
    }
}
