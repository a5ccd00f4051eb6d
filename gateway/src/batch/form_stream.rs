//! The incremental `multipart/form-data` parser under `POST /v1/files`: fed the body frame by
//! frame, it hands the file part on in pieces, so an upload is never held whole in memory.
//!
//! It keeps at most one frame plus a delimiter's length, and a part's headers (16 KiB) or a
//! text field (`MAX_FIELD_BYTES`). The grammar and its errors are `multipart`'s.

use bytes::{Buf, Bytes, BytesMut};

use super::multipart::{
    MAX_PART_HEADER_BYTES, MAX_PARTS, MultipartError, PartHeaders, boundary, find,
};

/// The largest text field (`purpose` and the like are a few bytes).
pub const MAX_FIELD_BYTES: usize = 64 << 10;

/// What a fed frame brought.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A whole text field, `(name, value)`.
    Field(String, String),
    /// The file part begins.
    FileStart {
        /// The form field name.
        field: String,
        /// The client's file name, informational only.
        filename: Option<String>,
    },
    /// The next bytes of the file.
    FileData(Bytes),
    /// The file part ended.
    FileEnd,
}

/// Where the parser is in the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the first delimiter; `first`: nothing looked at yet (it may open the body).
    Preamble { first: bool },
    /// Just after a delimiter: the close (`--`) or a line break and a part.
    AfterDelimiter,
    /// In a part's headers.
    Headers,
    /// In a text field's value.
    Field,
    /// In the file's bytes.
    File,
    /// After the closing delimiter: ignored.
    Epilogue,
}

/// The parser; feed it frames in order, then `finish`.
#[derive(Debug)]
pub struct FormStream {
    boundary: String,
    /// CRLF `--` boundary.
    delimiter: Vec<u8>,
    buf: BytesMut,
    state: State,
    part: usize,
    field: Option<(String, Vec<u8>)>,
    file: Option<String>,
    bare_lf: bool,
}

impl FormStream {
    /// A parser for the body `content_type` announces.
    pub fn new(content_type: &str) -> Result<Self, MultipartError> {
        let boundary = boundary(content_type)?;
        Ok(Self {
            delimiter: [b"\r\n--", boundary.as_bytes()].concat(),
            boundary,
            buf: BytesMut::new(),
            state: State::Preamble { first: true },
            part: 0,
            field: None,
            file: None,
            bare_lf: false,
        })
    }

    /// Reads `chunk`, the body's next bytes, into `events`.
    pub fn feed(&mut self, chunk: &[u8], events: &mut Vec<Event>) -> Result<(), MultipartError> {
        self.buf.extend_from_slice(chunk);
        while self.step(events)? {}
        Ok(())
    }

    /// The body ended: fine only after the closing delimiter.
    pub fn finish(&self) -> Result<(), MultipartError> {
        match self.state {
            State::Epilogue => Ok(()),
            State::Preamble { .. } if self.bare_lf => Err(MultipartError::BareLineFeed),
            State::Preamble { .. } => Err(MultipartError::MissingOpeningBoundary(
                self.boundary.clone(),
            )),
            _ => Err(MultipartError::MissingClosingBoundary(
                self.boundary.clone(),
            )),
        }
    }

    /// One step; `false` when more bytes are needed.
    fn step(&mut self, events: &mut Vec<Event>) -> Result<bool, MultipartError> {
        match self.state {
            State::Preamble { first } => Ok(self.preamble(first)),
            State::AfterDelimiter => self.after_delimiter(),
            State::Headers => self.headers(events),
            State::Field | State::File => self.content(events),
            State::Epilogue => {
                self.buf.clear();
                Ok(false)
            }
        }
    }

    fn preamble(&mut self, first: bool) -> bool {
        let opening = &self.delimiter[2..];
        if first {
            if self.buf.len() < opening.len() && opening.starts_with(&self.buf) {
                return false;
            }
            if self.buf.starts_with(opening) {
                self.buf.advance(opening.len());
                self.state = State::AfterDelimiter;
                return true;
            }
            self.state = State::Preamble { first: false };
        }
        if let Some(at) = find(&self.buf, &self.delimiter) {
            self.buf.advance(at + self.delimiter.len());
            self.state = State::AfterDelimiter;
            return true;
        }
        let bare = [b"\n--", self.boundary.as_bytes()].concat();
        self.bare_lf |= find(&self.buf, &bare).is_some();
        self.keep_tail();
        false
    }

    /// Drops what cannot hold the start of a delimiter.
    fn keep_tail(&mut self) {
        let keep = self.delimiter.len() - 1;
        if self.buf.len() > keep {
            self.buf.advance(self.buf.len() - keep);
        }
    }

    fn after_delimiter(&mut self) -> Result<bool, MultipartError> {
        if self.buf.starts_with(b"--") {
            self.state = State::Epilogue;
            return Ok(true);
        }
        // Transport padding before the line break.
        let padded = self.buf.iter().take_while(|&&b| b == b' ' || b == b'\t');
        let padded = padded.count();
        self.buf.advance(padded);
        if self.buf.starts_with(b"\r\n") {
            self.buf.advance(2);
            self.part += 1;
            if self.part > MAX_PARTS {
                return Err(MultipartError::TooManyParts);
            }
            self.state = State::Headers;
            Ok(true)
        } else if self.buf.starts_with(b"\n") {
            Err(MultipartError::BareLineFeed)
        } else if self.buf.is_empty() || &self.buf[..] == b"\r" || &self.buf[..] == b"-" {
            Ok(false)
        } else {
            Err(self.malformed("the boundary line before it has text after the boundary"))
        }
    }

    fn malformed(&self, reason: &str) -> MultipartError {
        MultipartError::MalformedPartHeaders {
            part: self.part,
            reason: reason.to_string(),
        }
    }

