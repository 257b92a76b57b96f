//! `n` choices of one request: the prompt is computed once (the siblings
//! take it from the prefix cache), and each choice is what the same request
//! with its own seed gives alone.

use stoker_executor::{BLOCK_SIZE, EngineConfig, FinishReason, Lane, SamplingParams};

use super::common::*;

#[test]
fn n_choices_prefill_once_and_each_matches_its_seed_alone() {
    let engine = engine(EngineConfig::default());
    let prompt = chat_prompt(
        &engine,
        "Write three sentences about lighthouses, their keepers and the sea at night.",
    );
    let params = SamplingParams {
        temperature: 1.0,
        seed: Some(40),
        max_tokens: 12,
        stop_at_eos: false,
        logprobs: Some(2),
        ..SamplingParams::default()
    };
    let req = request(&engine, prompt.clone(), params.clone(), Lane::Interactive);
    let choices: Vec<_> = engine
        .submit_n(req, 4)
        .unwrap()
        .into_iter()
        .map(|mut h| h.collect_blocking())
        .collect();
    let full_blocks = prompt.len() / BLOCK_SIZE * BLOCK_SIZE;
    for (i, c) in choices.iter().enumerate() {
        assert!(c.error.is_none(), "{:?}", c.error);
        assert_eq!(c.finish, Some(FinishReason::Length));
        assert_eq!(c.usage.prompt_tokens, prompt.len());
        if i > 0 {
            // Every full block of the prompt came from the first choice.
            assert!(
                c.usage.cached_prompt_tokens >= full_blocks.min(prompt.len() - 1),
                "choice {i} computed its prompt again: {} cached of {}",
                c.usage.cached_prompt_tokens,
                prompt.len()
            );
        }
        let alone = SamplingParams {
            seed: Some(40 + i as u64),
            ..params.clone()
        };
        let want = engine
            .submit(request(&engine, prompt.clone(), alone, Lane::Interactive))
            .unwrap()
            .collect_blocking();
        assert_eq!(c.token_ids, want.token_ids, "choice {i}");
        for (a, b) in c.logprobs.iter().zip(&want.logprobs) {
            assert!((a.logprob - b.logprob).abs() < 1e-5, "choice {i}");
        }
    }
    let distinct: std::collections::HashSet<_> = choices.iter().map(|c| &c.token_ids).collect();
    assert!(distinct.len() > 1, "four seeds drew one answer");
}
