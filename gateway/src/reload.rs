//! Reloads tenants when their file changes, by polling its modification time. It stands on
//! the top floor beside the loader: a whole config file is reloaded through `Config::load`,
//! which runs every concept's check, so an edit that breaks any section keeps the old tenants.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::auth::TenantDirectory;
use crate::config::{Config, TenantsFile};

/// Polls `path` every `interval` and swaps the tenants into `directory` when it changed.
/// `is_tenants_file` says whether `path` holds only tenants or a whole config. An invalid
/// file is logged and ignored: the last good tenants stay in force.
pub async fn watch_tenants(
    path: PathBuf,
    is_tenants_file: bool,
    interval: Duration,
    directory: Arc<TenantDirectory>,
) {
    let mut last = modified(&path);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let now = modified(&path);
        if now == last {
            continue;
        }
        last = now;
        let loaded = if is_tenants_file {
            TenantsFile::load(&path).map(|t| (t.tenants, t.anonymous))
        } else {
            Config::load(&path).map(|c| (c.tenants, c.anonymous))
        };
        match loaded {
            Ok((tenants, anonymous)) => {
                directory.replace(&tenants, anonymous.as_ref().map(|a| a.value.as_str()));
                tracing::info!(path = %path.display(), tenants = tenants.len(), "tenants reloaded");
            }
            Err(error) => {
                tracing::error!(%error, "tenants file changed but is invalid; keeping the previous tenants");
            }
        }
    }
}

/// The file's modification time, or `None` when it cannot be read (a Secret mid-update).
fn modified(path: &PathBuf) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}
