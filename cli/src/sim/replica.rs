//! One replica as a fluid: requests move in cohorts (a class's requests admitted together),
//! and each tick the replica runs as many batched steps as the performance model allows.
//!
//! Approximation, per tick of `dt` seconds: the decode step time comes from the batch at the
//! tick's start (sequences and KV tokens, with half the tick's admissions and KV growth);
//! prompt tokens admitted in the tick (FIFO, chunked prefill within the step token budget,
//! `max_num_seqs` and the KV budget) lengthen the tick's steps by `a·tokens`. A request's first
//! token comes at the later of "its arrival + 1.5 steps + its own prefill" and "its place in the
//! tick's prefill order"; its TTFT is recorded as four points spread over the tick (or step)
//! its arrivals were spread over. Each running sequence gains one token per step; a request
//! ends when its output is done, and its TPOT is (finish − first token) / (output − 1). When
//! the KV budget overflows, the newest cohorts are preempted and recomputed (vLLM's default).

use std::collections::VecDeque;

use tokenscale_common::perf_model::PerfProfile;
use tokenscale_scaling::autoscaler::Slo;

use super::metrics::Recorder;
use super::trace::RequestClass;

/// Cohorts whose first tokens are this close merge (bounds the work per tick).
const MERGE_WINDOW_S: f64 = 1.0;
/// Counts below this are dust from splitting and are dropped.
const EPS: f64 = 1e-9;

/// Requests of one class that move together.
#[derive(Debug, Clone, PartialEq)]
pub struct Cohort {
    /// Index into the trace's classes.
    pub class: u8,
    /// Requests (per replica of the group; fractional in the fluid model).
    pub count: f64,
    /// Mean arrival time, seconds.
    pub arrival_s: f64,
    /// Output tokens generated so far per request.
    pub generated: f64,
    /// Mean first-token time; `NAN` before the first token.
    pub first_token_s: f64,
    /// How many of `count` met the TTFT target.
    pub ttft_ok: f64,
}

impl Cohort {
    /// Fresh arrivals.
    pub fn arriving(class: u8, count: f64, arrival_s: f64) -> Self {
        Self {
            class,
            count,
            arrival_s,
            generated: 0.0,
            first_token_s: f64::NAN,
            ttft_ok: 0.0,
        }
    }

    fn split_off(&mut self, count: f64) -> Self {
        let share = count / self.count;
        let taken = Self {
            count,
            ttft_ok: self.ttft_ok * share,
            ..self.clone()
        };
        self.ttft_ok -= taken.ttft_ok;
        self.count -= count;
        taken
    }

    fn absorb(&mut self, other: &Self) {
        let total = self.count + other.count;
        let mean = |a: f64, b: f64| (a * self.count + b * other.count) / total;
        self.arrival_s = mean(self.arrival_s, other.arrival_s);
        self.generated = mean(self.generated, other.generated);
        self.first_token_s = mean(self.first_token_s, other.first_token_s);
        self.ttft_ok += other.ttft_ok;
        self.count = total;
    }
}

/// What a tick needs to know besides the replica's own state.
pub struct TickContext<'a> {
    /// The performance model.
    pub profile: &'a PerfProfile,
    /// Request classes.
    pub classes: &'a [RequestClass],
    /// Latency targets (to mark each request as within them or not).
    pub slo: Slo,
}

/// The queue and batch of one replica.
#[derive(Debug, Clone, Default)]
pub struct ReplicaState {
    /// Waiting requests, oldest first (preempted ones go to the front).
    pub waiting: VecDeque<Cohort>,
    /// Running requests, oldest first.
    pub running: Vec<Cohort>,
    /// Prefill position of each cohort admitted this tick (scratch, reused).
    prefill_before: Vec<f64>,
}

impl ReplicaState {
    /// Requests waiting plus running (the picker's load measure).
    pub fn in_flight(&self) -> f64 {
        self.waiting.iter().map(|c| c.count).sum::<f64>() + self.running_count()
    }

    /// Requests running.
    pub fn running_count(&self) -> f64 {
        self.running.iter().map(|c| c.count).sum()
    }

    /// Requests waiting.
    pub fn waiting_count(&self) -> f64 {
        self.waiting.iter().map(|c| c.count).sum()
    }

