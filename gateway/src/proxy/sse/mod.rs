//! Server-sent events: the pure cutter that finds where each event of a byte stream ends
//! (the failover layer's splice reads and rewrites them one by one).

mod events;

pub use events::{Cut, Events};
