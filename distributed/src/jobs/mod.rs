//! The executor's side of the transport: take jobs from the partition this
//! executor leases, run them on the in-process engine, stream the events back
//! to the asking API instance's reply partition, act on cancels from the
//! control topic, and publish capacity every `capacity_interval_ms`.
//!
//! Every job is checked again on arrival: the API routed it from a capacity
//! view up to one report old, so a full queue or a draining executor answers
//! a typed refusal the API passes on, never a silent drop. A job older than
//! the API's reply timeout is refused (nobody waits for it), and one
//! delivered twice runs once (`seen.rs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stoker_controlplane::transport::{Kafka, Lease};
use stoker_executor::engine::EngineEvent;
use stoker_executor::{BLOCK_SIZE, TenantId, ValidRequest};
use stoker_schemas::ids::{ExecutorId, RequestId};
use stoker_schemas::transport::{
    CapacityReport, ControlCommand, ControlMessage, JobMessage, ReplyEvent, ReplyMessage,
    TRANSPORT_VERSION, Versioned,
};
use tokio::sync::oneshot;

use crate::kafka::{LeaseHold, unix_ms};
use crate::wire;
use stoker_api::admission::Demand;
use stoker_api::error::ApiError;
use stoker_api::metrics::lane_name;
use stoker_api::state::{AppState, Phase};

mod held;
mod seen;

use held::Held;
use seen::Seen;

/// A running executor's transport loops.
pub struct JobServer {
    state: AppState,
    kafka: Kafka,
    executor_id: ExecutorId,
    slot: i32,
    /// Cancel switches of the jobs running now, by request id.
    running: Mutex<HashMap<RequestId, oneshot::Sender<()>>>,
    /// The jobs in the engine by reply partition, for the reports.
    held: Held,
    report_seq: AtomicU64,
    /// When this executor started draining (unix ms; 0 while not).
    drain_started_ms: AtomicU64,
    /// The slot's lease, until it is released at a clean stop.
    lease: Mutex<Option<LeaseHold>>,
    /// Set once the slot was given up: this process writes nothing more to
    /// the slot's partitions (their next holder is their only writer).
    released: AtomicBool,
    /// Jobs taken recently: one delivered again is not run twice.
    seen: Mutex<Seen>,
}

