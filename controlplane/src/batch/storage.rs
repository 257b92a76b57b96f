//! Object storage for batch files, segments and outputs through the
//! `object_store` crate: a local directory by default, S3 when the URL says
//! `s3://` and the binary was built with the `s3` feature.

use std::path::Path;
use std::sync::Arc;

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, PutPayload};

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("object {0} not found")]
    NotFound(String),
    #[error("object storage: {0}")]
    Backend(String),
    #[error("object storage URL {0:?} is not supported: {1}")]
    BadUrl(String, String),
}

impl From<object_store::Error> for StorageError {
    fn from(e: object_store::Error) -> Self {
        match e {
            object_store::Error::NotFound { path, .. } => StorageError::NotFound(path),
            e => StorageError::Backend(e.to_string()),
        }
    }
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

    #[cfg(feature = "s3")]
    fn s3(url: &str) -> Result<Self, StorageError> {
        let rest = url.trim_start_matches("s3://");
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let s3 = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .build()?;
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

    #[cfg(not(feature = "s3"))]
    fn s3(url: &str) -> Result<Self, StorageError> {
        Err(StorageError::BadUrl(
            url.to_owned(),
            "this build has no S3 support; rebuild with `--features s3`".into(),
        ))
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
