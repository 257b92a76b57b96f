//! Bounds that a lower module reports and a higher one enforces: kept in a
//! leaf (it uses nothing of the crate) so that `error` can name them in its
//! messages and `model::config` can check a model against what the forward
//! pass supports, without either depending on the module that applies them
//! (`request` and `model::forward` depend on `error` and `model::config`).

/// Largest head dimension the forward pass's per-head norms handle without
/// allocating; a model with larger heads is refused when it loads.
pub const MAX_HEAD_DIM: usize = 512;

/// Largest `repetition_penalty` a request may ask for.
pub const MAX_REPETITION_PENALTY: f32 = 10.0;
