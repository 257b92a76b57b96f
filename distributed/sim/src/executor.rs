//! One executor as the simulator models it: continuous batching with
//! `max_num_seqs` sequence slots, a KV cache of fixed blocks, chunked prefill
//! up to a step's token budget and, beside decoders, to the step planner's
//! time target, one decode token per running sequence a step, and a prefix
//! cache of whole system prompts. A step's time comes from the engine's
//! step-cost model, all four terms (its prior, or the terms an executor
//! fitted).

use std::collections::VecDeque;

use stoker_executor::BLOCK_SIZE;
use stoker_executor::scheduler::{PlannerConfig, StepFeatures};
use stoker_schemas::ids::ExecutorId;
use stoker_schemas::transport::{CapacityReport, PartitionLoad, TRANSPORT_VERSION};

use super::events::{MS, Micros};
use super::workload::{Mix, Request};

/// A step's cost in ms: fixed, per token computed, per row sampled, per
/// thousand query-key pairs attention visits (the engine's four terms).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    pub fixed_ms: f64,
    pub per_token_ms: f64,
    pub per_row_ms: f64,
    pub per_1k_pairs_ms: f64,
}

impl Default for Cost {
    /// The step-cost prior of `executor/src/scheduler/cost.rs`
    /// (SmolLM2-135M on two CPU cores): 5 ms + 1.5 ms a token + 0.3 ms a
    /// sampled row + 0.4 ms a thousand attention pairs.
    fn default() -> Self {
        Cost {
            fixed_ms: 5.0,
            per_token_ms: 1.5,
            per_row_ms: 0.3,
            per_1k_pairs_ms: 0.4,
        }
    }
}

impl Cost {
    /// Every term times `k`: the same shape at another level.
    pub fn scaled(&self, k: f64) -> Cost {
        Cost {
            fixed_ms: self.fixed_ms * k,
            per_token_ms: self.per_token_ms * k,
            per_row_ms: self.per_row_ms * k,
            per_1k_pairs_ms: self.per_1k_pairs_ms * k,
        }
    }

    /// A step's duration in ms.
    pub fn ms(&self, w: StepFeatures) -> f64 {
        self.fixed_ms
            + self.per_token_ms * w.tokens
            + self.per_row_ms * w.sampled
            + self.per_1k_pairs_ms * w.attention_pairs / 1000.0
    }

    /// A step's duration.
    pub fn step_time(&self, w: StepFeatures) -> Micros {
        (self.ms(w) * MS as f64) as Micros
    }
}
/// `engine.max_num_seqs` and `engine.max_batched_tokens` defaults.
pub const MAX_NUM_SEQS: usize = 64;
pub const MAX_STEP_TOKENS: u32 = 512;
/// KV blocks of `BLOCK_SIZE` tokens (16,384 tokens).
pub const KV_BLOCKS: u32 = 1024;
/// `admission.max_waiting_requests` default: past this many waiting, the
/// executor refuses a job and the API offers it elsewhere.
pub const MAX_WAITING: usize = 256;
/// KV room, in blocks, an executor needs beyond its queue to count as
/// free: a request of the mix's mean size (prompt and output).
pub fn free_blocks_wanted(mix: &Mix) -> u32 {
    let (prompt, output) = mix.mean_tokens();
    blocks((prompt + output).ceil() as u32)
}

/// System prompts an executor's prefix cache keeps (least recently used
/// evicted).
pub const PREFIX_CACHE: usize = 8;

fn blocks(tokens: u32) -> u32 {
    tokens.div_ceil(BLOCK_SIZE as u32)
}

struct Seq {
    req: u32,
    api: u32,
    prompt: u32,
    prefilled: u32,
    output: u32,
    generated: u32,
    blocks: u32,
    /// Prefill tokens in the step under way.
    chunk: u32,
    /// Decodes a token in the step under way.
    decoding: bool,
}

/// What a step's end changed, for the metrics.
#[derive(Default)]
pub struct StepEnd {
    pub first_tokens: Vec<u32>,
    pub finished: Vec<u32>,
}

