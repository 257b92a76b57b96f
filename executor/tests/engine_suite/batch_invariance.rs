//! Batch invariance, exact: a sequence's greedy tokens must not depend on what
//! shares its steps, nor on being preempted and recomputed.

use super::common::*;
use stoker_executor::{EngineConfig, EngineEvent, Lane, SamplingParams};

const NEW_TOKENS: usize = 24;

#[test]
fn greedy_tokens_are_identical_alone_in_a_crowd_and_after_preemption() {
    let engine = engine(EngineConfig::default());
    let prompts: Vec<Vec<u32>> = PROMPTS.iter().map(|p| chat_prompt(&engine, p)).collect();

    // 1. Each prompt alone.
    let alone: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| greedy_ids(&engine, p.clone(), NEW_TOKENS).token_ids)
        .collect();
    for ids in &alone {
        assert_eq!(ids.len(), NEW_TOKENS);
    }

    // 2. All eight together, mixed with eight other running sequences (some
    //    sampled, different lengths, both lanes).
    let mut others = Vec::new();
    for i in 0..8 {
        let mut params = SamplingParams {
            temperature: if i % 2 == 0 { 0.0 } else { 0.8 },
            seed: Some(i as u64),
            max_tokens: 40 + 3 * i,
            ..SamplingParams::default()
        };
        params.stop_at_eos = false;
        let prompt = chat_prompt(
            &engine,
            &format!("Tell me a long story about the number {i}."),
        );
        let lane = if i % 3 == 0 {
            Lane::Batch
        } else {
            Lane::Interactive
        };
        others.push(
            engine
                .submit(request(&engine, prompt, params, lane))
                .unwrap(),
        );
    }
    // Let the companions get going before the eight arrive.
    for h in others.iter_mut() {
        assert!(matches!(
            h.next_output_blocking(),
            Some(EngineEvent::Delta { .. })
        ));
    }
    let mut handles = Vec::new();
    for p in &prompts {
        let mut params = SamplingParams::greedy(NEW_TOKENS);
        params.stop_at_eos = false;
        handles.push(
            engine
                .submit(request(&engine, p.clone(), params, Lane::Interactive))
                .unwrap(),
        );
    }
    let crowd: Vec<Vec<u32>> = handles
        .iter_mut()
        .map(|h| h.collect_blocking().token_ids)
        .collect();
    for h in others.iter_mut() {
        h.collect_blocking();
    }
    assert_eq!(crowd, alone, "batch companions changed greedy tokens");

    // 3. Preempted mid-generation and resumed by recompute, each at a
    //    different point, with a companion running beside it.
    let mut preempted = Vec::new();
    for (i, p) in prompts.iter().enumerate() {
        let mut params = SamplingParams::greedy(NEW_TOKENS);
        params.stop_at_eos = false;
        let mut companion_params = SamplingParams::greedy(NEW_TOKENS + 8);
        companion_params.stop_at_eos = false;
        let companion = engine
            .submit(request(
                &engine,
                prompts[(i + 1) % 8].clone(),
                companion_params,
                Lane::Batch,
            ))
            .unwrap();
        let mut h = engine
            .submit(request(&engine, p.clone(), params, Lane::Interactive))
            .unwrap();
        let mut ids = Vec::new();
        while ids.len() < 1 + 2 * i {
            match h.next_output_blocking() {
                Some(EngineEvent::Delta { token_ids, .. }) => ids.extend(token_ids),
                other => panic!("unexpected {other:?}"),
            }
        }
        engine.preempt_for_test(h.seq());
        let rest = h.collect_blocking();
        assert!(rest.error.is_none(), "{:?}", rest.error);
        ids.extend(rest.token_ids);
        assert!(
            rest.timings.preemptions >= 1,
            "prompt {i} was not preempted"
        );
        preempted.push(ids);
        drop(companion);
    }
    assert_eq!(
        preempted, alone,
        "preemption and recompute changed greedy tokens"
    );
    assert!(engine.stats().interactive.preemptions_total >= 8);
}
