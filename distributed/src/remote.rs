//! The API's backend in the distributed mode: the executors behind Kafka.
//!
//! [`RemoteBackend::submit`] picks an executor from the capacity view (by
//! its routing policy, `kafka.routing`), sends the job to its partition, and
//! hands back a [`Generation`] fed by this instance's reply partition. A
//! watchdog declares an executor lost when its reports stop; the requests it
//! held end at once with `executor_lost` (retryable while no token was
//! delivered), so a stream never continues with text from another
//! generation.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use stoker_controlplane::transport::Kafka;
use stoker_executor::chat_template::ChatTemplate;
use stoker_executor::engine::{EngineStats, LaneStats, ModelInfo};
use stoker_executor::tokenizer::ModelTokenizer;
use stoker_executor::{RequestLimits, ValidRequest};
use stoker_schemas::codes::ErrorCode;
use stoker_schemas::ids::{ExecutorId, RequestId};
use stoker_schemas::transport::{
    CapacityReport, ControlCommand, ControlMessage, JobMessage, ReplyEvent, ReplyMessage,
    TRANSPORT_VERSION, Versioned,
};
use tokio::sync::mpsc;

use stoker_api::backend::{
    Artifact, Backend, BackendError, Fleet, Generation, LiveExecutor, Report, Runner,
};
use stoker_routing::prefix::{self, PrefixIndex};
use stoker_routing::{CapacityView, Demand, Entry, FleetLoad, InFlight, RoutingPolicy};

use crate::kafka::unix_ms;
use crate::wire;

/// `kafka.routing` as the capacity view applies it.
pub fn routing_policy(r: stoker_api::config::Routing) -> RoutingPolicy {
    use stoker_api::config::Routing;
    match r {
        Routing::PowerOfThree => RoutingPolicy::PowerOfChoices { d: 3 },
        Routing::PowerOfTwo => RoutingPolicy::PowerOfChoices { d: 2 },
        Routing::MaxHeadroom => RoutingPolicy::MaxHeadroom,
    }
}

/// How many executors a request is offered to before a refusal stands.
const MAX_ATTEMPTS: usize = 3;

struct Pending {
    events: mpsc::UnboundedSender<Report>,
    executor: ExecutorId,
    /// The generation's view of `executor` (its provenance).
    runner: Runner,
    /// The job as sent, for a retry elsewhere; executors that refused it.
    job: JobMessage,
    tried: Vec<ExecutorId>,
    /// Counts the request in `executor`'s load in the view until it ends.
    _held: InFlight,
    /// A token reached the client: a retry would repeat it.
    delivered: bool,
    next_seq: u64,
    /// When the job was sent or the last reply arrived.
    last_heard: Instant,
}

struct Inner {
    info: ModelInfo,
    tokenizer: ModelTokenizer,
    chat_template: ChatTemplate,
    kafka: Kafka,
    /// This instance's leased API slot: which partitions it writes jobs and
    /// cancels to and reads replies from (`Topics`).
    slot: i32,
    instance: String,
    /// Differs per start, so a restarted instance's request ids never
    /// match replies still addressed to its previous run.
    nonce: String,
    view: Mutex<CapacityView>,
    /// Which executor holds which prompt prefix in its cache.
    prefixes: Mutex<PrefixIndex>,
    pending: Mutex<HashMap<RequestId, Pending>>,
    next: AtomicU64,
    rt: tokio::runtime::Handle,
}

/// What `stoker api` generates with.
#[derive(Clone)]
pub struct RemoteBackend {
    inner: Arc<Inner>,
}

/// The parts of a loaded artifact the API validates with (no weights).
pub struct ArtifactMeta {
    pub info: ModelInfo,
    pub tokenizer: ModelTokenizer,
    pub chat_template: ChatTemplate,
}

