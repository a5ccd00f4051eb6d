//! Incremental detokenisation: token ids in, text deltas out, never splitting a UTF-8 character
//! across two deltas (byte-level tokens often carry half a character: emoji, CJK).

use super::{Error, Tokenizer};

/// Turns a stream of token ids into text deltas. Holds at most the 3 bytes of an unfinished
/// character; bytes that can never form a character come out as U+FFFD.
#[derive(Debug, Clone, Default)]
pub struct IncrementalDecoder {
    skip_special_tokens: bool,
    /// Bytes of a character whose remaining bytes have not arrived yet.
    pending: Vec<u8>,
}

impl IncrementalDecoder {
    /// A decoder; with `skip_special_tokens`, control tokens produce no text.
    pub fn new(skip_special_tokens: bool) -> Self {
        Self {
            skip_special_tokens,
            pending: Vec::new(),
        }
    }

    /// Adds token `id` and returns the text that is now complete (possibly empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> Result<String, Error> {
        if self.skip_special_tokens && tokenizer.is_special(id) {
            return Ok(String::new());
        }
        let bytes = tokenizer.token_bytes(id).ok_or(Error::UnknownTokenId {
            id,
            vocab_size: tokenizer.vocab_size(),
        })?;
        self.pending.extend_from_slice(bytes);
        Ok(self.take_complete())
    }

    /// Ends the stream: bytes of an unfinished character come out as U+FFFD.
    pub fn finish(&mut self) -> String {
        let text = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        text
    }

    /// Whether bytes of an unfinished character are held.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Removes and returns the longest prefix of `pending` that is complete text.
    fn take_complete(&mut self) -> String {
        let mut out = String::new();
        let mut start = 0;
        loop {
            match std::str::from_utf8(&self.pending[start..]) {
                Ok(text) => {
                    out.push_str(text);
                    start = self.pending.len();
                    break;
                }
                Err(e) => {
                    let valid_end = start + e.valid_up_to();
                    // Only the slice checked valid is pushed; from_utf8 cannot fail on it.
                    out.push_str(&String::from_utf8_lossy(&self.pending[start..valid_end]));
                    match e.error_len() {
                        // The tail may still become a character: keep it for the next token.
                        None => {
                            start = valid_end;
                            break;
                        }
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            start = valid_end + bad;
                        }
                    }
                }
            }
        }
        self.pending.drain(..start);
        out
    }
}
