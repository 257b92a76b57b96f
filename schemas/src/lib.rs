//! Contract types shared across stoker processes: the OpenAI wire format the
//! API speaks (chat and completions in `openai`, files and batches in
//! `batch`), the control-plane event payloads, and (later) the messages
//! executors exchange over Kafka (`transport`). The OpenAI types derive
//! `utoipa::ToSchema` so the checked-in `openapi.json` is generated from these
//! definitions; the event payloads derive `schemars::JsonSchema` for the
//! checked-in `events/*.schema.json`. Every error code any of them carries
//! is one [`codes::ErrorCode`].

pub mod batch;
pub mod codes;
pub mod error;
pub mod events;
pub mod ids;
pub mod openai;
pub mod transport;
