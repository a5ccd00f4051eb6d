//! Which captured CUDA graph runs a decode step (pure). A graph bakes in its grid sizes and
//! kernel arguments, so one is captured per (batch bucket, context bucket) and replayed for
//! every step that fits: the batch is padded up to its bucket (padding rows write no KV and
//! attend to nothing) and the attention split is the one for the bucket's longest context.

/// The key of one captured decode graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GraphKey {
    /// Sequences the graph runs (the step's batch, padded up).
    pub batch: usize,
    /// Longest context (tokens, including the new one) the graph's attention split covers.
    pub context: usize,
}

/// Smallest context bucket: shorter contexts share one graph.
pub const MIN_CONTEXT_BUCKET: usize = 512;

/// Batch buckets up to `max_batch`: 1, 2, 4, 8, then every multiple of 8 up to 32, then every
/// multiple of 32 — fine steps where padding would waste most, few graphs overall.
pub fn batch_buckets(max_batch: usize) -> Vec<usize> {
    let mut buckets: Vec<usize> = [1, 2, 4].into_iter().filter(|&b| b < max_batch).collect();
    let mut b = 8;
    while b < max_batch {
        buckets.push(b);
        b += if b < 32 { 8 } else { 32 };
    }
    buckets.push(max_batch.max(1));
    buckets
}

/// The graph for a decode step of `batch` sequences whose longest context is `max_context`,
/// or `None` when the step runs eagerly (larger than every bucket, or empty).
pub fn graph_key(
    batch: usize,
    max_context: usize,
    buckets: &[usize],
    max_model_len: usize,
) -> Option<GraphKey> {
    if batch == 0 || max_context > max_model_len {
        return None;
    }
    let batch = *buckets.iter().find(|&&b| b >= batch)?;
    let context = max_context
        .max(MIN_CONTEXT_BUCKET)
        .next_power_of_two()
        .min(max_model_len.max(1));
    Some(GraphKey { batch, context })
}

/// Every context bucket [`graph_key`] can return for `max_model_len`: the powers of two from
/// [`MIN_CONTEXT_BUCKET`] below `max_model_len`, then `max_model_len` itself.
pub fn context_buckets(max_model_len: usize) -> Vec<usize> {
    let top = max_model_len.max(1);
    let mut buckets: Vec<usize> =
        std::iter::successors(Some(MIN_CONTEXT_BUCKET), |c| c.checked_mul(2))
            .take_while(|&c| c < top)
            .collect();
    buckets.push(top);
    buckets
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_increasing_and_end_at_the_maximum() {
        assert_eq!(batch_buckets(1), [1]);
        assert_eq!(batch_buckets(6), [1, 2, 4, 6]);
        assert_eq!(batch_buckets(256)[..8], [1, 2, 4, 8, 16, 24, 32, 64]);
        let b = batch_buckets(256);
        assert_eq!(b.last(), Some(&256));
        assert!(b.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(b.len(), 14);
    }

    #[test]
    fn a_step_gets_the_smallest_bucket_that_holds_it() {
        let buckets = batch_buckets(256);
        assert_eq!(
            graph_key(1, 10, &buckets, 8192),
            Some(GraphKey {
                batch: 1,
                context: 512
            })
        );
        assert_eq!(
            graph_key(3, 513, &buckets, 8192),
            Some(GraphKey {
                batch: 4,
                context: 1024
            })
        );
        assert_eq!(
            graph_key(33, 8000, &buckets, 8192),
            Some(GraphKey {
                batch: 64,
                context: 8192
            })
        );
        assert_eq!(
            graph_key(256, 512, &buckets, 8192),
            Some(GraphKey {
                batch: 256,
                context: 512
            })
        );
    }

    #[test]
    fn context_buckets_hold_every_key_context() {
        assert_eq!(context_buckets(300), [300]);
        assert_eq!(context_buckets(512), [512]);
        assert_eq!(context_buckets(8192), [512, 1024, 2048, 4096, 8192]);
        assert_eq!(context_buckets(5000), [512, 1024, 2048, 4096, 5000]);
        let buckets = batch_buckets(16);
        for max_len in [300, 512, 5000, 8192] {
            let all = context_buckets(max_len);
            for ctx in (1..=max_len).step_by(37) {
                let key = graph_key(1, ctx, &buckets, max_len).unwrap();
                assert!(
                    all.contains(&key.context) && key.context >= ctx,
                    "{max_len} {ctx} {key:?}"
                );
            }
        }
    }

    #[test]
    fn no_graph_for_empty_oversized_or_overlong_steps() {
        let buckets = batch_buckets(64);
        assert_eq!(graph_key(0, 10, &buckets, 8192), None);
        assert_eq!(graph_key(65, 10, &buckets, 8192), None);
        assert_eq!(graph_key(1, 9000, &buckets, 8192), None);
        // A model shorter than the smallest bucket caps the bucket at its length.
        assert_eq!(
            graph_key(1, 100, &buckets, 300),
            Some(GraphKey {
                batch: 1,
                context: 300
            })
        );
    }
}
