//! Projections: the read models folded from the events, kept in memory for the
//! request path (routing reads them on every request) and persisted in
//! `read_models` with a checkpoint, so a restart loads them instead of
//! replaying history.
//!
//! Writers call [`Projector::catch_up`] after they append; a background tick
//! catches up on what other processes appended. [`Projector::rebuild`] empties
//! the tables and replays every event, and must give the same documents as the
//! live fold did.

mod sql;
pub mod tenants;
pub mod views;

use std::sync::Arc;

use tokio::sync::{Mutex, RwLock};

pub use tenants::{KeyView, TenantView};
pub use views::{
    BatchView, CapacityProfileView, DeploymentView, ExecutorStatus, ExecutorView, FoldError,
    RevisionView, RolloutStatus, RolloutView, Views, kind,
};

use crate::store::{EventStore, Position, StoreError};

/// The projection's name in `projection_checkpoints`.
const NAME: &str = "views";
/// Events read per round trip while catching up.
const BATCH: u32 = 500;

#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Fold(#[from] FoldError),
    #[error("stored read model {kind}/{id} is unreadable: {detail}")]
    Corrupt {
        kind: String,
        id: String,
        detail: String,
    },
}

impl From<sqlx::Error> for ProjectionError {
    fn from(e: sqlx::Error) -> Self {
        ProjectionError::Store(StoreError::from(e))
    }
}

/// What a rebuild did.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RebuildReport {
    pub events: u64,
    pub documents: u64,
    pub position: i64,
    /// Whether the rebuilt views equal the ones held before the rebuild;
    /// `None` when events arrived in between, so the two cannot be compared.
    pub unchanged: Option<bool>,
}

/// The read models of one store.
#[derive(Clone)]
pub struct Projector {
    store: EventStore,
    views: Arc<RwLock<Views>>,
    /// One fold at a time, so documents are written in position order.
    fold: Arc<Mutex<()>>,
}

impl std::fmt::Debug for Projector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Projector").finish_non_exhaustive()
    }
}

impl Projector {
    /// Loads the persisted views and catches up with the events after them.
    pub async fn open(store: EventStore) -> Result<Projector, ProjectionError> {
        let views = sql::load(&store.db()).await?;
        let p = Projector {
            store,
            views: Arc::new(RwLock::new(views)),
            fold: Arc::new(Mutex::new(())),
        };
        p.catch_up().await?;
        Ok(p)
    }

    /// A snapshot of every view (cheap enough: a control plane holds hundreds of
    /// documents, not millions).
    pub async fn views(&self) -> tokio::sync::RwLockReadGuard<'_, Views> {
        self.views.read().await
    }

    /// Folds the events appended since the last fold and persists the documents
    /// they changed together with the checkpoint. Returns the new position.
    pub async fn catch_up(&self) -> Result<Position, ProjectionError> {
        let _one = self.fold.lock().await;
        let db = self.store.db();
        loop {
            let mut next = self.views.read().await.clone();
            let events = self.store.read_all(next.position, BATCH).await?;
            if events.is_empty() {
                return Ok(next.position);
            }
            let mut touched = std::collections::BTreeSet::new();
            for ev in &events {
                touched.extend(next.fold(ev)?);
            }
            sql::save(&db, &next, &touched).await?;
            let done = events.len() < BATCH as usize;
            let pos = next.position;
            *self.views.write().await = next;
            if done {
                return Ok(pos);
            }
        }
    }

    /// Empties the read models and replays every event from the start.
    pub async fn rebuild(&self) -> Result<RebuildReport, ProjectionError> {
        let _one = self.fold.lock().await;
        let before = self.views.read().await.clone();
        let mut next = Views::default();
        let mut events = 0u64;
        loop {
            let batch = self.store.read_all(next.position, BATCH).await?;
            for ev in &batch {
                next.fold(ev)?;
            }
            events += batch.len() as u64;
            if batch.len() < BATCH as usize {
                break;
            }
        }
        let documents = sql::replace_all(&self.store.db(), &next).await?;
        // Events appended after `before` was read are in `next` too; compare
        // only when nothing new arrived in between.
        let unchanged = (before.position == next.position).then(|| before == next);
        let report = RebuildReport {
            events,
            documents,
            position: next.position.0,
            unchanged,
        };
        *self.views.write().await = next;
        Ok(report)
    }

    /// The documents as stored in the database, in (kind, id) order: what the
    /// rebuild test compares.
    pub async fn stored_documents(
        &self,
    ) -> Result<Vec<(String, String, serde_json::Value)>, ProjectionError> {
        sql::documents(&self.store.db()).await
    }

    pub fn store(&self) -> &EventStore {
        &self.store
    }
}