impl RemoteBackend {
    /// Starts the reply, capacity and watchdog loops. `instance` names this
    /// API process in request ids; `slot` is the API slot its lease holds.
    pub fn start(
        meta: ArtifactMeta,
        kafka: Kafka,
        slot: i32,
        instance: String,
        executor_timeout: Duration,
        reply_timeout: Duration,
        rt: tokio::runtime::Handle,
    ) -> anyhow::Result<Self> {
        // Request ids are `{instance}-{nonce}-{n}`: the longest must still
        // be a valid request id, or no job of this instance could be sent.
        let nonce = format!("{:x}", unix_ms());
        let longest = format!("{instance}-{nonce}-{}", u64::MAX);
        if let Err(e) = RequestId::new(longest) {
            anyhow::bail!(
                "this API instance's name `{instance}` cannot start request ids ({e}); \
                 pass a shorter --id of letters, digits, '.', '_' and '-'"
            );
        }
        let topics = kafka.topics().clone();
        let replies = kafka.assign_from_end(
            &topics.replies,
            &topics.reply_partitions(slot),
            &format!("stoker-api-{instance}"),
        )?;
        let capacity =
            kafka.assign_all_from_end(&topics.capacity, &format!("stoker-api-{instance}"))?;
        let inner = Arc::new(Inner {
            info: meta.info,
            tokenizer: meta.tokenizer,
            chat_template: meta.chat_template,
            kafka,
            slot,
            instance,
            nonce,
            view: Mutex::new(CapacityView::new(executor_timeout)),
            prefixes: Mutex::new(PrefixIndex::new(prefix::DEFAULT_CAPACITY)),
            pending: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            rt: rt.clone(),
        });
        {
            let inner = inner.clone();
            crate::kafka::spawn_consumer(&rt, replies, "replies", move |r: ReplyMessage| {
                inner.on_reply(r)
            });
        }
        {
            let inner = inner.clone();
            crate::kafka::spawn_consumer(&rt, capacity, "capacity", move |r: CapacityReport| {
                // What the executor holds for this instance: the reply
                // partition this instance reads for that executor's slot.
                let own = r.held_for(inner.kafka.topics().reply_partition(inner.slot, r.slot));
                inner
                    .view
                    .lock()
                    .unwrap()
                    .observe_own(r, own, Instant::now())
            });
        }
        {
            let inner = inner.clone();
            rt.spawn(async move {
                let mut t = tokio::time::interval(Duration::from_millis(100));
                loop {
                    t.tick().await;
                    let lost = inner.view.lock().unwrap().expire(Instant::now());
                    for id in lost {
                        inner.executor_lost(&id);
                    }
                    inner.end_silent(reply_timeout);
                }
            });
        }
        Ok(RemoteBackend { inner })
    }

    /// How requests choose among the executors (`kafka.routing`); the view
    /// starts with [`RoutingPolicy::default`].
    pub fn set_routing(&self, policy: RoutingPolicy) {
        self.inner.view.lock().unwrap().set_policy(policy);
    }

    /// Every executor this instance has heard of, with liveness.
    pub fn executors(&self) -> Vec<(Entry, bool)> {
        self.inner.view.lock().unwrap().entries()
    }

    /// Whether some executor takes this model's requests now.
    pub fn any_ready(&self) -> bool {
        self.inner
            .view
            .lock()
            .unwrap()
            .any_ready(&self.inner.info.identity.sha256, Instant::now())
    }

    /// Requests waiting for replies.
    pub fn in_flight(&self) -> usize {
        self.inner.pending.lock().unwrap().len()
    }
}

