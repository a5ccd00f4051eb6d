//! SentencePiece vocabularies (`tokenizer.ggml.model = llama`: Llama 1/2, Mistral v0.1) as a
//! `tokenizers` BPE model, the way Hugging Face converts them: merges derived from the scores
//! (a pair's priority is its merged piece's score), byte fallback to `<0xNN>` tokens, spaces
//! written as `▁` and one prepended to each stretch of text.

use tokenizers::models::bpe::{BPE, Merges};
use tokenizers::normalizers::{Prepend, Replace, Sequence};

use super::Error;
use super::bpe::{Encoders, vocab};
use super::spec::{TokenType, TokenizerSpec};

/// SentencePiece's word-boundary mark, standing for a space.
pub const SPACE_MARK: char = '\u{2581}';

/// Builds the encoders for a `llama`-type (SentencePiece) spec.
pub fn build(spec: &TokenizerSpec) -> Result<Encoders, Error> {
    if spec.scores.len() != spec.tokens.len() {
        let (scores, tokens) = (spec.scores.len(), spec.tokens.len());
        return Err(Error::InvalidVocab(format!(
            "a llama (SentencePiece) tokenizer needs tokenizer.ggml.scores for every token: {scores} scores for {tokens} tokens"
        )));
    }
    let vocab = vocab(spec);
    let merges = merges_from_scores(spec, &vocab);
    let mut builder = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .byte_fallback(true)
        .fuse_unk(true);
    let unk = (0..spec.tokens.len()).find(|&id| spec.token_type(id) == TokenType::Unknown);
    if let Some(unk) = unk {
        builder = builder.unk_token(spec.tokens[unk].clone());
    }
    let bpe = builder
        .build()
        .map_err(|e| Error::InvalidVocab(format!("SentencePiece merges: {e}")))?;
    let mut tokenizer = tokenizers::Tokenizer::new(bpe);
    let mark = SPACE_MARK.to_string();
    let replace = Replace::new(" ", mark.as_str())
        .map_err(|e| Error::Build(format!("space normaliser: {e}")))?;
    let normalizer = if spec.add_space_prefix.unwrap_or(true) {
        Sequence::new(vec![Prepend::new(mark).into(), replace.into()])
    } else {
        Sequence::new(vec![replace.into()])
    };
    tokenizer.with_normalizer(Some(normalizer));
    Ok(Encoders::new(tokenizer, spec, true))
}

/// Every split of a text piece into two pieces of the vocabulary is a merge; merges rank by the
/// merged piece's score, highest first (ties: by the halves' ids), as in Hugging Face's
/// `SentencePieceExtractor` and llama.cpp's SPM tokenizer.
fn merges_from_scores(spec: &TokenizerSpec, vocab: &tokenizers::models::bpe::Vocab) -> Merges {
    let mut ranked: Vec<(f32, u32, u32, String, String)> = Vec::new();
    for (id, piece) in spec.tokens.iter().enumerate() {
        if !matches!(
            spec.token_type(id),
            TokenType::Normal | TokenType::UserDefined
        ) {
            continue;
        }
        for (at, _) in piece.char_indices().skip(1) {
            let (left, right) = piece.split_at(at);
            if let (Some(&l), Some(&r)) = (vocab.get(left), vocab.get(right)) {
                ranked.push((spec.scores[id], l, r, left.to_string(), right.to_string()));
            }
        }
    }
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    ranked.into_iter().map(|(_, _, _, l, r)| (l, r)).collect()
}

/// The bytes a SentencePiece token stands for: `▁` is a space, `<0xNN>` is one raw byte.
pub fn piece_bytes(piece: &str, ty: TokenType) -> Vec<u8> {
    match ty {
        TokenType::Byte => byte_token(piece).map_or_else(|| piece.as_bytes().to_vec(), |b| vec![b]),
        TokenType::Control => piece.as_bytes().to_vec(),
        TokenType::Unused => Vec::new(),
        // llama.cpp shows the unknown token as a block character.
        TokenType::Unknown => "\u{2585}".as_bytes().to_vec(),
        TokenType::Normal | TokenType::UserDefined => piece.replace(SPACE_MARK, " ").into_bytes(),
    }
}

fn byte_token(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    u8::from_str_radix(hex, 16).ok()
}
