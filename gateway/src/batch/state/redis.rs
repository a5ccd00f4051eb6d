//! The batch state in Redis, shared by every gateway pod: the same contract as `LocalState`
//! (see the module doc of `state`), kept by Lua scripts that run atomically on the server.
//!
//! Keys are laid out in `keys` (each batch's in one Cluster slot), scripts listed in
//! `scripts`. A call that spans slots (a record and a listing) is several calls, ordered so
//! that a pod dying between them leaves nothing wrong, only an id that points nowhere
//! (skipped when read) or a terminal batch still in `active` (dropped by the next `active`).

mod keys;
mod scripts;

use std::collections::HashMap;
use std::time::Duration;

use futures::future::try_join_all;

use super::StateError;
use crate::batch::types::{BatchRecord, FileMeta, LineResult, Progress, now_ms};
use crate::store::RedisClient;
use keys::{Keys, Part};
use scripts::SCRIPTS;

/// The shared store; clones share the connection.
#[derive(Clone)]
pub struct RedisState {
    client: RedisClient,
    keys: Keys,
}

/// Results read per call: a big batch's results in one reply would outlast the call deadline.
const RESULTS_PAGE: u32 = 500;

impl RedisState {
    /// The store on `client` (keys under its prefix).
    pub fn new(client: RedisClient) -> Self {
        let keys = Keys::new(client.prefix.clone());
        Self { client, keys }
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        script: &redis::Script,
        keys: &[String],
        args: &[String],
    ) -> Result<T, StateError> {
        Ok(self.client.run_script(script, keys, args).await?)
    }

    pub(super) async fn put_file(&self, meta: &FileMeta) -> Result<(), StateError> {
        // Metadata first: a listing never names a file that is not there yet.
        let key = self.keys.file(&meta.id);
        let _: () = self.run(&SCRIPTS.set, &[key], &[encode(meta)?]).await?;
        let listing = self.keys.tenant(&meta.tenant, "files");
        let args = [meta.created_at.to_string(), meta.id.clone()];
        let _: () = self.run(&SCRIPTS.add, &[listing], &args).await?;
        Ok(())
    }

    pub(super) async fn file(&self, id: &str) -> Result<Option<FileMeta>, StateError> {
        let text: Option<String> = self.run(&SCRIPTS.get, &[self.keys.file(id)], &[]).await?;
        text.map(|t| decode("a file", &t)).transpose()
    }

    pub(super) async fn files(&self, tenant: &str) -> Result<Vec<FileMeta>, StateError> {
        let listing = self.keys.tenant(tenant, "files");
        let ids: Vec<String> = self.run(&SCRIPTS.newest_first, &[listing], &[]).await?;
        let files = try_join_all(ids.iter().map(|id| self.file(id))).await?;
        Ok(files.into_iter().flatten().collect())
    }

    pub(super) async fn delete_file(&self, id: &str) -> Result<(), StateError> {
        let Some(meta) = self.file(id).await? else {
            return Ok(());
        };
        // Out of the listing first: a listing never names a file that is gone.
        let listing = self.keys.tenant(&meta.tenant, "files");
        let _: () = self.run(&SCRIPTS.remove, &[listing], &[meta.id]).await?;
        let _: () = self
            .run(&SCRIPTS.delete, &[self.keys.file(id)], &[])
            .await?;
        Ok(())
    }

    pub(super) async fn put_batch(&self, batch: &BatchRecord) -> Result<(), StateError> {
        // Listed (and active) before the record exists: ids without a record are skipped when
        // read, so a pod dying in between leaves no batch that runs but is never listed.
        let args = [batch.created_at.to_string(), batch.id.clone()];
        let listing = self.keys.tenant(&batch.tenant, "batches");
        let _: () = self.run(&SCRIPTS.add, &[listing], &args).await?;
        if !batch.status.is_terminal() {
            let _: () = self.run(&SCRIPTS.add, &[self.keys.active()], &args).await?;
        }
        let record = self.keys.job(&batch.id, Part::Record);
        let args = record_args(batch)?;
        let _: () = self.run(&SCRIPTS.put_record, &[record], &args).await?;
        Ok(())
    }

