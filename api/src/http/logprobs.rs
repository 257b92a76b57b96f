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
        push(&mut out, tok, l.id, Some(l), offset);
    }
    out
}

/// The legacy `logprobs` of an echoed prompt `ids`: the first token with
/// null (nothing precedes it), each later one with its score (`scores[k]`
/// scores `ids[k + 1]`); a token without a score is null too.
pub fn echoed_prompt(
    tok: &ModelTokenizer,
    ids: &[u32],
    scores: &[TokenLogprob],
    offset: &mut u64,
) -> CompletionLogprobs {
    let mut out = CompletionLogprobs::default();
    for (k, &id) in ids.iter().enumerate() {
        let score = k.checked_sub(1).and_then(|j| scores.get(j));
        push(&mut out, tok, id, score, offset);
    }
    out
}

/// `b` after `a`, as one choice's log probabilities.
pub fn concat(mut a: CompletionLogprobs, b: CompletionLogprobs) -> CompletionLogprobs {
    a.tokens.extend(b.tokens);
    a.token_logprobs.extend(b.token_logprobs);
    a.top_logprobs.extend(b.top_logprobs);
    a.text_offset.extend(b.text_offset);
    a
}

fn push(
    out: &mut CompletionLogprobs,
    tok: &ModelTokenizer,
    id: u32,
    l: Option<&TokenLogprob>,
    offset: &mut u64,
) {
    let (token, _) = spell(tok, id);
    out.text_offset.push(*offset);
    *offset += token.chars().count() as u64;
    out.tokens.push(token);
    out.token_logprobs.push(l.map(|l| l.logprob));
    out.top_logprobs.push(l.map(|l| {
        let mut top = BTreeMap::new();
        for &(id, logprob) in &l.top {
            // Two ids can spell the same text; the likelier (first) one stays.
            top.entry(spell(tok, id).0).or_insert(logprob);
        }
        top
    }));
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
        let top = a.top_logprobs[0].as_ref().unwrap();
        assert_eq!(top.len(), 1);
        assert_eq!(top.values().next(), Some(&-0.5));

        // An echoed prompt: the first token has no score, the rest theirs,
        // and the output's offsets continue the prompt's.
        let mut offset = 0;
        let p = echoed_prompt(&tok, &ids, &lps[1..], &mut offset);
        assert_eq!(p.token_logprobs[0], None);
        assert_eq!(p.top_logprobs[0], None);
        assert!(p.token_logprobs[1..].iter().all(|l| *l == Some(-0.5)));
        let spelled: u64 = p.tokens.iter().map(|t| t.chars().count() as u64).sum();
        let out = completion(&tok, head, &mut offset);
        let both = concat(p, out);
        assert_eq!(both.tokens.len(), ids.len() + 3);
        assert_eq!(
            both.text_offset[ids.len()],
            spelled,
            "the output's first token starts after the prompt's tokens"
        );
    }
}
