//! The OpenAPI document, generated from the route annotations and schema
//! derives. `stoker openapi` prints it; `schemas/openapi.json` is the
//! checked-in copy and a test fails when the two drift.

use utoipa::OpenApi;

#[derive(OpenApi)]
#[openapi(
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

/// The document as pretty JSON with a trailing newline.
pub fn document() -> String {
    let mut s = ApiDoc::openapi()
        .to_pretty_json()
        .expect("the OpenAPI document serializes");
    s.push('\n');
    s
}
