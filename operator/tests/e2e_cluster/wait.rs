//! The suite's errors and its one bounded wait: every step names what it waited for and
//! what it last saw, so a failure on someone's cluster reads as a diagnosis.

use std::future::Future;
use std::time::{Duration, Instant};

/// Why a step of the suite failed.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// An API call failed.
    #[error("{what}: {source}")]
    Kube {
        /// The call.
        what: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// helm could not run or failed (its output is in the error).
    #[error("helm: {0}")]
    Helm(#[source] tokenscale_e2e::tools::ToolError),
    /// A file could not be written or read.
    #[error("{what}: {source}")]
    Io {
        /// The file.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// An object did not (de)serialise.
    #[error("json: {0}")]
    Json(#[source] serde_json::Error),
    /// A wait ran out.
    #[error("timed out after {after_s} s waiting for {what}; last seen: {last}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// How long, in seconds.
        after_s: u64,
        /// The last state observed.
        last: String,
    },
}

impl SuiteError {
    /// A failed API call, named.
    pub fn kube(what: impl Into<String>, source: kube::Error) -> Self {
        Self::Kube {
            what: what.into(),
            source,
        }
    }
}

/// Calls `probe` every `every` until it returns `Ok(Ok(value))`, for at most `timeout`.
/// `Ok(Err(state))` means "not yet" (the state is reported if time runs out); `Err` ends the
/// wait at once.
pub async fn poll_until<T, F, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut probe: F,
) -> Result<T, SuiteError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Result<T, String>, SuiteError>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match probe().await? {
            Ok(value) => return Ok(value),
            Err(state) => state,
        };
        if Instant::now() >= deadline {
            return Err(SuiteError::Timeout {
                what: what.to_string(),
                after_s: timeout.as_secs(),
                last,
            });
        }
        tokio::time::sleep(every).await;
    }
}
