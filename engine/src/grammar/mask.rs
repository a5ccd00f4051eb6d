//! The set of tokens a constraint allows at one step, as a bitmask over the vocabulary, and
//! its application to a row of logits.

/// Allowed tokens: bit `id % 32` of word `id / 32`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenMask {
    /// [ceil(vocab / 32)]
    words: Vec<u32>,
}

impl TokenMask {
    /// A mask from llguidance's bit vector layout (the same layout).
    pub fn from_words(words: Vec<u32>) -> Self {
        Self { words }
    }

    /// A mask allowing exactly `ids` in a vocabulary of `vocab_size`.
    pub fn allowing(vocab_size: usize, ids: &[u32]) -> Self {
        let mut words = vec![0u32; vocab_size.div_ceil(32)];
        for &id in ids.iter().filter(|&&id| (id as usize) < vocab_size) {
            words[id as usize / 32] |= 1 << (id % 32);
        }
        Self { words }
    }

    /// A mask allowing every token of a vocabulary of `vocab_size`.
    pub fn all(vocab_size: usize) -> Self {
        let mut words = vec![u32::MAX; vocab_size.div_ceil(32)];
        if let (Some(last), tail @ 1..) = (words.last_mut(), vocab_size % 32) {
            *last = (1u32 << tail) - 1;
        }
        Self { words }
    }

    /// The bit words (the layout the CUDA sampler reads).
    pub fn words(&self) -> &[u32] {
        &self.words
    }

    /// Whether `id` is allowed.
    pub fn allows(&self, id: u32) -> bool {
        self.words
            .get(id as usize / 32)
            .is_some_and(|w| w & (1 << (id % 32)) != 0)
    }

    /// Whether no token at all is allowed (a dead end).
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// Sets every disallowed logit of `logits` (`[vocab]`) to −∞, so no sampling mode (greedy,
    /// temperature, top-k/p, min-p) can pick it. Ids past the mask are disallowed.
    pub fn apply(&self, logits: &mut [f32]) {
        for (chunk, &word) in logits.chunks_mut(32).zip(&self.words) {
            if word == u32::MAX {
                continue;
            }
            for (bit, logit) in chunk.iter_mut().enumerate() {
                if word & (1 << bit) == 0 {
                    *logit = f32::NEG_INFINITY;
                }
            }
        }
        let covered = self.words.len() * 32;
        if logits.len() > covered {
            logits[covered..].fill(f32::NEG_INFINITY);
        }
    }
}
