//! Pooled upstream clients: HTTP/1.1, and HTTP/2 with prior knowledge (h2c).

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::{Client, Error as ClientError, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;

/// One client per protocol, each with its own connection pool.
#[derive(Clone, Debug)]
pub struct UpstreamClient {
    http1: Client<HttpConnector, Full<Bytes>>,
    h2c: Client<HttpConnector, Full<Bytes>>,
}

impl UpstreamClient {
    /// Clients with `connect_timeout` and keep-alive pools.
    pub fn new(connect_timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(connect_timeout));
        connector.enforce_http(true);
        let http1 = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(1024)
            .build(connector.clone());
        let h2c = Client::builder(TokioExecutor::new())
            .http2_only(true)
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Self { http1, h2c }
    }

    /// Sends `request` (its URI names the replica) over HTTP/1.1 or h2c.
    pub async fn send(
        &self,
        request: Request<Full<Bytes>>,
        h2c: bool,
    ) -> Result<Response<Incoming>, ClientError> {
        if h2c {
            self.h2c.request(request).await
        } else {
            self.http1.request(request).await
        }
    }
}
