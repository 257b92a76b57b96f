//! Engine behaviour end to end on the real model: cancellation frees blocks,
//! sampling is reproducible per seed, stop strings and lengths end requests.

use std::time::{Duration, Instant};

use super::common::*;
use stoker_executor::{
    AttentionOrder, Engine, EngineConfig, EngineError, EngineEvent, FinishReason, Lane,
    SamplingParams,
};

fn wait_until(mut f: impl FnMut() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn cancelling_100_in_flight_sequences_returns_the_pool_to_idle() {
    let engine = engine(EngineConfig {
        max_num_seqs: 128,
        ..EngineConfig::default()
    });
    let idle = engine.stats();
    assert_eq!(idle.kv_blocks_used, 0);
    let mut handles = Vec::new();
    for i in 0..100 {
        let prompt = chat_prompt(&engine, &format!("Count from {i} to {}.", i + 50));
        let mut params = SamplingParams::greedy(200);
        params.stop_at_eos = false;
        let lane = if i % 2 == 0 {
            Lane::Interactive
        } else {
            Lane::Batch
        };
        handles.push(
            engine
                .submit(request(&engine, prompt, params, lane))
                .unwrap(),
        );
    }
    // Wait until some are decoding, then cancel every one: half explicitly,
    // half by dropping the handle.
    assert!(matches!(
        handles[0].next_output_blocking(),
        Some(EngineEvent::Delta { .. })
    ));
    wait_until(|| engine.stats().kv_blocks_used > 0, "blocks in use");
    for h in handles.iter().step_by(2) {
        h.cancel();
    }
    let mut kept = Vec::new();
    for (i, h) in handles.into_iter().enumerate() {
        if i % 2 == 0 {
            kept.push(h);
        }
    }
    for mut h in kept {
        let c = h.collect_blocking();
        assert_eq!(c.finish, Some(FinishReason::Cancelled));
    }
    wait_until(
        || engine.stats().running() == 0 && engine.stats().waiting() == 0,
        "idle engine",
    );
    let s = engine.stats();
    assert_eq!(s.kv_blocks_used, 0, "blocks leaked: {s:?}");
    assert_eq!(s.kv_blocks_free, idle.kv_blocks_free);
}

#[test]
fn the_same_seed_gives_the_same_sampled_tokens_whatever_shares_the_batch() {
    let engine = engine(EngineConfig::default());
    let prompt = chat_prompt(&engine, "Invent a name for a cat.");
    let params = SamplingParams {
        temperature: 0.9,
        top_p: 0.95,
        top_k: Some(40),
        seed: Some(1234),
        max_tokens: 16,
        stop_at_eos: false,
        logprobs: Some(5),
        // The request's own logit rules depend on its history alone.
        presence_penalty: 0.3,
        frequency_penalty: 0.7,
        repetition_penalty: 1.1,
        logit_bias: vec![(2, -5.0), (1000, 3.0)],
        ..SamplingParams::default()
    };
    let mut alone = engine
        .submit(request(
            &engine,
            prompt.clone(),
            params.clone(),
            Lane::Interactive,
        ))
        .unwrap();
    let alone = alone.collect_blocking();
    let alone = (alone.token_ids, alone.logprobs);

    let mut noise: Vec<_> = (0..5)
        .map(|i| {
            let p = chat_prompt(&engine, &format!("Say something about {i}."));
            let mut n = SamplingParams {
                temperature: 1.0,
                seed: Some(i),
                max_tokens: 20,
                ..SamplingParams::default()
            };
            n.stop_at_eos = false;
            engine.submit(request(&engine, p, n, Lane::Batch)).unwrap()
        })
        .collect();
    let mut crowd = engine
        .submit(request(&engine, prompt, params, Lane::Interactive))
        .unwrap();
    let crowd = crowd.collect_blocking();
    let crowd = (crowd.token_ids, crowd.logprobs);
    for h in noise.iter_mut() {
        h.collect_blocking();
    }
    // Tokens and log probabilities alike: the forward pass is batch-invariant.
    assert_eq!(alone.1.len(), alone.0.len());
    assert_eq!(alone, crowd);
}

#[test]
fn logprobs_are_a_log_softmax_of_the_raw_logits_one_per_token() {
    // In both summation orders: the engine's default (position) and the
    // reference's, whose logits `reference_parity` holds to candle's.
    for order in [AttentionOrder::Position, AttentionOrder::Reference] {
        let engine = engine(EngineConfig {
            attention_order: order,
            ..EngineConfig::default()
        });
        logprobs_match_one_whole_prompt_forward(&engine, order);
    }
}

fn logprobs_match_one_whole_prompt_forward(engine: &Engine, order: AttentionOrder) {
    let prompt = chat_prompt(engine, "Name a colour.");
    let params = SamplingParams {
        logprobs: Some(20),
        stop_at_eos: false,
        // Logprobs are of the raw logits: temperature must not move them.
        temperature: 1.7,
        seed: Some(3),
        max_tokens: 6,
        ..SamplingParams::default()
    };
    let c = engine
        .submit(request(engine, prompt.clone(), params, Lane::Interactive))
        .unwrap()
        .collect_blocking();
    assert_eq!(c.logprobs.len(), c.token_ids.len());
    assert_eq!(c.token_ids.len(), 6);
    for (l, &id) in c.logprobs.iter().zip(&c.token_ids) {
        assert_eq!(l.id, id);
        assert_eq!(l.top.len(), 20);
        assert!(l.top.windows(2).all(|w| w[0].1 >= w[1].1), "{l:?}");
        assert!(l.logprob <= 0.0 && l.logprob <= l.top[0].1 + 1e-6, "{l:?}");
    }
    // The first token's, against a log-softmax (f64) of the prompt's logits
    // from one forward pass over the whole prompt, its rows summed in the
    // engine's order: the same logits, whatever chunks the scheduler cut.
    // (The two orders' logits differ by up to about 0.2 on this model:
    // SmolLM2's outliers amplify last-bit differences through the layers.)
    let logits = prompt_logits_in(
        &load_model(),
        &prompt,
        order.ordered_prompt_len(prompt.len()),
    );
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let log_z = max
        + logits
            .iter()
            .map(|&v| (v as f64 - max).exp())
            .sum::<f64>()
            .ln();
    let first = &c.logprobs[0];
    let want = logits[first.id as usize] as f64 - log_z;
    assert!(
        (first.logprob as f64 - want).abs() < 1e-4,
        "{order:?}: {} vs {want}",
        first.logprob
    );
    for &(id, lp) in &first.top {
        let want = logits[id as usize] as f64 - log_z;
        assert!(
            (lp as f64 - want).abs() < 1e-4,
            "{order:?}: {id}: {lp} vs {want}"
        );
    }
    // The sampled token's entry among the top is the same number.
    for l in &c.logprobs {
        if let Some(&(_, lp)) = l.top.iter().find(|t| t.0 == l.id) {
            assert_eq!(lp, l.logprob);
        }
    }
    let best = logits
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1).then(b.0.cmp(&a.0)))
        .unwrap()
        .0;
    assert_eq!(first.top[0].0 as usize, best);
}