impl JobServer {
    /// Starts the job, control, capacity and lease loops for `lease`'s partition.
    pub fn spawn(state: AppState, kafka: Kafka, lease: Lease) -> anyhow::Result<Arc<JobServer>> {
        let executor_id = state.config.executor_id.clone();
        let topics = kafka.topics().clone();
        let jobs = kafka.assign_from_end(
            &topics.interactive,
            &topics.job_partitions(lease.slot),
            &format!("stoker-executor-{executor_id}"),
        )?;
        let control = kafka
            .assign_all_from_end(&topics.control, &format!("stoker-executor-{executor_id}"))?;
        let me = Arc::new(JobServer {
            state,
            kafka,
            executor_id,
            slot: lease.slot,
            running: Mutex::new(HashMap::new()),
            held: Held::default(),
            report_seq: AtomicU64::new(0),
            drain_started_ms: AtomicU64::new(0),
            lease: Mutex::new(None),
            released: AtomicBool::new(false),
            seen: Mutex::new(Seen::new(seen::REMEMBERED)),
        });
        let rt = tokio::runtime::Handle::current();
        {
            let me = me.clone();
            crate::kafka::spawn_consumer(&rt, jobs, "jobs", move |job: JobMessage| {
                let me = me.clone();
                tokio::spawn(async move { me.run_job(job).await });
            });
        }
        {
            let me = me.clone();
            crate::kafka::spawn_consumer(&rt, control, "control", move |c: ControlMessage| {
                if c.executor_id == me.executor_id {
                    me.on_control(c)
                }
            });
        }
        {
            let me = me.clone();
            let every = Duration::from_millis(me.state.config.kafka.capacity_interval_ms.max(50));
            tokio::spawn(async move {
                let mut t = tokio::time::interval(every);
                t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    t.tick().await;
                    me.publish_capacity().await;
                }
            });
        }
        // Lost to another executor: this one reads nothing now, so it drains.
        let st = me.state.clone();
        let hold = crate::kafka::spawn_renewal(lease, move || st.request_drain());
        *me.lease.lock().unwrap() = Some(hold);
        Ok(me)
    }

    /// Gives the slot up at the end of a clean stop, so a replacement
    /// executor takes it at once. Jobs that still arrive are left unanswered
    /// (the replacement reads them too) and capacity is no longer reported.
    pub async fn release_slot(&self) {
        self.released.store(true, Ordering::Relaxed);
        let hold = self.lease.lock().unwrap().take();
        if let Some(hold) = hold {
            hold.release().await;
        }
    }

    /// The executor slot this process leases.
    pub fn slot(&self) -> i32 {
        self.slot
    }

    /// How long after a drain began jobs are still taken: the API instances
    /// may have routed them from a report that predates the drain.
    pub fn drain_grace(&self) -> Duration {
        Duration::from_millis(self.state.config.kafka.executor_timeout_ms.max(100))
    }

    /// Whether a job sent at `sent_unix_ms` is still taken while draining.
    fn within_drain_grace(&self, sent_unix_ms: u64) -> bool {
        let started = self.drain_started_ms.load(Ordering::Relaxed);
        started > 0 && sent_unix_ms <= started + self.drain_grace().as_millis() as u64
    }

    fn on_control(&self, c: ControlMessage) {
        match c.command {
            ControlCommand::Cancel { request_id } => {
                if let Some(tx) = self.running.lock().unwrap().remove(&request_id) {
                    let _ = tx.send(());
                }
            }
        }
    }

    /// This executor's capacity as the API's view needs it.
    fn report(&self) -> Option<CapacityReport> {
        let served = self.state.served()?;
        let s = served.backend.stats();
        let phase = self.state.phase();
        Some(CapacityReport {
            v: TRANSPORT_VERSION,
            executor_id: self.executor_id.clone(),
            // Distributed mode always has its control plane (Postgres).
            deployment_id: self.state.control()?.deployment_id.clone(),
            revision_id: served.provenance.revision.parse().ok()?,
            model_sha256: served.provenance.sha256.clone(),
            slot: self.slot,
            ready: phase == Phase::Ready,
            draining: phase == Phase::Draining,
            running: s.running() as u32,
            waiting: s.waiting() as u32,
            waiting_tokens: s.waiting_tokens as u64,
            kv_blocks_total: s.kv_blocks_total as u64,
            kv_blocks_free: s.kv_blocks_free as u64,
            block_size: BLOCK_SIZE as u32,
            max_num_seqs: self.state.config.engine.max_num_seqs as u32,
            tokens_per_second: s.tokens_per_second_ewma,
            prefill_tokens_per_second: s.prefill_tokens_per_second_ewma,
            decode_tokens_per_second: s.decode_tokens_per_second_ewma,
            seq: self.report_seq.fetch_add(1, Ordering::Relaxed),
            sent_unix_ms: unix_ms(),
            by_reply_partition: Some(self.held.snapshot()),
            prefill_backlog_tokens: Some(s.prefill_backlog_tokens as u64),
        })
    }

    /// Publishes one capacity report (also called at drain so the API stops
    /// routing here before the next tick).
    pub async fn publish_capacity(&self) {
        if self.state.phase() == Phase::Draining {
            let _ = self.drain_started_ms.compare_exchange(
                0,
                unix_ms(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        if self.released.load(Ordering::Relaxed) {
            return;
        }
        let Some(r) = self.report() else { return };
        let topics = self.kafka.topics();
        let partition = topics.capacity_partition(self.slot);
        if let Err(e) = self
            .kafka
            .send(
                &topics.capacity,
                Some(partition),
                &self.executor_id,
                &r.encode(),
            )
            .await
        {
            tracing::warn!(error = %e, "could not publish capacity");
        }
    }

    async fn reply(&self, job: &JobMessage, seq: &mut u64, event: ReplyEvent) -> bool {
        if self.released.load(Ordering::Relaxed) {
            // Only a job the drain's hard stop could not end gets here.
            return false;
        }
        let msg = ReplyMessage {
            v: TRANSPORT_VERSION,
            request_id: job.request_id.clone(),
            executor_id: self.executor_id.clone(),
            seq: *seq,
            event,
        };
        *seq += 1;
        let topic = &self.kafka.topics().replies;
        match self
            .kafka
            .send(
                topic,
                Some(job.reply_partition),
                &job.request_id,
                &msg.encode(),
            )
            .await
        {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, request_id = %job.request_id, "could not send a reply");
                false
            }
        }
    }

    /// Checks a job against this executor's state and limits.
    fn accept(
        &self,
        job: &JobMessage,
    ) -> Result<(ValidRequest, stoker_api::admission::Ticket), ApiError> {
        let retry = self.state.admission.retry_hint();
        // Older than the API's patience (it ends a request that hears
        // nothing for `reply_timeout_ms`): nobody waits for the answer.
        let patience = self.state.config.kafka.reply_timeout_ms.max(1000);
        let age = unix_ms().saturating_sub(job.sent_unix_ms);
        if age > patience {
            return Err(ApiError::NotReady {
                message: format!(
                    "the job took {age} ms to reach executor `{}`, longer than the API waits for a reply ({patience} ms)",
                    self.executor_id
                ),
                retry_after: retry,
            });
        }
        if job.executor_id != self.executor_id {
            return Err(ApiError::NotReady {
                message: format!(
                    "the job was meant for executor `{}`; this partition is now read by `{}`",
                    job.executor_id, self.executor_id
                ),
                retry_after: retry,
            });
        }
        let served = match (self.state.phase(), self.state.served()) {
            (Phase::Draining, Some(s)) if self.within_drain_grace(job.sent_unix_ms) => s,
            _ => self.state.ready()?,
        };
        if job.model_sha256 != served.provenance.sha256 {
            return Err(ApiError::NotReady {
                message: format!(
                    "executor `{}` serves another artifact than the request was validated for",
                    self.executor_id
                ),
                retry_after: retry,
            });
        }
        let lane = wire::lane_from_wire(&job.lane)
            .ok_or_else(|| ApiError::invalid(format!("unknown lane `{}`", job.lane), "lane"))?;
        let request = ValidRequest::new(
            job.prompt.clone(),
            wire::sampling_from_wire(&job.sampling),
            lane,
            TenantId(job.tenant.clone()),
            &served.limits,
        )
        .map_err(ApiError::from)?
        .with_tenant_weight(job.tenant_weight);
        let demand = Demand {
            prompt_tokens: job.prompt.len(),
            max_tokens: job.sampling.max_tokens as usize,
            deadline: None,
            tenant: stoker_api::admission::TenantKey::new(&job.tenant, job.tenant_weight),
        };
        let ticket = self
            .state
            .admission
            .admit(demand, &served.backend.stats())?;
        Ok((request, ticket))
    }

    async fn run_job(self: Arc<Self>, job: JobMessage) {
        if self.released.load(Ordering::Relaxed) {
            return;
        }
        if !self.seen.lock().unwrap().first_time(&job.request_id) {
            // Its first delivery runs (or ran) it and answers for it.
            tracing::warn!(request_id = %job.request_id, "dropping a job delivered again");
            return;
        }
        let topics = self.kafka.topics();
        if !topics.answers_on(self.slot, job.reply_partition) {
            // A process configured with another layout or other slot counts
            // sent it: in the pairwise layout, writing there would make this
            // executor a second writer of another's partition; in either,
            // the reply would reach the wrong API instance or none.
            tracing::warn!(request_id = %job.request_id, reply_partition = job.reply_partition,
                "dropping a job whose reply partition is not this executor's; are all processes configured with the same kafka.layout, kafka.executor_slots and kafka.api_slots?");
            return;
        }
        let mut seq = 0u64;
        let (request, mut ticket) = match self.accept(&job) {
            Ok(v) => v,
            Err(e) => {
                if let Some(s) = self.state.served() {
                    s.metrics.record_rejected(e.code());
                }
                self.reply(&job, &mut seq, wire::error_to_wire(&e)).await;
                return;
            }
        };
        let served = self
            .state
            .served()
            .expect("accepted jobs have a served model");
        let lane = request.lane();
        let mut handle = match served.backend.submit(request) {
            Ok(h) => h,
            Err(e) => {
                self.reply(&job, &mut seq, wire::report_to_wire(&Err(e)))
                    .await;
                return;
            }
        };
        // Counted for its API instance until the last reply is sent.
        let _hold = self.held.hold(job.reply_partition);
        let (cancel_tx, mut cancel_rx) = oneshot::channel();
        self.running
            .lock()
            .unwrap()
            .insert(job.request_id.clone(), cancel_tx);
        let mut hard_stop = self.state.hard_stop();
        loop {
            let ev = tokio::select! {
                ev = handle.next() => ev,
                _ = &mut cancel_rx => {
                    handle.cancel();
                    continue;
                }
                _ = stoker_api::edge::generate::stopped(&mut hard_stop) => {
                    handle.cancel();
                    let e = ApiError::NotReady {
                        message: "the executor shut down before this request finished".into(),
                        retry_after: self.state.admission.retry_hint(),
                    };
                    self.reply(&job, &mut seq, wire::error_to_wire(&e)).await;
                    break;
                }
            };
            let Some(ev) = ev else { break };
            if let Ok(EngineEvent::Started { .. }) = ev {
                ticket.started();
            }
            if let Ok(EngineEvent::Finished {
                reason,
                usage,
                timings,
            }) = &ev
            {
                served
                    .metrics
                    .record_finished(lane, reason.as_str(), usage, timings);
                ticket.finished(usage.completion_tokens);
                tracing::debug!(request_id = %job.request_id, lane = lane_name(lane), "job finished");
            }
            let end = matches!(
                ev,
                Ok(EngineEvent::Finished { .. } | EngineEvent::Error(_)) | Err(_)
            );
            if matches!(&ev, Ok(EngineEvent::Delta { text, logprobs, .. }) if text.is_empty() && logprobs.is_empty())
            {
                continue;
            }
            if !self.reply(&job, &mut seq, wire::report_to_wire(&ev)).await {
                // The API cannot hear us: stop spending the engine on it.
                handle.cancel();
            }
            if end {
                break;
            }
        }
        self.running.lock().unwrap().remove(&job.request_id);
        drop(ticket);
    }
}
