//! Server-sent events cut out of a byte stream that arrives in arbitrary chunks (pure: no I/O).

use bytes::{Bytes, BytesMut};

/// The most bytes held back waiting for the end of one event. An OpenAI chunk is well under a
/// kilobyte; a replica that never ends its event must not grow the buffer without bound.
const MAX_EVENT_BYTES: usize = 1 << 20;

/// Bytes of an event not yet ended by a blank line.
#[derive(Debug, Default)]
pub struct Events {
    pending: BytesMut,
}

impl Events {
    /// Takes a chunk; returns the complete events so far (maybe none), each with its own line
    /// endings. Events containing `marker` are shown to `keep` (their text, without the blank
    /// line) and left out when it says no; the rest pass without being looked at.
    pub fn push(
        &mut self,
        chunk: Bytes,
        marker: &[u8],
        mut keep: impl FnMut(&[u8]) -> bool,
    ) -> Bytes {
        // Fast path: whole events, none marked, nothing pending: forwarded as they came.
        if self.pending.is_empty()
            && (chunk.ends_with(b"\n\n") || chunk.ends_with(b"\r\n\r\n"))
            && !contains(&chunk, marker)
        {
            return chunk;
        }
        self.pending.extend_from_slice(&chunk);
        // Each complete event's (text end, event end). Found once, on the whole buffer: cut
        // out of it, a last event ended by `\r\r` would read as unfinished (fuzzing found
        // those bytes dropped).
        let mut events = Vec::new();
        let mut end = 0;
        while let Some((text, next)) = next_event(&self.pending[end..]) {
            events.push((end + text, end + next));
            end += next;
        }
        if end == 0 {
            // Past the cap the bytes go on unread, as a plain proxy's would.
            if self.pending.len() > MAX_EVENT_BYTES {
                return self.pending.split().freeze();
            }
            return Bytes::new();
        }
        let complete = self.pending.split_to(end).freeze();
        if !contains(&complete, marker) {
            return complete;
        }
        let mut out = BytesMut::with_capacity(complete.len());
        let mut start = 0;
        for (text, next) in events {
            let event = &complete[start..text];
            if !contains(event, marker) || keep(event) {
                out.extend_from_slice(&complete[start..next]);
            }
            start = next;
        }
        out.freeze()
    }

    /// The stream ended: an unterminated last event is passed on as it is.
    pub fn finish(&mut self) -> Bytes {
        self.pending.split().freeze()
    }
}

/// The first complete event of `bytes`: where its text ends and where the blank line that
/// ends it ends. Lines may end in `\n`, `\r\n` or `\r` (the SSE spec allows all three;
/// Python's sse-starlette writes `\r\n`): looking only for `\n\n` held a CRLF stream back
/// until its end. A `\r` at the very end may be half of a `\r\n`: the event waits for more.
fn next_event(bytes: &[u8]) -> Option<(usize, usize)> {
    let (mut at, mut line_start, mut text_end) = (0, 0, 0);
    while let Some(offset) = bytes[at..].iter().position(|&b| b == b'\n' || b == b'\r') {
        at += offset;
        let eol = match (bytes[at], bytes.get(at + 1)) {
            (b'\n', _) => 1,
            (_, Some(b'\n')) => 2,
            (_, Some(_)) => 1,
            (_, None) => return None,
        };
        // An empty line ends the event (one of its own when it comes first: an extra blank
        // line, which SSE ignores, is then cut the same wherever the chunks begin).
        if at == line_start {
            return Some((text_end, at + eol));
        }
        text_end = at;
        at += eol;
        line_start = at;
    }
    None
}

/// Whether `needle` occurs in `haystack`.
fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(mut bytes: &[u8]) -> Vec<(&[u8], &[u8])> {
        let mut out = Vec::new();
        while let Some((text, next)) = next_event(bytes) {
            out.push((&bytes[..text], &bytes[..next]));
            bytes = &bytes[next..];
        }
        out
    }

    #[test]
    fn events_end_at_a_blank_line_whatever_the_line_endings() {
        let lf: &[u8] = b"data: a\n\ndata: b\n\n";
        assert_eq!(
            events(lf),
            [
                (&b"data: a"[..], &b"data: a\n\n"[..]),
                (b"data: b", b"data: b\n\n")
            ]
        );
        let crlf: &[u8] = b"data: a\r\n\r\nevent: x\r\ndata: b\r\n\r\n";
        assert_eq!(
            events(crlf),
            [
                (&b"data: a"[..], &b"data: a\r\n\r\n"[..]),
                (b"event: x\r\ndata: b", b"event: x\r\ndata: b\r\n\r\n")
            ]
        );
        assert_eq!(events(b"data: a\r\r"), []);
        assert_eq!(
            events(b"data: a\r\rdata: b"),
            [(&b"data: a"[..], &b"data: a\r\r"[..])]
        );
    }

    #[test]
    fn an_unfinished_event_waits() {
        assert_eq!(next_event(b"data: a\n"), None);
        assert_eq!(next_event(b"data: a\r\n\r"), None);
        assert_eq!(next_event(b"data: a"), None);
        assert_eq!(next_event(b""), None);
    }

    /// Feeds `stream` in chunks of `size` bytes; returns what comes out, and the events shown.
    fn relay(stream: &[u8], size: usize) -> (Vec<u8>, Vec<String>) {
        let mut buffer = Events::default();
        let (mut out, mut shown) = (Vec::new(), Vec::new());
        for chunk in stream.chunks(size) {
            let passed = buffer.push(Bytes::copy_from_slice(chunk), b"usage", |event| {
                shown.push(String::from_utf8_lossy(event).into_owned());
                !event.ends_with(b"drop usage")
            });
            out.extend_from_slice(&passed);
        }
        out.extend_from_slice(&buffer.finish());
        (out, shown)
    }

    #[test]
    fn marked_events_are_shown_and_dropped_whole_in_any_chunking() {
        let stream =
            b"data: 1\r\rdata: 2\r\n\r\ndata: keep usage\r\n\r\ndata: drop usage\r\n\r\ndata: [DONE]\r\n\r\n";
        let expected = b"data: 1\r\rdata: 2\r\n\r\ndata: keep usage\r\n\r\ndata: [DONE]\r\n\r\n";
        for size in [1, 2, 3, 7, 13, stream.len()] {
            let (out, shown) = relay(stream, size);
            assert_eq!(out, expected, "chunks of {size}");
            assert_eq!(
                shown,
                ["data: keep usage", "data: drop usage"],
                "chunks of {size}"
            );
        }
    }

    #[test]
    fn an_event_that_never_ends_is_passed_on_past_the_cap() {
        let mut buffer = Events::default();
        let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
        let mut passed = 0;
        for _ in 0..(MAX_EVENT_BYTES / chunk.len() + 2) {
            passed += buffer.push(chunk.clone(), b"usage", |_| true).len();
        }
        assert!(passed > MAX_EVENT_BYTES, "held back {passed}");
        assert!(buffer.pending.len() <= MAX_EVENT_BYTES);
    }
}