#[test]
fn max_tokens_ends_with_length_and_usage_counts_tokens() {
    let engine = engine(EngineConfig::default());
    let prompt = chat_prompt(&engine, "Describe the moon.");
    let n = prompt.len();
    let c = greedy_ids(&engine, prompt, 5);
    assert_eq!(c.finish, Some(FinishReason::Length));
    assert_eq!(c.usage.completion_tokens, 5);
    assert_eq!(c.usage.prompt_tokens, n);
    assert_eq!(c.token_ids.len(), 5);
    assert!(c.timings.ttft <= c.timings.total);
}

/// The warm-up's first steps (a cold first touch of the weights, a one-token
/// prompt) say nothing of serving speed: admission would read them as a
/// prefill rate of a few dozen tokens a second, or as a step-cost model that
/// prices a prompt token at tens of milliseconds, and refuse the first burst.
/// Its calibration prompt, prefilled on warm weights, does: the prefill rate
/// and the cost model come out of the warm-up measured on this machine (not
/// the prior's), with no step time (a long prefill is not a decode step).
#[test]
fn the_warm_up_measures_prefill_on_warm_weights_and_keeps_no_step_time() {
    let engine = engine(EngineConfig::default());
    let prior = stoker_executor::scheduler::CostModel::default().snapshot();
    engine.warm_up().unwrap();
    let s = engine.stats();
    assert!(
        s.steps_total >= 3,
        "the greeting's and calibration's steps: {s:?}"
    );
    assert_eq!(s.step_time_ewma, Duration::ZERO, "{s:?}");
    assert_eq!(s.decode_tokens_per_second_ewma, 0.0, "{s:?}");
    let cost = s.planner.cost;
    assert!(
        cost.observations >= 1 && cost.observations < s.steps_total,
        "only the calibration's steps are in the cost model: {cost:?} of {} steps",
        s.steps_total
    );
    assert_ne!(cost.per_token_ms, prior.per_token_ms, "{cost:?}");
    // The rate agrees with the cost model within a factor of 3 (the model
    // also prices the fixed cost and the attention the rate spreads over
    // the tokens).
    let rate = s.prefill_tokens_per_second_ewma;
    let modelled = 1000.0 / cost.per_token_ms;
    assert!(
        rate > 0.0 && rate < 3.0 * modelled && modelled < 3.0 * rate,
        "prefill {rate:.0} tok/s measured, {modelled:.0} modelled: {s:?}"
    );
    // Real prompts then move both.
    let prompt = chat_prompt(&engine, "Describe the moon.");
    greedy_ids(&engine, prompt, 2);
    wait_until(
        || engine.stats().planner.cost.observations >= cost.observations + 2,
        "the prompt's two steps in the cost model",
    );
    let s = engine.stats();
    assert!(s.step_time_ewma > Duration::ZERO, "{s:?}");
    assert!(s.prefill_tokens_per_second_ewma > 0.0, "{s:?}");
}