impl Inner {
    fn on_reply(self: &Arc<Self>, r: ReplyMessage) {
        let mut pending = self.pending.lock().unwrap();
        let Some(p) = pending.get_mut(&r.request_id) else {
            // Cancelled, lost, or meant for a previous holder of this partition.
            return;
        };
        if p.executor != r.executor_id {
            tracing::warn!(request_id = %r.request_id, from = %r.executor_id, "reply from an executor the request was not sent to");
            return;
        }
        if r.seq < p.next_seq {
            return; // a duplicate of a redelivered message
        }
        if r.seq > p.next_seq {
            // A reply went missing: the stream cannot go on without a hole,
            // so it ends typed, like a lost executor, and the executor stops.
            // In the shared layout, where every executor writes this reply
            // partition, this is the safety net against a broker that lost
            // or reordered a batch.
            tracing::warn!(request_id = %r.request_id, expected = p.next_seq, got = r.seq, "replies missing");
            let p = pending.remove(&r.request_id).expect("looked up above");
            drop(pending);
            let code = if p.delivered {
                ErrorCode::ExecutorLostAfterOutput
            } else {
                ErrorCode::ExecutorLost
            };
            let _ = p.events.send(Err(BackendError::Remote {
                code,
                message: format!(
                    "replies from executor `{}` arrived out of order; the stream cannot be continued",
                    p.executor
                ),
            }));
            self.send_cancel(&r.request_id, &p.executor);
            return;
        }
        p.next_seq = r.seq + 1;
        p.last_heard = Instant::now();
        // Refused before it started because the view was stale (the executor
        // is draining, full, or no longer reads that partition): offer the
        // job to another executor instead of failing the client.
        if let ReplyEvent::Error { code, message } = &r.event
            && r.seq == 0
            && matches!(code, ErrorCode::NotReady | ErrorCode::ServerOverloaded)
            && p.tried.len() < MAX_ATTEMPTS
        {
            let demand = Demand {
                prompt: p.job.prompt.len(),
                tokens: p.job.prompt.len() + p.job.sampling.max_tokens as usize,
            };
            let next = self.view.lock().unwrap().pick_excluding(
                &self.info.identity.sha256,
                demand,
                Instant::now(),
                &p.tried,
            );
            if let Some(choice) = next {
                tracing::debug!(request_id = %r.request_id, from = %p.executor, to = %choice.executor_id, %message, "re-routing a refused job");
                p.executor = choice.executor_id.clone();
                *p.runner.lock().unwrap_or_else(|e| e.into_inner()) =
                    choice.executor_id.to_string();
                p.tried.push(choice.executor_id.clone());
                p._held = choice.held;
                p.next_seq = 0;
                p.last_heard = Instant::now();
                p.job.executor_id = choice.executor_id;
                let partition = self.route(&mut p.job, choice.slot);
                let job = p.job.clone();
                drop(pending);
                self.send_job(job, partition);
                return;
            }
        }
        let last = matches!(
            r.event,
            ReplyEvent::Finished { .. } | ReplyEvent::Error { .. }
        );
        if matches!(&r.event, ReplyEvent::Delta { text, .. } if !text.is_empty()) {
            p.delivered = true;
        }
        let _ = p.events.send(wire::event_from_wire(r.event));
        if last {
            pending.remove(&r.request_id);
        }
    }

    fn executor_lost(&self, id: &ExecutorId) {
        self.prefixes.lock().unwrap().forget(id);
        let mut pending = self.pending.lock().unwrap();
        let ids: Vec<RequestId> = pending
            .iter()
            .filter(|(_, p)| p.executor == *id)
            .map(|(k, _)| k.clone())
            .collect();
        tracing::warn!(
            executor = %id,
            requests = ids.len(),
            "executor lost: it stopped reporting"
        );
        for rid in ids {
            if let Some(p) = pending.remove(&rid) {
                // Not started yet: the request never ran, so to the client
                // this is the service not being ready, and retryable.
                let (code, retry) = if p.next_seq == 0 {
                    (ErrorCode::NotReady, "it had not started; retry it")
                } else if p.delivered {
                    (ErrorCode::ExecutorLostAfterOutput, "it cannot be resumed")
                } else {
                    (ErrorCode::ExecutorLost, "no output was delivered; retry it")
                };
                let _ = p.events.send(Err(BackendError::Remote {
                    code,
                    message: format!("the executor `{id}` serving this request was lost; {retry}"),
                }));
                // An executor that was only stopped (SIGSTOP, a long pause)
                // reads its control partition when it resumes: it drops the
                // request instead of generating it for nobody.
                self.send_cancel(&rid, id);
            }
        }
    }

