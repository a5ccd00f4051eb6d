//! The `multipart/form-data` grammar (RFC 7578) of `POST /v1/files`: a few text fields and at
//! most one file. `FormStream` parses it incrementally; `parse` is that parser over a whole
//! body.
//!
//! Only what OpenAI clients send is accepted: CRLF line endings, one `Content-Disposition:
//! form-data` per part, no nested multipart.

pub use super::form_stream::{Event, FormStream};

/// A parsed form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Form {
    /// Text fields, `(name, value)`, in body order (a name may repeat).
    pub fields: Vec<(String, String)>,
    /// The one file part, if any.
    pub file: Option<FilePart>,
}

/// The file part of a form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePart {
    /// The form field name (`file` for OpenAI's API).
    pub field: String,
    /// The client's file name, informational only.
    pub filename: Option<String>,
    /// The file's bytes.
    pub bytes: Vec<u8>,
}

/// Why a body is not a form this parser accepts.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MultipartError {
    /// The request's `Content-Type` is something else.
    #[error("Content-Type must be multipart/form-data, got `{0}`.")]
    NotFormData(String),
    /// The `Content-Type`'s parameters cannot be read.
    #[error("The Content-Type `{0}` has malformed parameters: {1}.")]
    MalformedContentType(String, String),
    /// The `Content-Type` names no boundary.
    #[error("The multipart/form-data Content-Type has no `boundary` parameter.")]
    NoBoundary,
    /// The boundary is empty, too long or holds characters it may not.
    #[error(
        "The multipart boundary `{0}` is invalid: it must be 1 to 70 printable ASCII characters."
    )]
    InvalidBoundary(String),
    /// The body does not contain its first delimiter.
    #[error("The body does not contain the multipart boundary `--{0}` its Content-Type names.")]
    MissingOpeningBoundary(String),
    /// The body's lines end with LF alone.
    #[error("Multipart lines must end with CRLF (\\r\\n); this body uses bare LF.")]
    BareLineFeed,
    /// A part's headers cannot be read.
    #[error("Part {part} of the form has malformed headers: {reason}.")]
    MalformedPartHeaders {
        /// The part, 1-based.
        part: usize,
        /// What is wrong.
        reason: String,
    },
    /// The body ends before the closing delimiter: usually a truncated upload.
    #[error("The body ends before the closing multipart boundary `--{0}--`: truncated upload?")]
    MissingClosingBoundary(String),
    /// Two parts carry files.
    #[error("The form has more than one file (fields `{first}` and `{second}`); send one.")]
    MoreThanOneFile {
        /// The first file's field name.
        first: String,
        /// The second file's field name.
        second: String,
    },
    /// A text field's value is not UTF-8.
    #[error("Form field `{0}` is not valid UTF-8.")]
    TextFieldNotUtf8(String),
    /// A text field is longer than `MAX_FIELD_BYTES`.
    #[error("Form field `{0}` is longer than 64 KiB.")]
    FieldTooLarge(String),
    /// The form has more parts than [`MAX_PARTS`].
    #[error("The form has more than {MAX_PARTS} parts.")]
    TooManyParts,
}

/// The most parts a form may have: OpenAI's upload has two.
pub const MAX_PARTS: usize = 16;

/// The most bytes of headers one part may have.
pub(crate) const MAX_PART_HEADER_BYTES: usize = 16 << 10;

/// The boundary named by a `multipart/form-data` `Content-Type` (quoted or not).
pub fn boundary(content_type: &str) -> Result<String, MultipartError> {
    let (mime, params) = content_type.split_once(';').unwrap_or((content_type, ""));
    if !mime.trim().eq_ignore_ascii_case("multipart/form-data") {
        return Err(MultipartError::NotFormData(content_type.to_string()));
    }
    let params = parameters(params)
        .map_err(|reason| MultipartError::MalformedContentType(content_type.to_string(), reason))?;
    let boundary = params
        .into_iter()
        .find(|(name, _)| name == "boundary")
        .map(|(_, value)| value)
        .ok_or(MultipartError::NoBoundary)?;
    // RFC 2046 §5.1.1: 1 to 70 characters. No control characters means no CR, which keeps
    // the delimiter search linear (see `find`).
    let printable = boundary.bytes().all(|b| (b' '..=b'~').contains(&b));
    if boundary.is_empty() || boundary.len() > 70 || !printable {
        return Err(MultipartError::InvalidBoundary(boundary));
    }
    Ok(boundary)
}

