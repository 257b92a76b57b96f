//! What the distributed roles add to the server `stoker_api::roles` runs,
//! as its [`RoleParts`]: the API reads only the model's header (tokenizer,
//! chat template, identity; no weights), generates through the executors
//! (the remote backend) and holds an API slot; the executor adds the job
//! front (`jobs/`) to the single-process server, holds an executor slot, and
//! watches for a drain recorded for it.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::Context;
use futures_util::future::BoxFuture;
use stoker_api::roles::RoleParts;
use stoker_api::state::{AppState, Role};
use stoker_controlplane::transport::{Kafka, Lease, LeaseKind};
use stoker_executor::BLOCK_SIZE;
use stoker_executor::engine::ModelInfo;
use stoker_executor::model::ModelMeta;

use crate::jobs::JobServer;
use crate::kafka::{LeaseHold, kafka_settings, spawn_renewal};
use crate::remote::{ArtifactMeta, RemoteBackend, routing_policy};

/// What `role` adds to the server (nothing for `stoker serve`).
pub fn parts(role: Role) -> Arc<dyn RoleParts> {
    match role {
        Role::Embedded => Arc::new(stoker_api::roles::InProcess),
        Role::Api => Arc::new(ApiRole::default()),
        Role::Executor => Arc::new(ExecutorRole::default()),
    }
}

/// `stoker api`: the remote backend, and the API slot whose reply
/// partitions it reads, released once drained.
#[derive(Debug, Default)]
pub struct ApiRole {
    slot: Mutex<Option<LeaseHold>>,
}

impl RoleParts for ApiRole {
    fn load<'a>(&'a self, state: &'a AppState) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let hold = load_api(state).await?;
            *self.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(hold);
            Ok(())
        })
    }

    fn drained(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let hold = self.slot.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(hold) = hold {
                hold.release().await;
            }
        })
    }
}

/// `stoker executor`: the job front, once started.
#[derive(Default)]
pub struct ExecutorRole {
    front: OnceLock<Arc<JobServer>>,
}

impl RoleParts for ExecutorRole {
    fn start<'a>(&'a self, state: &'a AppState) -> BoxFuture<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let js = start_executor(state).await?;
            let _ = self.front.set(js);
            Ok(())
        })
    }

    fn draining(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(js) = self.front.get() {
                // API instances stop routing here now rather than at the next report.
                js.publish_capacity().await;
                // Jobs routed from an older report may still arrive: take
                // them before what is in flight is judged.
                tokio::time::sleep(js.drain_grace()).await;
            }
        })
    }

    fn drained(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(js) = self.front.get() {
                js.release_slot().await;
            }
        })
    }
}

fn lease_ttl(state: &AppState) -> Duration {
    Duration::from_millis(state.config.kafka.lease_ttl_ms.max(300))
}

