//! The gateway's shared state store: one Redis client for every part of the gateway that
//! shares state between pods (limit buckets, the pods' membership; batch jobs later).
//!
//! One node (`redis://`, `rediss://` for TLS), a Cluster (seed URLs) or Sentinel (the
//! master's name and the sentinels' URLs); the password comes from an environment variable
//! (a mounted Secret), never from the config file. Every call has a deadline: a slow Redis is
//! a failed call, which callers handle (see `limits::Limiter`).

pub mod membership;

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelServerType};

use crate::config::LimitsStoreConfig;

/// `name` with its braces escaped, so it cannot end a key's hash tag early (Redis Cluster
/// slots a key by what is between its first `{` and the next `}`; tenant names and batch
/// ids come from configs and URLs).
pub fn hash_tag_safe(name: &str) -> std::borrow::Cow<'_, str> {
    if name.contains(['{', '}', '%']) {
        name.replace('%', "%25")
            .replace('{', "%7B")
            .replace('}', "%7D")
            .into()
    } else {
        name.into()
    }
}

/// Why a store call failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Redis answered with an error, or the connection failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// No answer within the call's deadline.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    /// The settings cannot make a client.
    #[error("redis settings: {0}")]
    Settings(String),
}

/// A shared, cheaply cloned Redis connection with a deadline on every call.
#[derive(Clone)]
pub struct RedisClient {
    connection: Connection,
    timeout: Duration,
    /// Prefix of every key.
    pub prefix: Arc<str>,
}

/// How the client reaches Redis.
#[derive(Clone)]
enum Connection {
    /// One node (or a proxy in front of many): reconnects by itself.
    Node(ConnectionManager),
    /// A Redis Cluster: routes each call by its keys' slot; made on first use.
    Cluster(Arc<Connecting<redis::cluster::ClusterClient, ClusterConnection>>),
    /// Sentinel: the master the sentinels name, asked again after a failed call (failover).
    Sentinel(Arc<Connecting<tokio::sync::Mutex<SentinelClient>, ConnectionManager>>),
}

/// A connection made on first use from `source`, and again after a failed call.
struct Connecting<S, C> {
    source: S,
    current: tokio::sync::Mutex<Option<C>>,
    config: ConnectionManagerConfig,
}

impl RedisClient {
    /// A client for the `limits:` settings; the connection is made lazily (the first call
    /// makes it), so a gateway starts while Redis is down.
    pub fn new(settings: &LimitsStoreConfig) -> Result<Self, StoreError> {
        let timeout = Duration::from_millis(settings.timeout_ms);
        let password = std::env::var(&settings.redis_password_env)
            .ok()
            .filter(|p| !p.is_empty());
        // Reconnect quickly in the background: callers fall back meanwhile.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout.max(Duration::from_millis(500))))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(1));
        let connection = if let Some(url) = &settings.redis_url {
            let mut info = redis::IntoConnectionInfo::into_connection_info(url.value.as_str())?;
            if let Some(password) = &password {
                let settings = info.redis_settings().clone().set_password(password);
                info = info.set_redis_settings(settings);
            }
            let client = redis::Client::open(info)?;
            Connection::Node(ConnectionManager::new_lazy_with_config(client, config)?)
        } else if !settings.redis_cluster_urls.is_empty() {
            let urls: Vec<&str> = settings
                .redis_cluster_urls
                .iter()
                .map(|u| u.value.as_str())
                .collect();
            let mut builder = redis::cluster::ClusterClient::builder(urls)
                .connection_timeout(timeout.max(Duration::from_millis(500)))
                .response_timeout(timeout);
            if let Some(password) = &password {
                builder = builder.password(password);
            }
            Connection::Cluster(Arc::new(Connecting::new(builder.build()?, config)))
        } else if let Some(sentinel) = &settings.redis_sentinel {
            let urls: Vec<&str> = sentinel.urls.iter().map(|u| u.value.as_str()).collect();
            let node = password.as_ref().map(|p| {
                redis::sentinel::SentinelNodeConnectionInfo::default().set_redis_connection_info(
                    redis::RedisConnectionInfo::default().set_password(p),
                )
            });
            let client = SentinelClient::build(
                urls,
                sentinel.master.clone(),
                node,
                SentinelServerType::Master,
            )?;
            let source = tokio::sync::Mutex::new(client);
            Connection::Sentinel(Arc::new(Connecting::new(source, config)))
        } else {
            return Err(StoreError::Settings(
                "no redis_url, redis_cluster_urls or redis_sentinel".into(),
            ));
        };
        Ok(Self {
            connection,
            timeout,
            prefix: Arc::from(settings.key_prefix.as_str()),
        })
    }

    /// Runs `script` with `keys` and `args` (EVALSHA, loading it on first use), within the
    /// call deadline.
    pub async fn run_script<T: redis::FromRedisValue>(
        &self,
        script: &redis::Script,
        keys: &[String],
        args: &[String],
    ) -> Result<T, StoreError> {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(key);
        }
        for arg in args {
            invocation.arg(arg);
        }
        let call = async {
            match &self.connection {
                Connection::Node(manager) => {
                    Ok(invocation.invoke_async(&mut manager.clone()).await?)
                }
                Connection::Cluster(cluster) => {
                    let mut connection = cluster.connection().await?;
                    let result = invocation.invoke_async(&mut connection).await;
                    cluster.forget_after(&result).await;
                    Ok(result?)
                }
                Connection::Sentinel(sentinel) => {
                    let mut connection = sentinel.connection().await?;
                    let result = invocation.invoke_async(&mut connection).await;
                    // Maybe a failover: ask the sentinels again next time.
                    sentinel.forget_after(&result).await;
                    Ok(result?)
                }
            }
        };
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Timeout(self.timeout)),
        }
    }
}

impl<S, C: Clone> Connecting<S, C> {
    fn new(source: S, config: ConnectionManagerConfig) -> Self {
        Self {
            source,
            current: tokio::sync::Mutex::new(None),
            config,
        }
    }

    /// Drops the connection after a failed call, so the next call makes a new one.
    async fn forget_after<T>(&self, result: &redis::RedisResult<T>) {
        if result
            .as_ref()
            .is_err_and(|e| e.is_io_error() || e.is_timeout())
        {
            *self.current.lock().await = None;
        }
    }
}

impl Connecting<redis::cluster::ClusterClient, ClusterConnection> {
    /// The cluster connection, made (slots discovered) when there is none.
    async fn connection(&self) -> Result<ClusterConnection, StoreError> {
        let mut current = self.current.lock().await;
        if let Some(connection) = current.as_ref() {
            return Ok(connection.clone());
        }
        let connection = self.source.get_async_connection().await?;
        *current = Some(connection.clone());
        Ok(connection)
    }
}

impl Connecting<tokio::sync::Mutex<SentinelClient>, ConnectionManager> {
    /// The master's connection, asking the sentinels for the master when there is none.
    async fn connection(&self) -> Result<ConnectionManager, StoreError> {
        let mut current = self.current.lock().await;
        if let Some(connection) = current.as_ref() {
            return Ok(connection.clone());
        }
        let client = self.source.lock().await.async_get_client().await?;
        let connection = ConnectionManager::new_lazy_with_config(client, self.config.clone())?;
        *current = Some(connection.clone());
        Ok(connection)
    }
}