/// Parses a whole `body` as the form its `content_type` announces (the file copied out);
/// uploads go through [`FormStream`] frame by frame, and this is that parser fed once.
pub fn parse(content_type: &str, body: &[u8]) -> Result<Form, MultipartError> {
    let mut stream = FormStream::new(content_type)?;
    let mut events = Vec::new();
    stream.feed(body, &mut events)?;
    stream.finish()?;
    Ok(Form::from_events(events))
}

impl Form {
    /// The form a parser's events describe, the file's pieces joined.
    pub fn from_events(events: Vec<Event>) -> Self {
        let mut form = Form {
            fields: Vec::new(),
            file: None,
        };
        for event in events {
            match event {
                Event::Field(name, value) => form.fields.push((name, value)),
                Event::FileStart { field, filename } => {
                    form.file = Some(FilePart {
                        field,
                        filename,
                        bytes: Vec::new(),
                    });
                }
                Event::FileData(data) => {
                    if let Some(file) = &mut form.file {
                        file.bytes.extend_from_slice(&data);
                    }
                }
                Event::FileEnd => {}
            }
        }
        form
    }
}

/// The headers of one part that the form needs.
pub(crate) struct PartHeaders {
    pub(crate) name: String,
    pub(crate) filename: Option<String>,
}

impl PartHeaders {
    /// Reads CRLF-separated `Name: value` lines; names are case-insensitive, unknown ones
    /// ignored. A part without a file name counts as the file when its field is `file`: that
    /// is OpenAI's field, and the name is only informational.
    pub(crate) fn read(head: &[u8]) -> Result<Self, String> {
        // Lossy: a non-UTF-8 byte can only sit in a file name, which is informational.
        let head = String::from_utf8_lossy(head);
        let (mut disposition, mut content_type) = (None, None);
        for line in head.split("\r\n").filter(|line| !line.is_empty()) {
            if line.starts_with([' ', '\t']) {
                return Err("folded (continued) header lines are not supported".into());
            }
            let (name, value) = line
                .split_once(':')
                .ok_or_else(|| format!("the header line `{}` has no `:`", shorten(line)))?;
            let slot = if name.trim().eq_ignore_ascii_case("content-disposition") {
                &mut disposition
            } else if name.trim().eq_ignore_ascii_case("content-type") {
                &mut content_type
            } else {
                continue;
            };
            if slot.replace(value.trim().to_string()).is_some() {
                return Err(format!("the header `{}` appears twice", name.trim()));
            }
        }
        let disposition = disposition.ok_or("there is no Content-Disposition header")?;
        let (kind, params) = disposition
            .split_once(';')
            .unwrap_or((disposition.as_str(), ""));
        if !kind.trim().eq_ignore_ascii_case("form-data") {
            return Err(format!(
                "Content-Disposition must be `form-data`, got `{}`",
                shorten(kind.trim())
            ));
        }
        let params = parameters(params)?;
        let param = |wanted: &str| params.iter().find(|(n, _)| n == wanted).map(|(_, v)| v);
        let name = param("name").ok_or("Content-Disposition has no `name`")?;
        // The plain `filename` wins; `filename*` (RFC 5987) only stands in for a missing one.
        let filename = match (param("filename"), param("filename*")) {
            (Some(plain), _) => Some(plain.clone()),
            (None, Some(extended)) => Some(decode_extended(extended)),
            (None, None) => None,
        };
        Ok(Self {
            name: name.clone(),
            filename,
        })
    }
}