async fn connect(state: &AppState) -> anyhow::Result<Kafka> {
    let settings = kafka_settings(&state.config);
    let brokers = settings.brokers.clone();
    let kafka = Kafka::connect(settings).with_context(|| format!("connecting to {brokers}"))?;
    // Topic creation races with other processes starting; both sides are fine.
    let mut attempt = 0;
    loop {
        attempt += 1;
        match kafka.ensure_topics().await {
            Ok(()) => {
                kafka.spawn_healer(Duration::from_secs(1));
                return Ok(kafka);
            }
            Err(e) if attempt < 30 => {
                tracing::warn!(attempt, error = %e, "creating topics; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e).context(format!("creating topics on {brokers}")),
        }
    }
}

async fn acquire(state: &AppState, kind: LeaseKind, count: i32) -> anyhow::Result<Lease> {
    let c = state.control().context("the control plane is not open")?;
    let holder = state.config.executor_id.to_string();
    Lease::acquire(&c.cp.store().db(), kind, count, &holder, lease_ttl(state))
        .await
        .with_context(|| format!("leasing a {} partition", kind.as_str()))
}

/// `stoker api`: the artifact's tokenizer and chat template, and a remote
/// backend reading this instance's leased reply partition. Returns once some
/// executor serving the model reports ready, with the API slot's lease.
async fn load_api(state: &AppState) -> anyhow::Result<LeaseHold> {
    let kafka = connect(state).await?;
    let lease = acquire(state, LeaseKind::Replies, kafka.topics().api_slots).await?;
    let layout = kafka.topics().layout.as_str();
    tracing::info!(partition = lease.slot, layout, "reading replies");
    let st = state.clone();
    let hold = spawn_renewal(lease.clone(), move || st.request_drain());
    let path = state.config.model.clone();
    let mode = state.config.load_options()?.weights;
    let template = state.config.chat_template_override();
    let timeout = Duration::from_millis(state.config.kafka.executor_timeout_ms.max(100));
    let instance = state.config.executor_id.to_string();
    let reply_timeout = Duration::from_millis(state.config.kafka.reply_timeout_ms.max(1000));
    let rt = tokio::runtime::Handle::current();
    let backend = tokio::task::spawn_blocking(move || -> anyhow::Result<RemoteBackend> {
        // The header only: an API host never runs the model, so it neither
        // holds the weights nor waits for them to load.
        let mut model = ModelMeta::read_as(&path, mode)
            .with_context(|| format!("reading model {}", path.display()))?;
        if let Some((source, origin)) = template? {
            model
                .override_chat_template(&source, &origin)
                .context("the chat template override")?;
        }
        let meta = ArtifactMeta {
            info: ModelInfo {
                identity: model.identity,
                context_window: model.config.context_length,
                vocab_size: model.config.vocab_size,
                // Executors refuse what their own caches cannot hold.
                num_kv_blocks: model.config.context_length / BLOCK_SIZE + 1,
                generation: model.generation,
            },
            tokenizer: model.tokenizer,
            chat_template: model.chat_template,
        };
        RemoteBackend::start(
            meta,
            kafka,
            lease.slot,
            instance,
            timeout,
            reply_timeout,
            rt,
        )
    })
    .await
    .context("loader panicked")??;
    backend.set_routing(routing_policy(state.config.kafka.routing));
    let backend = Arc::new(backend);
    state.install(backend.clone());
    state.set_fleet(backend.clone());
    tracing::info!("waiting for an executor to report ready");
    tokio::task::spawn_blocking(move || {
        use stoker_api::backend::Backend;
        backend.warm_up()
    })
    .await
    .context("waiting for executors")??;
    Ok(hold)
}

/// `stoker executor`: leases an interactive partition and starts taking jobs.
async fn start_executor(state: &AppState) -> anyhow::Result<Arc<JobServer>> {
    let kafka = connect(state).await?;
    let lease = acquire(state, LeaseKind::Interactive, kafka.topics().executor_slots).await?;
    let layout = kafka.topics().layout.as_str();
    tracing::info!(partition = lease.slot, layout, "taking jobs");
    let st = state.clone();
    // Assigning partitions reads offsets from the broker: blocking calls.
    let js = tokio::task::spawn_blocking(move || JobServer::spawn(st, kafka, lease))
        .await
        .context("job server start panicked")??;
    spawn_drain_watch(state.clone());
    Ok(js)
}

/// `stoker admin drain EXECUTOR` may be sent to any API instance: it records
/// the event, and the executor sees it here on its next read-model refresh.
fn spawn_drain_watch(state: AppState) {
    use stoker_controlplane::projection::ExecutorStatus;
    let every = Duration::from_millis(state.config.control.refresh_interval_ms.max(50));
    tokio::spawn(async move {
        let mut t = tokio::time::interval(every);
        loop {
            t.tick().await;
            let Some(c) = state.control() else { return };
            let status =
                c.cp.projector()
                    .views()
                    .await
                    .executors
                    .get(state.config.executor_id.as_str())
                    .map(|e| e.status);
            if status == Some(ExecutorStatus::Draining) {
                tracing::info!("a drain was recorded for this executor");
                state.request_drain();
                return;
            }
        }
    });
}
