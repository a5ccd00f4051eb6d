//! Verifying a draft against the rows of one forward: the token-by-token loop shared by the
//! engine and the tests. Pure: the caller's closure samples a row (and delivers the token).

/// Samples rows `0..=draft.len()` in order through `sample_row(i)`, which returns the token it
/// chose and whether the sequence stopped on it (EOS, length, a gone client). Row `i` follows
/// the draft's first `i` tokens, so it is sampled only while every earlier row chose its draft
/// token; the last row (after the whole draft) gives a bonus token. Returns the tokens chosen,
/// in order: the accepted draft tokens, then the correction or bonus (unless it stopped).
pub fn verify<E>(
    draft: &[u32],
    mut sample_row: impl FnMut(usize) -> Result<(u32, bool), E>,
) -> Result<Vec<u32>, E> {
    let mut chosen = Vec::with_capacity(draft.len() + 1);
    for i in 0..=draft.len() {
        let (token, stopped) = sample_row(i)?;
        chosen.push(token);
        if stopped || draft.get(i) != Some(&token) {
            break;
        }
    }
    Ok(chosen)
}

/// How many leading draft tokens `chosen` kept.
pub fn accepted(draft: &[u32], chosen: &[u32]) -> usize {
    draft.iter().zip(chosen).take_while(|(d, c)| d == c).count()
}
