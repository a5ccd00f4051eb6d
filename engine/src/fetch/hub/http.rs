//! The HTTP side of the Hub protocol: one hyper client (rustls with the system's CA roots, so
//! the engine image needs no Python and no OpenSSL), requests with the user's token sent only
//! to the Hub's own origin, redirects followed by hand (the Hub sends large files to a CDN,
//! which must not see the token), and bounded waits.

use std::time::Duration;

use bytes::Bytes;
use http::header::{AUTHORIZATION, LOCATION, RANGE, USER_AGENT};
use http::{HeaderMap, Method, Request, StatusCode, Uri};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Longest wait for a connection and the response headers.
pub const HEADERS_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for the next piece of a response body before the download is retried.
pub const BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Redirects followed at most.
const MAX_REDIRECTS: usize = 10;

/// A response whose body has not been read.
pub struct Reply {
    pub status: StatusCode,
    /// Headers of the *first* response (the Hub's, before any redirect to a CDN): they carry
    /// `X-Repo-Commit`, `X-Linked-Etag` and `X-Linked-Size`.
    pub hub_headers: HeaderMap,
    /// Headers of the final response.
    pub headers: HeaderMap,
    pub body: Incoming,
}

/// The Hub client's connection pool and credentials.
pub struct Http {
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
    token: Option<String>,
    /// `scheme://authority` of the Hub endpoint: the only origin that gets the token.
    origin: String,
    /// Why the system's CA roots could not be loaded, if they could not (reported with the
    /// first HTTPS failure).
    roots_error: Option<String>,
}

fn origin_of(uri: &Uri) -> String {
    format!(
        "{}://{}",
        uri.scheme_str().unwrap_or(""),
        uri.authority().map_or("", |a| a.as_str())
    )
}

impl Http {
    /// A client for `endpoint` (its origin gets `token`).
    pub fn new(endpoint: &str, token: Option<String>) -> Result<Self, String> {
        let endpoint: Uri = endpoint
            .parse()
            .map_err(|e| format!("HF_ENDPOINT {endpoint:?} is not a URL: {e}"))?;
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let (builder, roots_error) = match hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(provider.clone())
        {
            Ok(b) => (b, None),
            Err(e) => {
                // Plain-HTTP endpoints (a local mirror, the tests' Hub) still work.
                let config = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|e| format!("TLS set-up: {e}"))?
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth();
                (
                    hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config),
                    Some(format!("no CA certificates could be loaded ({e})")),
                )
            }
        };
        let connector = builder.https_or_http().enable_http1().build();
        Ok(Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
            token,
            origin: origin_of(&endpoint),
            roots_error,
        })
    }

    /// Whether a token is configured.
    pub fn has_token(&self) -> bool {
        self.token.is_some()
    }

    /// Sends `method url` (with `Range: bytes=FROM-` or `bytes=FROM-TO` when `range` is
    /// `(FROM, TO)`, `TO` inclusive), following redirects when `follow` (with the range,
    /// without the token off the Hub's origin).
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        range: Option<(u64, Option<u64>)>,
        follow: bool,
    ) -> Result<Reply, String> {
        let mut uri: Uri = url.parse().map_err(|e| format!("bad URL {url}: {e}"))?;
        let mut hub_headers = None;
        for _ in 0..=MAX_REDIRECTS {
            let mut req = Request::builder()
                .method(method.clone())
                .uri(uri.clone())
                .header(
                    USER_AGENT,
                    concat!("tokenscale/", env!("CARGO_PKG_VERSION")),
                )
                // The Hub's metadata (ETag, sizes) describes the file, not a compressed form.
                .header(http::header::ACCEPT_ENCODING, "identity");
            if let (Some(token), true) = (&self.token, origin_of(&uri) == self.origin) {
                req = req.header(AUTHORIZATION, format!("Bearer {token}"));
            }
            // `bytes=0-` asks for the whole file: sent as a plain GET.
            if let Some((from, to)) = range.filter(|&(from, to)| from > 0 || to.is_some()) {
                let to = to.map_or(String::new(), |t| t.to_string());
                req = req.header(RANGE, format!("bytes={from}-{to}"));
            }
            let req = req.body(Empty::new()).map_err(|e| e.to_string())?;
            let response = tokio::time::timeout(HEADERS_TIMEOUT, self.client.request(req))
                .await
                .map_err(|_| format!("no response from {uri} within {HEADERS_TIMEOUT:?}"))?
                .map_err(|e| self.describe(&uri, &e))?;
            let status = response.status();
            let headers = response.headers().clone();
            let first = hub_headers.get_or_insert_with(|| headers.clone()).clone();
            if follow && status.is_redirection() {
                let location = headers
                    .get(LOCATION)
                    .and_then(|l| l.to_str().ok())
                    .ok_or_else(|| format!("{uri} redirected ({status}) without a Location"))?;
                uri = join(&uri, location)?;
                continue;
            }
            return Ok(Reply {
                status,
                hub_headers: first,
                headers,
                body: response.into_body(),
            });
        }
        Err(format!("more than {MAX_REDIRECTS} redirects from {url}"))
    }

    /// A transport error with its causes on one line (and the CA hint for HTTPS).
    fn describe(&self, uri: &Uri, err: &dyn std::error::Error) -> String {
        let mut text = format!("{uri}: {err}");
        let mut source = err.source();
        while let Some(s) = source {
            text.push_str(&format!(": {s}"));
            source = s.source();
        }
        if let (Some(hint), Some("https")) = (&self.roots_error, uri.scheme_str()) {
            text.push_str(&format!(" ({hint})"));
        }
        text
    }
}

/// `location` relative to `base` (the Hub answers renamed repositories with relative
/// redirects, large files with absolute ones).
fn join(base: &Uri, location: &str) -> Result<Uri, String> {
    let bad = |e: &dyn std::fmt::Display| format!("bad redirect {location:?}: {e}");
    if location.starts_with("http://") || location.starts_with("https://") {
        return location.parse().map_err(|e| bad(&e));
    }
    let path = if location.starts_with('/') {
        location.to_string()
    } else {
        let dir = base.path().rsplit_once('/').map_or("", |(d, _)| d);
        format!("{dir}/{location}")
    };
    Uri::builder()
        .scheme(base.scheme_str().unwrap_or("https"))
        .authority(base.authority().map_or("", |a| a.as_str()))
        .path_and_query(path)
        .build()
        .map_err(|e| bad(&e))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn redirects_resolve_against_the_current_url() {
        let base: Uri = "https://hub.example/api/models/a/b/revision/main"
            .parse()
            .unwrap();
        assert_eq!(
            join(&base, "/api/models/a/c/revision/main")
                .unwrap()
                .to_string(),
            "https://hub.example/api/models/a/c/revision/main"
        );
        assert_eq!(
            join(&base, "https://cdn.example/x?sig=1")
                .unwrap()
                .to_string(),
            "https://cdn.example/x?sig=1"
        );
        assert_eq!(
            join(&base, "other").unwrap().to_string(),
            "https://hub.example/api/models/a/b/revision/other"
        );
        assert_eq!(origin_of(&base), "https://hub.example");
    }
}