    pub(super) async fn batch(&self, id: &str) -> Result<Option<BatchRecord>, StateError> {
        let record = self.keys.job(id, Part::Record);
        let text: Option<String> = self.run(&SCRIPTS.get_record, &[record], &[]).await?;
        text.map(|t| decode("a batch record", &t)).transpose()
    }

    pub(super) async fn batches(&self, tenant: &str) -> Result<Vec<BatchRecord>, StateError> {
        let listing = self.keys.tenant(tenant, "batches");
        let ids: Vec<String> = self.run(&SCRIPTS.newest_first, &[listing], &[]).await?;
        let batches = try_join_all(ids.iter().map(|id| self.batch(id))).await?;
        Ok(batches.into_iter().flatten().collect())
    }

    pub(super) async fn active(&self) -> Result<Vec<BatchRecord>, StateError> {
        let ids: Vec<String> = self
            .run(&SCRIPTS.oldest_first, &[self.keys.active()], &[])
            .await?;
        let batches = try_join_all(ids.iter().map(|id| self.batch(id))).await?;
        let (done, active): (Vec<_>, Vec<_>) = batches
            .into_iter()
            .flatten()
            .partition(|b| b.status.is_terminal());
        // Terminal batches left behind by a replace whose second call failed: a terminal
        // batch never changes again, so dropping it from the set is always right.
        if !done.is_empty() {
            let ids: Vec<String> = done.into_iter().map(|b| b.id).collect();
            let _: () = self
                .run(&SCRIPTS.remove, &[self.keys.active()], &ids)
                .await?;
        }
        Ok(active)
    }

    pub(super) async fn replace_batch(&self, batch: &BatchRecord) -> Result<bool, StateError> {
        let record = self.keys.job(&batch.id, Part::Record);
        let args = record_args(batch)?;
        let replaced: i64 = self.run(&SCRIPTS.replace, &[record], &args).await?;
        if replaced == 1 && batch.status.is_terminal() {
            // The record is already replaced; if this fails, the next `active` drops it.
            let ids = [batch.id.clone()];
            let removed: Result<(), _> =
                self.run(&SCRIPTS.remove, &[self.keys.active()], &ids).await;
            if let Err(error) = removed {
                tracing::debug!(batch = %batch.id, %error, "batch state: a finished batch stays in `active` until the next read");
            }
        }
        Ok(replaced == 1)
    }

    pub(super) async fn claim(
        &self,
        id: &str,
        total: u32,
        max: u32,
        _worker: &str,
        lease: Duration,
    ) -> Result<Vec<u32>, StateError> {
        if max == 0 {
            return Ok(Vec::new());
        }
        let keys = self.keys.jobs(
            id,
            &[Part::Leases, Part::Returned, Part::Results, Part::Cursor],
        );
        let now = now_ms();
        let args = [
            now.to_string(),
            lease_end(now, lease).to_string(),
            total.to_string(),
            max.to_string(),
        ];
        self.run(&SCRIPTS.claim, &keys, &args).await
    }

