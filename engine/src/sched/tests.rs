//! Scheduler decisions: budget split, chunked prefill, sequence cap, prefix hits, preemption,
//! priority classes and cancellation, each checked against exact batches and block ids.

use super::*;
use crate::kv::KvCacheManager;
use crate::sched::request::{Priority, SchedRequest};

fn sched(max_batch_tokens: usize, max_num_seqs: usize) -> Scheduler {
    Scheduler::new(SchedulerConfig {
        max_batch_tokens,
        max_num_seqs,
    })
}

fn req(id: u64, len: usize, priority: Priority) -> SchedRequest {
    let prompt = (0..len as u32).map(|t| id as u32 * 100 + t).collect();
    SchedRequest::new(id, prompt, priority, None)
}

fn seq(id: u64, start_pos: usize, num_tokens: usize, want_logits: bool) -> ScheduledSeq {
    ScheduledSeq {
        id,
        start_pos,
        num_tokens,
        want_logits,
        prompt_logits: false,
        num_draft: 0,
    }
}

/// One engine step without a model: schedule, "compute", append token 7 where logits came out.
fn step(s: &mut Scheduler, kv: &mut KvCacheManager) -> SchedulerOutput {
    let out = s.schedule(kv);
    s.on_step_computed(&out, kv);
    for q in out.seqs.iter().filter(|q| q.want_logits) {
        s.append_token(q.id, 7);
    }
    out
}

#[test]
fn running_decodes_first_then_waiting_prefill_takes_what_is_left_in_chunks() {
    let mut kv = KvCacheManager::new(16, 4, false);
    let mut s = sched(10, 8);
    s.add(req(1, 8, Priority::Interactive));
    s.add(req(2, 8, Priority::Interactive));
    let out = step(&mut s, &mut kv);
    assert_eq!(out.seqs, vec![seq(1, 0, 8, true), seq(2, 0, 2, false)]);
    let out = step(&mut s, &mut kv);
    assert_eq!(out.seqs, vec![seq(1, 8, 1, true), seq(2, 2, 6, true)]);
    let out = step(&mut s, &mut kv);
    assert_eq!(out.seqs, vec![seq(1, 9, 1, true), seq(2, 8, 1, true)]);
    assert_eq!(s.request(1).map(|r| r.output_tokens().len()), Some(3));
    assert_eq!(s.request(2).map(|r| r.num_computed_tokens), Some(9));
}

#[test]
fn the_sequence_cap_keeps_later_requests_waiting() {
    let mut kv = KvCacheManager::new(16, 4, false);
    let mut s = sched(100, 2);
    for id in 1..=3 {
        s.add(req(id, 3, Priority::Interactive));
    }
    let out = step(&mut s, &mut kv);
    assert_eq!(
        out.seqs.iter().map(|q| q.id).collect::<Vec<_>>(),
        vec![1, 2]
    );
    assert_eq!(s.waiting(), vec![3]);
    s.remove(1, &mut kv);
    let out = step(&mut s, &mut kv);
    assert_eq!(out.seqs, vec![seq(2, 3, 1, true), seq(3, 0, 3, true)]);
}

#[test]
fn a_shared_prefix_is_not_recomputed_and_is_counted() {
    let mut kv = KvCacheManager::new(16, 4, true);
    let mut s = sched(100, 8);
    let shared: Vec<u32> = (0..9).collect();
    s.add(SchedRequest::new(
        1,
        shared.clone(),
        Priority::Interactive,
        None,
    ));
    let first = step(&mut s, &mut kv);
    assert_eq!((first.prefix_query_tokens, first.prefix_hit_tokens), (9, 0));
    let mut other = shared.clone();
    other.push(42);
    s.add(SchedRequest::new(2, other, Priority::Interactive, None));
    let out = step(&mut s, &mut kv);
    // Request 2 starts after the two full shared blocks: 8 cached tokens.
    assert_eq!(out.seqs, vec![seq(1, 9, 1, true), seq(2, 8, 2, true)]);
    assert_eq!((out.prefix_query_tokens, out.prefix_hit_tokens), (10, 8));
    assert_eq!(out.first_scheduled, vec![2]);
    assert_eq!(s.request(2).and_then(|r| r.num_cached_tokens), Some(8));
    assert_eq!(&kv.block_table(2)[..2], &kv.block_table(1)[..2]);
}

