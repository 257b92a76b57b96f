//! Incremental detokenizer tests: deltas never split a character, and their
//! concatenation always equals the full decode.

use stoker_executor::detokenize::IncrementalDetokenizer;
use stoker_executor::tokenizer::{ModelTokenizer, TokenizerError};
use stoker_test_support::TestRng;

use super::llama_cpp_vocab::llama_spm;
use super::{byte_level_char, single_byte_token, tokenizer};

/// Streams `ids` and returns the deltas (flush included) and the largest number of
/// pending tokens seen.
fn stream(tok: &ModelTokenizer, ids: &[u32], skip_special: bool) -> (Vec<String>, usize) {
    let mut detok = IncrementalDetokenizer::new(skip_special);
    let mut deltas = Vec::new();
    let mut max_pending = 0;
    for &id in ids {
        if let Some(d) = detok.push(tok, id).unwrap() {
            deltas.push(d);
        }
        max_pending = max_pending.max(detok.pending_tokens());
    }
    deltas.extend(detok.flush(tok).unwrap());
    assert_eq!(detok.pending_tokens(), 0);
    assert_eq!(detok.ids(), ids);
    (deltas, max_pending)
}

#[test]
fn streamed_deltas_concatenate_to_the_full_decode_for_random_sequences() {
    let tok = tokenizer();
    let vocab = tok.vocab_size();
    // Bytes that are never a whole character: continuation bytes and lead bytes.
    // (The vocabulary lacks bytes that never occur in UTF-8, such as 0xC0.)
    let partial: Vec<u32> = (0x80..=0xFFu8)
        .filter_map(|b| tok.token_to_id(&byte_level_char(b).to_string()))
        .collect();
    assert!(
        partial.len() >= 0x40 + 0x30,
        "{} partial-byte tokens",
        partial.len()
    );
    let emoji = tok.encode("😀👍🏽 你好 Привет").unwrap();
    let mut rng = TestRng::new(0x5EED_0F70_C0DE);
    for case in 0..300 {
        let len = rng.below(40);
        let ids: Vec<u32> = (0..len)
            .map(|_| match rng.below(10) {
                0..=3 => partial[rng.below(partial.len())],
                4 => rng.below(17) as u32, // special tokens
                5 => emoji[rng.below(emoji.len())],
                _ => rng.below(vocab) as u32,
            })
            .collect();
        for skip_special in [false, true] {
            let (deltas, _) = stream(tok, &ids, skip_special);
            let full = tok.decode(&ids, skip_special).unwrap();
            assert_eq!(
                deltas.concat(),
                full,
                "case {case}, skip {skip_special}, ids {ids:?}"
            );
            assert!(deltas.iter().all(|d| !d.is_empty()));
        }
    }
}

#[test]
fn valid_text_streams_without_replacement_characters_and_with_a_short_window() {
    let tok = tokenizer();
    for text in super::ROUND_TRIP_TEXTS {
        let ids = tok.encode(text).unwrap();
        let (deltas, max_pending) = stream(tok, &ids, false);
        assert_eq!(deltas.concat(), *text);
        assert!(deltas.iter().all(|d| !d.contains('\u{FFFD}')), "{deltas:?}");
        assert!(max_pending <= 3, "pending window grew to {max_pending}");
    }
}

#[test]
fn a_character_split_across_tokens_is_held_back_until_complete() {
    let tok = tokenizer();
    let euro = "€".as_bytes(); // E2 82 AC
    let ids: Vec<u32> = euro.iter().map(|&b| single_byte_token(tok, b)).collect();
    let mut detok = IncrementalDetokenizer::new(false);
    assert_eq!(detok.push(tok, ids[0]).unwrap(), None);
    assert_eq!(detok.push(tok, ids[1]).unwrap(), None);
    assert_eq!(detok.push(tok, ids[2]).unwrap().as_deref(), Some("€"));
    assert_eq!(detok.flush(tok).unwrap(), None);
}

#[test]
fn a_sequence_ending_inside_a_character_flushes_a_replacement_character() {
    let tok = tokenizer();
    let mut detok = IncrementalDetokenizer::new(false);
    assert_eq!(detok.push(tok, 19556).unwrap().as_deref(), Some("Hello"));
    assert_eq!(detok.push(tok, single_byte_token(tok, 0xE2)).unwrap(), None);
    assert_eq!(detok.flush(tok).unwrap().as_deref(), Some("\u{FFFD}"));
}

#[test]
fn skipped_special_tokens_produce_no_text() {
    let tok = tokenizer();
    let ids = tok.encode("Hi<|im_end|> there<|endoftext|>").unwrap();
    let (kept, _) = stream(tok, &ids, false);
    assert_eq!(kept.concat(), "Hi<|im_end|> there<|endoftext|>");
    let (skipped, _) = stream(tok, &ids, true);
    assert_eq!(skipped.concat(), "Hi there");
}

#[test]
fn pushing_an_out_of_range_id_is_a_typed_error() {
    let tok = tokenizer();
    let mut detok = IncrementalDetokenizer::new(false);
    let err = detok.push(tok, 1_000_000).unwrap_err();
    assert!(
        matches!(err, TokenizerError::IdOutOfRange { .. }),
        "{err:?}"
    );
    assert!(detok.ids().is_empty(), "a refused id is not recorded");
}

