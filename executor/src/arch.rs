//! The architecture families the forward pass implements, by their GGUF
//! `general.architecture` names.
//!
//! The Hugging Face class names (`architectures[0]` of `config.json`) served
//! are here too, with the family each is.
//!
//! A leaf module (it uses nothing of the crate) so that `error` can list the
//! supported architectures and classes in its messages without depending on
//! `model`, which depends on `error`. `model::config` re-exports `Arch` and
//! `SUPPORTED_ARCHITECTURES`.

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

/// Hugging Face class names (`architectures[0]`) and the family each is.
pub const SUPPORTED_HF_ARCHITECTURES: &[(&str, Arch)] = &[
    ("LlamaForCausalLM", Arch::Llama),
    ("MistralForCausalLM", Arch::Llama),
    ("Qwen2ForCausalLM", Arch::Qwen2),
    ("Qwen3ForCausalLM", Arch::Qwen3),
    ("Phi3ForCausalLM", Arch::Phi3),
    ("Gemma2ForCausalLM", Arch::Gemma2),
    ("Gemma3ForCausalLM", Arch::Gemma3),
    ("Gemma3ForConditionalGeneration", Arch::Gemma3),
];

/// The Hugging Face class names served, for messages.
pub fn supported_hf_classes() -> Vec<&'static str> {
    SUPPORTED_HF_ARCHITECTURES.iter().map(|(c, _)| *c).collect()
}