    /// Ends requests that heard nothing for `timeout` although their
    /// executor still reports (a lost job or reply): a typed error instead
    /// of a client waiting forever.
    fn end_silent(&self, timeout: Duration) {
        let now = Instant::now();
        let mut pending = self.pending.lock().unwrap();
        let silent: Vec<RequestId> = pending
            .iter()
            .filter(|(_, p)| now.saturating_duration_since(p.last_heard) > timeout)
            .map(|(k, _)| k.clone())
            .collect();
        for rid in silent {
            if let Some(p) = pending.remove(&rid) {
                tracing::warn!(request_id = %rid, executor = %p.executor, "no reply within the reply timeout");
                let code = if p.next_seq == 0 {
                    ErrorCode::NotReady
                } else if p.delivered {
                    ErrorCode::ExecutorLostAfterOutput
                } else {
                    ErrorCode::ExecutorLost
                };
                let _ = p.events.send(Err(BackendError::Remote {
                    code,
                    message: format!(
                        "no reply from executor `{}` for {} s",
                        p.executor,
                        timeout.as_secs()
                    ),
                }));
                self.send_cancel(&rid, &p.executor);
            }
        }
    }

    fn fail(&self, request_id: &str, code: ErrorCode, message: String) {
        if let Some(p) = self.pending.lock().unwrap().remove(request_id) {
            let _ = p.events.send(Err(BackendError::Remote { code, message }));
        }
    }

    /// Points `job`'s replies at the partition executor slot `executor`
    /// answers this instance on; returns the partition the job goes to.
    fn route(&self, job: &mut JobMessage, executor: i32) -> i32 {
        let topics = self.kafka.topics();
        job.reply_partition = topics.reply_partition(self.slot, executor);
        topics.job_partition(executor, self.slot)
    }

    fn send_job(self: &Arc<Self>, job: JobMessage, partition: i32) {
        let inner = self.clone();
        self.rt.spawn(async move {
            let topic = inner.kafka.topics().interactive.clone();
            if let Err(e) = inner
                .kafka
                .send(&topic, Some(partition), &job.request_id, &job.encode())
                .await
            {
                inner.fail(
                    &job.request_id,
                    ErrorCode::NotReady,
                    format!("the job could not be handed to an executor: {e}"),
                );
            }
        });
    }

    fn cancel(self: &Arc<Self>, request_id: &RequestId) {
        let Some(p) = self.pending.lock().unwrap().remove(request_id) else {
            return;
        };
        self.send_cancel(request_id, &p.executor);
    }

    /// Tells `executor` to stop generating `request_id`.
    fn send_cancel(&self, request_id: &RequestId, executor: &ExecutorId) {
        let msg = ControlMessage {
            v: TRANSPORT_VERSION,
            executor_id: executor.clone(),
            command: ControlCommand::Cancel {
                request_id: request_id.clone(),
            },
        };
        let kafka = self.kafka.clone();
        let partition = kafka.topics().control_partition(self.slot);
        self.rt.spawn(async move {
            let topic = kafka.topics().control.clone();
            if let Err(e) = kafka
                .send(&topic, Some(partition), &msg.executor_id, &msg.encode())
                .await
            {
                tracing::warn!(error = %e, "could not send a cancel; the executor finishes the request for nobody");
            }
        });
    }
}

impl Artifact for RemoteBackend {
    fn info(&self) -> &ModelInfo {
        &self.inner.info
    }
    fn tokenizer(&self) -> &ModelTokenizer {
        &self.inner.tokenizer
    }
    fn chat_template(&self) -> &ChatTemplate {
        &self.inner.chat_template
    }
    fn model_limits(&self) -> RequestLimits {
        let i = &self.inner.info;
        RequestLimits {
            context_window: i.context_window,
            max_input_tokens: i.context_window,
            max_output_tokens: i.context_window,
            vocab_size: i.vocab_size,
        }
    }
}

/// The fleet's summed load as the engine stats admission reads: the
/// executors' requests count as the interactive lane's.
fn engine_stats(l: &FleetLoad) -> EngineStats {
    EngineStats {
        interactive: LaneStats {
            running: l.running,
            waiting: l.waiting,
            preemptions_total: 0,
        },
        waiting_tokens: l.waiting_tokens,
        kv_blocks_total: l.kv_blocks_total,
        kv_blocks_free: l.kv_blocks_free,
        kv_blocks_used: l.kv_blocks_used,
        tokens_per_second_ewma: l.tokens_per_second,
        prefill_tokens_per_second_ewma: l.prefill_tokens_per_second,
        decode_tokens_per_second_ewma: l.decode_tokens_per_second,
        ..EngineStats::default()
    }
}

