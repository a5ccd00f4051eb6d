//! Prompt-lookup drafting: the tokens that followed the latest earlier occurrence of the
//! sequence's longest suffix that occurred before (up to `max_n` tokens), continued
//! periodically past the end. Pure.

/// A proposal: the draft and the length of the suffix it matched (longer matches are kept
/// far more often: on the quotes task 19% of 1-token matches' first tokens against all of
/// the 4-token ones', so acceptance is learnt per match length).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lookup {
    pub n: usize,
    pub tokens: Vec<u32>,
}

/// Up to `k` draft tokens for `tokens` (prompt and output so far), from the longest suffix of
/// `max_n` down to `min_n` tokens that occurred before; empty when none did. A match `p`
/// tokens back that runs into the end is a loop of period `p`: the draft goes on repeating
/// it (`"son's son's"` drafts `k` tokens, not the 2 that follow the match).
pub fn propose(tokens: &[u32], min_n: usize, max_n: usize, k: usize) -> Vec<u32> {
    lookup(tokens, min_n, max_n, k).map_or_else(Vec::new, |found| found.tokens)
}

/// [`propose`] with the length of the suffix matched; `None` when none did.
///
/// One pass over the sequence: at each earlier position holding the last token, the match
/// is extended backwards (up to `max_n`), and the longest wins, the latest among equals (the
/// most recent context is the likeliest to repeat). A long `max_n` (a loop's whole period,
/// which tells a loop from a phrase that merely recurs) thus costs no more than a short one,
/// where trying each length in turn scanned the sequence once per length.
pub fn lookup(tokens: &[u32], min_n: usize, max_n: usize, k: usize) -> Option<Lookup> {
    let len = tokens.len();
    if k == 0 || min_n == 0 || max_n < min_n || len <= min_n {
        return None;
    }
    let last = tokens[len - 1];
    // (match length, the position after the match): the best so far.
    let mut best: Option<(usize, usize)> = None;
    // `from`: the position after an earlier occurrence; `len` itself is the suffix, which
    // nothing follows yet.
    for from in (1..len).rev() {
        if tokens[from - 1] != last {
            continue;
        }
        let n = (1..max_n.min(from))
            .take_while(|&j| tokens[from - 1 - j] == tokens[len - 1 - j])
            .count()
            + 1;
        if n >= min_n && best.is_none_or(|(longest, _)| n > longest) {
            best = Some((n, from));
            if n == max_n {
                break;
            }
        }
    }
    let (n, from) = best?;
    let mut draft = Vec::with_capacity(k);
    for j in 0..k {
        // Past the end, the token one period back: already in the draft (`from` is before
        // the end, so `from + j - len < j`).
        let token = match tokens.get(from + j) {
            Some(&token) => token,
            None => draft[from + j - len],
        };
        draft.push(token);
    }
    Some(Lookup { n, tokens: draft })
}
