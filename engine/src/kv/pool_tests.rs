//! Block pool: exact block ids and free-queue order through allocate / share / free / evict.

use super::*;
use crate::kv::hash::hash_block;

fn h(n: u32) -> BlockHash {
    hash_block(None, &[n], None)
}

#[test]
fn a_new_pool_queues_every_block_in_id_order() {
    let pool = BlockPool::new(4);
    assert_eq!(pool.free_queue(), vec![0, 1, 2, 3]);
    assert_eq!(pool.num_free_blocks(), 4);
    assert_eq!(pool.usage(), 0.0);
}

#[test]
fn allocate_takes_from_the_head_and_refuses_without_taking() {
    let mut pool = BlockPool::new(4);
    assert_eq!(pool.allocate(3), Some(vec![0, 1, 2]));
    assert_eq!(pool.free_queue(), vec![3]);
    assert_eq!(pool.allocate(2), None);
    assert_eq!(pool.free_queue(), vec![3]);
    assert_eq!(pool.usage(), 0.75);
    assert_eq!(pool.allocate(0), Some(vec![]));
}

#[test]
fn uncached_blocks_return_to_the_head_and_cached_ones_to_the_tail() {
    let mut pool = BlockPool::new(5);
    let ids = pool.allocate(3).unwrap_or_default();
    assert_eq!(ids, vec![0, 1, 2]);
    assert!(pool.cache_block(0, h(0)));
    assert!(pool.cache_block(1, h(1)));
    // Freed in reverse (tail of the sequence first), as a finished request frees its table.
    pool.free([2, 1, 0]);
    // 2 caches nothing: reused first. 1 then 0 go to the tail: 1 is evicted before 0.
    assert_eq!(pool.free_queue(), vec![2, 3, 4, 1, 0]);
    assert_eq!(pool.num_free_blocks(), 5);
}

#[test]
fn a_shared_block_is_freed_only_when_its_last_reference_goes() {
    let mut pool = BlockPool::new(3);
    let ids = pool.allocate(1).unwrap_or_default();
    assert!(pool.cache_block(ids[0], h(7)));
    pool.touch(&ids);
    assert_eq!(pool.ref_count(0), 2);
    pool.free([0]);
    assert_eq!(pool.ref_count(0), 1);
    assert_eq!(pool.free_queue(), vec![1, 2]);
    pool.free([0]);
    assert_eq!(pool.free_queue(), vec![1, 2, 0]);
    // Freeing an already free block changes nothing.
    pool.free([0]);
    assert_eq!(pool.free_queue(), vec![1, 2, 0]);
}

#[test]
fn touching_a_free_cached_block_revives_it_from_the_middle_of_the_queue() {
    let mut pool = BlockPool::new(4);
    let ids = pool.allocate(2).unwrap_or_default();
    assert!(pool.cache_block(0, h(0)));
    assert!(pool.cache_block(1, h(1)));
    pool.free([1, 0]);
    assert_eq!(pool.free_queue(), vec![2, 3, 1, 0]);
    assert_eq!(pool.cached_block(&h(1)), Some(1));
    pool.touch(&[1]);
    assert_eq!(pool.free_queue(), vec![2, 3, 0]);
    assert_eq!(pool.ref_count(1), 1);
    assert_eq!(ids, vec![0, 1]);
}

#[test]
fn allocation_evicts_cached_blocks_least_recently_freed_first() {
    let mut pool = BlockPool::new(3);
    let _ = pool.allocate(3);
    for id in 0..3 {
        assert!(pool.cache_block(id, h(id)));
    }
    pool.free([2]);
    pool.free([0]);
    pool.free([1]);
    assert_eq!(pool.free_queue(), vec![2, 0, 1]);
    assert_eq!(pool.allocate(2), Some(vec![2, 0]));
    // Evicted prefixes are gone from the index; the survivor stays findable.
    assert_eq!(pool.cached_block(&h(2)), None);
    assert_eq!(pool.cached_block(&h(0)), None);
    assert_eq!(pool.cached_block(&h(1)), Some(1));
    assert_eq!(pool.num_cached_blocks(), 1);
    assert_eq!(pool.free_queue(), vec![1]);
}

#[test]
fn the_first_block_to_cache_a_prefix_keeps_it() {
    let mut pool = BlockPool::new(2);
    let _ = pool.allocate(2);
    assert!(pool.cache_block(0, h(5)));
    assert!(!pool.cache_block(1, h(5)));
    assert!(!pool.cache_block(0, h(6)));
    assert_eq!(pool.cached_block(&h(5)), Some(0));
    // The duplicate holds no registered prefix, so it goes to the head when freed.
    pool.free([0]);
    pool.free([1]);
    assert_eq!(pool.free_queue(), vec![1, 0]);
}

#[test]
fn unknown_block_ids_are_ignored() {
    let mut pool = BlockPool::new(1);
    pool.touch(&[9]);
    pool.free([9]);
    assert!(!pool.cache_block(9, h(1)));
    assert_eq!(pool.ref_count(9), 0);
    assert_eq!(pool.free_queue(), vec![0]);
}

#[test]
fn an_empty_pool_has_nothing_to_give() {
    let mut pool = BlockPool::new(0);
    assert_eq!(pool.allocate(1), None);
    assert_eq!(pool.usage(), 0.0);
    assert!(pool.free_queue().is_empty());
}
