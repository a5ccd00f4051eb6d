//! The Redis store: buckets shared by every gateway pod, taken and settled by one Lua script
//! (`take.lua`) that runs atomically on the server with the server's clock.
//!
//! Keys: `{prefix}:limits:{TENANT}:model:MODEL:KIND` and `{prefix}:limits:{TENANT}:all:KIND`.
//! The braces are a Cluster hash tag: a tenant's buckets live in one slot, so one script can
//! take from its model and its tenant-wide buckets together.

use std::time::Duration;

use super::plan::{BucketState, Scope, Take};
use crate::store::{RedisClient, StoreError, hash_tag_safe};

/// Buckets in Redis.
pub struct RedisStore {
    client: RedisClient,
    script: redis::Script,
}

impl RedisStore {
    /// A store over `client`.
    pub fn new(client: RedisClient) -> Self {
        Self {
            client,
            script: redis::Script::new(include_str!("take.lua")),
        }
    }

    /// As [`MemoryStore::take`](super::memory::MemoryStore::take), in Redis.
    pub async fn take(
        &self,
        tenant: &str,
        model: &str,
        takes: &[Take],
        force: bool,
    ) -> Result<(bool, Vec<BucketState>), StoreError> {
        let keys: Vec<String> = takes
            .iter()
            .map(|take| key(&self.client.prefix, tenant, model, take))
            .collect();
        let mut args = Vec::with_capacity(1 + 2 * takes.len());
        args.push(if force { "1" } else { "0" }.to_string());
        for take in takes {
            args.push(take.per_minute.to_string());
            args.push(amount_text(take.amount));
        }
        let reply: Vec<i64> = self.client.run_script(&self.script, &keys, &args).await?;
        parse_reply(&reply, takes.len()).ok_or_else(|| {
            StoreError::Settings(format!(
                "unexpected reply from the limits script: {reply:?}"
            ))
        })
    }
}

/// The key of `take`'s bucket.
fn key(prefix: &str, tenant: &str, model: &str, take: &Take) -> String {
    let tenant = hash_tag_safe(tenant);
    match take.scope {
        Scope::Model => format!(
            "{prefix}:limits:{{{tenant}}}:model:{model}:{}",
            take.kind.key()
        ),
        Scope::Tenant => format!("{prefix}:limits:{{{tenant}}}:all:{}", take.kind.key()),
    }
}

/// An amount as Lua reads it: integers plainly, fractions with all their digits.
fn amount_text(amount: f64) -> String {
    if amount.fract() == 0.0 && amount.abs() < 1e15 {
        format!("{}", amount as i64)
    } else {
        format!("{amount:e}")
    }
}

/// `{taken, (remaining, reset_ms, wait_ms) per bucket}` into bucket states.
fn parse_reply(reply: &[i64], buckets: usize) -> Option<(bool, Vec<BucketState>)> {
    let (&taken, rest) = reply.split_first()?;
    if rest.len() != 3 * buckets {
        return None;
    }
    let ms = |v: i64| Duration::from_millis(u64::try_from(v).unwrap_or(0));
    let states = rest
        .chunks_exact(3)
        .map(|c| BucketState {
            remaining: u64::try_from(c[0]).unwrap_or(0),
            reset: ms(c[1]),
            wait: ms(c[2]),
        })
        .collect();
    Some((taken == 1, states))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vocab::LimitKind;

    #[test]
    fn keys_share_the_tenants_hash_tag_and_escape_braces() {
        let take = |scope| Take {
            scope,
            kind: LimitKind::Requests,
            per_minute: 60,
            amount: 1.0,
        };
        assert_eq!(
            key("ts", "team-a", "llama", &take(Scope::Model)),
            "ts:limits:{team-a}:model:llama:rpm"
        );
        assert_eq!(
            key("ts", "a}b{", "llama", &take(Scope::Tenant)),
            "ts:limits:{a%7Db%7B}:all:rpm"
        );
        assert_eq!(amount_text(-1500.0), "-1500");
        assert_eq!(amount_text(0.5), "5e-1");
        assert_eq!(
            parse_reply(&[1, 59, 1000, 0], 1),
            Some((
                true,
                vec![BucketState {
                    remaining: 59,
                    reset: Duration::from_secs(1),
                    wait: Duration::ZERO
                }]
            ))
        );
        assert_eq!(parse_reply(&[1, 59], 1), None);
    }
}