// ---- SentencePiece: `▁` spaces, a stripped prefix space and `<0xXX>` bytes. ----

/// The id of SentencePiece's byte-fallback token `<0xXX>`.
fn spm_byte(tok: &ModelTokenizer, byte: u8) -> u32 {
    tok.token_to_id(&format!("<0x{byte:02X}>"))
        .unwrap_or_else(|| panic!("no byte token for {byte:#04x}"))
}

#[test]
fn sentencepiece_text_streams_like_its_full_decode() {
    let tok = llama_spm();
    for text in super::ROUND_TRIP_TEXTS {
        let ids = tok.encode(text).unwrap();
        let full = tok.decode(&ids, false).unwrap();
        assert_eq!(full, *text, "ids {ids:?}");
        let (deltas, max_pending) = stream(tok, &ids, false);
        assert_eq!(deltas.concat(), full);
        assert!(deltas.iter().all(|d| !d.contains('\u{FFFD}')), "{deltas:?}");
        assert!(max_pending <= 3, "pending window grew to {max_pending}");
    }
}

#[test]
fn sentencepiece_byte_fallback_is_held_back_until_the_character_completes() {
    let tok = llama_spm();
    let hello = tok.encode("Hello").unwrap();
    assert_eq!(hello.len(), 1);
    let mut detok = IncrementalDetokenizer::new(false);
    assert_eq!(detok.push(tok, hello[0]).unwrap().as_deref(), Some("Hello"));
    let space = tok.token_to_id("▁").unwrap();
    assert_eq!(detok.push(tok, space).unwrap().as_deref(), Some(" "));
    for (i, &b) in "😀".as_bytes().iter().enumerate() {
        let delta = detok.push(tok, spm_byte(tok, b)).unwrap();
        assert_eq!(delta.as_deref(), (i == 3).then_some("😀"), "byte {i}");
    }
    assert_eq!(detok.push(tok, spm_byte(tok, 0xE2)).unwrap(), None);
    assert_eq!(detok.flush(tok).unwrap().as_deref(), Some("\u{FFFD}"));
}

#[test]
fn sentencepiece_random_sequences_concatenate_to_the_full_decode() {
    let tok = llama_spm();
    let vocab = tok.vocab_size();
    let emoji = tok.encode("😀👍🏽 你好 Привет").unwrap();
    let mut rng = TestRng::new(0x5EED_5EED_0F5B);
    for case in 0..300 {
        let len = rng.below(40);
        let ids: Vec<u32> = (0..len)
            .map(|_| match rng.below(10) {
                0..=3 => spm_byte(tok, 0x80 + rng.below(0x80) as u8),
                4 => rng.below(3) as u32, // <unk> <s> </s>
                5 => emoji[rng.below(emoji.len())],
                _ => rng.below(vocab) as u32,
            })
            .collect();
        for skip_special in [false, true] {
            let (deltas, _) = stream(tok, &ids, skip_special);
            let full = tok.decode(&ids, skip_special).unwrap();
            assert_eq!(
                deltas.concat(),
                full,
                "case {case}, skip {skip_special}, ids {ids:?}"
            );
        }
    }
}

/// The deltas of `generated` streamed after `prompt`, concatenated (flush included).
fn stream_after(tok: &ModelTokenizer, prompt: &[u32], generated: &[u32]) -> String {
    let mut detok = IncrementalDetokenizer::after_prompt(true, prompt);
    let mut out = String::new();
    for &id in generated {
        out.extend(detok.push(tok, id).unwrap());
    }
    out.extend(detok.flush(tok).unwrap());
    assert_eq!(
        detok.ids(),
        generated,
        "the prompt context is not a pushed id"
    );
    out
}

#[test]
fn a_generation_keeps_the_space_of_its_first_sentencepiece_word() {
    // SentencePiece decoding drops the word-boundary space of a sequence's
    // first token; a generation is not a sequence's start, so its first word
    // keeps its space (" Paris"), as llama.cpp and vLLM stream it.
    let tok = llama_spm();
    let prompt = tok.encode("The capital of France is").unwrap();
    let full = tok
        .encode("The capital of France is Paris, of course.")
        .unwrap();
    assert_eq!(&full[..prompt.len()], prompt.as_slice());
    let generated = &full[prompt.len()..];
    assert_eq!(stream_after(tok, &prompt, generated), " Paris, of course.");
    // Without the prompt as context the space is lost: what this guards against.
    let (alone, _) = stream(tok, generated, true);
    assert_eq!(alone.concat(), "Paris, of course.");
    // An empty prompt behaves as no context.
    assert_eq!(stream_after(tok, &[], generated), "Paris, of course.");
}

#[test]
fn byte_level_generations_stream_the_same_with_or_without_the_prompt() {
    let tok = tokenizer();
    let prompt = tok.encode("Count: one, two,").unwrap();
    let full = tok.encode("Count: one, two, three — 四五 😀!").unwrap();
    assert_eq!(&full[..prompt.len()], prompt.as_slice());
    let generated = &full[prompt.len()..];
    let (alone, _) = stream(tok, generated, true);
    assert_eq!(stream_after(tok, &prompt, generated), alone.concat());
    assert_eq!(alone.concat(), " three — 四五 😀!");
}