pub struct Executor {
    pub id: ExecutorId,
    pub slot: i32,
    running: Vec<Seq>,
    waiting: VecDeque<u32>,
    waiting_tokens: u64,
    /// KV blocks the waiting jobs will take.
    waiting_blocks: u32,
    /// Prompt tokens not yet computed, waiting and running (cache hits
    /// deducted at admission).
    backlog: u32,
    /// [`free_blocks_wanted`], computed once.
    wanted: u32,
    cost: Cost,
    free_blocks: u32,
    prefixes: VecDeque<u16>,
    /// Requests running or waiting, by the API instance that sent them
    /// (its index is its reply partition in the reports).
    held: Vec<u32>,
    /// A step is under way.
    pub busy: bool,
    seq: u64,
    /// Time-integral of running + waiting over the measured window.
    load_area: f64,
    last_touch: Micros,
    pub prefix_hits: u64,
    /// Time spent stepping, and requests finished, over the whole run: the
    /// busy time a request costs, which the agreement bench matches to
    /// what the real executors measured.
    pub busy_time: Micros,
    pub finished: u64,
}

impl Executor {
    pub fn new(index: u32, cost: Cost, wanted: u32) -> Self {
        Executor {
            id: format!("e{index}").parse().expect("a valid executor id"),
            slot: index as i32,
            running: Vec::new(),
            waiting: VecDeque::new(),
            waiting_tokens: 0,
            waiting_blocks: 0,
            backlog: 0,
            wanted,
            cost,
            free_blocks: KV_BLOCKS,
            prefixes: VecDeque::new(),
            held: Vec::new(),
            busy: false,
            seq: 0,
            load_area: 0.0,
            last_touch: 0,
            prefix_hits: 0,
            busy_time: 0,
            finished: 0,
        }
    }

    /// Requests running or waiting.
    pub fn load(&self) -> usize {
        self.running.len() + self.waiting.len()
    }

    /// A request of the mean size arriving now would start at the next
    /// step: a slot and KV room for it after everything queued ahead, and
    /// less than a step's budget of prefill ahead of it.
    pub fn has_free_slot(&self) -> bool {
        self.would_fit(self.wanted)
    }

    fn would_fit(&self, need: u32) -> bool {
        self.running.len() + self.waiting.len() < MAX_NUM_SEQS
            && self.free_blocks >= self.waiting_blocks + need
            && self.backlog < MAX_STEP_TOKENS
    }

    /// Whether `r`, arriving now, starts at the next step (jobs that came
    /// during the step under way start with it) rather than queueing.
    pub fn would_start(&self, r: &Request) -> bool {
        self.would_fit(blocks(r.prompt_len() + r.output))
    }

    /// Whether the executor refuses another job (its queue is full).
    pub fn refuses(&self) -> bool {
        self.waiting.len() >= MAX_WAITING
    }

    /// Accounts the load carried since the last change, within
    /// `[from, to)`; call before every change and once at the end.
    pub fn touch(&mut self, now: Micros, from: Micros, to: Micros) {
        let (a, b) = (self.last_touch.max(from), now.min(to));
        if b > a {
            self.load_area += self.load() as f64 * (b - a) as f64;
        }
        self.last_touch = now;
    }

    pub fn load_area(&self) -> f64 {
        self.load_area
    }

    /// Queues a job; it starts at the next step with room for it.
    pub fn enqueue(&mut self, req: u32, r: &Request) {
        self.waiting.push_back(req);
        self.waiting_tokens += (r.prompt_len() + r.output) as u64;
        self.waiting_blocks += blocks(r.prompt_len() + r.output);
        self.backlog += r.prompt_len();
        let api = r.api as usize;
        if self.held.len() <= api {
            self.held.resize(api + 1, 0);
        }
        self.held[api] += 1;
    }

