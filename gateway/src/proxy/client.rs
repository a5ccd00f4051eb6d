//! Pooled upstream clients: HTTP/1.1, and HTTP/2 with prior knowledge (h2c).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::{Client, Error as ClientError, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;

use super::h1_pool::{H1Error, H1Pool};
use crate::routing::ReplicaAddr;

/// One client per protocol, each with its own connection pool.
#[derive(Clone, Debug)]
pub struct UpstreamClient {
    http1: Arc<H1Pool>,
    h2c: Client<HttpConnector, Full<Bytes>>,
}

/// Why an upstream call got no response.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// Over HTTP/1.1.
    #[error(transparent)]
    Http1(#[from] H1Error),
    /// Over h2c.
    #[error(transparent)]
    H2c(#[from] ClientError),
}

impl SendError {
    /// Whether no connection could be made (as opposed to one failing mid-exchange).
    pub fn is_connect(&self) -> bool {
        match self {
            Self::Http1(error) => matches!(error, H1Error::Connect { .. }),
            Self::H2c(error) => error.is_connect(),
        }
    }
}

impl UpstreamClient {
    /// Clients with `connect_timeout` and keep-alive pools.
    pub fn new(connect_timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(connect_timeout));
        connector.enforce_http(true);
        let http1 = Arc::new(H1Pool::new(connect_timeout));
        let h2c = Client::builder(TokioExecutor::new())
            .http2_only(true)
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Self { http1, h2c }
    }

    /// Sends `request` to `replica` over HTTP/1.1 or h2c. Over h2c its URI must be
    /// absolute; over HTTP/1.1 it may also be origin-form (`/path?query`).
    pub async fn send(
        &self,
        request: Request<Full<Bytes>>,
        replica: &ReplicaAddr,
    ) -> Result<Response<Incoming>, SendError> {
        if replica.h2c {
            Ok(self.h2c.request(request).await?)
        } else {
            Ok(self.http1.send(request, &replica.authority).await?)
        }
    }
}
