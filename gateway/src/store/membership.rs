//! Gateway pods announce themselves in Redis every second; each learns how many pods are
//! alive and its place among them, and takes its share of what they split (a model's replica
//! concurrency, a tenant's in-flight cap, quotas while Redis is down). A pod that stops
//! announcing drops out after [`TTL`], and the others' shares grow back.

use std::sync::Arc;
use std::time::Duration;

use super::RedisClient;
use crate::vocab::GatewayShare;

/// How often a pod announces itself.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// How long an announcement counts.
pub const TTL: Duration = Duration::from_secs(5);

/// Adds this pod with its expiry (server time), drops expired pods, returns those left.
const ANNOUNCE: &str = r"
local time = redis.call('TIME')
local now_ms = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
redis.call('ZADD', KEYS[1], now_ms + tonumber(ARGV[2]), ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now_ms)
redis.call('PEXPIRE', KEYS[1], 2 * tonumber(ARGV[2]))
return redis.call('ZRANGE', KEYS[1], 0, -1)
";

/// A name for this pod that no other pod has: its pod name (or host name), process id and
/// start time.
pub fn pod_id() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "gateway".into());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{host}-{}-{:x}", std::process::id(), nanos as u64)
}

/// Announces `pod` every [`INTERVAL`] until the process ends, keeping `share` in step with the
/// pods alive and calling `changed` when the split changes. While Redis is unreachable the
/// last split stands.
pub async fn run(
    client: RedisClient,
    pod: String,
    share: Arc<GatewayShare>,
    changed: impl Fn(u32, u32),
) {
    let script = redis::Script::new(ANNOUNCE);
    let key = format!("{}:gateways", client.prefix);
    let ttl_ms = TTL.as_millis().to_string();
    let mut ticker = tokio::time::interval(INTERVAL);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        ticker.tick().await;
        let args = [pod.clone(), ttl_ms.clone()];
        let result: Result<Vec<String>, _> = client
            .run_script(&script, std::slice::from_ref(&key), &args)
            .await;
        match result {
            Ok(mut pods) => {
                failing = false;
                pods.sort();
                let Some(index) = pods.iter().position(|p| *p == pod) else {
                    continue;
                };
                let (count, index) = (pods.len() as u32, index as u32);
                if share.set(count, index) {
                    tracing::info!(
                        pods = count,
                        index,
                        "gateway pods changed: shares rebalanced"
                    );
                    changed(count, index);
                }
            }
            Err(error) if !failing => {
                failing = true;
                let (pods, _) = share.get();
                tracing::warn!(%error, pods, "cannot announce this gateway pod; keeping the last split");
            }
            Err(_) => {}
        }
    }
}