    /// Moves waiting jobs into free slots, first come first served, while
    /// the head of the queue has KV room for its prompt and output.
    fn admit(&mut self, reqs: &[Request]) {
        while self.running.len() < MAX_NUM_SEQS {
            let Some(&req) = self.waiting.front() else {
                break;
            };
            let r = &reqs[req as usize];
            let need = blocks(r.prompt_len() + r.output);
            if need > self.free_blocks {
                break;
            }
            self.waiting.pop_front();
            self.waiting_tokens -= (r.prompt_len() + r.output) as u64;
            self.waiting_blocks -= need;
            self.free_blocks -= need;
            let mut prefilled = 0;
            if let Some(p) = r.prefix {
                if let Some(i) = self.prefixes.iter().position(|&q| q == p) {
                    self.prefixes.remove(i);
                    prefilled = r.prefix_len;
                    self.backlog -= prefilled;
                    self.prefix_hits += 1;
                } else if self.prefixes.len() == PREFIX_CACHE {
                    self.prefixes.pop_front();
                }
                self.prefixes.push_back(p);
            }
            self.running.push(Seq {
                req,
                api: r.api,
                prompt: r.prompt_len(),
                prefilled,
                output: r.output,
                generated: 0,
                blocks: need,
                chunk: 0,
                decoding: false,
            });
        }
    }

    /// Starts a step if there is work and none is under way; returns its
    /// duration. Decodes go first, then prefill chunks in admission order up
    /// to the token budget, sized as the engine's step planner sizes them
    /// (its defaults, `PlannerConfig::default()`): with decoders in the step,
    /// chunks fit within `interactive_itl_factor` times the decoders' own
    /// cost, and the first gets at least `min_prefill_chunk` tokens past it;
    /// a step without decoders prefills up to the budget.
    pub fn start_step(&mut self, reqs: &[Request]) -> Option<Micros> {
        if self.busy {
            return None;
        }
        self.admit(reqs);
        if self.running.is_empty() {
            return None;
        }
        let mut work = StepFeatures::default();
        for s in self.running.iter_mut() {
            s.decoding = s.prefilled == s.prompt;
            s.chunk = 0;
            if s.decoding {
                // The newest token, at position prompt + generated - 1.
                let at = (s.prompt + s.generated - 1) as usize;
                work = work + StepFeatures::chunk(at, 1, true);
            }
        }
        let planner = PlannerConfig::default();
        let limit_ms = (!work.is_empty() && planner.interactive_itl_factor > 0.0)
            .then(|| planner.interactive_itl_factor * self.cost.ms(work));
        let mut floor = planner.min_prefill_chunk.max(1) as u32;
        for s in self.running.iter_mut().filter(|s| !s.decoding) {
            let want =
                (s.prompt - s.prefilled).min(MAX_STEP_TOKENS.saturating_sub(work.tokens as u32));
            if want == 0 {
                break;
            }
            let chunk_work = |len: u32| {
                StepFeatures::chunk(
                    s.prefilled as usize,
                    len as usize,
                    s.prefilled + len == s.prompt,
                )
            };
            let chunk = match limit_ms {
                None => want,
                Some(limit) => {
                    let fits = |len: u32| self.cost.ms(work + chunk_work(len)) <= limit;
                    // The largest chunk within the target (cost grows with
                    // the chunk), then the first chunk's floor.
                    let (mut lo, mut hi) = (0, want);
                    while lo < hi {
                        let mid = lo + (hi - lo).div_ceil(2);
                        if fits(mid) {
                            lo = mid;
                        } else {
                            hi = mid - 1;
                        }
                    }
                    let chunk = lo.max(want.min(floor));
                    floor = 0;
                    chunk
                }
            };
            if chunk == 0 {
                continue;
            }
            s.chunk = chunk;
            work = work + chunk_work(chunk);
        }
        self.busy = true;
        let d = self.cost.step_time(work);
        self.busy_time += d;
        Some(d)
    }

    /// Ends the step under way: tokens delivered, sequences finished and
    /// their blocks freed.
    pub fn end_step(&mut self) -> StepEnd {
        self.busy = false;
        let mut out = StepEnd::default();
        for s in self.running.iter_mut() {
            if s.decoding {
                s.generated += 1;
            } else if s.chunk > 0 {
                s.prefilled += s.chunk;
                self.backlog -= s.chunk;
                if s.prefilled == s.prompt {
                    s.generated = 1;
                    out.first_tokens.push(s.req);
                }
            }
            s.chunk = 0;
            s.decoding = false;
        }
        let mut freed = 0;
        let held = &mut self.held;
        self.running.retain(|s| {
            let done = s.generated >= s.output;
            if done {
                out.finished.push(s.req);
                freed += s.blocks;
                held[s.api as usize] -= 1;
            }
            !done
        });
        self.free_blocks += freed;
        self.finished += out.finished.len() as u64;
        out
    }

