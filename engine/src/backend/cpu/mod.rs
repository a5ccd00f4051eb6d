//! The CPU backend: the reference every other backend is compared with.