#[test]
fn a_request_wanting_prompt_logits_reads_no_cached_prefix_and_marks_its_prompt_chunks() {
    let mut kv = KvCacheManager::new(16, 4, true);
    let mut s = sched(6, 8);
    let shared: Vec<u32> = (0..9).collect();
    s.add(SchedRequest::new(
        1,
        shared.clone(),
        Priority::Interactive,
        None,
    ));
    step(&mut s, &mut kv);
    step(&mut s, &mut kv);
    let mut scored = SchedRequest::new(2, shared, Priority::Interactive, None);
    scored.prompt_logits = true;
    s.add(scored);
    let marked = |id, start, n, want| ScheduledSeq {
        prompt_logits: true,
        ..seq(id, start, n, want)
    };
    // Every prompt position is computed again (no cache hit), in chunks that want all rows.
    let out = step(&mut s, &mut kv);
    assert_eq!(out.seqs, vec![seq(1, 9, 1, true), marked(2, 0, 5, false)]);
    assert_eq!(out.prefix_hit_tokens, 0);
    let out = step(&mut s, &mut kv);
    assert_eq!(out.seqs, vec![seq(1, 10, 1, true), marked(2, 5, 4, true)]);
    // Decode steps of the same request want only their last row.
    let out = step(&mut s, &mut kv);
    assert_eq!(out.seqs, vec![seq(1, 11, 1, true), seq(2, 9, 1, true)]);
}

#[test]
fn no_free_block_preempts_the_newest_request_which_recomputes_later() {
    // 4 blocks of 2 slots; two 4-token prompts fill the pool.
    let mut kv = KvCacheManager::new(4, 2, false);
    let mut s = sched(100, 8);
    s.add(req(1, 4, Priority::Interactive));
    s.add(req(2, 4, Priority::Interactive));
    step(&mut s, &mut kv);
    assert_eq!(kv.pool().num_free_blocks(), 0);
    // Request 1 needs a third block for its 5th token: request 2 (newest) gives its blocks up.
    let out = step(&mut s, &mut kv);
    assert_eq!(out.preempted, vec![2]);
    assert_eq!(out.seqs, vec![seq(1, 4, 1, true)]);
    // Request 2's uncached blocks went back to the head of the free queue, lowest id first.
    assert_eq!(kv.block_table(1), &[0, 1, 2]);
    assert_eq!(s.waiting(), vec![2]);
    let r2 = s.request(2).cloned();
    assert_eq!(
        r2.as_ref()
            .map(|r| (r.num_computed_tokens, r.num_preemptions)),
        Some((0, 1))
    );
    // Its generated token is kept and recomputed with the prompt once room returns.
    assert_eq!(r2.map(|r| r.tokens.len()), Some(5));
    s.remove(1, &mut kv);
    let out = step(&mut s, &mut kv);
    assert_eq!(out.seqs, vec![seq(2, 0, 5, true)]);
    assert!(out.first_scheduled.is_empty());
}

#[test]
fn a_request_alone_without_room_preempts_itself() {
    let mut kv = KvCacheManager::new(2, 2, false);
    let mut s = sched(100, 8);
    s.add(req(1, 4, Priority::Interactive));
    step(&mut s, &mut kv);
    let out = step(&mut s, &mut kv);
    assert_eq!(out.preempted, vec![1]);
    assert!(out.seqs.is_empty());
    assert_eq!(kv.pool().num_free_blocks(), 2);
    assert_eq!(s.waiting(), vec![1]);
}

#[test]
fn batch_work_is_preempted_before_older_interactive_work() {
    let mut kv = KvCacheManager::new(4, 2, false);
    let mut s = sched(100, 8);
    s.add(req(1, 4, Priority::Batch));
    s.add(req(2, 4, Priority::Interactive));
    step(&mut s, &mut kv);
    let out = step(&mut s, &mut kv);
    // Batch request 1 is older, but its class goes first.
    assert_eq!(out.preempted, vec![1]);
    assert_eq!(out.seqs, vec![seq(2, 4, 1, true)]);
}

