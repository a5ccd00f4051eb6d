//! Fuzz target: the gateway's SSE event cutter (`gateway/src/proxy/sse/events.rs`). For any
//! byte stream cut into chunks of any size: passing every event gives back exactly the bytes
//! that went in, and dropping some events gives the same bytes whatever the chunk size.
#![no_main]

#[path = "../../gateway/src/proxy/sse/events.rs"]
mod events;

use bytes::Bytes;
use events::Events;
use libfuzzer_sys::fuzz_target;

fn relay(stream: &[u8], size: usize, drop_x: bool) -> Vec<u8> {
    let mut buffer = Events::default();
    let mut out = Vec::new();
    for chunk in stream.chunks(size) {
        let passed = buffer.push(Bytes::copy_from_slice(chunk), b"usage", |event| {
            !(drop_x && event.ends_with(b"x"))
        });
        out.extend_from_slice(&passed);
    }
    out.extend_from_slice(&buffer.finish());
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&size, stream)) = data.split_first() else {
        return;
    };
    let size = usize::from(size.max(1));
    assert_eq!(relay(stream, size, false), stream, "bytes changed");
    assert_eq!(
        relay(stream, size, true),
        relay(stream, stream.len().max(1), true),
        "chunking changed what was dropped"
    );
});
