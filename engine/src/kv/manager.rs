//! The KV cache manager: one block table per request over the block pool, prefix-cache lookup
//! and registration. The scheduler talks only to this; "no room" is `None`, never an error.

use std::collections::HashMap;

use super::hash::{BlockHash, block_hashes, hash_block};
use super::pool::{BlockId, BlockPool};

/// Identifies a request inside the engine.
pub type RequestId = u64;

/// The cached blocks that already hold a prefix of a request's tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CachedPrefix {
    /// Blocks holding the prefix, in order.
    pub blocks: Vec<BlockId>,
    /// Tokens those blocks cover (`blocks.len() * block_size`).
    pub num_tokens: usize,
}

/// One request's blocks.
#[derive(Debug, Default)]
struct Table {
    blocks: Vec<BlockId>,
    /// Hashes of the leading full blocks already registered (or found) in the prefix cache.
    hashes: Vec<BlockHash>,
}

/// Block tables of every request over one block pool.
#[derive(Debug)]
pub struct KvCacheManager {
    pool: BlockPool,
    block_size: usize,
    prefix_caching: bool,
    tables: HashMap<RequestId, Table>,
}

impl KvCacheManager {
    /// A manager over `num_blocks` blocks of `block_size` token slots.
    pub fn new(num_blocks: usize, block_size: usize, prefix_caching: bool) -> Self {
        Self {
            pool: BlockPool::new(num_blocks),
            block_size: block_size.max(1),
            prefix_caching,
            tables: HashMap::new(),
        }
    }

    /// Token slots per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// The underlying pool (read-only: counts, usage, free-queue order).
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// Fraction (0–1) of blocks referenced by some request.
    pub fn usage(&self) -> f64 {
        self.pool.usage()
    }

    /// The block table of `request` (empty when it holds none).
    pub fn block_table(&self, request: RequestId) -> &[BlockId] {
        self.tables
            .get(&request)
            .map_or(&[], |t| t.blocks.as_slice())
    }

    /// The longest cached prefix of `tokens`, whole blocks only, and always leaving at least
    /// one token to compute (the step needs it to produce logits).
    pub fn find_cached_prefix(&self, tokens: &[u32], salt: Option<&str>) -> CachedPrefix {
        if !self.prefix_caching || tokens.is_empty() {
            return CachedPrefix::default();
        }
        let lookup = &tokens[..tokens.len() - 1];
        let mut blocks = Vec::new();
        for hash in block_hashes(lookup, self.block_size, salt) {
            match self.pool.cached_block(&hash) {
                Some(id) => blocks.push(id),
                None => break,
            }
        }
        let num_tokens = blocks.len() * self.block_size;
        CachedPrefix { blocks, num_tokens }
    }

    /// Makes `request`'s table cover `num_tokens` tokens, first taking `prefix` (from
    /// [`find_cached_prefix`](Self::find_cached_prefix), only for a request holding no blocks)
    /// and then fresh blocks. `None`, with nothing changed, when the pool cannot supply them.
    pub fn allocate_slots(
        &mut self,
        request: RequestId,
        num_tokens: usize,
        prefix: &CachedPrefix,
    ) -> Option<&[BlockId]> {
        let held = self.tables.get(&request).map_or(0, |t| t.blocks.len());
        let prefix_blocks = if held == 0 {
            prefix.blocks.as_slice()
        } else {
            &[]
        };
        let needed = num_tokens.div_ceil(self.block_size);
        let num_new = needed.saturating_sub(held + prefix_blocks.len());
        // Reviving a free cached block takes it out of the free queue too.
        let revived = prefix_blocks
            .iter()
            .filter(|&&b| self.pool.ref_count(b) == 0)
            .count();
        if num_new + revived > self.pool.num_free_blocks() {
            return None;
        }
        self.pool.touch(prefix_blocks);
        let fresh = self.pool.allocate(num_new)?;
        let table = self.tables.entry(request).or_default();
        // Blocks found by hash are registered: keep their hashes so the chain continues.
        let pool = &self.pool;
        table
            .hashes
            .extend(prefix_blocks.iter().map_while(|&id| pool.hash_of(id)));
        table.blocks.extend_from_slice(prefix_blocks);
        table.blocks.extend(fresh);
        Some(table.blocks.as_slice())
    }

    /// Registers the full blocks of `tokens[..num_computed_tokens]` (keys and values now
    /// written) in the prefix cache, so later requests can share them.
    pub fn cache_computed_blocks(
        &mut self,
        request: RequestId,
        tokens: &[u32],
        num_computed_tokens: usize,
        salt: Option<&str>,
    ) {
        if !self.prefix_caching {
            return;
        }
        let Some(table) = self.tables.get_mut(&request) else {
            return;
        };
        let full = num_computed_tokens.min(tokens.len()) / self.block_size;
        let full = full.min(table.blocks.len());
        while table.hashes.len() < full {
            let index = table.hashes.len();
            let chunk = &tokens[index * self.block_size..(index + 1) * self.block_size];
            let hash = hash_block(table.hashes.last().copied(), chunk, salt);
            self.pool.cache_block(table.blocks[index], hash);
            table.hashes.push(hash);
        }
    }

    /// Shrinks `request`'s table to the blocks covering its first `num_tokens` tokens (a
    /// speculative step's rejected positions): the blocks past them go back to the pool, last
    /// first. Their slots held keys and values of tokens that were never kept; a kept block's
    /// stale slots are written again before any step reads them.
    pub fn truncate(&mut self, request: RequestId, num_tokens: usize) {
        let Some(table) = self.tables.get_mut(&request) else {
            return;
        };
        let keep = num_tokens.div_ceil(self.block_size);
        if keep >= table.blocks.len() {
            return;
        }
        let dropped = table.blocks.split_off(keep);
        table.hashes.truncate(keep);
        self.pool.free(dropped.into_iter().rev());
    }

    /// Releases every block of `request` (last block first, so a shared prefix's tail is
    /// evicted before its head). Unknown requests are ignored.
    pub fn free(&mut self, request: RequestId) {
        if let Some(table) = self.tables.remove(&request) {
            self.pool.free(table.blocks.into_iter().rev());
        }
    }
}

#[cfg(test)]
#[path = "manager_tests.rs"]
mod tests;
