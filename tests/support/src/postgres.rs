//! A fresh Postgres database per test or benchmark, dropped again when the
//! handle drops (even on panic), on the machine's server. The one fixture
//! the event-store suite, its benchmark and the end-to-end cluster tests
//! share. It drives the `psql` client, so it needs no async runtime (a drop
//! inside a test's runtime cannot block on one) and no database driver.

use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// The server's maintenance database, used only to create and drop the
/// per-test databases: `STOKER_TEST_POSTGRES_URL`, else the local default.
pub fn admin_url() -> String {
    std::env::var("STOKER_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// Runs `sql` with `psql` against `url`; returns its unaligned output.
/// Panics with the fix when the client or the server is missing.
pub fn psql(url: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .arg(url)
        .args(["-v", "ON_ERROR_STOP=1", "-q", "-tA", "-c", sql])
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "running psql (the PostgreSQL client): {e}; install postgresql-client \
                 (CI's .ci/run does)"
            )
        });
    assert!(
        out.status.success(),
        "psql -c {sql:?} on {url}: {}\nThe tests need a running Postgres: start it, or point \
         STOKER_TEST_POSTGRES_URL at one (trust auth).",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A fresh database on the machine's Postgres, dropped at the end.
#[derive(Debug)]
pub struct Database {
    pub name: String,
    pub url: String,
}

impl Database {
    /// Creates `stoker_{tag}_…`, unique across processes and threads (the
    /// tag is cut to 24 characters: Postgres truncates names past 63).
    pub fn create(tag: &str) -> Database {
        let tag: String = tag.chars().take(24).collect();
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!(
            "stoker_{tag}_{}_{nanos}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let admin = admin_url();
        psql(&admin, &format!("CREATE DATABASE {name}"));
        let base = admin
            .rsplit_once('/')
            .map(|(b, _)| b)
            .expect("a database in the URL");
        Database {
            url: format!("{base}/{name}"),
            name,
        }
    }

    /// One value a query of this database returns.
    pub fn scalar(&self, sql: &str) -> String {
        psql(&self.url, sql)
    }

    /// The server's `host:port`.
    pub fn server_addr(&self) -> std::net::SocketAddr {
        let after_at = self.url.rsplit_once('@').map_or(&self.url[..], |(_, r)| r);
        let after_scheme = after_at.rsplit_once("://").map_or(after_at, |(_, r)| r);
        let hostport = after_scheme
            .split('/')
            .next()
            .expect("host:port in the URL");
        std::net::ToSocketAddrs::to_socket_addrs(hostport)
            .expect("the Postgres address")
            .next()
            .expect("the Postgres address resolves")
    }

    /// This database's URL through a relay on 127.0.0.1:`port`.
    pub fn url_via(&self, port: u16) -> String {
        let (user, _) = self
            .url
            .rsplit_once('@')
            .expect("a user in the Postgres URL");
        format!("{user}@127.0.0.1:{port}/{}", self.name)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        // Best effort: a failed drop leaves a database behind, not a failure.
        let _ = Command::new("psql")
            .arg(admin_url())
            .args([
                "-q",
                "-c",
                &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
            ])
            .output();
    }
}
