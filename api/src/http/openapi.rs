//! The OpenAPI document, generated from the route annotations and schema
//! derives. `stoker openapi` prints it; `schemas/openapi.json` is the
//! checked-in copy and a test fails when the two drift.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{ContentBuilder, OpenApi as Document, Ref, RefOr, ResponseBuilder};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    modifiers(&BearerKeys),
    info(
        title = "stoker",
        description = "OpenAI-compatible LLM serving with typed backpressure and provenance.",
        license(name = "Apache-2.0")
    ),
    paths(
        crate::http::routes::completions::chat_completions,
        crate::http::routes::completions::completions,
        crate::http::routes::models::list_models,
        crate::http::routes::models::get_model,
        crate::http::routes::tokenize::tokenize,
        crate::http::routes::tokenize::detokenize,
        crate::http::routes::health::live,
        crate::http::routes::health::ready,
        crate::http::routes::health::metrics,
        crate::http::routes::files::upload,
        crate::http::routes::files::list,
        crate::http::routes::files::get,
        crate::http::routes::files::content,
        crate::http::routes::files::delete,
        crate::http::routes::batches::create,
        crate::http::routes::batches::list,
        crate::http::routes::batches::get,
        crate::http::routes::batches::cancel,
    ),
    components(schemas(
        stoker_schemas::error::ErrorBody,
        stoker_schemas::error::ErrorDetail,
        stoker_schemas::openai::ChatCompletionRequest,
        stoker_schemas::openai::ChatCompletion,
        stoker_schemas::openai::ChatCompletionChunk,
        stoker_schemas::openai::CompletionRequest,
        stoker_schemas::openai::Completion,
        stoker_schemas::openai::ModelList,
        stoker_schemas::openai::ModelCard,
        stoker_schemas::openai::TokenizeRequest,
        stoker_schemas::openai::TokenizeResponse,
        stoker_schemas::openai::DetokenizeRequest,
        stoker_schemas::openai::DetokenizeResponse,
        stoker_schemas::batch::FileObject,
        stoker_schemas::batch::FileList,
        stoker_schemas::batch::FileDeleted,
        stoker_schemas::batch::FileUpload,
        stoker_schemas::batch::CreateBatchRequest,
        stoker_schemas::batch::Batch,
        stoker_schemas::batch::BatchList,
        stoker_schemas::batch::BatchRequestCounts,
        stoker_schemas::batch::BatchErrors,
        stoker_schemas::batch::BatchError,
        stoker_schemas::batch::BatchOutputLine,
        stoker_schemas::batch::BatchResponse,
        stoker_schemas::batch::BatchLineError,
    ))
)]
pub struct ApiDoc;

/// Every route but the probes and metrics takes a bearer API key: the
/// document says so once, here, with the 401 (no valid key) and 403 (the key
/// lacks the route's scope) each such route can answer, the 408 of a body
/// that stopped arriving on those that take one, and the 503 and 507 of the
/// routes that write files and batches (their records and objects).
struct BearerKeys;

impl Modify for BearerKeys {
    fn modify(&self, doc: &mut Document) {
        doc.components
            .get_or_insert_with(Default::default)
            .add_security_scheme(
                "api_key",
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
            );
        for (path, item) in doc.paths.paths.iter_mut() {
            if path.starts_with("/health/") || path == "/metrics" {
                continue;
            }
            let records = path.starts_with("/v1/files") || path.starts_with("/v1/batches");
            let ops = [
                (&mut item.get, false),
                (&mut item.post, records),
                (&mut item.put, records),
                (&mut item.delete, records),
            ];
            for (op, writes) in ops {
                let Some(op) = op else { continue };
                op.security = Some(vec![SecurityRequirement::new(
                    "api_key",
                    Vec::<String>::new(),
                )]);
                let mut answers = vec![
                    ("401", "No valid API key (`invalid_api_key`)"),
                    (
                        "403",
                        "The key lacks this route's scope (`insufficient_scope`)",
                    ),
                ];
                if op.request_body.is_some() {
                    answers.push((
                        "408",
                        "Nothing of the body arrived for `limits.body_idle_timeout_ms` \
                         (`request_timeout`)",
                    ));
                }
                if writes {
                    answers.push((
                        "503",
                        "The control-plane database or object storage is unreachable; \
                         nothing was changed (`not_ready`, with `Retry-After`)",
                    ));
                    answers.push((
                        "507",
                        "The disk under the database or object storage is full; nothing \
                         was changed (`storage_full`, with `Retry-After`)",
                    ));
                }
                for (code, what) in answers {
                    op.responses
                        .responses
                        .entry(code.to_owned())
                        .or_insert_with(|| {
                            RefOr::T(
                                ResponseBuilder::new()
                                    .description(what)
                                    .content(
                                        "application/json",
                                        ContentBuilder::new()
                                            .schema(Some(Ref::from_schema_name("ErrorBody")))
                                            .build(),
                                    )
                                    .build(),
                            )
                        });
                }
            }
        }
    }
}

/// The document as pretty JSON with a trailing newline.
pub fn document() -> String {
    let mut s = ApiDoc::openapi()
        .to_pretty_json()
        .expect("the OpenAPI document serializes");
    s.push('\n');
    s
}
