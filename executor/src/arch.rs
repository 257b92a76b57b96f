//! The architecture families the forward pass implements, by their GGUF
//! `general.architecture` names.
//!
//! A leaf module (it uses nothing of the crate) so that `error` can list the
//! supported architectures in its message without depending on `model`, which
//! depends on `error`. `model::config` re-exports both items.

/// Architectures (`general.architecture`) whose GGUF layout our forward pass implements.
pub const SUPPORTED_ARCHITECTURES: &[&str] =
    &["llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3"];

/// The architecture family, parsed from `general.architecture`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Llama,
    Qwen2,
    Qwen3,
    Phi3,
    Gemma2,
    Gemma3,
}

impl Arch {
    pub fn parse(name: &str) -> Option<Arch> {
        Some(match name {
            "llama" => Arch::Llama,
            "qwen2" => Arch::Qwen2,
            "qwen3" => Arch::Qwen3,
            "phi3" => Arch::Phi3,
            "gemma2" => Arch::Gemma2,
            "gemma3" => Arch::Gemma3,
            _ => return None,
        })
    }

    pub fn is_gemma(self) -> bool {
        matches!(self, Arch::Gemma2 | Arch::Gemma3)
    }
}
