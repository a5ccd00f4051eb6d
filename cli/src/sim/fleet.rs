//! The fleet: replicas in groups of identical state (replicas started together and fed
//! evenly by the picker stay identical, so a 1,000-replica fleet costs a handful of fluid
//! models), the gateway's hold queue for when no replica is ready, and the scale target.

use std::collections::VecDeque;

use super::metrics::Recorder;
use super::replica::{Cohort, ReplicaState, TickContext};
use super::start::StartTimes;
use super::trace::ClassCounts;

/// Groups ready for this long are assumed to have converged and are merged.
const SETTLE_S: f64 = 60.0;

/// Where a group is in its life.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Phase {
    /// Created, becomes ready at `ready_at_s` (cold start).
    Starting { ready_at_s: f64 },
    /// Serving since `since_s`.
    Ready { since_s: f64 },
    /// Told to go: gets no new work, finishes what it has, then is removed.
    Draining,
}

/// Identical replicas.
#[derive(Debug, Clone)]
pub struct Group {
    /// How many replicas.
    pub replicas: u32,
    /// Their phase.
    pub phase: Phase,
    /// The state of each of them.
    pub state: ReplicaState,
}

/// All replicas of one model plus the gateway's hold queue.
#[derive(Debug, Clone)]
pub struct Fleet {
    /// Replica groups.
    pub groups: Vec<Group>,
    /// Requests held at the gateway while no replica is ready.
    held: VecDeque<Cohort>,
    starts: StartTimes,
    hold_deadline_s: f64,
}

impl Fleet {
    /// A fleet with `ready` replicas serving from the start; new ones take `starts`.
    pub fn new(ready: u32, starts: StartTimes, hold_deadline_s: f64) -> Self {
        let groups = if ready > 0 {
            vec![Group {
                replicas: ready,
                phase: Phase::Ready { since_s: -SETTLE_S },
                state: ReplicaState::default(),
            }]
        } else {
            Vec::new()
        };
        Self {
            groups,
            held: VecDeque::new(),
            starts,
            hold_deadline_s,
        }
    }

    fn count(&self, pick: impl Fn(&Phase) -> bool) -> u32 {
        self.groups
            .iter()
            .filter(|g| pick(&g.phase))
            .map(|g| g.replicas)
            .sum()
    }

    /// Ready replicas.
    pub fn ready(&self) -> u32 {
        self.count(|p| matches!(p, Phase::Ready { .. }))
    }

    /// Starting replicas.
    pub fn starting(&self) -> u32 {
        self.count(|p| matches!(p, Phase::Starting { .. }))
    }

    /// Replicas holding a device (ready, starting or draining).
    pub fn allocated(&self) -> u32 {
        self.count(|_| true)
    }

    /// The scale target's replica count (ready plus starting).
    pub fn target(&self) -> u32 {
        self.ready() + self.starting()
    }

    /// Requests waiting (gateway plus engine queues) and running, fleet-wide.
    pub fn queued_and_running(&self) -> (f64, f64) {
        let held: f64 = self.held.iter().map(|c| c.count).sum();
        self.groups.iter().fold((held, 0.0), |(q, r), g| {
            let m = f64::from(g.replicas);
            (
                q + m * g.state.waiting_count(),
                r + m * g.state.running_count(),
            )
        })
    }

    /// Sets the scale target: new replicas start cold, each group after its own drawn start
    /// time; fewer cancels starting ones first (newest first), then drains the least-loaded
    /// ready ones.
    pub fn set_target(&mut self, desired: u32, now_s: f64) {
        let current = self.target();
        if desired > current {
            for (replicas, start_s) in self.starts.draw_order(desired - current) {
                self.groups.push(Group {
                    replicas,
                    phase: Phase::Starting {
                        ready_at_s: now_s + start_s,
                    },
                    state: ReplicaState::default(),
                });
            }
            return;
        }
        let mut excess = current - desired;
        for group in self
            .groups
            .iter_mut()
            .rev()
            .filter(|g| matches!(g.phase, Phase::Starting { .. }))
        {
            let cut = excess.min(group.replicas);
            group.replicas -= cut;
            excess -= cut;
        }
        while excess > 0 {
            let least_loaded = self
                .groups
                .iter()
                .enumerate()
                .filter(|(_, g)| matches!(g.phase, Phase::Ready { .. }) && g.replicas > 0)
                .min_by(|(_, a), (_, b)| a.state.in_flight().total_cmp(&b.state.in_flight()))
                .map(|(i, _)| i);
            let Some(i) = least_loaded else { break };
            let cut = excess.min(self.groups[i].replicas);
            self.groups[i].replicas -= cut;
            excess -= cut;
            let state = self.groups[i].state.clone();
            self.groups.push(Group {
                replicas: cut,
                phase: Phase::Draining,
                state,
            });
        }
        self.groups.retain(|g| g.replicas > 0);
    }

