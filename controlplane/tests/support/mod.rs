//! Fixtures for the event-store suite: a fresh SQLite file or a fresh Postgres
//! database per test, removed again when the fixture drops (even on panic).

use stoker_controlplane::store::EventStore;
use stoker_test_support::{TempDir, temp_dir};

/// The server the Postgres cases run against; its `postgres` database is used
/// only to create and drop the per-test databases.
pub fn postgres_admin_url() -> String {
    std::env::var("STOKER_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Sqlite,
    Postgres,
}

pub struct Fixture {
    pub store: EventStore,
    pub url: String,
    cleanup: Cleanup,
}

enum Cleanup {
    /// The database file (and its `-wal`, `-shm`) lives in a temp dir; dropping it
    /// after the store removes them.
    Sqlite {
        _dir: TempDir,
    },
    Postgres {
        admin_url: String,
        db: String,
    },
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
                let admin_url = postgres_admin_url();
                let db = format!("stoker_test_{tag}");
                let admin = sqlx::PgPool::connect(&admin_url).await.unwrap_or_else(|e| {
                    panic!(
                        "Postgres is unreachable at {admin_url}: {e}. The event-store suite \
                         runs against a real Postgres (CI starts one); start it or point \
                         STOKER_TEST_POSTGRES_URL at one."
                    )
                });
                sqlx::query(&format!("CREATE DATABASE {db}"))
                    .execute(&admin)
                    .await
                    .unwrap_or_else(|e| panic!("CREATE DATABASE {db}: {e}"));
                admin.close().await;
                let base = admin_url.rsplit_once('/').map(|(b, _)| b).unwrap();
                (format!("{base}/{db}"), Cleanup::Postgres { admin_url, db })
            }
        };
        let store = EventStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        Fixture {
            store,
            url,
            cleanup,
        }
    }

    /// A second, independent handle on the same database (another process, say).
    pub async fn reconnect(&self) -> EventStore {
        EventStore::connect(&self.url).await.unwrap()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        match &self.cleanup {
            Cleanup::Sqlite { .. } => {}
            Cleanup::Postgres { admin_url, db } => {
                let (admin_url, db) = (admin_url.clone(), db.clone());
                // Drop runs inside the test's runtime; use a private one to clean up.
                let _ = std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    rt.block_on(async {
                        if let Ok(admin) = sqlx::PgPool::connect(&admin_url).await {
                            let sql = format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)");
                            let _ = sqlx::query(&sql).execute(&admin).await;
                            admin.close().await;
                        }
                    });
                })
                .join();
            }
        }
    }
}