#[test]
fn a_stop_string_ends_the_request_and_is_never_streamed() {
    let engine = engine(EngineConfig::default());
    let prompt = chat_prompt(&engine, "What is the capital of France?");
    // Find what the model says greedily, then stop on a word from its answer.
    let free = greedy_ids(&engine, prompt.clone(), 24);
    let word = free
        .text
        .split_whitespace()
        .nth(2)
        .expect("a few words")
        .to_string();
    let params = SamplingParams {
        stop: vec![word.clone()],
        ..SamplingParams::greedy(24)
    };
    let mut h = engine
        .submit(request(&engine, prompt, params, Lane::Interactive))
        .unwrap();
    let c = h.collect_blocking();
    assert_eq!(c.finish, Some(FinishReason::Stop));
    assert!(
        !c.text.contains(&word),
        "{:?} contains stop {:?}",
        c.text,
        word
    );
    assert!(free.text.starts_with(&c.text));
}

#[test]
fn eos_ends_a_chat_answer_with_stop() {
    let engine = engine(EngineConfig::default());
    let prompt = chat_prompt(&engine, "Reply with just the word yes.");
    let mut h = engine
        .submit(request(
            &engine,
            prompt,
            SamplingParams::greedy(64),
            Lane::Interactive,
        ))
        .unwrap();
    let c = h.collect_blocking();
    assert_eq!(c.finish, Some(FinishReason::Stop), "{c:?}");
    assert!(!c.text.contains("<|im_end|>"));
}

#[test]
fn a_full_waiting_queue_is_a_typed_refusal() {
    let engine = engine(EngineConfig {
        max_num_seqs: 1,
        max_waiting_requests: 1,
        interactive_reserve_share: 0.0,
        ..EngineConfig::default()
    });
    let prompt = chat_prompt(&engine, "Hello");
    let mut params = SamplingParams::greedy(100);
    params.stop_at_eos = false;
    let mut first = engine
        .submit(request(
            &engine,
            prompt.clone(),
            params.clone(),
            Lane::Interactive,
        ))
        .unwrap();
    assert!(matches!(
        first.next_output_blocking(),
        Some(EngineEvent::Delta { .. })
    ));
    let _second = engine
        .submit(request(
            &engine,
            prompt.clone(),
            params.clone(),
            Lane::Interactive,
        ))
        .unwrap();
    let mut third = engine
        .submit(request(&engine, prompt, params, Lane::Interactive))
        .unwrap();
    match third.next_blocking() {
        Some(EngineEvent::Error(EngineError::QueueFull { .. })) => {}
        other => panic!("expected QueueFull, got {other:?}"),
    }
}
