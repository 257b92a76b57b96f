//! Fixtures for the event-store suite: a fresh SQLite file or a fresh Postgres
//! database per test, removed again when the fixture drops (even on panic).

use stoker_controlplane::store::EventStore;
use stoker_test_support::postgres::Database;
use stoker_test_support::{TempDir, temp_dir};

#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Sqlite,
    Postgres,
}

pub struct Fixture {
    pub store: EventStore,
    pub url: String,
    _cleanup: Cleanup,
}

enum Cleanup {
    /// The database file (and its `-wal`, `-shm`) lives in a temp dir; dropping it
    /// after the store removes them.
    Sqlite { _dir: TempDir },
    /// Dropped after the store.
    Postgres { _db: Database },
}

impl Fixture {
    pub async fn new(kind: Kind) -> Fixture {
        let tag = uuid::Uuid::new_v4().simple().to_string();
        let (url, cleanup) = match kind {
            Kind::Sqlite => {
                let dir = temp_dir("event-store");
                let path = dir.path().join(format!("stoker_test_{tag}.db"));
                (
                    format!("sqlite://{}", path.display()),
                    Cleanup::Sqlite { _dir: dir },
                )
            }
            Kind::Postgres => {
                let db = Database::create("cp");
                (db.url.clone(), Cleanup::Postgres { _db: db })
            }
        };
        let store = EventStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        Fixture {
            store,
            url,
            _cleanup: cleanup,
        }
    }

    /// A second, independent handle on the same database (another process, say).
    pub async fn reconnect(&self) -> EventStore {
        EventStore::connect(&self.url).await.unwrap()
    }
}
