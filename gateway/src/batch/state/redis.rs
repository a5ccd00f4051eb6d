//! The batch state in Redis (shared by every gateway pod). Being written: see `LocalState`
//! for the contract; until then a gateway configured with `batch.state: redis` refuses
//! batch calls with this error.

use std::time::Duration;

use super::StateError;
use crate::batch::types::{BatchRecord, FileMeta, LineResult, Progress};
use crate::store::RedisClient;

/// The shared store.
#[derive(Clone)]
pub struct RedisState {
    #[allow(dead_code)]
    client: RedisClient,
}

fn unbuilt<T>() -> Result<T, StateError> {
    Err(StateError::Corrupt(
        "batch.state: redis is not built yet".into(),
    ))
}

impl RedisState {
    /// The store on `client` (keys under its prefix).
    pub fn new(client: RedisClient) -> Self {
        Self { client }
    }
    pub(super) async fn put_file(&self, _: &FileMeta) -> Result<(), StateError> {
        unbuilt()
    }
    pub(super) async fn file(&self, _: &str) -> Result<Option<FileMeta>, StateError> {
        unbuilt()
    }
    pub(super) async fn files(&self, _: &str) -> Result<Vec<FileMeta>, StateError> {
        unbuilt()
    }
    pub(super) async fn delete_file(&self, _: &str) -> Result<(), StateError> {
        unbuilt()
    }
    pub(super) async fn put_batch(&self, _: &BatchRecord) -> Result<(), StateError> {
        unbuilt()
    }
    pub(super) async fn batch(&self, _: &str) -> Result<Option<BatchRecord>, StateError> {
        unbuilt()
    }
    pub(super) async fn batches(&self, _: &str) -> Result<Vec<BatchRecord>, StateError> {
        unbuilt()
    }
    pub(super) async fn active(&self) -> Result<Vec<BatchRecord>, StateError> {
        unbuilt()
    }
    pub(super) async fn replace_batch(&self, _: &BatchRecord) -> Result<bool, StateError> {
        unbuilt()
    }
    pub(super) async fn claim(
        &self,
        _: &str,
        _: u32,
        _: u32,
        _: &str,
        _: Duration,
    ) -> Result<Vec<u32>, StateError> {
        unbuilt()
    }
    pub(super) async fn renew(
        &self,
        _: &str,
        _: &str,
        _: &[u32],
        _: Duration,
    ) -> Result<(), StateError> {
        unbuilt()
    }
    pub(super) async fn release(&self, _: &str, _: &[u32]) -> Result<(), StateError> {
        unbuilt()
    }
    pub(super) async fn record(&self, _: &str, _: u32, _: &LineResult) -> Result<bool, StateError> {
        unbuilt()
    }
    pub(super) async fn progress(&self, _: &str) -> Result<Progress, StateError> {
        unbuilt()
    }
    pub(super) async fn leased(&self, _: &str) -> Result<u32, StateError> {
        unbuilt()
    }
    pub(super) async fn results(&self, _: &str) -> Result<Vec<(u32, LineResult)>, StateError> {
        unbuilt()
    }
    pub(super) async fn forget_work(&self, _: &str) -> Result<(), StateError> {
        unbuilt()
    }
}
