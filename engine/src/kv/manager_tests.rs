//! KV cache manager: block tables, prefix sharing, eviction, with exact block ids.

use super::*;

fn tokens(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32).map(|i| seed * 1000 + i).collect()
}

/// Allocates, "computes" and registers `toks` for `id` in one go, like one prefill step.
fn prefill(kv: &mut KvCacheManager, id: RequestId, toks: &[u32]) -> Vec<BlockId> {
    let prefix = kv.find_cached_prefix(toks, None);
    let blocks = kv
        .allocate_slots(id, toks.len(), &prefix)
        .map(<[_]>::to_vec)
        .unwrap_or_default();
    kv.cache_computed_blocks(id, toks, toks.len(), None);
    blocks
}

#[test]
fn allocation_grows_a_table_block_by_block() {
    let mut kv = KvCacheManager::new(8, 4, true);
    let none = CachedPrefix::default();
    assert_eq!(kv.allocate_slots(1, 5, &none), Some(&[0, 1][..]));
    // Still inside block 1: nothing new.
    assert_eq!(kv.allocate_slots(1, 8, &none), Some(&[0, 1][..]));
    assert_eq!(kv.allocate_slots(1, 9, &none), Some(&[0, 1, 2][..]));
    assert_eq!(kv.allocate_slots(2, 4, &none), Some(&[3][..]));
    assert_eq!(kv.block_table(1), &[0, 1, 2]);
    assert_eq!(kv.pool().free_queue(), vec![4, 5, 6, 7]);
}

#[test]
fn no_room_is_none_and_changes_nothing() {
    let mut kv = KvCacheManager::new(3, 4, true);
    let none = CachedPrefix::default();
    assert!(kv.allocate_slots(1, 8, &none).is_some());
    assert_eq!(kv.allocate_slots(2, 8, &none), None);
    assert_eq!(kv.block_table(2), &[] as &[BlockId]);
    assert_eq!(kv.pool().free_queue(), vec![2]);
}

#[test]
fn a_second_request_shares_every_full_block_of_a_common_prefix() {
    let mut kv = KvCacheManager::new(10, 4, true);
    let mut a = tokens(10, 1);
    assert_eq!(prefill(&mut kv, 1, &a), vec![0, 1, 2]);
    // Same first 8 tokens, different tail.
    a.truncate(8);
    a.extend([7, 7, 7]);
    let prefix = kv.find_cached_prefix(&a, None);
    assert_eq!(
        prefix,
        CachedPrefix {
            blocks: vec![0, 1],
            num_tokens: 8
        }
    );
    assert_eq!(kv.allocate_slots(2, a.len(), &prefix), Some(&[0, 1, 3][..]));
    assert_eq!(kv.pool().ref_count(0), 2);
    assert_eq!(kv.pool().ref_count(2), 1);
}

#[test]
fn a_fully_cached_prompt_still_leaves_one_token_to_compute() {
    let mut kv = KvCacheManager::new(10, 4, true);
    let a = tokens(8, 1);
    prefill(&mut kv, 1, &a);
    let prefix = kv.find_cached_prefix(&a, None);
    assert_eq!(prefix.blocks, vec![0]);
    assert_eq!(prefix.num_tokens, 4);
}

#[test]
fn freed_prefixes_are_revived_then_evicted_least_recently_used_first() {
    let mut kv = KvCacheManager::new(6, 4, true);
    let a = tokens(9, 1);
    let b = tokens(9, 2);
    assert_eq!(prefill(&mut kv, 1, &a), vec![0, 1, 2]);
    assert_eq!(prefill(&mut kv, 2, &b), vec![3, 4, 5]);
    kv.free(1);
    // Block 2 (partial, uncached) to the head; 1 then 0 to the tail.
    assert_eq!(kv.pool().free_queue(), vec![2, 1, 0]);
    kv.free(2);
    assert_eq!(kv.pool().free_queue(), vec![5, 2, 1, 0, 4, 3]);
    assert_eq!(kv.usage(), 0.0);
    // `a` again: both its cached blocks come back from the middle of the queue.
    let prefix = kv.find_cached_prefix(&a, None);
    assert_eq!(prefix.blocks, vec![0, 1]);
    assert_eq!(kv.allocate_slots(3, a.len(), &prefix), Some(&[0, 1, 5][..]));
    assert_eq!(kv.pool().free_queue(), vec![2, 4, 3]);
    // A new 12-token request needs 3 blocks: it takes 2 then evicts b's tail block 4, then 3.
    let c = tokens(12, 3);
    assert_eq!(prefill(&mut kv, 4, &c), vec![2, 4, 3]);
    assert_eq!(kv.find_cached_prefix(&b, None), CachedPrefix::default());
}

#[test]
fn decode_tokens_fill_blocks_that_become_shareable() {
    let mut kv = KvCacheManager::new(8, 4, true);
    let mut a = tokens(3, 1);
    prefill(&mut kv, 1, &a);
    // Two decode steps: the first block fills with token 4 and is registered after compute.
    for t in [50, 51] {
        a.push(t);
        let n = a.len();
        assert!(kv.allocate_slots(1, n, &CachedPrefix::default()).is_some());
        kv.cache_computed_blocks(1, &a, n, None);
    }
    assert_eq!(kv.block_table(1), &[0, 1]);
    let prefix = kv.find_cached_prefix(&[a[0], a[1], a[2], a[3], 9], None);
    assert_eq!(prefix.blocks, vec![0]);
}

#[test]
fn salted_prefixes_are_private_to_their_tenant() {
    let mut kv = KvCacheManager::new(8, 4, true);
    let a = tokens(9, 1);
    let prefix = kv.find_cached_prefix(&a, Some("t1"));
    assert!(kv.allocate_slots(1, a.len(), &prefix).is_some());
    kv.cache_computed_blocks(1, &a, a.len(), Some("t1"));
    assert_eq!(kv.find_cached_prefix(&a, Some("t1")).blocks, vec![0, 1]);
    assert!(kv.find_cached_prefix(&a, Some("t2")).blocks.is_empty());
    assert!(kv.find_cached_prefix(&a, None).blocks.is_empty());
}

#[test]
fn prefix_caching_off_finds_and_registers_nothing() {
    let mut kv = KvCacheManager::new(8, 4, false);
    let a = tokens(9, 1);
    prefill(&mut kv, 1, &a);
    assert!(kv.find_cached_prefix(&a, None).blocks.is_empty());
    assert_eq!(kv.pool().num_cached_blocks(), 0);
}

#[test]
fn reviving_a_free_cached_block_counts_against_free_space() {
    let mut kv = KvCacheManager::new(3, 4, true);
    let a = tokens(9, 1);
    assert_eq!(prefill(&mut kv, 1, &a), vec![0, 1, 2]);
    kv.free(1);
    // 3 free blocks, 2 of them cached prefix blocks of `a`; `a` needs its 2 plus 1 fresh.
    let prefix = kv.find_cached_prefix(&a, None);
    assert_eq!(kv.allocate_slots(2, a.len(), &prefix), Some(&[0, 1, 2][..]));
    assert_eq!(kv.pool().num_free_blocks(), 0);
    kv.free(2);
    kv.free(2);
    assert_eq!(kv.pool().num_free_blocks(), 3);
}