    fn headers(&mut self, events: &mut Vec<Event>) -> Result<bool, MultipartError> {
        let (head_len, skip) = if self.buf.starts_with(b"\r\n") {
            (0, 2)
        } else {
            let searched = &self.buf[..self.buf.len().min(MAX_PART_HEADER_BYTES + 4)];
            let end = find(searched, b"\r\n\r\n");
            let delimiter = find(searched, &self.delimiter);
            match (end, delimiter) {
                (Some(end), None) => (end, end + 4),
                (Some(end), Some(at)) if end < at => (end, end + 4),
                (None, None) if searched.len() < MAX_PART_HEADER_BYTES + 4 => return Ok(false),
                _ => {
                    return Err(self.malformed(
                        "they do not end with a blank line within 16 KiB (or the part is cut short)",
                    ));
                }
            }
        };
        let headers = PartHeaders::read(&self.buf[..head_len]).map_err(|r| self.malformed(&r))?;
        self.buf.advance(skip);
        let is_file = headers.filename.is_some() || headers.name == "file";
        if !is_file {
            self.field = Some((headers.name, Vec::new()));
            self.state = State::Field;
            return Ok(true);
        }
        if let Some(first) = &self.file {
            return Err(MultipartError::MoreThanOneFile {
                first: first.clone(),
                second: headers.name,
            });
        }
        self.file = Some(headers.name.clone());
        events.push(Event::FileStart {
            field: headers.name,
            filename: headers.filename,
        });
        self.state = State::File;
        Ok(true)
    }

    /// A part's content up to the next delimiter.
    fn content(&mut self, events: &mut Vec<Event>) -> Result<bool, MultipartError> {
        let found = find(&self.buf, &self.delimiter);
        let take = match found {
            Some(at) => at,
            None => self.buf.len().saturating_sub(self.delimiter.len() - 1),
        };
        let piece = self.buf.split_to(take).freeze();
        if self.state == State::File {
            if !piece.is_empty() {
                events.push(Event::FileData(piece));
            }
        } else if let Some((name, value)) = &mut self.field {
            if value.len() + piece.len() > MAX_FIELD_BYTES {
                return Err(MultipartError::FieldTooLarge(name.clone()));
            }
            value.extend_from_slice(&piece);
        }
        if found.is_none() {
            return Ok(false);
        }
        self.buf.advance(self.delimiter.len());
        if self.state == State::File {
            events.push(Event::FileEnd);
        } else if let Some((name, value)) = self.field.take() {
            let value = String::from_utf8(value)
                .map_err(|_| MultipartError::TextFieldNotUtf8(name.clone()))?;
            events.push(Event::Field(name, value));
        }
        self.state = State::AfterDelimiter;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CT: &str = "multipart/form-data; boundary=xyz";

    fn body(file: &[u8]) -> Vec<u8> {
        [
            &b"--xyz\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n"[..],
            b"--xyz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.jsonl\"\r\n\r\n",
            file,
            b"\r\n--xyz--\r\n",
        ]
        .concat()
    }

    /// The events of `body` fed in pieces of `size`, the file's data joined.
    fn events_in_pieces(body: &[u8], size: usize) -> Result<Vec<Event>, MultipartError> {
        let mut stream = FormStream::new(CT)?;
        let mut events = Vec::new();
        for piece in body.chunks(size) {
            stream.feed(piece, &mut events)?;
        }
        stream.finish()?;
        let mut joined: Vec<Event> = Vec::new();
        for event in events {
            match (joined.last_mut(), event) {
                (Some(Event::FileData(before)), Event::FileData(more)) => {
                    *before = [&before[..], &more[..]].concat().into();
                }
                (_, event) => joined.push(event),
            }
        }
        Ok(joined)
    }

    #[test]
    fn any_split_of_the_body_gives_the_same_form() {
        let file = b"{\"custom_id\":\"a\"}\r\n--xy\r\n-\r\n--xyZ is not the delimiter\n";
        let body = body(file);
        let whole = events_in_pieces(&body, body.len()).expect("parses");
        assert_eq!(
            whole,
            vec![
                Event::Field("purpose".into(), "batch".into()),
                Event::FileStart {
                    field: "file".into(),
                    filename: Some("a.jsonl".into())
                },
                Event::FileData(Bytes::copy_from_slice(file)),
                Event::FileEnd,
            ]
        );
        for size in 1..body.len() {
            assert_eq!(
                events_in_pieces(&body, size).as_ref(),
                Ok(&whole),
                "pieces of {size}"
            );
        }
    }

    #[test]
    fn the_file_leaves_the_parser_as_it_arrives() {
        let file = vec![b'x'; 100_000];
        let body = body(&file);
        let mut stream = FormStream::new(CT).expect("boundary");
        let mut events = Vec::new();
        let mut most = 0;
        for piece in body.chunks(4096) {
            stream.feed(piece, &mut events).expect("parses");
            most = most.max(stream.buf.len());
        }
        stream.finish().expect("closed");
        // Never more than a frame and a delimiter held.
        assert!(most <= 4096 + 8, "held {most} bytes");
        let data: usize = events
            .iter()
            .map(|e| match e {
                Event::FileData(d) => d.len(),
                _ => 0,
            })
            .sum();
        assert_eq!(data, file.len());
    }

    #[test]
    fn a_long_text_field_is_refused() {
        let value = "v".repeat(MAX_FIELD_BYTES + 100);
        let body = format!("--xyz\r\nContent-Disposition: form-data; name=\"note\"\r\n\r\n{value}");
        let mut stream = FormStream::new(CT).expect("boundary");
        let result = stream.feed(body.as_bytes(), &mut Vec::new());
        assert_eq!(result, Err(MultipartError::FieldTooLarge("note".into())));
    }
}
