//! Where the Batch API's files are: the bytes of uploaded inputs and of the output and error
//! files, through `object_store`: a local directory by default, an S3-compatible bucket when
//! several gateway pods share the work.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

pub use crate::config::{Location, parse_location};

/// A local upload's part: a write to the staging file.
const LOCAL_PART_BYTES: usize = 256 << 10;

/// Why a file's bytes could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// No such object.
    #[error("no such file in the object store")]
    NotFound,
    /// The store failed.
    #[error("object store: {0}")]
    Store(String),
}

impl From<object_store::Error> for ObjectError {
    fn from(error: object_store::Error) -> Self {
        match error {
            object_store::Error::NotFound { .. } => Self::NotFound,
            other => Self::Store(other.to_string()),
        }
    }
}

/// The file store; clones share it.
#[derive(Clone)]
pub struct Objects {
    store: Arc<dyn ObjectStore>,
    prefix: String,
    /// The size of an upload's parts (S3 takes no smaller).
    part_bytes: usize,
    /// Said in logs and errors.
    pub describe: Arc<str>,
}

impl Objects {
    /// Opens `location` (a local folder is created).
    pub fn open(location: &Location) -> Result<Self, String> {
        match location {
            Location::Dir(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                // fsync: an upload's staging file and its rename are durable before its
                // file record is written.
                let store = object_store::local::LocalFileSystem::new_with_prefix(dir)
                    .map_err(|e| format!("{}: {e}", dir.display()))?
                    .with_fsync(true);
                Ok(Self {
                    store: Arc::new(store),
                    part_bytes: LOCAL_PART_BYTES,
                    prefix: String::new(),
                    describe: Arc::from(format!("the folder {}", dir.display())),
                })
            }
            Location::S3 { bucket, prefix } => {
                // reqwest is built without a TLS provider of its own and panics building a
                // client (even for an http:// endpoint) unless the process has one: ring, as
                // kube and redis use. Installing twice is refused harmlessly.
                let _ = rustls::crypto::ring::default_provider().install_default();
                let store = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .build()
                    .map_err(|e| format!("s3://{bucket}: {e}"))?;
                Ok(Self {
                    store: Arc::new(store),
                    part_bytes: super::object_upload::S3_MIN_PART_BYTES,
                    prefix: prefix.clone(),
                    describe: Arc::from(format!("s3://{bucket}/{prefix}")),
                })
            }
        }
    }

    /// The store in `dir/objects` (the default beside the local state).
    pub fn in_dir(dir: &Path) -> Result<Self, String> {
        Self::open(&Location::Dir(dir.join("objects")))
    }

    /// The size of an upload's parts: what one upload holds in memory.
    pub fn part_bytes(&self) -> usize {
        self.part_bytes
    }

    pub(super) fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    pub(super) fn path(&self, key: &str) -> ObjectPath {
        if self.prefix.is_empty() {
            ObjectPath::from(key)
        } else {
            ObjectPath::from(format!("{}/{key}", self.prefix))
        }
    }

    /// Writes `bytes` under `key` (whole: readers see the old object or the new one).
    pub async fn put(&self, key: &str, bytes: Bytes) -> Result<(), ObjectError> {
        self.store.put(&self.path(key), bytes.into()).await?;
        Ok(())
    }

    /// The bytes under `key`.
    pub async fn get(&self, key: &str) -> Result<Bytes, ObjectError> {
        Ok(self.store.get(&self.path(key)).await?.bytes().await?)
    }

    /// The bytes under `key`, as a stream of chunks (a file is never read whole to serve it).
    pub async fn get_stream(
        &self,
        key: &str,
    ) -> Result<BoxStream<'static, Result<Bytes, ObjectError>>, ObjectError> {
        let stream = self.store.get(&self.path(key)).await?.into_stream();
        Ok(stream.map_err(ObjectError::from).boxed())
    }

    /// Deletes `key` (absent is fine).
    pub async fn delete(&self, key: &str) -> Result<(), ObjectError> {
        match self.store.delete(&self.path(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse_and_bad_ones_say_what_is_expected() {
        assert_eq!(
            parse_location("s3://jobs/batch/"),
            Ok(Location::S3 {
                bucket: "jobs".into(),
                prefix: "batch".into()
            })
        );
        assert_eq!(
            parse_location("file:///var/lib/x"),
            Ok(Location::Dir("/var/lib/x".into()))
        );
        assert!(parse_location("s3://").is_err());
        assert!(parse_location("file://relative").is_err());
        assert!(
            parse_location("gs://b")
                .expect_err("an error")
                .contains("s3://")
        );
    }

    #[tokio::test]
    async fn a_local_folder_round_trips_and_missing_is_not_found() {
        let dir = tokenscale_scratch::Scratch::in_temp_dir("objects");
        let objects = Objects::in_dir(dir.path()).expect("ok");
        objects
            .put("files/a", Bytes::from_static(b"x\n"))
            .await
            .expect("ok");
        assert_eq!(&objects.get("files/a").await.expect("ok")[..], b"x\n");
        objects.delete("files/a").await.expect("ok");
        objects.delete("files/a").await.expect("ok");
        assert!(matches!(
            objects.get("files/a").await,
            Err(ObjectError::NotFound)
        ));
    }
}
