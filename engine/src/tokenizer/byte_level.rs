//! GPT-2's byte-level alphabet: every byte maps to a printable character so that BPE works on
//! text; decoding maps the characters of a token back to its bytes.

use std::collections::HashMap;

/// The character GPT-2 uses for each byte (`bytes_to_unicode` in OpenAI's encoder.py):
/// printable Latin-1 bytes stand for themselves, the others are shifted to U+0100 and up.
pub fn byte_to_char() -> [char; 256] {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut table = ['\0'; 256];
    let mut shifted = 0u32;
    for b in 0..=255u8 {
        table[b as usize] = if printable(b) {
            char::from(b)
        } else {
            shifted += 1;
            // 256 + n is always a valid scalar value (well below the surrogate range).
            char::from_u32(255 + shifted).unwrap_or(char::REPLACEMENT_CHARACTER)
        };
    }
    table
}

/// The inverse of [`byte_to_char`].
pub fn char_to_byte() -> HashMap<char, u8> {
    byte_to_char()
        .iter()
        .enumerate()
        .map(|(b, &c)| (c, b as u8))
        .collect()
}

/// The bytes a byte-level token stands for. A character outside the alphabet (a malformed
/// vocabulary) is kept as its own UTF-8 rather than dropped.
pub fn token_to_bytes(token: &str, map: &HashMap<char, u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(token.len());
    for c in token.chars() {
        match map.get(&c) {
            Some(&b) => out.push(b),
            None => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_alphabet_is_a_bijection_with_gpt2s_known_points() {
        let table = byte_to_char();
        assert_eq!(table[b' ' as usize], 'Ġ');
        assert_eq!(table[b'\n' as usize], 'Ċ');
        assert_eq!(table[b'a' as usize], 'a');
        assert_eq!(char_to_byte().len(), 256);
        let map = char_to_byte();
        assert_eq!(token_to_bytes("ĠHello", &map), b" Hello");
    }
}
