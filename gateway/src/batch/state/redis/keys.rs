//! Where the batch state lives in Redis (`P` is the client's key prefix; braces are Redis
//! Cluster hash tags):
//! - `P:batch:file:{FILE}`: a file's metadata (JSON);
//! - `P:batch:tenant:{TENANT}:files` and `…:batches`: the tenant's ids, scored by
//!   `created_at` (listings, newest first);
//! - `P:batch:active`: ids of batches not yet terminal, scored by `created_at`;
//! - `P:batch:job:{BATCH}:record` (a hash `{version, json, status}`: compare-and-set reads
//!   the version, `record` the status), `:cursor`, `:leases`, `:returned`, `:results`, `:progress`: one batch's record
//!   and work, all in the batch's slot, so each script touches one slot.

use std::sync::Arc;

use crate::store::hash_tag_safe;

/// The key names under one prefix.
#[derive(Clone)]
pub(super) struct Keys {
    prefix: Arc<str>,
}

/// The parts of one batch's work, each a key in the batch's slot.
#[derive(Clone, Copy)]
pub(super) enum Part {
    Record,
    Cursor,
    Leases,
    Returned,
    Results,
    Progress,
}

impl Part {
    fn name(self) -> &'static str {
        match self {
            Self::Record => "record",
            Self::Cursor => "cursor",
            Self::Leases => "leases",
            Self::Returned => "returned",
            Self::Results => "results",
            Self::Progress => "progress",
        }
    }
}

impl Keys {
    pub(super) fn new(prefix: Arc<str>) -> Self {
        Self { prefix }
    }

    /// `part` of batch `id`'s work.
    pub(super) fn job(&self, id: &str, part: Part) -> String {
        let (prefix, tag) = (&self.prefix, hash_tag_safe(id));
        format!("{prefix}:batch:job:{{{tag}}}:{}", part.name())
    }

    /// Several parts of batch `id`'s work (one slot: one script may touch them all).
    pub(super) fn jobs(&self, id: &str, parts: &[Part]) -> Vec<String> {
        parts.iter().map(|&part| self.job(id, part)).collect()
    }

    /// File `id`'s metadata.
    pub(super) fn file(&self, id: &str) -> String {
        format!("{}:batch:file:{{{}}}", self.prefix, hash_tag_safe(id))
    }

    /// The tenant's `files` or `batches`.
    pub(super) fn tenant(&self, tenant: &str, listing: &str) -> String {
        let tag = hash_tag_safe(tenant);
        format!("{}:batch:tenant:{{{tag}}}:{listing}", self.prefix)
    }

    /// The batches not yet terminal.
    pub(super) fn active(&self) -> String {
        format!("{}:batch:active", self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batchs_keys_share_its_hash_tag_and_ids_from_urls_cannot_break_out() {
        let keys = Keys::new(Arc::from("ts"));
        assert_eq!(
            keys.job("batch-1", Part::Leases),
            "ts:batch:job:{batch-1}:leases"
        );
        assert_eq!(keys.file("}a{%"), "ts:batch:file:{%7Da%7B%25}");
        assert_eq!(
            keys.tenant("team-a", "files"),
            "ts:batch:tenant:{team-a}:files"
        );
        assert_eq!(keys.active(), "ts:batch:active");
    }
}
