//! Fetching `/metrics` over HTTP (hyper 1 client), bounded in time and size.

use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Longest a scrape may take.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(3);
/// Largest exposition accepted, bytes.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// Why a scrape failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ScrapeError {
    /// The URL could not be parsed.
    #[error("invalid scrape URL {url:?}: {message}")]
    Url {
        /// The URL.
        url: String,
        /// Why.
        message: String,
    },
    /// Connecting or sending failed.
    #[error("scraping {url} failed: {message}")]
    Request {
        /// The URL.
        url: String,
        /// Why.
        message: String,
    },
    /// The target answered with a non-2xx status.
    #[error("scraping {url} returned HTTP {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status code.
        status: u16,
    },
    /// No answer in time.
    #[error("scraping {url} timed out after {SCRAPE_TIMEOUT:?}")]
    Timeout {
        /// The URL.
        url: String,
    },
    /// The body was too large or not UTF-8.
    #[error("scraping {url}: unreadable body: {message}")]
    Body {
        /// The URL.
        url: String,
        /// Why.
        message: String,
    },
}

fn client() -> &'static Client<HttpConnector, Empty<Bytes>> {
    static CLIENT: OnceLock<Client<HttpConnector, Empty<Bytes>>> = OnceLock::new();
    CLIENT.get_or_init(|| Client::builder(TokioExecutor::new()).build_http())
}

/// GETs `url` and returns its body as text.
pub async fn fetch_text(url: &str) -> Result<String, ScrapeError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e: http::uri::InvalidUri| ScrapeError::Url {
            url: url.into(),
            message: e.to_string(),
        })?;
    let work = async {
        let response = client().get(uri).await.map_err(|e| ScrapeError::Request {
            url: url.into(),
            message: e.to_string(),
        })?;
        let status = response.status();
        if !status.is_success() {
            return Err(ScrapeError::Status {
                url: url.into(),
                status: status.as_u16(),
            });
        }
        let body = Limited::new(response.into_body(), MAX_BODY_BYTES)
            .collect()
            .await
            .map_err(|e| ScrapeError::Body {
                url: url.into(),
                message: e.to_string(),
            })?
            .to_bytes();
        String::from_utf8(body.to_vec()).map_err(|e| ScrapeError::Body {
            url: url.into(),
            message: e.to_string(),
        })
    };
    tokio::time::timeout(SCRAPE_TIMEOUT, work)
        .await
        .map_err(|_| ScrapeError::Timeout { url: url.into() })?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn refused_connection_and_bad_url_are_typed_errors() {
        // Bind then drop to get a loopback port nothing listens on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("free port");
        let err = fetch_text(&format!("http://127.0.0.1:{port}/metrics")).await;
        assert!(matches!(err, Err(ScrapeError::Request { .. })), "{err:?}");
        let err = fetch_text("not a url").await;
        assert!(matches!(err, Err(ScrapeError::Url { .. })), "{err:?}");
    }
}
