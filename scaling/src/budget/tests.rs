//! Several models competing for one GPU budget.

use super::*;

fn request(
    model: &str,
    priority: i32,
    desired: u32,
    min: u32,
    gpus: u32,
    slo: Option<f64>,
) -> GpuRequest {
    GpuRequest {
        model: model.to_string(),
        priority,
        desired_replicas: desired,
        min_replicas: min,
        gpus_per_replica: gpus,
        slo_ratio: slo,
    }
}

fn replicas(grants: &[Grant]) -> Vec<u32> {
    grants.iter().map(|g| g.replicas).collect()
}

#[test]
fn everything_fits_everyone_granted() {
    let grants = allocate(
        100,
        &[
            request("a", 0, 4, 1, 2, None),
            request("b", 0, 10, 0, 1, Some(0.5)),
        ],
    );
    assert_eq!(replicas(&grants), vec![4, 10]);
    assert!(grants.iter().all(|g| g.reason == GrantReason::Granted));
    assert_eq!(grants[0].gpus, 8);
}

#[test]
fn higher_priority_served_first() {
    let grants = allocate(
        10,
        &[
            request("low", 0, 8, 1, 1, Some(2.0)),
            request("high", 5, 8, 1, 1, Some(0.5)),
        ],
    );
    // Both minimums (1 + 1), then high takes its 7 extra, low gets the last 1.
    assert_eq!(replicas(&grants), vec![2, 8]);
    assert_eq!(grants[0].reason, GrantReason::BudgetLimited);
    assert_eq!(grants[0].reason.as_str(), "BudgetLimited");
    assert_eq!(grants[1].reason, GrantReason::Granted);
}

#[test]
fn same_priority_furthest_from_slo_first() {
    let requests = [
        request("calm", 1, 6, 0, 1, Some(0.4)),
        request("burning", 1, 6, 0, 1, Some(1.7)),
        request("unknown", 1, 6, 0, 1, None),
    ];
    let grants = allocate(9, &requests);
    assert_eq!(replicas(&grants), vec![0, 6, 3]);
    assert_eq!(grants[0].reason, GrantReason::BudgetLimited);
    assert!(grants[0].message.contains("budget"));
}

#[test]
fn minimums_are_kept_even_over_budget() {
    let grants = allocate(
        3,
        &[
            request("a", 9, 10, 2, 1, Some(3.0)),
            request("b", 0, 5, 4, 1, Some(0.1)),
        ],
    );
    assert_eq!(replicas(&grants), vec![2, 4]);
    assert!(
        grants
            .iter()
            .all(|g| g.reason == GrantReason::BudgetLimited)
    );
}

#[test]
fn multi_gpu_replicas_take_whole_replicas_only() {
    // 7 GPUs left after nothing; a 4-GPU replica fits once, the remaining 3 go to the 1-GPU model.
    let grants = allocate(
        7,
        &[
            request("big", 2, 3, 0, 4, None),
            request("small", 1, 5, 0, 1, None),
        ],
    );
    assert_eq!(replicas(&grants), vec![1, 3]);
    assert_eq!(grants.iter().map(|g| g.gpus).sum::<u64>(), 7);
}

#[test]
fn never_exceeds_budget_beyond_minimums() {
    let mut seed = 7u64;
    for _ in 0..500 {
        let mut next = |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        let budget = next(64);
        let requests: Vec<GpuRequest> = (0..next(6) + 1)
            .map(|i| {
                let min = next(3) as u32;
                request(
                    &format!("m{i}"),
                    next(3) as i32,
                    min + next(10) as u32,
                    min,
                    next(4) as u32 + 1,
                    Some(next(300) as f64 / 100.0),
                )
            })
            .collect();
        let grants = allocate(budget, &requests);
        let min_gpus: u64 = requests
            .iter()
            .map(|r| u64::from(r.min_replicas * r.gpus_per_replica))
            .sum();
        let total: u64 = grants.iter().map(|g| g.gpus).sum();
        assert!(total <= budget.max(min_gpus), "granted {total} of {budget}");
        for (g, r) in grants.iter().zip(&requests) {
            assert!(
                g.replicas >= r.min_replicas
                    && g.replicas <= r.desired_replicas.max(r.min_replicas)
            );
            assert_eq!(
                g.reason == GrantReason::Granted,
                g.replicas >= r.desired_replicas.max(r.min_replicas)
            );
        }
    }
}
