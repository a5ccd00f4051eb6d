//! Content hashes of full KV blocks, chained so a block's hash names its whole prefix.

use sha2::{Digest, Sha256};

/// Hash of one full block and, through its parent, of every token before it.
///
/// SHA-256 truncated to 128 bits: a collision would silently hand one request another's keys
/// and values, so a fast non-cryptographic hash (which a tenant could attack) is not enough.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockHash(pub [u8; 16]);

/// Hash of one full block: `sha256(parent hash | salt | token ids)`.
///
/// The salt (a per-tenant secret, usually) only enters the first block; later blocks inherit it
/// through the chain, so two tenants with different salts never share a block.
pub fn hash_block(parent: Option<BlockHash>, tokens: &[u32], salt: Option<&str>) -> BlockHash {
    let mut hasher = Sha256::new();
    match parent {
        Some(parent) => {
            hasher.update([1u8]);
            hasher.update(parent.0);
        }
        None => {
            hasher.update([0u8]);
            if let Some(salt) = salt {
                // The length prefix keeps `salt | tokens` unambiguous.
                hasher.update([1u8]);
                hasher.update((salt.len() as u64).to_le_bytes());
                hasher.update(salt.as_bytes());
            } else {
                hasher.update([0u8]);
            }
        }
    }
    for token in tokens {
        hasher.update(token.to_le_bytes());
    }
    let digest = hasher.finalize();
    let mut out = [0u8; 16];
    out.copy_from_slice(&digest[..16]);
    BlockHash(out)
}

/// Hashes of every *full* block of `tokens`, in order (a trailing partial block has none).
pub fn block_hashes(tokens: &[u32], block_size: usize, salt: Option<&str>) -> Vec<BlockHash> {
    let mut hashes: Vec<BlockHash> = Vec::with_capacity(tokens.len() / block_size.max(1));
    if block_size == 0 {
        return hashes;
    }
    for chunk in tokens.chunks_exact(block_size) {
        let parent = hashes.last().copied();
        hashes.push(hash_block(parent, chunk, salt));
    }
    hashes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_full_blocks_are_hashed() {
        assert_eq!(block_hashes(&[1, 2, 3], 4, None).len(), 0);
        assert_eq!(block_hashes(&[1, 2, 3, 4, 5], 4, None).len(), 1);
        assert_eq!(block_hashes(&[1, 2, 3, 4, 5, 6, 7, 8], 4, None).len(), 2);
    }

    #[test]
    fn a_block_hash_depends_on_its_whole_prefix() {
        let a = block_hashes(&[1, 2, 3, 4, 9, 9, 9, 9], 4, None);
        let b = block_hashes(&[1, 2, 3, 5, 9, 9, 9, 9], 4, None);
        assert_ne!(a[0], b[0]);
        // Same second-block tokens, different parents: different hashes.
        assert_ne!(a[1], b[1]);
        // Same tokens: same hashes.
        assert_eq!(a, block_hashes(&[1, 2, 3, 4, 9, 9, 9, 9, 7], 4, None));
    }

    #[test]
    fn salts_separate_tenants() {
        let none = block_hashes(&[1, 2, 3, 4, 5, 6, 7, 8], 4, None);
        let empty = block_hashes(&[1, 2, 3, 4, 5, 6, 7, 8], 4, Some(""));
        let a = block_hashes(&[1, 2, 3, 4, 5, 6, 7, 8], 4, Some("tenant-a"));
        let b = block_hashes(&[1, 2, 3, 4, 5, 6, 7, 8], 4, Some("tenant-b"));
        assert_ne!(none, empty);
        assert_ne!(a, b);
        assert_ne!(a[1], b[1]);
        assert_eq!(
            a,
            block_hashes(&[1, 2, 3, 4, 5, 6, 7, 8], 4, Some("tenant-a"))
        );
    }
}
