//! Usage that shows the binding limit: per tenant and model, rolling windows of the last
//! minute and hour (`window`), the rule naming the limit that binds first (`binding`), and the
//! report `GET /v1/usage` serves (`report`). What is counted is fed from the one place that
//! counts a tenant's usage (`metrics::TenantUsage`); this module does no I/O.

mod binding;
mod report;
mod window;

pub use binding::{binding, ratio};
pub use report::{LimitUse, RateLimited, UsageList, UsageRow, WindowUsage};
pub use window::{Counts, KINDS, UsageWindows, kind_index};

use crate::config::LimitsConfig;

/// One tenant's windows on one model: (tenant, model, last minute, last hour).
pub type WindowedRow = (String, String, Counts, Counts);

/// The report of `rows`, each against its tenant's per-model limits (`limits_of(tenant)`),
/// sorted by tenant, then model.
pub fn list(
    mut rows: Vec<WindowedRow>,
    limits_of: impl Fn(&str) -> Option<LimitsConfig>,
) -> UsageList {
    rows.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
    let data = rows
        .iter()
        .map(|(tenant, model, minute, hour)| {
            UsageRow::new(tenant, model, minute, hour, limits_of(tenant).as_ref())
        })
        .collect();
    UsageList {
        object: "list".into(),
        data,
    }
}
