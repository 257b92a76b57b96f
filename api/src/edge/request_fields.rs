//! The fields of a request that shape its sampling beyond the scalar
//! parameters: OpenAI's `response_format` (a grammar the engine enforces)
//! and `logit_bias`, each parsed and checked here with errors naming the
//! field.

use serde_json::Value;
use stoker_executor::structured::StructuredOutput;

use crate::error::{ApiError, truncate};

/// OpenAI's `response_format`: `text` (none), `json_object`, or `json_schema`
/// with its `schema`, all enforced while decoding whatever `strict` says (as
/// vLLM does). Other types are refused by name.
pub(super) fn response_format(v: Option<&Value>) -> Result<Option<StructuredOutput>, ApiError> {
    let map = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(ApiError::invalid(
                "`response_format` must be an object with a `type`",
                "response_format",
            ));
        }
    };
    let kind = map.get("type").and_then(Value::as_str).ok_or_else(|| {
        ApiError::invalid(
            "`response_format.type` must be `text`, `json_object` or `json_schema`",
            "response_format.type",
        )
    })?;
    match kind {
        "text" => Ok(None),
        "json_object" => Ok(Some(StructuredOutput::JsonObject)),
        "json_schema" => {
            let param = "response_format.json_schema";
            let js = map
                .get("json_schema")
                .and_then(Value::as_object)
                .ok_or_else(|| {
                    ApiError::invalid(
                        "`response_format.json_schema` must be an object with a `schema`",
                        param,
                    )
                })?;
            if js
                .get("name")
                .is_some_and(|n| !(n.is_string() || n.is_null()))
            {
                return Err(ApiError::invalid(
                    "`response_format.json_schema.name` must be a string",
                    "response_format.json_schema.name",
                ));
            }
            if js
                .get("strict")
                .is_some_and(|n| !(n.is_boolean() || n.is_null()))
            {
                return Err(ApiError::invalid(
                    "`response_format.json_schema.strict` must be a boolean",
                    "response_format.json_schema.strict",
                ));
            }
            let schema = js.get("schema").filter(|s| !s.is_null()).ok_or_else(|| {
                ApiError::invalid(
                    "`response_format.json_schema.schema` is required",
                    "response_format.json_schema.schema",
                )
            })?;
            let format = StructuredOutput::JsonSchema(schema.clone());
            format.validate().map_err(|e| {
                ApiError::invalid(
                    format!("`response_format`: {e}"),
                    "response_format.json_schema.schema",
                )
            })?;
            Ok(Some(format))
        }
        other => Err(ApiError::unsupported(
            "response_format.type",
            &format!("a response format of type `{}`", truncate(other, 32)),
        )),
    }
}

/// OpenAI's `logit_bias`: an object from token ids (as strings) to a bias,
/// sorted by id for the engine. Ranges and the vocabulary are checked by the
/// engine's validation.
pub(super) fn logit_bias(v: Option<&Value>) -> Result<Vec<(u32, f32)>, ApiError> {
    let param = "logit_bias";
    let map = match v {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(ApiError::invalid(
                "`logit_bias` must be an object mapping token ids to biases",
                param,
            ));
        }
    };
    let max = stoker_executor::request::MAX_LOGIT_BIAS;
    if map.len() > max {
        return Err(ApiError::invalid(
            format!(
                "at most {max} `logit_bias` entries are allowed, got {}",
                map.len()
            ),
            param,
        ));
    }
    let mut out = Vec::with_capacity(map.len());
    for (k, b) in map {
        let id: u32 = k.trim().parse().map_err(|_| {
            ApiError::invalid(
                format!("`logit_bias` key `{}` is not a token id", truncate(k, 32)),
                param,
            )
        })?;
        let bias = b.as_f64().filter(|b| b.is_finite()).ok_or_else(|| {
            ApiError::invalid(
                format!("`logit_bias` for token {id} must be a number"),
                param,
            )
        })?;
        out.push((id, bias as f32));
    }
    out.sort_by_key(|&(id, _)| id);
    if let Some(w) = out.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(ApiError::invalid(
            format!("`logit_bias` names token {} twice", w[0].0),
            param,
        ));
    }
    Ok(out)
}