#[test]
fn batch_waits_behind_interactive_and_interactive_preempts_running_batch() {
    let mut kv = KvCacheManager::new(3, 2, false);
    let mut s = sched(100, 8);
    s.add(req(1, 4, Priority::Batch));
    step(&mut s, &mut kv);
    s.add(req(3, 2, Priority::Batch));
    s.add(req(2, 4, Priority::Interactive));
    // Interactive 2 needs 2 blocks, 1 is free: running batch 1 is preempted for it, after it
    // had been scheduled this step (its budget is refunded).
    let out = s.schedule(&mut kv);
    assert_eq!(out.preempted, vec![1]);
    assert_eq!(out.seqs, vec![seq(2, 0, 4, true)]);
    // Batch work preempted this step does not come straight back.
    assert_eq!(s.waiting(), vec![1, 3]);
}

#[test]
fn interactive_work_takes_a_batch_seat_when_the_cap_is_reached() {
    let mut kv = KvCacheManager::new(16, 4, false);
    let mut s = sched(100, 1);
    s.add(req(1, 3, Priority::Batch));
    step(&mut s, &mut kv);
    s.add(req(2, 3, Priority::Interactive));
    let out = s.schedule(&mut kv);
    assert_eq!(out.preempted, vec![1]);
    assert_eq!(out.seqs, vec![seq(2, 0, 3, true)]);
}

#[test]
fn batch_work_never_preempts_to_get_in() {
    let mut kv = KvCacheManager::new(3, 2, false);
    let mut s = sched(100, 8);
    s.add(req(1, 4, Priority::Interactive));
    step(&mut s, &mut kv);
    s.add(req(2, 2, Priority::Batch));
    let out = s.schedule(&mut kv);
    // Request 1 takes the last block for its 5th token; batch 2 finds none and waits.
    assert!(out.preempted.is_empty());
    assert_eq!(out.seqs, vec![seq(1, 4, 1, true)]);
    assert_eq!(s.waiting(), vec![2]);
}

#[test]
fn a_waiting_interactive_request_that_cannot_fit_holds_batch_back() {
    let mut kv = KvCacheManager::new(2, 2, false);
    let mut s = sched(100, 8);
    s.add(req(1, 4, Priority::Interactive));
    step(&mut s, &mut kv);
    s.add(req(2, 4, Priority::Interactive));
    s.add(req(3, 1, Priority::Batch));
    let out = s.schedule(&mut kv);
    // Request 1 needs a block for its 5th token; request 2 is newer but only waiting, so 1
    // preempts itself; nothing else is admitted in a step that preempted.
    assert_eq!(out.preempted, vec![1]);
    assert!(out.seqs.is_empty());
    assert_eq!(s.waiting(), vec![1, 2, 3]);
}

#[test]
fn removing_a_request_frees_its_blocks_wherever_it_is() {
    let mut kv = KvCacheManager::new(8, 2, false);
    let mut s = sched(100, 8);
    s.add(req(1, 4, Priority::Interactive));
    step(&mut s, &mut kv);
    s.add(req(2, 4, Priority::Interactive));
    assert_eq!(kv.pool().num_free_blocks(), 6);
    assert!(s.remove(1, &mut kv).is_some());
    assert!(s.remove(2, &mut kv).is_some());
    assert!(s.remove(2, &mut kv).is_none());
    assert_eq!(kv.pool().num_free_blocks(), 8);
    assert!(s.is_idle());
    assert!(s.schedule(&mut kv).seqs.is_empty());
}

#[test]
fn priorities_parse_from_their_wire_names() {
    assert_eq!(Priority::parse("batch"), Some(Priority::Batch));
    assert_eq!(
        Priority::parse(" Interactive "),
        Some(Priority::Interactive)
    );
    assert_eq!(Priority::parse("urgent"), None);
    assert_eq!(Priority::Batch.as_str(), "batch");
}