    /// The capacity report the real executor would publish now.
    pub fn report(&mut self, now: Micros) -> CapacityReport {
        self.seq += 1;
        CapacityReport {
            v: TRANSPORT_VERSION,
            executor_id: self.id.clone(),
            deployment_id: "sim".parse().expect("a valid deployment id"),
            revision_id: "sim".parse().expect("a valid revision id"),
            model_sha256: super::SHA.into(),
            slot: self.slot,
            ready: true,
            draining: false,
            running: self.running.len() as u32,
            waiting: self.waiting.len() as u32,
            waiting_tokens: self.waiting_tokens,
            kv_blocks_total: KV_BLOCKS as u64,
            kv_blocks_free: self.free_blocks as u64,
            block_size: BLOCK_SIZE as u32,
            max_num_seqs: MAX_NUM_SEQS as u32,
            tokens_per_second: 0.0,
            prefill_tokens_per_second: 0.0,
            decode_tokens_per_second: 0.0,
            seq: self.seq,
            sent_unix_ms: now / MS,
            by_reply_partition: Some(
                (0..)
                    .zip(&self.held)
                    .filter(|&(_, &requests)| requests > 0)
                    .map(|(partition, &requests)| PartitionLoad {
                        partition,
                        requests,
                    })
                    .collect(),
            ),
            prefill_backlog_tokens: Some(self.backlog as u64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(unique: u32, output: u32) -> Request {
        Request {
            unique,
            output,
            prefix: None,
            prefix_len: 0,
            api: 0,
            arrived: 0,
            first_token: None,
            finished: None,
            tried: Vec::new(),
            refused: false,
        }
    }

    /// Runs steps until request `req` has its first token; returns the
    /// steps it took.
    fn steps_to_first_token(e: &mut Executor, reqs: &[Request], req: u32) -> usize {
        for n in 1..=100 {
            e.start_step(reqs).expect("work to run");
            if e.end_step().first_tokens.contains(&req) {
                return n;
            }
        }
        panic!("no first token for {req}");
    }

    #[test]
    fn a_lone_prompt_prefills_in_one_step_and_one_beside_decoders_in_planner_chunks() {
        // 10 ms fixed, 4 ms a token, 1 ms a row (of the order two
        // executors on two cores fit), no attention term: four decoders cost
        // 10 + 4 × 5 = 30 ms, so the target is 60 ms and a 128-token prompt
        // beside them gets the 32-token floor a step.
        let cost = Cost {
            fixed_ms: 10.0,
            per_token_ms: 4.0,
            per_row_ms: 1.0,
            per_1k_pairs_ms: 0.0,
        };
        let reqs: Vec<Request> = (0..5).map(|_| request(128, 64)).collect();
        let mut e = Executor::new(0, cost, 1);
        e.enqueue(0, &reqs[0]);
        assert_eq!(steps_to_first_token(&mut e, &reqs, 0), 1);
        let mut e = Executor::new(0, cost, 1);
        for i in 0..4 {
            e.enqueue(i, &reqs[i as usize]);
        }
        // Nothing decodes yet: the four prompts share the 512-token budget.
        assert_eq!(steps_to_first_token(&mut e, &reqs, 3), 1);
        e.enqueue(4, &reqs[4]);
        assert_eq!(steps_to_first_token(&mut e, &reqs, 4), 4);
    }

    #[test]
    fn attention_is_counted_as_the_engine_counts_it() {
        let cost = Cost {
            fixed_ms: 0.0,
            per_token_ms: 0.0,
            per_row_ms: 0.0,
            per_1k_pairs_ms: 1.0,
        };
        // A lone 100-token prompt: 100 × 101 / 2 pairs.
        let reqs = vec![request(100, 3)];
        let mut e = Executor::new(0, cost, 1);
        e.enqueue(0, &reqs[0]);
        assert_eq!(e.start_step(&reqs), Some((5.05 * MS as f64) as Micros));
        e.end_step();
        // Its first decode: the token at position 100 sees 101.
        assert_eq!(e.start_step(&reqs), Some((0.101 * MS as f64) as Micros));
    }
}
