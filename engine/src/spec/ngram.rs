//! Prompt-lookup drafting: the tokens that followed the latest earlier occurrence of the
//! sequence's last n tokens, longest n first. Pure.

/// Up to `k` draft tokens for `tokens` (prompt and output so far), from the longest suffix of
/// `max_n` down to `min_n` tokens that occurred before; empty when none did.
pub fn propose(tokens: &[u32], min_n: usize, max_n: usize, k: usize) -> Vec<u32> {
    if k == 0 || min_n == 0 {
        return Vec::new();
    }
    for n in (min_n..=max_n).rev() {
        if tokens.len() <= n {
            continue;
        }
        let suffix = &tokens[tokens.len() - n..];
        // Latest start first: the most recent context is the likeliest to repeat; the suffix
        // itself (start `len - n`) is excluded, since nothing follows it yet.
        let found = (0..tokens.len() - n)
            .rev()
            .find(|&start| &tokens[start..start + n] == suffix);
        if let Some(start) = found {
            let from = start + n;
            let to = (from + k).min(tokens.len());
            return tokens[from..to].to_vec();
        }
    }
    Vec::new()
}
