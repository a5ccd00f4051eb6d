//! KV-cache bookkeeping (no tensors): the block pool with its free queue and reference counts,
//! a block table per request, and the prefix cache (a hash chain over full blocks, evicted
//! least-recently-used). The backend owns the storage; this module decides which block holds
//! which tokens.

mod hash;
mod manager;
mod pool;

pub use hash::{BlockHash, block_hashes, hash_block};
pub use manager::{CachedPrefix, KvCacheManager, RequestId};
pub use pool::{BlockId, BlockPool};
