//! Fuzz target: the Batch API's `multipart/form-data` parser (`POST /v1/files`), fed as an
//! upload arrives: frame by frame. It may not panic on any Content-Type, body or split; the
//! form it reads does not depend on how the body was split; a form it accepts has at most
//! its part cap; and any bytes that do not hold the delimiter are a file that comes back
//! exactly.
#![cfg_attr(fuzzing, no_main)]

#[macro_use]
#[path = "../replay.rs"]
mod replay;

// The parser's whole-body entry and its error texts are not all used here.
#[allow(dead_code)]
#[path = "../../gateway/src/batch/multipart.rs"]
mod multipart;

#[allow(dead_code)]
#[path = "../../gateway/src/batch/form_stream.rs"]
mod form_stream;

use form_stream::FormStream;

const BOUNDARY: &str = "fuzz0b0undary";

/// The property, for any input: its first line is the Content-Type, the rest the body; a
/// hash of it picks the frame sizes (so the committed corpus keeps its meaning).
fn check(data: &[u8]) {
    let seed = data
        .iter()
        .fold(0u8, |hash, &b| hash.wrapping_mul(31).wrapping_add(b));
    let (head, body) = match data.iter().position(|&b| b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &data[..0]),
    };
    let content_type = String::from_utf8_lossy(head);
    let whole = multipart::parse(&content_type, body);
    let split = in_frames(&content_type, body, seed);
    assert_eq!(whole, split, "the split changed the form");
    if let Ok(form) = whole {
        let parts = form.fields.len() + usize::from(form.file.is_some());
        assert!(parts <= multipart::MAX_PARTS, "{parts} parts");
        if let Some(file) = form.file {
            assert!(file.bytes.len() <= body.len());
        }
    }
    round_trip(data, seed);
}

/// `body` fed in frames of sizes drawn from `seed`, collected as `parse` does.
fn in_frames(
    content_type: &str,
    body: &[u8],
    seed: u8,
) -> Result<multipart::Form, multipart::MultipartError> {
    let mut stream = FormStream::new(content_type)?;
    let mut events = Vec::new();
    let mut rest = body;
    let mut state = u32::from(seed) | 1;
    while !rest.is_empty() {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let size = 1 + (state >> 16) as usize % 97;
        let (frame, tail) = rest.split_at(size.min(rest.len()));
        stream.feed(frame, &mut events)?;
        rest = tail;
    }
    stream.finish()?;
    Ok(multipart::Form::from_events(events))
}

/// `data` as an upload's file, as httpx writes it: it must come back unchanged unless it
/// holds the delimiter (which, after the blank line that ends the headers, includes starting
/// with `--` and the boundary).
fn round_trip(data: &[u8], seed: u8) {
    let delimiter = format!("\r\n--{BOUNDARY}");
    let framed = [b"\r\n", data].concat();
    if framed
        .windows(delimiter.len())
        .any(|w| w == delimiter.as_bytes())
    {
        return;
    }
    let body = [
        format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n\
             --{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; \
             filename=\"in.jsonl\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
        data,
        format!("\r\n--{BOUNDARY}--\r\n").as_bytes(),
    ]
    .concat();
    let content_type = format!("multipart/form-data; boundary={BOUNDARY}");
    let form = in_frames(&content_type, &body, seed)
        .unwrap_or_else(|e| panic!("a well-formed upload was refused: {e}"));
    assert_eq!(form.fields, [("purpose".to_string(), "batch".to_string())]);
    assert_eq!(form.file.map(|f| f.bytes), Some(data.to_vec()));
}

fuzz_main!("batch_multipart");
