//! The sim backend's vocabulary and output: the 256 byte tokens of a byte-level BPE with no
//! merges, plus the ChatML control tokens; outputs are lower-case letters picked by position,
//! never a control token, so a request ends only at `max_tokens` (or a stop string).

use crate::tokenizer::{TokenType, TokenizerSpec};

/// Control tokens after the 256 byte tokens: ids 256, 257, 258.
const CONTROL: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
/// `<|im_end|>`: the end-of-turn (EOS) token.
const EOS_ID: u32 = 258;
/// ChatML, as SmolLM2's template renders it, so chats through the sim backend look real.
const CHAT_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// The sim vocabulary.
#[derive(Debug, Clone, Copy, Default)]
pub struct SimVocab;

impl SimVocab {
    /// The one sim vocabulary.
    pub fn new() -> Self {
        Self
    }

    /// Tokens in the vocabulary.
    pub fn size(&self) -> usize {
        256 + CONTROL.len()
    }

    /// A tokenizer spec for it (GPT-2 byte-level, no merges: one token per byte).
    pub fn tokenizer_spec(&self) -> TokenizerSpec {
        let mut tokens = byte_alphabet();
        tokens.extend(CONTROL.iter().map(|t| t.to_string()));
        let mut token_types = vec![TokenType::Normal; 256];
        token_types.extend([TokenType::Control; CONTROL.len()]);
        TokenizerSpec {
            model: "gpt2".into(),
            pre: Some("gpt2".into()),
            tokens,
            token_types,
            eos_token_id: Some(EOS_ID),
            add_bos: Some(false),
            chat_template: Some(CHAT_TEMPLATE.into()),
            ..TokenizerSpec::default()
        }
    }
}

/// The token the sim backend emits at sequence position `pos`: a letter `a`–`z` (byte token
/// ids 97–122) from a hash of the position, so outputs are deterministic and never EOS.
pub fn token_at(pos: usize) -> u32 {
    // SplitMix64's finaliser: neighbouring positions give unrelated letters.
    let mut x = (pos as u64).wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    u32::from(b'a') + (x % 26) as u32
}

/// GPT-2's `bytes_to_unicode`: byte `b` is the token whose text is this character.
fn byte_alphabet() -> Vec<String> {
    let printable =
        |b: u32| (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
    let mut shifted = 0;
    (0..256u32)
        .map(|b| {
            let c = if printable(b) {
                b
            } else {
                shifted += 1;
                255 + shifted
            };
            char::from_u32(c).map(String::from).unwrap_or_default()
        })
        .collect()
}
