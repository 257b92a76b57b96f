//! llama.cpp's pre-tokenizer table for byte-level BPE: for each
//! `tokenizer.ggml.pre` value, the regexes that split text before the merges
//! (as `src/llama-vocab.cpp` defines them) and whether merges are skipped for
//! pieces that are whole tokens.

/// GPT-2's word-splitting regex (llama.cpp's spelling, without the redundant
/// trailing `|\s+`: text a regex leaves unmatched is a piece of its own anyway).
const RE_GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3's regex as its tokenizer.json writes it (llama.cpp spells the
/// case-insensitive contractions out because its engine lacks `(?i:)`).
const RE_LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Jais 2: Llama 3's regex with a cascade of whitespace-run lengths.
const RE_JAIS2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}";
/// Qwen 2: Llama 3's regex with single digits.
const RE_QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 3.5: Qwen 2's regex with combining marks kept inside words.
const RE_QWEN35: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// ChatGLM 4 / GLM 4 (llama.cpp's spelling).
const RE_CHATGLM4: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Poro, BLOOM, GPT-3 Finnish: everything up to a separator.
const RE_PORO: &str = r" ?[^(\s|.,!?…。，、।۔،)]+";
/// Tekken (Mistral Nemo), as its tokenizer.json writes it.
const RE_TEKKEN: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// GPT-4o (o200k) and Llama 4, as their tokenizer.json writes it.
const RE_GPT4O: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// DeepSeek V3's word regex (after digits and CJK runs are split off).
const RE_DEEPSEEK3_WORDS: &str = r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##;

/// How one `tokenizer.ggml.pre` value splits text before byte-level BPE: the
/// regexes of llama.cpp's `llm_tokenizer_bpe` for that pre-tokenizer type, applied
/// in order, each isolating its matches (and the text between them) as pieces.
pub(super) struct PreTokenizerRule {
    /// The `tokenizer.ggml.pre` values llama.cpp maps to this rule.
    names: &'static [&'static str],
    /// The split regexes, in order.
    pub(super) regexes: &'static [&'static str],
    /// llama.cpp's `ignore_merges`: a piece that is itself a token is emitted whole.
    pub(super) ignore_merges: bool,
}