    /// Nothing queued or running.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    /// Runs `[t_s, t_s + dt_s)`. `weight` is how many identical replicas this state stands for
    /// (every record is multiplied by it).
    pub fn tick(
        &mut self,
        ctx: &TickContext,
        t_s: f64,
        dt_s: f64,
        weight: f64,
        rec: &mut Recorder,
    ) {
        if self.is_idle() {
            return;
        }
        let p = ctx.profile;
        let prompt = |c: &Cohort| ctx.classes[usize::from(c.class)].input_tokens + c.generated;
        let seqs: f64 = self.running_count();
        let kv: f64 = self.running.iter().map(|c| c.count * prompt(c)).sum();
        let decode_step_s = p.step_time_s_f64(0.0, seqs, kv);
        let budget_free = (f64::from(p.max_batch_tokens) - seqs).max(0.0);
        let prefill_max =
            dt_s * budget_free / (decode_step_s + p.step.prefill_s_per_token * budget_free);

        let old = self.running.len();
        let prefill = self.admit(ctx, seqs, kv, prefill_max);
        let admitted_seqs: f64 = self.running[old..].iter().map(|c| c.count).sum();
        let admitted_kv: f64 = self.running[old..]
            .iter()
            .map(|c| c.count * prompt(c))
            .sum();

        // Steps in the tick: n·(t' + c·seqs·n/2) = dt − a·prefill, KV growing by one token per
        // sequence per step.
        let step_base_s = decode_step_s
            + 0.5
                * (p.step.decode_s_per_seq * admitted_seqs
                    + p.step.kv_read_s_per_token * admitted_kv);
        let time_left_s = (dt_s - p.step.prefill_s_per_token * prefill).max(dt_s * 0.01);
        let growth = 0.5 * p.step.kv_read_s_per_token * seqs;
        let steps = if growth > 1e-15 {
            (-step_base_s + (step_base_s * step_base_s + 4.0 * growth * time_left_s).sqrt())
                / (2.0 * growth)
        } else {
            time_left_s / step_base_s
        };
        let step_s = dt_s / steps.max(1e-9);
        let tick_end_s = t_s + dt_s;

        for i in 0..self.running.len() {
            let class = ctx.classes[usize::from(self.running[i].class)];
            let tokens = if i < old {
                steps
            } else {
                let c = &mut self.running[i];
                let own_prefill_s = p.step.prefill_s_per_token * class.input_tokens;
                let order = self.prefill_before[i - old]
                    + 0.5 * c.count * (class.input_tokens + c.generated);
                let by_order_s = t_s + dt_s * order / prefill_max.max(prefill).max(EPS) + step_s;
                let start_s = (c.arrival_s.max(t_s) + 1.5 * step_s + own_prefill_s).max(by_order_s);
                let fresh = c.first_token_s.is_nan();
                if fresh {
                    c.first_token_s = start_s;
                    let spread_s = if c.arrival_s < t_s { dt_s } else { step_s };
                    c.ttft_ok = record_ttft(
                        rec,
                        c,
                        start_s - c.arrival_s,
                        spread_s,
                        own_prefill_s,
                        weight,
                        ctx.slo.ttft_p95_s,
                    );
                }
                f64::from(u8::from(fresh)) + ((tick_end_s - start_s) / step_s).max(0.0)
            };
            let c = &mut self.running[i];
            let remaining = class.output_tokens - c.generated;
            if tokens >= remaining {
                let finish_s = (tick_end_s - (tokens - remaining) * step_s).max(c.first_token_s);
                let tpot_s = if class.output_tokens > 1.0 {
                    (finish_s - c.first_token_s) / (class.output_tokens - 1.0)
                } else {
                    0.0
                };
                let ok = if tpot_s <= ctx.slo.tpot_p95_s {
                    c.ttft_ok
                } else {
                    0.0
                };
                rec.completed(
                    finish_s,
                    tpot_s,
                    c.count * weight,
                    ok * weight,
                    c.count * class.output_tokens * weight,
                );
                rec.served(c.count * remaining.max(0.0) * weight);
                c.count = 0.0;
            } else {
                c.generated += tokens;
                rec.served(c.count * tokens * weight);
            }
        }
        self.running.retain(|c| c.count > EPS);
        self.preempt_overflow(ctx, rec, weight);
        self.merge_recent();
    }

    /// Admits waiting cohorts FIFO while sequences, KV and the prefill budget allow; returns
    /// the prompt tokens admitted.
    fn admit(&mut self, ctx: &TickContext, seqs: f64, kv: f64, prefill_max: f64) -> f64 {
        let p = ctx.profile;
        let mut seqs_free = f64::from(p.max_num_seqs) - seqs;
        let mut kv_free = p.kv_capacity_tokens() as f64 - kv;
        let mut prefill = 0.0;
        self.prefill_before.clear();
        while let Some(front) = self.waiting.front_mut() {
            let tokens = ctx.classes[usize::from(front.class)].input_tokens + front.generated;
            let fit = front
                .count
                .min(seqs_free)
                .min(kv_free / (tokens + 1.0))
                .min((prefill_max - prefill) / tokens.max(1.0));
            if front.count <= EPS {
                self.waiting.pop_front();
                continue;
            }
            if fit <= EPS {
                break;
            }
            let cohort = if fit >= front.count - EPS {
                self.waiting
                    .pop_front()
                    .unwrap_or_else(|| Cohort::arriving(0, 0.0, 0.0))
            } else {
                front.split_off(fit)
            };
            self.prefill_before.push(prefill);
            prefill += cohort.count * tokens;
            seqs_free -= cohort.count;
            kv_free -= cohort.count * (tokens + 1.0);
            self.running.push(cohort);
        }
        prefill
    }

