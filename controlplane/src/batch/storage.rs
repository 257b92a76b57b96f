//! Object storage for batch files, segments and outputs through the
//! `object_store` crate: a local directory by default, S3 (or any server that
//! speaks its protocol) when the URL says `s3://`.

use std::path::Path;
use std::sync::Arc;

use object_store::aws::AmazonS3ConfigKey;
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ClientConfigKey, ObjectStore, PutPayload, RetryConfig};

/// How an S3 call is retried: transient failures (a dropped connection, a 5xx,
/// throttling) are retried up to 10 times with jittered backoff (100 ms
/// growing to at most 4 s) for at most 15 s, after which the call fails as
/// [`StorageError::Unavailable`]: an upload gets a typed 503 rather
/// than hanging for the client library's default of 3 minutes, and a batch
/// shard retries its commit from its last checkpoint.
const S3_RETRY: RetryConfig = RetryConfig {
    backoff: BackoffConfig {
        init_backoff: std::time::Duration::from_millis(100),
        max_backoff: std::time::Duration::from_secs(4),
        base: 2.0,
    },
    max_retries: 10,
    retry_timeout: std::time::Duration::from_secs(15),
};

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("object {0} not found")]
    NotFound(String),
    /// The filesystem under a local store is out of space (or quota): nothing
    /// was written, and the same write can succeed once space is freed.
    #[error("object storage is full: {0}")]
    Full(String),
    /// A remote store (S3) could not be reached or kept failing through the
    /// client's retries: nothing was written, and the same call may succeed
    /// later.
    #[error("object storage is unreachable: {0}")]
    Unavailable(String),
    #[error("object storage: {0}")]
    Backend(String),
    #[error("object storage URL {0:?} is not supported: {1}")]
    BadUrl(String, String),
}

impl From<object_store::Error> for StorageError {
    fn from(e: object_store::Error) -> Self {
        match e {
            object_store::Error::NotFound { path, .. } => StorageError::NotFound(path),
            e if out_of_space(&e) => StorageError::Full(e.to_string()),
            e @ object_store::Error::Generic { store: "S3", .. } => {
                StorageError::Unavailable(e.to_string())
            }
            e => StorageError::Backend(e.to_string()),
        }
    }
}

/// Whether an I/O error in `e`'s chain says the disk or the quota is full.
fn out_of_space(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
            )
        {
            return true;
        }
        next = err.source();
    }
    false
}

/// A cheap-to-clone handle on the bucket or directory.
#[derive(Clone, Debug)]
pub struct Storage {
    inner: Arc<dyn ObjectStore>,
    url: String,
}

impl Storage {
    /// A directory on the local filesystem, created if missing.
    pub fn local(dir: &Path) -> Result<Self, StorageError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| StorageError::Backend(format!("creating {}: {e}", dir.display())))?;
        let fs = object_store::local::LocalFileSystem::new_with_prefix(dir)?;
        Ok(Storage {
            inner: Arc::new(fs),
            url: format!("file://{}", dir.display()),
        })
    }

    /// `file:///path` or a bare path, or `s3://bucket/prefix` (credentials
    /// and region from the usual `AWS_*` variables).
    pub fn open(url: &str) -> Result<Self, StorageError> {
        if let Some(path) = url.strip_prefix("file://") {
            return Self::local(Path::new(path));
        }
        if url.starts_with("s3://") {
            return Self::s3(url);
        }
        if url.contains("://") {
            return Err(StorageError::BadUrl(
                url.to_owned(),
                "use file:///path or s3://bucket/prefix".into(),
            ));
        }
        Self::local(Path::new(url))
    }

    fn s3(url: &str) -> Result<Self, StorageError> {
        let rest = url.trim_start_matches("s3://");
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let mut builder = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_retry(S3_RETRY);
        // A store that does not answer a connection at once is down: fail
        // over to the retry schedule instead of waiting out the OS's timeout.
        if std::env::var_os("AWS_CONNECT_TIMEOUT").is_none() {
            builder = builder.with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::ConnectTimeout),
                "5s",
            );
        }
        let s3 = builder.build()?;
        let inner: Arc<dyn ObjectStore> = if prefix.is_empty() {
            Arc::new(s3)
        } else {
            Arc::new(object_store::prefix::PrefixStore::new(s3, prefix))
        };
        Ok(Storage {
            inner,
            url: url.to_owned(),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), StorageError> {
        self.inner
            .put(&ObjectPath::from(key), PutPayload::from(bytes))
            .await?;
        Ok(())
    }

    pub async fn get(&self, key: &str) -> Result<Vec<u8>, StorageError> {
        let r = self.inner.get(&ObjectPath::from(key)).await?;
        Ok(r.bytes().await?.to_vec())
    }

    /// Deletes `key`; a missing object is not an error.
    pub async fn delete(&self, key: &str) -> Result<(), StorageError> {
        match self.inner.delete(&ObjectPath::from(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(store: &'static str, io: std::io::ErrorKind) -> object_store::Error {
        object_store::Error::Generic {
            store,
            source: Box::new(std::io::Error::from(io)),
        }
    }

    #[test]
    fn a_full_disk_is_full_an_unreachable_s3_is_unavailable_and_the_rest_is_backend() {
        assert!(matches!(
            StorageError::from(generic("LocalFileSystem", std::io::ErrorKind::StorageFull)),
            StorageError::Full(_)
        ));
        assert!(matches!(
            StorageError::from(generic(
                "LocalFileSystem",
                std::io::ErrorKind::QuotaExceeded
            )),
            StorageError::Full(_)
        ));
        assert!(matches!(
            StorageError::from(generic("S3", std::io::ErrorKind::ConnectionReset)),
            StorageError::Unavailable(_)
        ));
        assert!(matches!(
            StorageError::from(generic(
                "LocalFileSystem",
                std::io::ErrorKind::PermissionDenied
            )),
            StorageError::Backend(_)
        ));
        assert!(matches!(
            StorageError::from(object_store::Error::NotFound {
                path: "a/b".into(),
                source: Box::new(std::io::Error::from(std::io::ErrorKind::NotFound)),
            }),
            StorageError::NotFound(_)
        ));
    }

    #[test]
    fn a_local_store_on_a_full_disk_refuses_a_put_as_full() {
        // /dev/full fails every write with ENOSPC: the error object_store
        // wraps must still read as a full disk.
        let err = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .and_then(|mut f| std::io::Write::write_all(&mut f, b"x"))
            .expect_err("/dev/full refuses writes");
        let e = object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(err),
        };
        assert!(matches!(StorageError::from(e), StorageError::Full(_)));
    }
}
