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

/// A piece of the stream, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cut {
    /// A complete event, its blank line included; its text (without the blank line) is the
    /// first `text_len` bytes.
    Event { whole: Bytes, text_len: usize },
    /// Bytes of an event longer than the cap, passed on unread as a plain proxy would.
    Unended(Bytes),
}

impl Events {
    /// Takes a chunk; appends the complete events so far (maybe none) to `out`, each with its
    /// own line endings. Events are slices of the chunk when nothing was pending (the usual
    /// case: a chunk holds whole events), so no byte is copied.
    pub fn cut(&mut self, chunk: Bytes, out: &mut Vec<Cut>) {
        let buffer = if self.pending.is_empty() {
            chunk
        } else {
            self.pending.extend_from_slice(&chunk);
            self.pending.split().freeze()
        };
        // Found once, on the whole buffer: cut out of it, a last event ended by `\r\r` would
        // read as unfinished (fuzzing found those bytes dropped).
        let mut end = 0;
        while let Some((text, next)) = next_event(&buffer[end..]) {
            out.push(Cut::Event {
                whole: buffer.slice(end..end + next),
                text_len: text,
            });
            end += next;
        }
        if end == 0 && buffer.len() > MAX_EVENT_BYTES {
            out.push(Cut::Unended(buffer));
            return;
        }
        self.pending.extend_from_slice(&buffer[end..]);
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

    /// Feeds `stream` in chunks of `size` bytes; returns what comes out whole and each
    /// event's text.
    fn relay(stream: &[u8], size: usize) -> (Vec<u8>, Vec<String>) {
        let mut buffer = Events::default();
        let (mut out, mut texts, mut cuts) = (Vec::new(), Vec::new(), Vec::new());
        for chunk in stream.chunks(size) {
            buffer.cut(Bytes::copy_from_slice(chunk), &mut cuts);
        }
        for cut in cuts {
            match cut {
                Cut::Event { whole, text_len } => {
                    texts.push(String::from_utf8_lossy(&whole[..text_len]).into_owned());
                    out.extend_from_slice(&whole);
                }
                Cut::Unended(bytes) => out.extend_from_slice(&bytes),
            }
        }
        out.extend_from_slice(&buffer.finish());
        (out, texts)
    }

    #[test]
    fn events_come_out_whole_and_alike_in_any_chunking() {
        let stream =
            b"data: 1\r\rdata: 2\r\n\r\ndata: keep usage\r\n\r\nevent: x\ndata: y\n\ndata: [DONE]\r\n\r\ntail";
        for size in [1, 2, 3, 7, 13, stream.len()] {
            let (out, texts) = relay(stream, size);
            assert_eq!(out, stream, "chunks of {size}");
            assert_eq!(
                texts,
                [
                    "data: 1",
                    "data: 2",
                    "data: keep usage",
                    "event: x\ndata: y",
                    "data: [DONE]"
                ],
                "chunks of {size}"
            );
        }
    }

    #[test]
    fn a_chunk_of_whole_events_is_cut_without_copying() {
        let chunk = Bytes::from_static(b"data: a\n\ndata: b\n\n");
        let mut cuts = Vec::new();
        Events::default().cut(chunk.clone(), &mut cuts);
        let Some(Cut::Event { whole, .. }) = cuts.first() else {
            panic!("{cuts:?}");
        };
        assert_eq!(whole.as_ptr(), chunk.as_ptr());
    }

    #[test]
    fn an_event_that_never_ends_is_passed_on_past_the_cap() {
        let mut buffer = Events::default();
        let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
        let mut cuts = Vec::new();
        for _ in 0..(MAX_EVENT_BYTES / chunk.len() + 2) {
            buffer.cut(chunk.clone(), &mut cuts);
        }
        let passed: usize = cuts
            .iter()
            .map(|c| match c {
                Cut::Unended(b) => b.len(),
                Cut::Event { whole, .. } => whole.len(),
            })
            .sum();
        assert!(passed > MAX_EVENT_BYTES, "held back {passed}");
        assert!(buffer.pending.len() <= MAX_EVENT_BYTES);
    }
}