    /// Sends arrivals (and held requests) to ready replicas, levelling in-flight requests per
    /// replica (the picker's least-load rule, as water filling); with none ready, holds them.
    pub fn dispatch(&mut self, arrivals: &ClassCounts, t_s: f64, dt_s: f64, rec: &mut Recorder) {
        let arrival_s = t_s + 0.5 * dt_s;
        for (class, &count) in arrivals.iter().enumerate().filter(|(_, c)| **c > 0.0) {
            self.held
                .push_back(Cohort::arriving(class as u8, count, arrival_s));
        }
        let ready: Vec<usize> = (0..self.groups.len())
            .filter(|&i| matches!(self.groups[i].phase, Phase::Ready { .. }))
            .collect();
        if ready.is_empty() {
            while let Some(old) = self
                .held
                .front()
                .filter(|c| t_s - c.arrival_s > self.hold_deadline_s)
            {
                rec.rejected(t_s, old.count);
                self.held.pop_front();
            }
            return;
        }
        let total: f64 = self.held.iter().map(|c| c.count).sum();
        let shares = water_fill(
            &ready
                .iter()
                .map(|&i| {
                    (
                        f64::from(self.groups[i].replicas),
                        self.groups[i].state.in_flight(),
                    )
                })
                .collect::<Vec<_>>(),
            total,
        );
        for cohort in self.held.drain(..) {
            for (&i, &per_replica) in ready.iter().zip(&shares) {
                if per_replica > 0.0 {
                    let count = cohort.count * per_replica / total;
                    self.groups[i].state.enqueue(Cohort {
                        count,
                        ..cohort.clone()
                    });
                }
            }
        }
    }

    /// Runs every serving group for one tick and moves phases along.
    pub fn tick(&mut self, ctx: &TickContext, t_s: f64, dt_s: f64, rec: &mut Recorder) {
        for group in &mut self.groups {
            if let Phase::Starting { ready_at_s } = group.phase
                && ready_at_s <= t_s
            {
                group.phase = Phase::Ready { since_s: t_s };
            }
            if !matches!(group.phase, Phase::Starting { .. }) {
                group
                    .state
                    .tick(ctx, t_s, dt_s, f64::from(group.replicas), rec);
            }
        }
        self.groups
            .retain(|g| !(g.phase == Phase::Draining && g.state.is_idle()));
    }

    /// Merges ready groups that have served long enough to have converged.
    pub fn consolidate(&mut self, now_s: f64) {
        let settled =
            |g: &Group| matches!(g.phase, Phase::Ready { since_s } if now_s - since_s >= SETTLE_S);
        let Some(first) = self.groups.iter().position(settled) else {
            return;
        };
        let mut i = first + 1;
        while i < self.groups.len() {
            if settled(&self.groups[i]) {
                let other = self.groups.remove(i);
                let base = &mut self.groups[first];
                base.state.merge_from(
                    &other.state,
                    f64::from(base.replicas),
                    f64::from(other.replicas),
                );
                base.replicas += other.replicas;
            } else {
                i += 1;
            }
        }
    }
}

/// Per-replica shares of `total` new requests that level `(replicas, load)` groups.
fn water_fill(groups: &[(f64, f64)], total: f64) -> Vec<f64> {
    let mut order: Vec<usize> = (0..groups.len()).collect();
    order.sort_by(|&a, &b| groups[a].1.total_cmp(&groups[b].1));
    let (mut weight, mut weighted_load) = (0.0, 0.0);
    let mut level = 0.0;
    for (k, &i) in order.iter().enumerate() {
        let (m, load) = groups[i];
        weight += m;
        weighted_load += m * load;
        level = (total + weighted_load) / weight.max(1e-12);
        if order.get(k + 1).is_none_or(|&next| level <= groups[next].1) {
            break;
        }
    }
    groups
        .iter()
        .map(|&(_, load)| (level - load).max(0.0))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn water_fill_levels_loads() {
        let shares = water_fill(&[(2.0, 0.0), (1.0, 4.0), (1.0, 10.0)], 12.0);
        // Level 5: 2 × 5 + 1 × 1 + 0 = 11? No: level L solves 2L + (L − 4) = 12 → L = 16/3.
        assert!((shares[0] - 16.0 / 3.0).abs() < 1e-9);
        assert!((shares[1] - 4.0 / 3.0).abs() < 1e-9);
        assert_eq!(shares[2], 0.0);
        let given: f64 = shares.iter().zip([2.0, 1.0, 1.0]).map(|(s, m)| s * m).sum();
        assert!((given - 12.0).abs() < 1e-9);
    }

    #[test]
    fn scale_in_cancels_starting_before_draining() {
        let mut fleet = Fleet::new(4, StartTimes::fixed(30.0), 60.0);
        fleet.set_target(7, 0.0);
        assert_eq!((fleet.ready(), fleet.starting()), (4, 3));
        fleet.set_target(2, 1.0);
        assert_eq!(
            (fleet.ready(), fleet.starting(), fleet.allocated()),
            (2, 0, 4)
        );
    }
}
