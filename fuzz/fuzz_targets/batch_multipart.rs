//! Fuzz target: the Batch API's `multipart/form-data` parser (`POST /v1/files`). It may not
//! panic on any Content-Type or body; a form it accepts has at most its part cap and a file
//! that lies inside the body; and any bytes that do not hold the delimiter are a file that
//! comes back exactly.
#![cfg_attr(fuzzing, no_main)]

#[macro_use]
#[path = "../replay.rs"]
mod replay;

// The file's name and type are not read here.
#[allow(dead_code)]
#[path = "../../gateway/src/batch/multipart.rs"]
mod multipart;

const BOUNDARY: &str = "fuzz0b0undary";

/// The property, for any input: its first line is the Content-Type, the rest the body.
fn check(data: &[u8]) {
    let (head, body) = match data.iter().position(|&b| b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &data[..0]),
    };
    let content_type = String::from_utf8_lossy(head);
    if let Ok(form) = multipart::parse(&content_type, body) {
        let parts = form.fields.len() + usize::from(form.file.is_some());
        assert!(parts <= multipart::MAX_PARTS, "{parts} parts");
        if let Some(file) = form.file {
            let (start, at) = (body.as_ptr() as usize, file.bytes.as_ptr() as usize);
            assert!(at >= start && at + file.bytes.len() <= start + body.len());
        }
    }
    round_trip(data);
}

/// `data` as an upload's file, as httpx writes it: it must come back unchanged unless it
/// holds the delimiter (which, after the blank line that ends the headers, includes starting
/// with `--` and the boundary).
fn round_trip(data: &[u8]) {
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
    let form = multipart::parse(&content_type, &body)
        .unwrap_or_else(|e| panic!("a well-formed upload was refused: {e}"));
    assert_eq!(form.fields, [("purpose".to_string(), "batch".to_string())]);
    assert_eq!(form.file.map(|f| f.bytes), Some(data));
}

fuzz_main!("batch_multipart");
