//! sampling (being written).