/// The `; name=value` parameters after a header's first token, names lowercased; a value is
/// a token or a quoted string whose backslash escapes are undone.
fn parameters(mut s: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    loop {
        s = s.trim_start();
        if s.is_empty() {
            return Ok(out);
        }
        if !out.is_empty() || s.starts_with(';') {
            s = s
                .strip_prefix(';')
                .ok_or("parameters must be separated by `;`")?
                .trim_start();
        }
        if s.is_empty() {
            return Ok(out);
        }
        let (name, rest) = s.split_once('=').ok_or("a parameter has no `=`")?;
        let rest = rest.trim_start();
        let value = if let Some(quoted) = rest.strip_prefix('"') {
            let (value, after) = unquote(quoted)?;
            s = after;
            value
        } else {
            let end = rest.find(';').unwrap_or(rest.len());
            s = &rest[end..];
            rest[..end].trim_end().to_string()
        };
        out.push((name.trim().to_ascii_lowercase(), value));
    }
}

/// The value of a quoted string whose opening quote is already consumed, and what follows
/// its closing quote.
fn unquote(s: &str) -> Result<(String, &str), String> {
    let mut value = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((value, &s[i + 1..])),
            '\\' => match chars.next() {
                Some((_, escaped)) => value.push(escaped),
                None => break,
            },
            c => value.push(c),
        }
    }
    Err("a quoted parameter value has no closing quote".into())
}

/// An RFC 5987 value (`UTF-8''name%20here`) decoded; kept as sent when it is not UTF-8
/// percent-encoding, since the name is only informational.
fn decode_extended(value: &str) -> String {
    let mut pieces = value.splitn(3, '\'');
    let (Some(charset), Some(_language), Some(encoded)) =
        (pieces.next(), pieces.next(), pieces.next())
    else {
        return value.to_string();
    };
    if !charset.eq_ignore_ascii_case("utf-8") {
        return value.to_string();
    }
    let mut bytes = Vec::with_capacity(encoded.len());
    let mut rest = encoded.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        // Two hex digits, checked first: `from_str_radix` would also take a sign.
        let hex = tail
            .get(..2)
            .filter(|h| h.iter().all(u8::is_ascii_hexdigit))
            .and_then(|h| std::str::from_utf8(h).ok());
        match (b, hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(decoded)) => {
                bytes.push(decoded);
                rest = &tail[2..];
            }
            _ => {
                bytes.push(b);
                rest = tail;
            }
        }
    }
    String::from_utf8(bytes).unwrap_or_else(|_| value.to_string())
}

/// At most 60 characters of `s`, for an error message.
fn shorten(s: &str) -> String {
    s.chars().take(60).collect()
}

