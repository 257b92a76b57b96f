//! Loading aggregates from the event store and executing commands against them.
//!
//! `execute` is read, fold, decide, append at the version that was read. If
//! another writer appended in between, the store refuses with
//! [`StoreError::Conflict`] and nothing is written; that error is returned as
//! is, never retried here, because the command was decided on a state that no
//! longer exists and only the caller knows whether it still makes sense.

use stoker_schemas::events::{EVENT_VERSION, EventPayload};

use super::{Aggregate, DomainError, Meta};
use crate::store::{
    EventStore, ExpectedVersion, NewEvent, Position, Recorded, StoreError, StreamRef,
};

/// An aggregate's state and the stream version it was folded from.
#[derive(Clone, Debug, PartialEq)]
pub struct Loaded<A> {
    pub state: A,
    /// The last `seq` folded; 0 for a stream with no events.
    pub version: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    #[error(transparent)]
    Domain(#[from] DomainError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A stored event this build cannot read: an unknown type, a version with
    /// no upcaster, or a payload that does not match its type.
    #[error("the event at position {position} cannot be decoded: {detail}")]
    Decode { position: Position, detail: String },
}

impl RepoError {
    /// Whether another writer got there first: re-read and decide again.
    pub fn is_conflict(&self) -> bool {
        matches!(self, RepoError::Store(e) if e.is_conflict())
    }
}

/// Reads the stream `A::STREAM_TYPE`/`stream_id` and folds it.
pub async fn load<A: Aggregate>(
    store: &EventStore,
    stream_id: &str,
) -> Result<Loaded<A>, RepoError> {
    let stream = StreamRef::new(A::STREAM_TYPE, stream_id);
    let mut state = A::default();
    let mut version = 0;
    for recorded in store.read_stream(&stream).await? {
        let seq = recorded.seq;
        state.apply(&decode::<A::Event>(recorded)?);
        version = seq;
    }
    Ok(Loaded { state, version })
}

/// Decides `cmd` on the current state of the stream and appends what it causes,
/// each event carrying `meta`'s actor and reason. Returns the recorded events
/// (none when the command causes none).
pub async fn execute<A: Aggregate>(
    store: &EventStore,
    stream_id: &str,
    cmd: A::Command,
    meta: &Meta,
) -> Result<Vec<Recorded>, RepoError> {
    let loaded = load::<A>(store, stream_id).await?;
    execute_loaded(store, stream_id, &loaded, cmd, meta).await
}

/// [`execute`] on a state the caller already loaded: the append expects the
/// stream to still be at `loaded.version`, so anything appended since makes it
/// a [`StoreError::Conflict`] and writes nothing.
pub async fn execute_loaded<A: Aggregate>(
    store: &EventStore,
    stream_id: &str,
    loaded: &Loaded<A>,
    cmd: A::Command,
    meta: &Meta,
) -> Result<Vec<Recorded>, RepoError> {
    let events = loaded
        .state
        .handle(cmd, meta)
        .map_err(|e| name_the_stream(e, stream_id))?;
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let expected = match loaded.version {
        0 => ExpectedVersion::NoStream,
        v => ExpectedVersion::Exact(v),
    };
    let new_events = events
        .iter()
        .map(|ev| {
            let (event_type, payload) = ev.to_parts();
            NewEvent {
                event_type: event_type.to_owned(),
                version: EVENT_VERSION,
                payload,
                actor: meta.actor.clone(),
                reason: meta.reason.clone(),
            }
        })
        .collect();
    let stream = StreamRef::new(A::STREAM_TYPE, stream_id);
    Ok(store.append(&stream, expected, new_events).await?)
}

/// Rebuilds a stream's typed event from its stored form (e.g. to fold the
/// events [`execute`] returned into a read model).
pub fn decode<E: EventPayload>(recorded: Recorded) -> Result<E, RepoError> {
    if recorded.version != EVENT_VERSION {
        return Err(RepoError::Decode {
            position: recorded.position,
            detail: format!(
                "{} has version {}, but this build reads version {EVENT_VERSION} and has no \
                 upcaster for it",
                recorded.event_type, recorded.version
            ),
        });
    }
    E::from_parts(&recorded.event_type, recorded.payload).map_err(|e| RepoError::Decode {
        position: recorded.position,
        detail: format!("{}: {e}", recorded.event_type),
    })
}

/// An aggregate with no events does not know its own id, so its `NotFound`
/// carries an empty one; the stream id is that id.
fn name_the_stream(e: DomainError, stream_id: &str) -> DomainError {
    match e {
        DomainError::NotFound { kind, id } if id.is_empty() => DomainError::NotFound {
            kind,
            id: stream_id.to_owned(),
        },
        e => e,
    }
}