    /// Preempts the newest cohorts until the KV cache fits again.
    fn preempt_overflow(&mut self, ctx: &TickContext, rec: &mut Recorder, weight: f64) {
        let capacity = ctx.profile.kv_capacity_tokens() as f64;
        let tokens = |c: &Cohort| ctx.classes[usize::from(c.class)].input_tokens + c.generated;
        let mut used: f64 = self.running.iter().map(|c| c.count * tokens(c)).sum();
        while used > capacity + EPS {
            let Some(last) = self.running.last_mut() else {
                break;
            };
            let per = tokens(last).max(1.0);
            let evict = last.count.min((used - capacity) / per + EPS);
            let cohort = if evict >= last.count - EPS {
                self.running
                    .pop()
                    .unwrap_or_else(|| Cohort::arriving(0, 0.0, 0.0))
            } else {
                last.split_off(evict)
            };
            used -= cohort.count * per;
            rec.preempted(cohort.count * weight);
            self.waiting.push_front(cohort);
        }
    }

    /// Merges cohorts of the same class whose first tokens are close.
    fn merge_recent(&mut self) {
        let n = self.running.len();
        let mut i = n.saturating_sub(16).max(1);
        while i < self.running.len() {
            let (head, tail) = self.running.split_at_mut(i);
            let c = &tail[0];
            let target = head.iter_mut().rev().take(16).find(|o| {
                o.class == c.class
                    && (o.first_token_s - c.first_token_s).abs() < MERGE_WINDOW_S
                    && (o.generated - c.generated).abs() < 64.0
            });
            if let Some(target) = target {
                target.absorb(c);
                self.running.remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Adds arrivals to the waiting queue, merging with the newest waiting cohort of the class
    /// when it arrived within the merge window.
    pub fn enqueue(&mut self, cohort: Cohort) {
        if cohort.count <= EPS {
            return;
        }
        let close = self.waiting.iter_mut().rev().take(8).find(|w| {
            w.class == cohort.class
                && w.generated == 0.0
                && (w.arrival_s - cohort.arrival_s).abs() < MERGE_WINDOW_S * 0.25
        });
        match close {
            Some(w) => w.absorb(&cohort),
            None => self.waiting.push_back(cohort),
        }
    }

    /// Merges another replica group's state into this one: `self` stands for `w_self`
    /// replicas, `other` for `w_other`; the result stands for their sum.
    pub fn merge_from(&mut self, other: &ReplicaState, w_self: f64, w_other: f64) {
        let total = w_self + w_other;
        let scale = |cohorts: &mut dyn Iterator<Item = &mut Cohort>, by: f64| {
            for c in cohorts {
                c.count *= by;
                c.ttft_ok *= by;
            }
        };
        scale(
            &mut self.waiting.iter_mut().chain(self.running.iter_mut()),
            w_self / total,
        );
        let mut theirs = other.clone();
        scale(
            &mut theirs.waiting.iter_mut().chain(theirs.running.iter_mut()),
            w_other / total,
        );
        self.running.extend(theirs.running);
        self.running
            .sort_by(|a, b| a.first_token_s.total_cmp(&b.first_token_s));
        let mut waiting: Vec<Cohort> = self.waiting.drain(..).chain(theirs.waiting).collect();
        waiting.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
        self.waiting = waiting.into();
        self.merge_recent_all();
    }

    fn merge_recent_all(&mut self) {
        let mut merged: Vec<Cohort> = Vec::with_capacity(self.running.len());
        for c in self.running.drain(..) {
            match merged.iter_mut().rev().take(32).find(|o| {
                o.class == c.class && (o.first_token_s - c.first_token_s).abs() < MERGE_WINDOW_S
            }) {
                Some(o) => o.absorb(&c),
                None => merged.push(c),
            }
        }
        self.running = merged;
    }
}

/// Records a cohort's TTFT as four points spread over `spread_s`; returns how many of its
/// requests met `target_s`.
fn record_ttft(
    rec: &mut Recorder,
    c: &Cohort,
    ttft_s: f64,
    spread_s: f64,
    floor_s: f64,
    weight: f64,
    target_s: f64,
) -> f64 {
    let mut ok = 0.0;
    for offset in [-0.375, -0.125, 0.125, 0.375] {
        let value = (ttft_s + offset * spread_s).max(floor_s);
        rec.first_token(c.first_token_s, value, 0.25 * c.count * weight);
        if value <= target_s {
            ok += 0.25 * c.count;
        }
    }
    ok
}
