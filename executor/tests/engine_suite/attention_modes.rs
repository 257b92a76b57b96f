//! The two attention orders on a two-turn conversation: what the next turn
//! reuses from the prefix cache, and that each order's answer does not depend
//! on what the cache held.

use super::common::*;
use stoker_executor::{AttentionOrder, BLOCK_SIZE, EngineConfig};

const REPLY: usize = 40;

/// Turn 1, then turn 2 = turn 1's prompt and reply plus a follow-up, run
/// twice: once after turn 1 (cache warm) and once on a fresh engine (cold).
/// Returns (turn-1 prompt length, cached tokens when warm, warm ids, cold ids).
fn two_turns(order: AttentionOrder) -> (usize, usize, Vec<u32>, Vec<u32>) {
    let config = EngineConfig {
        attention_order: order,
        ..EngineConfig::default()
    };
    let warm = engine(config.clone());
    let turn1 = chat_prompt(&warm, "Describe a lighthouse keeper's morning.");
    let reply = greedy_ids(&warm, turn1.clone(), REPLY).token_ids;
    let follow_up = chat_prompt(&warm, "And the evening?");
    let turn2 = [turn1.clone(), reply, follow_up].concat();
    let hot = greedy_ids(&warm, turn2.clone(), 16);
    drop(warm);
    let cold = greedy_ids(&engine(config), turn2, 16);
    (
        turn1.len(),
        hot.usage.cached_prompt_tokens,
        hot.token_ids,
        cold.token_ids,
    )
}

#[test]
fn position_order_reuses_the_reply_and_reference_order_recomputes_it() {
    let (p1, cached, hot, cold) = two_turns(AttentionOrder::Position);
    // Every full block of prompt and reply (the reply's last token has no KV).
    assert_eq!(cached, (p1 + REPLY - 1) / BLOCK_SIZE * BLOCK_SIZE);
    assert_eq!(
        hot, cold,
        "position order: the cache does not change the answer"
    );

    let (p1, cached, hot, cold) = two_turns(AttentionOrder::Reference);
    // Only the turn-1 prompt's complete 32-position groups are summed as
    // turn 2's prompt sums them.
    assert_eq!(cached, p1 / 32 * 32);
    assert_eq!(
        hot, cold,
        "reference order: the cache does not change the answer"
    );
}
