//! One file written to the object store in bounded parts: a small file is one `put`; a
//! larger one a multipart upload (S3's, or a local staging file fsynced and renamed at the
//! end) of parts of `part_bytes`. Until `finish`, nothing is visible under the key; a failed
//! or dropped upload is aborted, so a cut upload leaves no object and no parts behind.

use bytes::{Bytes, BytesMut};
use object_store::{MultipartUpload, ObjectStoreExt, PutPayload};

use super::objects::{ObjectError, Objects};

/// The smallest part S3 takes (but the last).
pub const S3_MIN_PART_BYTES: usize = 5 << 20;

/// A file being written; `finish` makes it visible, anything else leaves nothing.
pub struct ObjectUpload {
    objects: Objects,
    key: String,
    part_bytes: usize,
    /// The bytes not yet sent, copied into one buffer of a part's size: the frames they
    /// came in are freed at once (kept, each would pin the larger buffer it was cut from).
    pending: BytesMut,
    /// The multipart upload, from the first full part on.
    upload: Option<Box<dyn MultipartUpload>>,
    written: u64,
}

impl ObjectUpload {
    /// Starts writing `key` in parts of `part_bytes` (the store's `part_bytes()`).
    pub fn new(objects: Objects, key: String, part_bytes: usize) -> Self {
        Self {
            objects,
            key,
            part_bytes,
            pending: BytesMut::new(),
            upload: None,
            written: 0,
        }
    }

    /// Bytes held in memory now (at most `part_bytes` plus one frame).
    pub fn pending_bytes(&self) -> usize {
        self.pending.len()
    }

    /// Bytes taken so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Takes the next bytes; sends a part once `part_bytes` are pending.
    pub async fn write(&mut self, data: Bytes) -> Result<(), ObjectError> {
        self.written += data.len() as u64;
        if self.pending.capacity() == 0 {
            self.pending.reserve(self.part_bytes + (64 << 10));
        }
        self.pending.extend_from_slice(&data);
        if self.pending.len() >= self.part_bytes {
            self.send_part().await?;
        }
        Ok(())
    }

    async fn send_part(&mut self) -> Result<(), ObjectError> {
        let payload = PutPayload::from(std::mem::take(&mut self.pending).freeze());
        let upload = match &mut self.upload {
            Some(upload) => upload,
            None => {
                let path = self.objects.path(&self.key);
                let started = self.objects.store().put_multipart(&path).await?;
                self.upload.insert(started)
            }
        };
        upload.put_part(payload).await?;
        Ok(())
    }

    /// Sends what is left and makes the file visible under its key; its size.
    pub async fn finish(mut self) -> Result<u64, ObjectError> {
        if self.upload.is_none() {
            // Smaller than one part: one plain write.
            let payload = PutPayload::from(std::mem::take(&mut self.pending).freeze());
            let path = self.objects.path(&self.key);
            self.objects.store().put(&path, payload).await?;
            return Ok(self.written);
        }
        if !self.pending.is_empty() {
            self.send_part().await?;
        }
        if let Some(mut upload) = self.upload.take()
            && let Err(error) = upload.complete().await
        {
            abort(upload).await;
            return Err(error.into());
        }
        Ok(self.written)
    }

    /// Gives up: the parts sent are deleted (S3's multipart upload aborted, the local
    /// staging file removed).
    pub async fn abort(mut self) {
        self.pending.clear();
        if let Some(upload) = self.upload.take() {
            abort(upload).await;
        }
    }
}

async fn abort(mut upload: Box<dyn MultipartUpload>) {
    if let Err(error) = upload.abort().await {
        tracing::warn!(%error, "batch upload: aborting the multipart upload failed");
    }
}

impl Drop for ObjectUpload {
    /// A task dropped mid-upload (the connection's future dropped) still aborts it.
    fn drop(&mut self) {
        if let Some(upload) = self.upload.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(abort(upload));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn parts_make_one_file_and_a_cut_upload_leaves_nothing() {
        let dir = tokenscale_scratch::Scratch::in_temp_dir("object-upload");
        let objects = Objects::in_dir(dir.path()).expect("store");
        let mut upload = ObjectUpload::new(objects.clone(), "files/a".into(), 1000);
        let mut sent = Vec::new();
        for i in 0..25u8 {
            let chunk = vec![i; 300];
            sent.extend_from_slice(&chunk);
            upload.write(chunk.into()).await.expect("write");
            assert!(upload.pending_bytes() < 1000);
        }
        assert_eq!(upload.finish().await.expect("finish"), 7500);
        assert_eq!(&objects.get("files/a").await.expect("read")[..], &sent[..]);

        let mut cut = ObjectUpload::new(objects.clone(), "files/b".into(), 1000);
        for _ in 0..5 {
            cut.write(vec![1; 400].into()).await.expect("write");
        }
        // A part is staged on disk: aborting removes it and nothing is under the key.
        cut.abort().await;
        assert!(matches!(
            objects.get("files/b").await,
            Err(ObjectError::NotFound)
        ));
        let names: Vec<_> = std::fs::read_dir(dir.path().join("objects/files"))
            .expect("the files folder")
            .map(|entry| entry.expect("an entry").file_name())
            .collect();
        assert_eq!(names, ["a"], "no staging file is left");
    }

    #[tokio::test]
    async fn a_small_file_is_one_write() {
        let dir = tokenscale_scratch::Scratch::in_temp_dir("object-upload-small");
        let objects = Objects::in_dir(dir.path()).expect("store");
        let mut upload = ObjectUpload::new(objects.clone(), "files/s".into(), 1 << 20);
        upload
            .write(Bytes::from_static(b"{}\n"))
            .await
            .expect("write");
        assert_eq!(upload.finish().await.expect("finish"), 3);
        let empty = ObjectUpload::new(objects.clone(), "files/e".into(), 1 << 20);
        assert_eq!(empty.finish().await.expect("finish"), 0);
        assert_eq!(&objects.get("files/s").await.expect("read")[..], b"{}\n");
        assert!(objects.get("files/e").await.expect("read").is_empty());
    }
}
