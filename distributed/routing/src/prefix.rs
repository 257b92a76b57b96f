//! Which executor served a conversation's prefix last, so the next turn goes
//! where its KV blocks are already cached (each executor's prefix cache
//! keeps full 16-token blocks). Keys are a hash chain over the prompt's full
//! blocks, as the executor's own cache keys them; the index is bounded and
//! forgets the oldest prefixes first. It is a preference only: routing takes
//! it when that executor has headroom for the request, and otherwise falls
//! back to the most headroom.

use std::collections::{HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};

/// Prefixes remembered per API instance (about 50 bytes each).
pub const DEFAULT_CAPACITY: usize = 65_536;

#[derive(Debug)]
pub struct PrefixIndex {
    owner: HashMap<u64, String>,
    /// Insertion order, for eviction; a re-inserted key appears twice and
    /// the older entry is skipped when it comes up.
    order: VecDeque<(u64, u64)>,
    /// Generation of each key's latest insertion.
    generation: HashMap<u64, u64>,
    next_generation: u64,
    capacity: usize,
}

/// The hash chain of `prompt`'s full blocks of `block_size` tokens (the
/// executors' KV block size): element `i` stands for the first
/// `(i + 1) * block_size` tokens.
pub fn block_hashes(prompt: &[u32], block_size: usize) -> Vec<u64> {
    let block_size = block_size.max(1);
    let mut out = Vec::with_capacity(prompt.len() / block_size);
    let mut prev = 0u64;
    for block in prompt.chunks_exact(block_size) {
        let mut h = DefaultHasher::new();
        prev.hash(&mut h);
        block.hash(&mut h);
        prev = h.finish();
        out.push(prev);
    }
    out
}

impl PrefixIndex {
    pub fn new(capacity: usize) -> Self {
        PrefixIndex {
            owner: HashMap::new(),
            order: VecDeque::new(),
            generation: HashMap::new(),
            next_generation: 0,
            capacity: capacity.max(1),
        }
    }

    /// The executor that last took the longest known prefix of these
    /// blocks, and how many blocks that prefix covers.
    pub fn lookup(&self, hashes: &[u64]) -> Option<(&str, usize)> {
        hashes
            .iter()
            .enumerate()
            .rev()
            .find_map(|(i, h)| self.owner.get(h).map(|e| (e.as_str(), i + 1)))
    }

    /// The executor worth preferring for these blocks: one that caches more
    /// than half of them (a conversation's earlier turns). A shorter match,
    /// such as a short shared system prompt, saves too little prefill to
    /// steer routing away from headroom.
    pub fn preferred(&self, hashes: &[u64]) -> Option<&str> {
        self.lookup(hashes)
            .filter(|(_, matched)| matched * 2 > hashes.len())
            .map(|(e, _)| e)
    }

    /// Records that `executor` now holds these blocks.
    pub fn record(&mut self, hashes: &[u64], executor: &str) {
        for &h in hashes {
            self.owner.insert(h, executor.to_string());
            let g = self.next_generation;
            self.next_generation += 1;
            self.generation.insert(h, g);
            self.order.push_back((h, g));
        }
        while self.owner.len() > self.capacity {
            let Some((h, g)) = self.order.pop_front() else {
                break;
            };
            if self.generation.get(&h) == Some(&g) {
                self.owner.remove(&h);
                self.generation.remove(&h);
            }
        }
        // Stale order entries of re-inserted keys are bounded by the live ones.
        if self.order.len() > 2 * self.capacity {
            let generation = &self.generation;
            self.order
                .retain(|(h, g)| generation.get(h).is_some_and(|live| live == g));
        }
    }

    /// Forgets an executor (lost or gone): its cache is gone with it.
    pub fn forget(&mut self, executor: &str) {
        self.owner.retain(|_, e| e != executor);
        let owner = &self.owner;
        self.generation.retain(|h, _| owner.contains_key(h));
    }

    pub fn len(&self) -> usize {
        self.owner.len()
    }

    pub fn is_empty(&self) -> bool {
        self.owner.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The engine's block size, which these prompts' lengths are cut for.
    fn hashes(prompt: &[u32]) -> Vec<u64> {
        block_hashes(prompt, 16)
    }

    fn prompt(seed: u32, len: usize) -> Vec<u32> {
        (0..len as u32).map(|i| seed * 1000 + i).collect()
    }

    #[test]
    fn the_longest_known_prefix_names_its_executor() {
        let mut ix = PrefixIndex::new(1000);
        let system = prompt(1, 64);
        let mut turn1 = system.clone();
        turn1.extend(prompt(2, 20));
        ix.record(&hashes(&turn1), "a");
        // The next turn shares the 64-token system prompt and the first turn.
        let mut turn2 = turn1.clone();
        turn2.extend(prompt(3, 40));
        assert_eq!(ix.lookup(&hashes(&turn2)), Some(("a", 5)));
        assert_eq!(ix.preferred(&hashes(&turn2)), Some("a"), "5 of 7 blocks");
        // Another conversation with the same system prompt: still "a".
        let mut other = system.clone();
        other.extend(prompt(4, 30));
        assert_eq!(ix.lookup(&hashes(&other)), Some(("a", 4)));
        assert_eq!(ix.preferred(&hashes(&other)), Some("a"), "4 of 5");
        let mut long = system.clone();
        long.extend(prompt(5, 100));
        assert_eq!(ix.preferred(&hashes(&long)), None, "4 of 10");
        // A longer match on "b" wins over the shared system prompt on "a".
        ix.record(&hashes(&other), "b");
        assert_eq!(ix.lookup(&hashes(&other)), Some(("b", 5)));
        // Nothing in common, or shorter than a block: no preference.
        assert_eq!(ix.lookup(&hashes(&prompt(9, 100))), None);
        assert_eq!(ix.lookup(&hashes(&system[..15])), None);
    }

    #[test]
    fn bounded_oldest_first_and_forgets_lost_executors() {
        let mut ix = PrefixIndex::new(8);
        for i in 0..20 {
            ix.record(&hashes(&prompt(i, 32)), "a");
            assert!(ix.len() <= 8);
            assert!(ix.order.len() <= 16 + 2);
        }
        // The newest are kept, the oldest gone.
        assert_eq!(ix.preferred(&hashes(&prompt(19, 32))), Some("a"));
        assert_eq!(ix.lookup(&hashes(&prompt(0, 32))), None);
        // Re-recording a key keeps it alive past older ones.
        ix.record(&hashes(&prompt(16, 32)), "b");
        for i in 30..32 {
            ix.record(&hashes(&prompt(i, 16)), "a");
        }
        assert_eq!(ix.preferred(&hashes(&prompt(16, 32))), Some("b"));
        ix.forget("b");
        assert_eq!(ix.lookup(&hashes(&prompt(16, 32))), None);
        assert!(ix.len() <= 8);
    }
}
