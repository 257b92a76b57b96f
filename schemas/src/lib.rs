//! Contract types shared across stoker processes: the OpenAI wire format the
//! API speaks, and (later) the messages executors and the control plane
//! exchange. Each type derives serde and a JSON Schema (`utoipa::ToSchema`) so
//! the checked-in `openapi.json` is generated from these definitions.

pub mod error;
pub mod openai;
