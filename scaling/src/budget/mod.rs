//! Cluster GPU budget: when the GPUs all models want exceed what the cluster may use, grant
//! them by priority, then by how far each model is from its SLO, never below each model's
//! minimum. A pure function; models held back are flagged so their status can say so.

#[cfg(test)]
mod tests;

/// What one model asks of the budget this period.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuRequest {
    /// Model identity (e.g. `namespace/name`), echoed in the grant.
    pub model: String,
    /// Higher goes first.
    pub priority: i32,
    /// The policy's desired replicas.
    pub desired_replicas: u32,
    /// The spec's minimum replicas: always granted, budget or not.
    pub min_replicas: u32,
    /// GPUs one replica uses.
    pub gpus_per_replica: u32,
    /// How far from the SLO: the larger p95/target of TTFT and TPOT (above 1: SLO broken);
    /// `None` when unknown (treated as on target, 1.0).
    pub slo_ratio: Option<f64>,
}

/// Why a model got what it got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantReason {
    /// Everything it asked for.
    Granted,
    /// Less than it asked for: the budget ran out (`Scaling` condition reason `BudgetLimited`).
    BudgetLimited,
}

impl GrantReason {
    /// CamelCase name for conditions.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Granted => "Granted",
            Self::BudgetLimited => "BudgetLimited",
        }
    }
}

/// The budget's answer for one model.
#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    /// Model identity, from the request.
    pub model: String,
    /// Replicas the model may run.
    pub replicas: u32,
    /// GPUs those replicas use.
    pub gpus: u64,
    /// Granted in full or limited.
    pub reason: GrantReason,
    /// In words, for status.
    pub message: String,
}

/// Splits `budget_gpus` among `requests`; grants come back in the order of the requests.
/// Minimums are granted first even if they alone exceed the budget (a minimum is a promise);
/// the rest goes by priority (higher first), then by SLO ratio (furthest over its SLO first),
/// then by name, each model served in full before the next.
pub fn allocate(budget_gpus: u64, requests: &[GpuRequest]) -> Vec<Grant> {
    let gpus_of =
        |r: &GpuRequest, replicas: u32| u64::from(replicas) * u64::from(r.gpus_per_replica);
    let mut granted: Vec<u32> = requests.iter().map(|r| r.min_replicas).collect();
    let mut left =
        budget_gpus.saturating_sub(requests.iter().map(|r| gpus_of(r, r.min_replicas)).sum());

    let mut order: Vec<usize> = (0..requests.len()).collect();
    order.sort_by(|&a, &b| {
        let (ra, rb) = (&requests[a], &requests[b]);
        let slo = |r: &GpuRequest| r.slo_ratio.filter(|v| v.is_finite()).unwrap_or(1.0);
        rb.priority
            .cmp(&ra.priority)
            .then(slo(rb).total_cmp(&slo(ra)))
            .then(ra.model.cmp(&rb.model))
    });
    for i in order {
        let request = &requests[i];
        let extra_wanted = request
            .desired_replicas
            .saturating_sub(request.min_replicas);
        let per = u64::from(request.gpus_per_replica.max(1));
        let extra = u64::from(extra_wanted).min(left / per) as u32;
        granted[i] += extra;
        left -= u64::from(extra) * per;
    }

    requests
        .iter()
        .zip(granted)
        .map(|(request, replicas)| {
            let wanted = request.desired_replicas.max(request.min_replicas);
            let (reason, message) = if replicas >= wanted {
                (GrantReason::Granted, format!("granted {replicas} replicas"))
            } else {
                let message = format!(
                    "wants {wanted} replicas, granted {replicas}: the cluster GPU budget of {budget_gpus} is spent by models of higher priority or further from their SLO"
                );
                (GrantReason::BudgetLimited, message)
            };
            Grant { model: request.model.clone(), replicas, gpus: gpus_of(request, replicas), reason, message }
        })
        .collect()
}
