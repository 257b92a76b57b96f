//! Log probabilities in OpenAI's two shapes: chat's `logprobs.content[]`
//! (token, logprob, bytes, top_logprobs) and the legacy completions object
//! (tokens, token_logprobs, top_logprobs, text_offset).
//!
//! The engine sends token ids and numbers; the served tokenizer spells them
//! here, so the executor and the wire stay free of strings per token. A
//! token's `token` is its bytes read as UTF-8 with U+FFFD for a character
//! split across tokens, as OpenAI and vLLM show it; `bytes` are exact.

use std::collections::BTreeMap;

use stoker_executor::TokenLogprob;
use stoker_executor::tokenizer::ModelTokenizer;
use stoker_schemas::openai::{ChatLogprobs, ChatTokenLogprob, CompletionLogprobs, TopLogprob};

fn spell(tok: &ModelTokenizer, id: u32) -> (String, Vec<u8>) {
    let bytes = tok.token_bytes(id);
    (String::from_utf8_lossy(&bytes).into_owned(), bytes)
}

/// Chat's `logprobs` for these tokens.
pub fn chat(tok: &ModelTokenizer, lps: &[TokenLogprob]) -> ChatLogprobs {
    ChatLogprobs {
        content: lps
            .iter()
            .map(|l| {
                let (token, bytes) = spell(tok, l.id);
                ChatTokenLogprob {
                    token,
                    logprob: l.logprob,
                    bytes,
                    top_logprobs: l
                        .top
                        .iter()
                        .map(|&(id, logprob)| {
                            let (token, bytes) = spell(tok, id);
                            TopLogprob {
                                token,
                                logprob,
                                bytes,
                            }
                        })
                        .collect(),
                }
            })
            .collect(),
    }
}

/// The legacy completions `logprobs` for these tokens; `offset` is where
/// the first one's text starts in the choice's text (characters), and is
/// advanced past them, so a stream's chunks continue one another.
pub fn completion(
    tok: &ModelTokenizer,
    lps: &[TokenLogprob],
    offset: &mut u64,
) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    for l in lps {
        let (token, _) = spell(tok, l.id);
        out.text_offset.push(*offset);
        *offset += token.chars().count() as u64;
        out.tokens.push(token);
        out.token_logprobs.push(l.logprob);
        let mut top = BTreeMap::new();
        for &(id, logprob) in &l.top {
            // Two ids can spell the same text; the likelier (first) one stays.
            top.entry(spell(tok, id).0).or_insert(logprob);
        }
        out.top_logprobs.push(top);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spelled_tokens_concatenate_to_the_text_and_offsets_continue() {
        let model = stoker_test_support::model_path();
        let tok = stoker_executor::tokenizer::ModelTokenizer::from_gguf_file(&model)
            .unwrap_or_else(|e| panic!("load the tokenizer of {}: {e}", model.display()));
        let text = "Héllo, wörld! 日本語 ok";
        let ids = tok.encode(text).unwrap();
        let lps: Vec<TokenLogprob> = ids
            .iter()
            .map(|&id| TokenLogprob {
                id,
                logprob: -0.5,
                top: vec![(id, -0.5), (id, -0.6)],
            })
            .collect();
        let c = chat(&tok, &lps);
        let bytes: Vec<u8> = c.content.iter().flat_map(|t| t.bytes.clone()).collect();
        assert_eq!(String::from_utf8(bytes).unwrap(), text);
        assert_eq!(c.content[0].top_logprobs.len(), 2);
        let (head, tail) = lps.split_at(3);
        let mut offset = 0;
        let a = completion(&tok, head, &mut offset);
        let b = completion(&tok, tail, &mut offset);
        assert_eq!(a.text_offset[0], 0);
        let joined: String = a.tokens.iter().chain(&b.tokens).cloned().collect();
        assert_eq!(
            b.text_offset[0],
            a.tokens
                .iter()
                .map(|t| t.chars().count() as u64)
                .sum::<u64>()
        );
        assert_eq!(offset, joined.chars().count() as u64);
        // The same text twice in the top keeps one entry, the likelier.
        assert_eq!(a.top_logprobs[0].len(), 1);
        assert_eq!(a.top_logprobs[0].values().next(), Some(&-0.5));
    }
}