    pub(super) async fn renew(
        &self,
        id: &str,
        _worker: &str,
        lines: &[u32],
        lease: Duration,
    ) -> Result<(), StateError> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut args = vec![lease_end(now_ms(), lease).to_string()];
        args.extend(lines.iter().map(u32::to_string));
        let keys = [self.keys.job(id, Part::Leases)];
        self.run(&SCRIPTS.renew, &keys, &args).await
    }

    pub(super) async fn release(&self, id: &str, lines: &[u32]) -> Result<(), StateError> {
        if lines.is_empty() {
            return Ok(());
        }
        let keys = self.keys.jobs(id, &[Part::Leases, Part::Returned]);
        let args: Vec<String> = lines.iter().map(u32::to_string).collect();
        self.run(&SCRIPTS.release, &keys, &args).await
    }

    pub(super) async fn record(
        &self,
        id: &str,
        index: u32,
        result: &LineResult,
    ) -> Result<bool, StateError> {
        let parts = [Part::Results, Part::Leases, Part::Progress, Part::Record];
        let keys = self.keys.jobs(id, &parts);
        let args = [
            index.to_string(),
            encode(result)?,
            if result.ok { "1" } else { "0" }.to_string(),
            result.prompt_tokens.to_string(),
            result.cached_tokens.to_string(),
            result.completion_tokens.to_string(),
        ];
        let recorded: i64 = self.run(&SCRIPTS.record, &keys, &args).await?;
        Ok(recorded == 1)
    }

    pub(super) async fn progress(&self, id: &str) -> Result<Progress, StateError> {
        let keys = [self.keys.job(id, Part::Progress)];
        let counts: Vec<Option<u64>> = self.run(&SCRIPTS.progress, &keys, &[]).await?;
        let count = |i: usize| counts.get(i).copied().flatten().unwrap_or(0);
        Ok(Progress {
            completed: u32::try_from(count(0)).unwrap_or(u32::MAX),
            failed: u32::try_from(count(1)).unwrap_or(u32::MAX),
            prompt_tokens: count(2),
            cached_tokens: count(3),
            completion_tokens: count(4),
        })
    }

    pub(super) async fn leased(&self, id: &str) -> Result<u32, StateError> {
        let keys = [self.keys.job(id, Part::Leases)];
        let live: u64 = self
            .run(&SCRIPTS.leased, &keys, &[now_ms().to_string()])
            .await?;
        Ok(u32::try_from(live).unwrap_or(u32::MAX))
    }

    pub(super) async fn results(&self, id: &str) -> Result<Vec<(u32, LineResult)>, StateError> {
        let keys = [self.keys.job(id, Part::Results)];
        // HSCAN may repeat a field across pages: the map keeps each line once.
        let mut results = HashMap::new();
        let mut cursor = "0".to_string();
        loop {
            let args = [cursor, RESULTS_PAGE.to_string()];
            let (next, page): (String, Vec<String>) =
                self.run(&SCRIPTS.results_page, &keys, &args).await?;
            for pair in page.chunks_exact(2) {
                let index: u32 = pair[0]
                    .parse()
                    .map_err(|_| StateError::Corrupt(format!("a result under `{}`", pair[0])))?;
                results.insert(index, decode("a line result", &pair[1])?);
            }
            if next == "0" {
                return Ok(results.into_iter().collect());
            }
            cursor = next;
        }
    }

    pub(super) async fn forget_work(&self, id: &str) -> Result<(), StateError> {
        let parts = [
            Part::Cursor,
            Part::Leases,
            Part::Returned,
            Part::Results,
            Part::Progress,
        ];
        self.run(&SCRIPTS.delete, &self.keys.jobs(id, &parts), &[])
            .await
    }
}

/// A record as the record scripts take it: version, JSON, status (read by `record.lua`).
fn record_args(batch: &BatchRecord) -> Result<[String; 3], StateError> {
    Ok([
        batch.version.to_string(),
        encode(batch)?,
        batch.status.as_str().to_string(),
    ])
}

/// When a lease taken at `now_ms` for `lease` ends, in ms since the epoch.
fn lease_end(now_ms: u64, lease: Duration) -> u64 {
    now_ms.saturating_add(u64::try_from(lease.as_millis()).unwrap_or(u64::MAX))
}

fn encode<T: serde::Serialize>(value: &T) -> Result<String, StateError> {
    serde_json::to_string(value).map_err(|e| StateError::Corrupt(e.to_string()))
}

fn decode<T: serde::de::DeserializeOwned>(what: &str, text: &str) -> Result<T, StateError> {
    serde_json::from_str(text).map_err(|e| StateError::Corrupt(format!("{what}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_end_later_and_never_wrap() {
        assert_eq!(lease_end(5, Duration::from_secs(1)), 1_005);
        assert_eq!(lease_end(u64::MAX, Duration::from_secs(1)), u64::MAX);
    }
}
