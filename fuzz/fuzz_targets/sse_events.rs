//! Fuzz target: the gateway's SSE event cutter (`gateway/src/proxy/sse/events.rs`). For any
//! byte stream cut into chunks of any size: the pieces it gives back, in order, are exactly
//! the bytes that went in, and (below the cap on one event) the same events whatever the
//! chunk size.
#![cfg_attr(fuzzing, no_main)]

#[macro_use]
#[path = "../replay.rs"]
mod replay;

#[path = "../../gateway/src/proxy/sse/events.rs"]
mod events;

use bytes::Bytes;
use events::{Cut, Events};

/// Every piece, and the events among them as (whole, text length).
fn cut(stream: &[u8], size: usize) -> (Vec<u8>, Vec<(Vec<u8>, usize)>) {
    let mut buffer = Events::default();
    let mut cuts = Vec::new();
    for chunk in stream.chunks(size) {
        buffer.cut(Bytes::copy_from_slice(chunk), &mut cuts);
    }
    let (mut out, mut events) = (Vec::new(), Vec::new());
    for piece in cuts {
        match piece {
            Cut::Event { whole, text_len } => {
                assert!(text_len <= whole.len());
                out.extend_from_slice(&whole);
                events.push((whole.to_vec(), text_len));
            }
            Cut::Unended(bytes) => out.extend_from_slice(&bytes),
        }
    }
    out.extend_from_slice(&buffer.finish());
    (out, events)
}

/// The property, for any input.
fn check(data: &[u8]) {
    let Some((&size, stream)) = data.split_first() else {
        return;
    };
    let size = usize::from(size.max(1));
    let (out, events) = cut(stream, size);
    assert_eq!(out, stream, "bytes changed");
    let (_, whole_events) = cut(stream, stream.len().max(1));
    assert_eq!(events, whole_events, "chunking changed the events");
}

fuzz_main!("sse_events");
