//! `ReplicaAddr`: where a replica answers, as the config, discovery, the picker and the proxy
//! name it.

use http::uri::{Authority, Scheme};

/// A replica's base URL, split for building upstream requests.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ReplicaAddr {
    /// `http://host:port`, as shown in metrics and logs (`h2c://` kept when given).
    pub url: String,
    /// `host:port`.
    pub authority: Authority,
    /// Whether to speak HTTP/2 with prior knowledge (`h2c://`).
    pub h2c: bool,
    /// `host:port` as the `Host` header of HTTP/1.1 requests, built once (cloning it
    /// per request only counts a reference).
    pub host: http::HeaderValue,
}

impl ReplicaAddr {
    /// Parses `http://host:port` or `h2c://host:port` (no path, no TLS).
    pub fn parse(url: &str) -> Result<Self, String> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| format!("`{url}` is not a URL: {e}"))?;
        let h2c = match uri.scheme_str() {
            Some("http") => false,
            Some("h2c") => true,
            _ => {
                return Err(format!(
                    "`{url}`: upstreams must start with http:// or h2c://"
                ));
            }
        };
        let authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| format!("`{url}` has no host"))?;
        if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(format!("`{url}`: give only scheme://host:port, no path"));
        }
        let host =
            http::HeaderValue::from_str(authority.as_str()).map_err(|e| format!("`{url}`: {e}"))?;
        Ok(Self {
            url: url.trim_end_matches('/').to_string(),
            authority,
            h2c,
            host,
        })
    }

    /// The upstream URI for a path-and-query on this replica.
    pub fn uri(&self, path_and_query: &str) -> Result<http::Uri, http::Error> {
        http::Uri::builder()
            .scheme(Scheme::HTTP)
            .authority(self.authority.clone())
            .path_and_query(path_and_query)
            .build()
    }
}
