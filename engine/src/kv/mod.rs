//! kv (being written).
