//! Reading one HTTP/1.1 response off a `Connection: close` socket, for suites that talk to
//! the real binaries with nothing but std (no client library between the test and the wire).

use std::io::Read;
use std::net::TcpStream;

/// Reads the response to its end; returns `(status, body)`, de-chunked when chunked.
pub fn read_response(stream: &mut TcpStream) -> std::io::Result<(u16, String)> {
    read_response_with_head(stream).map(|(status, _, body)| (status, body))
}

/// Reads the response to its end; returns `(status, head, body)`: the head is the status
/// line and the headers as sent, the body de-chunked when chunked.
pub fn read_response_with_head(stream: &mut TcpStream) -> std::io::Result<(u16, String, String)> {
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no header end"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    Ok((status, head.to_string(), body))
}

/// The value of header `name` (any case) in a response head, if sent.
pub fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.lines().skip(1).find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

/// The payload of a chunked body (stops at the last chunk or at the first malformed one).
pub fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}
