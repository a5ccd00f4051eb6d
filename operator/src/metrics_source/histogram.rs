//! Quantiles from cumulative histogram buckets: one definition, shared with the gateway (which
//! paces batch work by the interactive latency it measures), in `tokenscale_common`.

pub use tokenscale_common::histogram::{Buckets, bucket_delta, quantile};