/// llama.cpp's pre-tokenizer types for byte-level BPE (`src/llama-vocab.cpp`), by
/// the `tokenizer.ggml.pre` names that select them. Where llama.cpp quotes the
/// model's original tokenizer.json regex (it rewrites `(?i:...)` and `\p{Lu}`
/// classes that its own engine lacks), the original is used here. Left out:
/// types that need llama.cpp's hand-written splitters (`kimi-k2`, `afmoe`,
/// `superbpe`), possessive quantifiers (`bailingmoe`), non-byte-level BPE
/// (`whitespace`, `sarvam-moe`) and image tokens (`chameleon`).
const BYTE_LEVEL_PRE_TOKENIZERS: &[PreTokenizerRule] = &[
    PreTokenizerRule {
        names: &["default"],
        regexes: &[
            r"[\p{P}\$\+<=>\^~\|]+",
            RE_GPT2,
            r"\p{N}+",
            "[0-9][0-9][0-9]",
        ],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ],
        regexes: &[RE_LLAMA3],
        ignore_merges: true,
    },
    PreTokenizerRule {
        names: &["dbrx", "smaug-bpe"],
        regexes: &[RE_LLAMA3],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &["jais-2"],
        regexes: &[RE_JAIS2],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &["deepseek-llm"],
        regexes: &[
            "[\r\n]",
            // Unicode's cased letters (Lu, Ll, Lt), spelled as escapes: several of them
            // (U+1FD3, U+2126, ...) would be changed by Unicode normalization of the
            // source text, which turns the ranges they end into invalid ones.
            concat!(
                "\\s?[",
                "A-Za-z\u{B5}\u{C0}-\u{D6}\u{D8}-\u{F6}\u{F8}-\u{1BA}\u{1BC}-\u{1BF}\u{1C4}-\u{293}\u{295}-\u{2AF}\u{370}-\u{373}\u{376}\u{377}\u{37B}-\u{37D}\u{37F}\u{386}\u{388}-\u{38A}\u{38C}\u{38E}-\u{3A1}\u{3A3}-\u{3F5}\u{3F7}-\u{481}\u{48A}-\u{52F}\u{531}-\u{556}\u{10A0}-\u{10C5}\u{13A0}-\u{13F5}\u{13F8}-\u{13FD}\u{1C90}-\u{1CBA}\u{1CBD}-\u{1CBF}\u{1D00}-\u{1D2B}\u{1D6B}-\u{1D77}\u{1D79}-\u{1D9A}\u{1E00}-\u{1F15}\u{1F18}-\u{1F1D}\u{1F20}-\u{1F45}\u{1F48}-\u{1F4D}\u{1F50}-\u{1F57}\u{1F59}\u{1F5B}\u{1F5D}\u{1F5F}-\u{1F7D}\u{1F80}-\u{1FB4}\u{1FB6}-\u{1FBC}\u{1FBE}\u{1FC2}-\u{1FC4}\u{1FC6}-\u{1FCC}\u{1FD0}-\u{1FD3}\u{1FD6}-\u{1FDB}\u{1FE0}-\u{1FEC}\u{1FF2}-\u{1FF4}\u{1FF6}-\u{1FFC}\u{2102}\u{2107}\u{210A}-\u{2113}\u{2115}\u{2119}-\u{211D}\u{2124}\u{2126}\u{2128}\u{212A}-\u{212D}\u{212F}-\u{2134}\u{2139}\u{213C}-\u{213F}\u{2145}-\u{2149}\u{214E}\u{2183}\u{2184}\u{2C00}-\u{2C7B}\u{2C7E}-\u{2CE4}\u{2CEB}-\u{2CEE}\u{2CF2}\u{2CF3}\u{A640}-\u{A66D}\u{A680}-\u{A69B}\u{A722}-\u{A76F}\u{A771}-\u{A787}\u{A78B}-\u{A78E}\u{AB70}-\u{ABBF}\u{FB00}-\u{FB06}\u{FB13}-\u{FB17}\u{FF21}-\u{FF3A}\u{FF41}-\u{FF5A}\u{10400}-\u{1044F}\u{104B0}-\u{104D3}\u{104D8}-\u{104FB}\u{10C80}-\u{10CB2}\u{10CC0}-\u{10CF2}\u{118A0}-\u{118DF}\u{1E900}-\u{1E943}",
                "]+"
            ),
            r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
            r"\s+$",
            "[一-龥ࠀ-一가-퟿]+",
            r"\p{N}+",
        ],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &["deepseek-coder"],
        regexes: &[
            "[\r\n]",
            r"\s?\p{L}+",
            r"\s?\p{P}+",
            "[一-龥ࠀ-一가-퟿]+",
            r"\p{N}",
        ],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &["deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"],
        regexes: &[r"\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+", RE_DEEPSEEK3_WORDS],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &["falcon"],
        regexes: &[r"[\p{P}\$\+<=>\^~\|`]+", RE_GPT2, "[0-9][0-9][0-9]"],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &[
            "starcoder",
            "refact",
            "command-r",
            "smollm",
            "codeshell",
            "exaone",
            "minerva-7b",
            "mellum2",
        ],
        regexes: &[r"\p{N}", RE_GPT2],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &[
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
            "mpt",
            "olmo",
            "jais",
            "trillion",
            "granite-docling",
            "exaone4",
        ],
        regexes: &[RE_GPT2],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &[
            "qwen2",
            "deepseek-r1-qwen",
            "kormo",
            "f2llmv2",
            "megrez",
            "stablelm2",
            "hunyuan",
            "solar-open",
        ],
        regexes: &[RE_QWEN2],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &["qwen35"],
        regexes: &[RE_QWEN35],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &["poro-chat", "bloom", "gpt3-finnish"],
        regexes: &[RE_PORO],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &["glm4", "chatglm-bpe"],
        regexes: &[RE_CHATGLM4],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &["viking"],
        regexes: &[RE_PORO, r"\p{N}"],
        ignore_merges: false,
    },
    PreTokenizerRule {
        names: &["tekken"],
        regexes: &[RE_TEKKEN],
        ignore_merges: true,
    },
    PreTokenizerRule {
        names: &["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"],
        regexes: &[RE_GPT4O],
        ignore_merges: false,
    },
];

/// The rule for a `tokenizer.ggml.pre` value, if it is in the table.
pub(super) fn pre_tokenizer_rule(name: &str) -> Option<&'static PreTokenizerRule> {
    BYTE_LEVEL_PRE_TOKENIZERS
        .iter()
        .find(|r| r.names.contains(&name))
}

/// Every `tokenizer.ggml.pre` value accepted for byte-level BPE, in table order.
pub fn supported_pre_tokenizers() -> Vec<&'static str> {
    BYTE_LEVEL_PRE_TOKENIZERS
        .iter()
        .flat_map(|r| r.names.iter().copied())
        .collect()
}
