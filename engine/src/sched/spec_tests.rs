//! Verify steps in the scheduler: a draft runs with its decode token, only accepted positions
//! stay computed, rejected positions' blocks go back, and the prefix cache sees kept tokens only.

use super::*;
use crate::kv::KvCacheManager;
use crate::sched::request::{Priority, SchedRequest};

fn sched(max_batch_tokens: usize) -> Scheduler {
    Scheduler::new(SchedulerConfig {
        max_batch_tokens,
        max_num_seqs: 4,
    })
}

fn decoding(kv: &mut KvCacheManager, s: &mut Scheduler, prompt: Vec<u32>) {
    s.add(SchedRequest::new(1, prompt, Priority::Interactive, None));
    let out = s.schedule(kv);
    s.on_step_computed(&out, kv);
    s.append_token(1, 50);
}

#[test]
fn a_draft_runs_with_the_decode_token_and_rejected_positions_are_rolled_back() {
    // Blocks of 4: the 7-token prompt and its first output token fill 2 blocks.
    let mut kv = KvCacheManager::new(16, 4, true);
    let mut s = sched(64);
    decoding(&mut kv, &mut s, (0..7).collect());
    s.set_draft(1, vec![60, 61, 62, 63, 64]);
    let out = s.schedule(&mut kv);
    assert_eq!(out.seqs.len(), 1);
    let seq = out.seqs[0];
    assert_eq!((seq.start_pos, seq.num_tokens, seq.num_draft), (7, 6, 5));
    // Positions 0..13 are covered: 4 blocks.
    assert_eq!(kv.block_table(1).len(), 4);
    s.on_step_computed(&out, &mut kv);
    assert_eq!(s.request(1).map(|r| r.num_computed_tokens), Some(8));
    // Two draft tokens kept, then a correction.
    for t in [60, 61, 99] {
        s.append_token(1, t);
    }
    s.settle_draft(1, 2, &mut kv);
    let request = s.request(1).expect("request");
    assert_eq!(request.num_computed_tokens, 10);
    assert!(request.draft.is_empty());
    // 10 computed tokens need 3 blocks: the fourth (rejected positions only) is free again.
    assert_eq!(kv.block_table(1).len(), 3);
    assert_eq!(kv.pool().num_free_blocks(), 13);
    // The two full blocks are cached with the kept tokens; the partial third is not.
    let kept: Vec<u32> = request.tokens.clone();
    assert_eq!(kv.find_cached_prefix(&kept, None).num_tokens, 8);
    let guessed: Vec<u32> = (0..7).chain([50, 60, 61, 62, 63]).collect();
    assert_eq!(kv.find_cached_prefix(&guessed, None).num_tokens, 8);
    // The next step is a plain decode of the correction.
    let out = s.schedule(&mut kv);
    assert_eq!((out.seqs[0].start_pos, out.seqs[0].num_tokens), (10, 1));
    assert_eq!(out.seqs[0].num_draft, 0);
}

#[test]
fn a_draft_is_cut_to_the_budget_and_dropped_without_room() {
    let mut kv = KvCacheManager::new(16, 4, false);
    let mut s = sched(3);
    decoding(&mut kv, &mut s, (0..3).collect());
    s.set_draft(1, vec![60, 61, 62, 63]);
    let out = s.schedule(&mut kv);
    assert_eq!((out.seqs[0].num_tokens, out.seqs[0].num_draft), (3, 2));
    s.on_step_computed(&out, &mut kv);
    s.append_token(1, 5);
    s.settle_draft(1, 0, &mut kv);
    // No block left for a draft: the decode token alone runs.
    let mut tight = KvCacheManager::new(1, 4, false);
    let mut s = sched(64);
    decoding(&mut tight, &mut s, (0..2).collect());
    s.set_draft(1, vec![60, 61, 62, 63]);
    let out = s.schedule(&mut tight);
    assert_eq!((out.seqs[0].num_tokens, out.seqs[0].num_draft), (1, 0));
}

#[test]
fn prompt_work_is_pending_mid_prompt_or_with_a_free_seat_only() {
    let mut kv = KvCacheManager::new(64, 4, false);
    // A 4-token budget: a 10-token prompt takes three steps.
    let mut s = sched(4);
    assert!(!s.prefill_pending(), "nothing at all");
    s.add(SchedRequest::new(
        1,
        (0..10).collect(),
        Priority::Interactive,
        None,
    ));
    assert!(s.prefill_pending(), "a waiting request with a free seat");
    let out = s.schedule(&mut kv);
    s.on_step_computed(&out, &mut kv);
    assert!(
        s.prefill_pending(),
        "a running request part way through its prompt"
    );
    for _ in 0..2 {
        let out = s.schedule(&mut kv);
        s.on_step_computed(&out, &mut kv);
    }
    s.append_token(1, 50);
    assert!(!s.prefill_pending(), "the only request decodes");
    // A second arrival while the seat limit is one: it waits for a seat, not for a prompt
    // step, so the decoding request may draft.
    s.set_step_limits(Some(StepLimits {
        max_num_seqs: 1,
        max_batch_tokens: 4,
    }));
    s.add(SchedRequest::new(
        2,
        (0..6).collect(),
        Priority::Interactive,
        None,
    ));
    assert_eq!(s.num_waiting(), 1);
    assert!(!s.prefill_pending(), "held back by the seat limit");
    s.set_step_limits(None);
    assert!(s.prefill_pending(), "a seat is free again");
}
