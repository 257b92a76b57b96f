//! Prompt scoring (`prompt_logprobs`, the completions route's `echo`): each
//! prompt token's log probability given the tokens before it, from the same
//! forward pass that fills the KV cache, whatever chunks the scheduler cuts,
//! however often the sequence is preempted, and never served from the
//! prefix cache (a cached block has no logits).

use super::common::*;
use stoker_executor::model::{ForwardChunk, KvStorage, Workspace};
use stoker_executor::{
    AttentionOrder, BLOCK_SIZE, BlockId, Engine, EngineConfig, EngineEvent, FinishReason, Lane,
    Model, SamplingParams, TokenLogprob,
};

fn scoring(top: usize, max_tokens: usize) -> SamplingParams {
    SamplingParams {
        prompt_logprobs: Some(top),
        stop_at_eos: false,
        ..SamplingParams::greedy(max_tokens)
    }
}

/// Every row's logits of `prompt` in one forward pass, each row a chunk of
/// its own, summed in the order of a prompt `ordered` long.
fn every_row_logits(model: &Model, prompt: &[u32], ordered: usize) -> Vec<Vec<f32>> {
    let table: Vec<BlockId> = (0..prompt.len().div_ceil(BLOCK_SIZE) as u32)
        .map(BlockId)
        .collect();
    let mut kv = KvStorage::new(&model.config, table.len());
    let chunks: Vec<ForwardChunk<'_>> = (0..prompt.len())
        .map(|i| ForwardChunk {
            tokens: &prompt[i..i + 1],
            start_pos: i,
            block_table: &table,
            logits: true,
            score: None,
            prompt_len: ordered,
        })
        .collect();
    model
        .forward(&chunks, &mut kv, &mut Workspace::default())
        .unwrap()
}

fn log_z(logits: &[f32]) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    max + logits
        .iter()
        .map(|&v| (v as f64 - max).exp())
        .sum::<f64>()
        .ln()
}

#[test]
fn each_prompt_token_is_scored_within_1e_4_of_a_log_softmax_of_the_row_before_it() {
    let model = load_model();
    for order in [AttentionOrder::Position, AttentionOrder::Reference] {
        let engine = engine(EngineConfig {
            attention_order: order,
            ..EngineConfig::default()
        });
        let prompt = chat_prompt(&engine, "Score every token of this sentence, please.");
        let mut h = engine
            .submit(request(
                &engine,
                prompt.clone(),
                scoring(5, 0),
                Lane::Interactive,
            ))
            .unwrap();
        let c = h.collect_blocking();
        assert!(c.error.is_none(), "{:?}", c.error);
        assert_eq!(c.finish, Some(FinishReason::Length));
        assert_eq!(
            c.usage.completion_tokens, 0,
            "max_tokens 0 generates nothing"
        );
        assert!(c.token_ids.is_empty() && c.text.is_empty());
        let scores = c.prompt_logprobs.expect("the prompt's scores");
        assert_eq!(scores.len(), prompt.len() - 1);

        let rows = every_row_logits(&model, &prompt, order.ordered_prompt_len(prompt.len()));
        for (k, s) in scores.iter().enumerate() {
            assert_eq!(s.id, prompt[k + 1], "entry {k} scores token {}", k + 1);
            let row = &rows[k];
            let z = log_z(row);
            let want = row[s.id as usize] as f64 - z;
            assert!(
                (s.logprob as f64 - want).abs() < 1e-4,
                "{order:?} token {}: {} vs {want}",
                k + 1,
                s.logprob
            );
            assert_eq!(s.top.len(), 5);
            for &(id, lp) in &s.top {
                let want = row[id as usize] as f64 - z;
                assert!(
                    (lp as f64 - want).abs() < 1e-4,
                    "{order:?}: {id}: {lp} vs {want}"
                );
            }
            assert!(s.top.windows(2).all(|w| w[0].1 >= w[1].1), "{s:?}");
        }
    }
}

/// Scores (and the greedy tokens after them) of `prompt` on `engine`,
/// preempting the sequence once its prefill has started when `preempt`.
fn scored_run(
    engine: &Engine,
    prompt: &[u32],
    preempt: bool,
) -> (Vec<TokenLogprob>, Vec<u32>, u32) {
    let mut params = scoring(3, 4);
    params.logprobs = Some(1);
    let mut h = engine
        .submit(request(engine, prompt.to_vec(), params, Lane::Interactive))
        .unwrap();
    match h.next_blocking() {
        Some(EngineEvent::Started { .. }) => {}
        other => panic!("expected Started, got {other:?}"),
    }
    if preempt {
        engine.preempt_for_test(h.seq());
    }
    let mut scores = None;
    let mut ids = Vec::new();
    let mut preemptions = 0;
    while let Some(ev) = h.next_blocking() {
        match ev {
            EngineEvent::PromptLogprobs(p) => {
                assert!(ids.is_empty(), "the scores come before any token");
                assert!(scores.replace(p).is_none(), "the scores come once");
            }
            EngineEvent::Delta { token_ids, .. } => ids.extend(token_ids),
            EngineEvent::Finished { timings, .. } => preemptions = timings.preemptions,
            other => panic!("unexpected {other:?}"),
        }
    }
    (scores.expect("the prompt's scores"), ids, preemptions)
}

#[test]
fn chunked_preempted_and_cached_runs_score_the_prompt_identically() {
    let whole = engine(EngineConfig::default());
    // A long prompt in 16-token chunks, preempted while it prefills: the
    // rows it recomputes are not scored twice, and none is missing.
    let chunked = engine(EngineConfig {
        max_batched_tokens: 16,
        max_num_seqs: 8,
        ..EngineConfig::default()
    });
    let text = PROMPTS.join(" ").repeat(4);
    let prompt = chat_prompt(&whole, &text);
    assert!(prompt.len() > 250, "{} tokens", prompt.len());

    // The same prompt ran before without scoring: its blocks are cached,
    // and the scoring run must not take them.
    let plain = greedy_ids(&whole, prompt.clone(), 4);
    let (scores, ids, _) = scored_run(&whole, &prompt, false);
    assert_eq!(scores.len(), prompt.len() - 1);
    assert_eq!(ids, plain.token_ids, "scoring does not change the output");

    let (again, ids_again, preemptions) = scored_run(&chunked, &prompt, true);
    assert!(preemptions >= 1, "the scoring run was not preempted");
    assert_eq!(again, scores, "chunking and preemption changed the scores");
    assert_eq!(ids_again, ids);

    // The plain request's cache hits still happen after a scoring run.
    let after = greedy_ids(&whole, prompt.clone(), 4);
    assert!(after.usage.cached_prompt_tokens > 0);
}

#[test]
fn choices_share_one_scoring_of_their_prompt() {
    let engine = engine(EngineConfig::default());
    let prompt = chat_prompt(&engine, "Two choices, one prompt.");
    let params = SamplingParams {
        temperature: 0.8,
        seed: Some(5),
        ..scoring(2, 3)
    };
    let handles = engine
        .submit_n(
            request(&engine, prompt.clone(), params, Lane::Interactive),
            2,
        )
        .unwrap();
    let mut scored = Vec::new();
    for mut h in handles {
        let c = h.collect_blocking();
        assert!(c.error.is_none(), "{:?}", c.error);
        assert_eq!(c.token_ids.len(), 3);
        scored.push(c.prompt_logprobs.is_some());
    }
    assert_eq!(scored, vec![true, false], "the first choice scores it");
}
