//! The KV block pool: a flat array of blocks, an index-linked free queue, reference counts and
//! the prefix-cache index (hash → block).
//!
//! Free queue order is the eviction order. A freed block that holds a cached prefix goes to the
//! tail (least recently used is evicted first, from the head); a freed block that holds nothing
//! reusable goes to the head, so eviction only touches cached blocks once nothing cheaper is
//! free. A free block keeps its hash until it is handed out again, so a later request can
//! revive it with [`BlockPool::touch`].

use std::collections::HashMap;

use super::hash::BlockHash;

/// Index of a block in the pool (and in the backend's KV storage).
pub type BlockId = u32;

/// Marks "no link" in the free queue.
const NIL: u32 = u32::MAX;

#[derive(Debug, Clone)]
struct Block {
    /// Requests whose block table holds this block; 0 means it sits in the free queue.
    ref_count: u32,
    /// The prefix this block holds, when it is registered in the cache.
    hash: Option<BlockHash>,
    prev: u32,
    next: u32,
}

/// All KV blocks of one replica.
#[derive(Debug)]
pub struct BlockPool {
    blocks: Vec<Block>,
    head: u32,
    tail: u32,
    num_free: usize,
    cached: HashMap<BlockHash, BlockId>,
}

impl BlockPool {
    /// A pool of `num_blocks` free blocks, queued in id order.
    pub fn new(num_blocks: usize) -> Self {
        // Ids must fit below the NIL marker.
        let num_blocks = num_blocks.min(NIL as usize);
        let blocks = (0..num_blocks as u32)
            .map(|id| Block {
                ref_count: 0,
                hash: None,
                prev: if id == 0 { NIL } else { id - 1 },
                next: if id as usize + 1 == num_blocks {
                    NIL
                } else {
                    id + 1
                },
            })
            .collect();
        let tail = if num_blocks == 0 {
            NIL
        } else {
            num_blocks as u32 - 1
        };
        let head = if num_blocks == 0 { NIL } else { 0 };
        Self {
            blocks,
            head,
            tail,
            num_free: num_blocks,
            cached: HashMap::new(),
        }
    }

    /// Blocks in the pool.
    pub fn num_blocks(&self) -> usize {
        self.blocks.len()
    }

    /// Blocks no request references (some may still hold an evictable cached prefix).
    pub fn num_free_blocks(&self) -> usize {
        self.num_free
    }

    /// Fraction (0–1) of blocks referenced by some request.
    pub fn usage(&self) -> f64 {
        if self.blocks.is_empty() {
            return 0.0;
        }
        1.0 - self.num_free as f64 / self.blocks.len() as f64
    }

    /// How many requests reference `id` (0 for a free or unknown block).
    pub fn ref_count(&self, id: BlockId) -> u32 {
        self.blocks.get(id as usize).map_or(0, |b| b.ref_count)
    }

    /// The free queue from head (next to be handed out) to tail.
    pub fn free_queue(&self) -> Vec<BlockId> {
        let mut out = Vec::with_capacity(self.num_free);
        let mut at = self.head;
        while at != NIL {
            out.push(at);
            at = self.blocks[at as usize].next;
        }
        out
    }

    /// The cached block holding the prefix `hash`, if any (free or in use).
    pub fn cached_block(&self, hash: &BlockHash) -> Option<BlockId> {
        self.cached.get(hash).copied()
    }

    /// The prefix `id` is registered under, if any.
    pub fn hash_of(&self, id: BlockId) -> Option<BlockHash> {
        self.blocks.get(id as usize).and_then(|b| b.hash)
    }

    /// Blocks registered in the prefix cache.
    pub fn num_cached_blocks(&self) -> usize {
        self.cached.len()
    }

    /// Takes `n` blocks from the head of the free queue, evicting whatever prefix they cached.
    /// `None` (and nothing taken) when fewer than `n` are free.
    pub fn allocate(&mut self, n: usize) -> Option<Vec<BlockId>> {
        if n > self.num_free {
            return None;
        }
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let id = self.head;
            self.unlink(id);
            let block = &mut self.blocks[id as usize];
            block.ref_count = 1;
            if let Some(hash) = block.hash.take() {
                self.cached.remove(&hash);
            }
            out.push(id);
        }
        Some(out)
    }

    /// Adds a reference to each block (a prefix-cache hit); a free one leaves the free queue.
    pub fn touch(&mut self, ids: &[BlockId]) {
        for &id in ids {
            let Some(block) = self.blocks.get(id as usize) else {
                continue;
            };
            if block.ref_count == 0 {
                self.unlink(id);
            }
            self.blocks[id as usize].ref_count += 1;
        }
    }

    /// Drops one reference from each block, in the order given; a block nobody references
    /// joins the free queue (tail if it caches a prefix, head if not).
    pub fn free(&mut self, ids: impl IntoIterator<Item = BlockId>) {
        for id in ids {
            let Some(block) = self.blocks.get_mut(id as usize) else {
                continue;
            };
            if block.ref_count == 0 {
                continue;
            }
            block.ref_count -= 1;
            if block.ref_count == 0 {
                if block.hash.is_some() {
                    self.push_tail(id);
                } else {
                    self.push_head(id);
                }
            }
        }
    }

    /// Registers block `id` as holding the prefix `hash`. Returns false when another block
    /// already holds that prefix (the first one stays the cached copy) or `id` already has one.
    pub fn cache_block(&mut self, id: BlockId, hash: BlockHash) -> bool {
        let Some(block) = self.blocks.get_mut(id as usize) else {
            return false;
        };
        if block.hash.is_some() || self.cached.contains_key(&hash) {
            return false;
        }
        block.hash = Some(hash);
        self.cached.insert(hash, id);
        true
    }

    fn unlink(&mut self, id: BlockId) {
        let (prev, next) = {
            let b = &self.blocks[id as usize];
            (b.prev, b.next)
        };
        if prev == NIL {
            self.head = next
        } else {
            self.blocks[prev as usize].next = next
        }
        if next == NIL {
            self.tail = prev
        } else {
            self.blocks[next as usize].prev = prev
        }
        let b = &mut self.blocks[id as usize];
        b.prev = NIL;
        b.next = NIL;
        self.num_free -= 1;
    }

    fn push_tail(&mut self, id: BlockId) {
        self.blocks[id as usize].prev = self.tail;
        self.blocks[id as usize].next = NIL;
        if self.tail == NIL {
            self.head = id
        } else {
            self.blocks[self.tail as usize].next = id
        }
        self.tail = id;
        self.num_free += 1;
    }

    fn push_head(&mut self, id: BlockId) {
        self.blocks[id as usize].prev = NIL;
        self.blocks[id as usize].next = self.head;
        if self.head == NIL {
            self.tail = id
        } else {
            self.blocks[self.head as usize].prev = id
        }
        self.head = id;
        self.num_free += 1;
    }
}

#[cfg(test)]
#[path = "pool_tests.rs"]
mod tests;
