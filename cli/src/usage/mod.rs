//! `tokenscale usage`: a gateway's usage report — per tenant and model, each limit's use over
//! the last minute and hour, 429s per limit, and the limit that binds — as a table or JSON.

mod table;

pub use table::render as render_table;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokenscale_gateway::usage::UsageList;

/// How long the gateway has to answer.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Arguments of `tokenscale usage`.
#[derive(Debug, Clone, clap::Args)]
pub struct UsageArgs {
    /// The gateway: its API URL with --key, else its admin listener's URL (--admin-listen),
    /// which lists every tenant.
    #[arg(long)]
    pub url: String,
    /// A tenant's API key: read that tenant's own usage from the API port.
    #[arg(long)]
    pub key: Option<String>,
    /// Print the report as JSON (one object per tenant and model) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Why the report could not be read.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    /// The URL is not one this command can call.
    #[error("--url {url}: {why}")]
    BadUrl {
        /// What was given.
        url: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The async runtime could not start.
    #[error("cannot start the runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// No answer.
    #[error("GET {url}: {why}")]
    Unreachable {
        /// What was called.
        url: String,
        /// What went wrong.
        why: String,
    },
    /// An answer other than the report.
    #[error("GET {url} answered {status}: {body}{hint}")]
    Refused {
        /// What was called.
        url: String,
        /// The status.
        status: u16,
        /// Its body (the gateway's error message).
        body: String,
        /// What to try instead.
        hint: &'static str,
    },
    /// A 200 whose body is not a usage report.
    #[error("GET {url}: the answer is not a usage report ({source})")]
    NotAReport {
        /// What was called.
        url: String,
        /// Why it does not parse.
        #[source]
        source: serde_json::Error,
    },
}

/// Reads the report and renders it as `args` ask.
pub fn run_command(args: &UsageArgs) -> Result<String, UsageError> {
    let url = usage_url(&args.url)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(UsageError::Runtime)?;
    let (status, body) = runtime.block_on(get(&url, args.key.as_deref()))?;
    if status != 200 {
        let hint = match (status, &args.key) {
            (404, None) => " (without --key, --url must be the gateway's admin listener)",
            (401, None) => " (the API port needs a tenant's key: pass --key)",
            _ => "",
        };
        return Err(UsageError::Refused {
            url,
            status,
            body: body.trim().to_string(),
            hint,
        });
    }
    let list: UsageList = serde_json::from_str(&body).map_err(|source| UsageError::NotAReport {
        url: url.clone(),
        source,
    })?;
    if args.json {
        // Re-serialized from the typed report: a field the gateway added and this CLI does not
        // know is left out rather than passed on unchecked.
        return serde_json::to_string_pretty(&list)
            .map_err(|source| UsageError::NotAReport { url, source });
    }
    Ok(render_table(&list))
}

/// `<base>/v1/usage` for the `--url` given.
fn usage_url(base: &str) -> Result<String, UsageError> {
    let bad = |why| UsageError::BadUrl {
        url: base.to_string(),
        why,
    };
    if base.starts_with("https://") {
        return Err(bad("https is not supported: call the gateway over http"));
    }
    if !base.starts_with("http://") {
        return Err(bad("give the gateway's URL as http://host:port"));
    }
    Ok(format!("{}/v1/usage", base.trim_end_matches('/')))
}

/// `(status, body)` of `GET url`, sent with `key` as a bearer token.
async fn get(url: &str, key: Option<&str>) -> Result<(u16, String), UsageError> {
    let unreachable = |why: String| UsageError::Unreachable {
        url: url.to_string(),
        why,
    };
    let mut request = http::Request::get(url);
    if let Some(key) = key {
        request = request.header(http::header::AUTHORIZATION, format!("Bearer {key}"));
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(|e| unreachable(e.to_string()))?;
    let client = Client::builder(TokioExecutor::new()).build_http();
    let exchange = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| unreachable(with_sources(&e)))?;
        let status = response.status().as_u16();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| unreachable(e.to_string()))?
            .to_bytes();
        Ok((status, String::from_utf8_lossy(&bytes).into_owned()))
    };
    tokio::time::timeout(TIMEOUT, exchange)
        .await
        .map_err(|_| unreachable(format!("no answer within {}s", TIMEOUT.as_secs())))?
}

/// `error` and each error below it, `: `-joined (hyper's own says only "client error
/// (Connect)"; the cause, e.g. "Connection refused", is below it).
fn with_sources(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_must_be_plain_http() {
        assert_eq!(
            usage_url("http://127.0.0.1:9090/").ok().as_deref(),
            Some("http://127.0.0.1:9090/v1/usage")
        );
        for bad in ["127.0.0.1:9090", "https://gw.example", ""] {
            let error = usage_url(bad).err().map(|e| e.to_string());
            assert!(
                error.as_deref().is_some_and(|e| e.contains("--url")),
                "{bad}: {error:?}"
            );
        }
    }
}