impl Backend for RemoteBackend {
    fn stats(&self) -> EngineStats {
        let load = self
            .inner
            .view
            .lock()
            .unwrap()
            .load(&self.inner.info.identity.sha256, Instant::now());
        engine_stats(&load)
    }

    fn submit(&self, request: ValidRequest) -> Result<Generation, BackendError> {
        let inner = &self.inner;
        let demand = Demand {
            prompt: request.prompt().len(),
            tokens: request.prompt().len() + request.params().max_tokens,
        };
        // Prefer the executor whose cache holds this prompt's prefix (the
        // conversation's earlier turns, a shared system prompt).
        let blocks = prefix::block_hashes(request.prompt(), stoker_executor::BLOCK_SIZE);
        let preferred = inner
            .prefixes
            .lock()
            .unwrap()
            .preferred(&blocks)
            .map(str::to_string);
        let choice = inner
            .view
            .lock()
            .unwrap()
            .pick_preferring(
                &inner.info.identity.sha256,
                demand,
                Instant::now(),
                preferred.as_deref(),
            )
            .ok_or_else(|| BackendError::Remote {
                code: ErrorCode::NotReady,
                message: "no executor serving this model is ready".into(),
            })?;
        let n = inner.next.fetch_add(1, Ordering::Relaxed);
        // `start` checked that the instance's name leaves room for this.
        let request_id = RequestId::new(format!("{}-{}-{n}", inner.instance, inner.nonce))
            .map_err(|e| BackendError::Remote {
                code: ErrorCode::InternalError,
                message: format!("this API instance's request ids are malformed: {e}"),
            })?;
        let (tx, rx) = mpsc::unbounded_channel();
        let mut job = JobMessage {
            v: TRANSPORT_VERSION,
            request_id: request_id.clone(),
            executor_id: choice.executor_id.clone(),
            model_sha256: inner.info.identity.sha256.clone(),
            reply_partition: 0,
            prompt: request.prompt().to_vec(),
            sampling: wire::sampling_to_wire(request.params()),
            lane: wire::lane_to_wire(request.lane()).into(),
            tenant: request.tenant().0.clone(),
            tenant_weight: request.tenant_weight(),
            sent_unix_ms: unix_ms(),
        };
        inner
            .prefixes
            .lock()
            .unwrap()
            .record(&blocks, &choice.executor_id);
        let partition = inner.route(&mut job, choice.slot);
        let runner = Runner::new(Mutex::new(choice.executor_id.to_string()));
        inner.pending.lock().unwrap().insert(
            request_id.clone(),
            Pending {
                events: tx,
                executor: choice.executor_id.clone(),
                runner: runner.clone(),
                job: job.clone(),
                tried: vec![choice.executor_id.clone()],
                _held: choice.held,
                delivered: false,
                next_seq: 0,
                last_heard: Instant::now(),
            },
        );
        inner.send_job(job, partition);
        let weak = Arc::downgrade(inner);
        Ok(Generation::remote(rx, runner, move || {
            if let Some(i) = weak.upgrade() {
                i.cancel(&request_id);
            }
        }))
    }

    /// Ready once some executor serving this model reports ready.
    fn warm_up(&self) -> Result<(), BackendError> {
        while !self.any_ready() {
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    fn kind(&self) -> &'static str {
        "kafka"
    }
}

impl Fleet for RemoteBackend {
    fn executors(&self) -> Vec<LiveExecutor> {
        RemoteBackend::executors(self)
            .into_iter()
            .map(|(e, alive)| LiveExecutor {
                since_report: e.seen.elapsed(),
                report: e.report,
                alive,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stoker_api::config::Routing;

    #[test]
    fn the_configured_default_is_the_views_default() {
        assert_eq!(routing_policy(Routing::default()), RoutingPolicy::default());
        assert_eq!(
            routing_policy(Routing::MaxHeadroom),
            RoutingPolicy::MaxHeadroom
        );
        assert_eq!(
            routing_policy(Routing::PowerOfTwo),
            RoutingPolicy::PowerOfChoices { d: 2 }
        );
        assert_eq!(
            routing_policy(Routing::PowerOfThree),
            RoutingPolicy::PowerOfChoices { d: 3 }
        );
    }
}