/// The first position of `needle` (non-empty) in `haystack`. Linear for the needles used
/// here: each starts with a byte (`\r` or `-`) found nowhere else in it, so two candidate
/// matches never overlap and no byte is compared twice.
pub(crate) fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, tail) = needle.split_first()?;
    let mut from = 0;
    while let Some(offset) = haystack.get(from..)?.iter().position(|&b| b == first) {
        let at = from + offset;
        if haystack.get(at + 1..at + needle.len()) == Some(tail) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const CT: &str = "multipart/form-data; boundary=a3f1c2d4e5b6978812345678abcdef01";

    /// The body `httpx` writes for `files.create(file=open("batch.jsonl", "rb"),
    /// purpose="batch")`.
    fn httpx_body(file: &[u8]) -> Vec<u8> {
        let b = "a3f1c2d4e5b6978812345678abcdef01";
        [
            format!("--{b}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n")
                .as_bytes(),
            format!(
                "--{b}\r\nContent-Disposition: form-data; name=\"file\"; \
                 filename=\"batch.jsonl\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .as_bytes(),
            file,
            format!("\r\n--{b}--\r\n").as_bytes(),
        ]
        .concat()
    }

    #[test]
    fn reads_the_body_httpx_sends() {
        let file = b"{\"custom_id\":\"a\"}\r\n{\"custom_id\":\"b\"}\n";
        let body = httpx_body(file);
        let form = parse(CT, &body).expect("parses");
        assert_eq!(form.fields, vec![("purpose".into(), "batch".into())]);
        let part = form.file.expect("a file");
        assert_eq!(part.field, "file");
        assert_eq!(part.filename.as_deref(), Some("batch.jsonl"));
        assert_eq!(part.bytes, file);
    }

    #[test]
    fn boundary_may_be_quoted_and_parameters_reordered() {
        assert_eq!(
            boundary(r#"Multipart/Form-Data; charset=utf-8; boundary="x y""#),
            Ok("x y".into())
        );
        assert_eq!(
            boundary("multipart/form-data;boundary=abc"),
            Ok("abc".into())
        );
        let body = b"--q;q\r\nContent-Disposition: form-data; name=purpose\r\n\r\nbatch\r\n--q;q--";
        let form = parse(r#"multipart/form-data; boundary="q;q""#, body).expect("parses");
        assert_eq!(form.fields, vec![("purpose".into(), "batch".into())]);
        assert_eq!(form.file, None);
    }

    #[test]
    fn a_missing_or_bad_boundary_and_other_types_are_refused() {
        assert_eq!(
            boundary("application/json"),
            Err(MultipartError::NotFormData("application/json".into()))
        );
        assert_eq!(
            boundary("multipart/form-data"),
            Err(MultipartError::NoBoundary)
        );
        assert_eq!(
            boundary("multipart/form-data; charset=utf-8"),
            Err(MultipartError::NoBoundary)
        );
        assert_eq!(
            boundary("multipart/form-data; boundary=\"\""),
            Err(MultipartError::InvalidBoundary(String::new()))
        );
        let long = "b".repeat(71);
        assert_eq!(
            boundary(&format!("multipart/form-data; boundary={long}")),
            Err(MultipartError::InvalidBoundary(long))
        );
        let other = "multipart/form-data; boundary=zzz";
        assert_eq!(
            parse(other, &httpx_body(b"x")),
            Err(MultipartError::MissingOpeningBoundary("zzz".into()))
        );
    }

    #[test]
    fn truncated_bodies_are_refused_at_every_length() {
        let body = httpx_body(b"{\"a\":1}\n");
        let closing = body.len() - b"--\r\n".len();
        for end in 0..closing {
            let result = parse(CT, &body[..end]);
            assert!(
                result.is_err(),
                "a body cut at {end} bytes parsed: {result:?}"
            );
        }
        assert!(parse(CT, &body[..closing + 2]).is_ok());
        let cut = &body[..body.len() - 40];
        assert_eq!(
            parse(CT, cut),
            Err(MultipartError::MissingClosingBoundary(
                "a3f1c2d4e5b6978812345678abcdef01".into()
            ))
        );
    }

    #[test]
    fn preamble_and_epilogue_are_ignored() {
        let mut body = b"This is a preamble.\r\n".to_vec();
        body.extend(httpx_body(b"data"));
        body.extend(b"an epilogue, even with --a3f1c2d4e5b6978812345678abcdef01 in it");
        let form = parse(CT, &body).expect("parses");
        assert_eq!(form.file.map(|f| f.bytes), Some(b"data".to_vec()));
    }

    #[test]
    fn two_files_are_refused() {
        let b = "bb";
        let body = format!(
            "--{b}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nA\r\n\
             --{b}\r\nContent-Disposition: form-data; name=\"other\"; filename=\"b\"\r\n\r\nB\r\n--{b}--"
        );
        assert_eq!(
            parse("multipart/form-data; boundary=bb", body.as_bytes()),
            Err(MultipartError::MoreThanOneFile {
                first: "file".into(),
                second: "other".into()
            })
        );
    }

    #[test]
    fn bare_lf_bodies_are_refused_clearly() {
        let body = httpx_body(b"x")
            .iter()
            .filter(|&&b| b != b'\r')
            .copied()
            .collect::<Vec<_>>();
        assert_eq!(parse(CT, &body), Err(MultipartError::BareLineFeed));
    }

    #[test]
    fn file_names_unescape_and_the_plain_one_wins_over_the_extended_one() {
        let part = |disposition: &str| {
            let body = format!("--b\r\nContent-Disposition: {disposition}\r\n\r\nX\r\n--b--\r\n");
            let ct = "multipart/form-data; boundary=b";
            parse(ct, body.as_bytes()).map(|f| f.file.and_then(|f| f.filename))
        };
        assert_eq!(
            part(r#"form-data; name="file"; filename="a \"b\".jsonl""#),
            Ok(Some(r#"a "b".jsonl"#.into()))
        );
        assert_eq!(
            part(r#"form-data; name="file"; filename*=UTF-8''%C3%A9.jsonl; filename="e.jsonl""#),
            Ok(Some("e.jsonl".into()))
        );
        assert_eq!(
            part(r#"form-data; name="file"; filename*=UTF-8''%C3%A9.jsonl"#),
            Ok(Some("é.jsonl".into()))
        );
        assert_eq!(
            part(r#"FORM-DATA; NAME="file""#),
            Ok(None),
            "the `file` field is a file without a name"
        );
        assert!(matches!(
            part("attachment; name=\"file\""),
            Err(MultipartError::MalformedPartHeaders { part: 1, .. })
        ));
        assert!(matches!(
            part(r#"form-data; filename="a""#),
            Err(MultipartError::MalformedPartHeaders { .. })
        ));
        assert!(matches!(
            part(r#"form-data; name="file"; filename="a"#),
            Err(MultipartError::MalformedPartHeaders { .. })
        ));
    }

    #[test]
    fn malformed_headers_name_the_part() {
        let ct = "multipart/form-data; boundary=b";
        let no_colon = b"--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--b\r\nbroken\r\n\r\n2\r\n--b--";
        assert!(matches!(
            parse(ct, no_colon),
            Err(MultipartError::MalformedPartHeaders { part: 2, .. })
        ));
        let no_disposition = b"--b\r\nContent-Type: text/plain\r\n\r\n1\r\n--b--";
        assert!(matches!(
            parse(ct, no_disposition),
            Err(MultipartError::MalformedPartHeaders { part: 1, .. })
        ));
        let no_headers = b"--b\r\n\r\n1\r\n--b--";
        assert!(matches!(
            parse(ct, no_headers),
            Err(MultipartError::MalformedPartHeaders { part: 1, .. })
        ));
    }

    #[test]
    fn text_fields_must_be_utf8_and_parts_are_capped() {
        let ct = "multipart/form-data; boundary=b";
        let latin1 =
            b"--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n\xe9\r\n--b--";
        assert_eq!(
            parse(ct, latin1),
            Err(MultipartError::TextFieldNotUtf8("purpose".into()))
        );
        let field = "--b\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\nv\r\n";
        let at_cap = format!("{}--b--", field.repeat(MAX_PARTS));
        assert_eq!(
            parse(ct, at_cap.as_bytes()).map(|f| f.fields.len()),
            Ok(MAX_PARTS)
        );
        let over = format!("{}--b--", field.repeat(MAX_PARTS + 1));
        assert_eq!(
            parse(ct, over.as_bytes()),
            Err(MultipartError::TooManyParts)
        );
    }

    #[test]
    fn an_empty_form_and_an_empty_file_parse() {
        assert_eq!(
            parse("multipart/form-data; boundary=b", b"--b--\r\n").map(|f| f.fields),
            Ok(vec![])
        );
        let body = httpx_body(b"");
        let form = parse(CT, &body).expect("parses");
        assert_eq!(form.file.map(|f| f.bytes.len()), Some(0));
    }
}
