//! When a request ends: EOS and stop tokens, the token limit, and stop strings matched on text
//! that arrives a delta at a time (text that might begin a stop string is held back).

use super::params::SamplingParams;

/// Why generation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// The model produced one of its EOS tokens (and `ignore_eos` was off).
    Eos,
    /// The model produced one of the request's `stop_token_ids`.
    StopToken(u32),
    /// The output contained this stop string (cut off before it).
    StopString(String),
    /// `max_tokens` were generated (or the context is full).
    Length,
}

impl FinishReason {
    /// The OpenAI API's `finish_reason`: `"stop"` or `"length"`.
    pub fn as_openai(&self) -> &'static str {
        match self {
            Self::Length => "length",
            Self::Eos | Self::StopToken(_) | Self::StopString(_) => "stop",
        }
    }
}

/// Whether generating `token_id` as the `num_generated`-th output token (counting it) ends the
/// request, on token grounds alone. An `Eos` or `StopToken` token is not part of the output text.
pub fn finish_on_token(
    params: &SamplingParams,
    token_id: u32,
    num_generated: u32,
    eos_token_ids: &[u32],
) -> Option<FinishReason> {
    if !params.ignore_eos && eos_token_ids.contains(&token_id) {
        return Some(FinishReason::Eos);
    }
    if params.stop_token_ids.contains(&token_id) {
        return Some(FinishReason::StopToken(token_id));
    }
    match params.max_tokens {
        Some(max) if num_generated >= max => Some(FinishReason::Length),
        _ => None,
    }
}

/// What a push of new text gives back.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StopCheck {
    /// Text that is now safe to send to the client.
    pub text: String,
    /// The stop string that was found, if any: the request ends, `text` ends just before it.
    pub stopped: Option<String>,
}

/// Finds stop strings in incrementally produced text.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    /// Text not yet released because it may be the start of a stop string.
    held: String,
    done: bool,
}

impl StopMatcher {
    /// A matcher for `stops` (empty strings are ignored: they would match everywhere).
    pub fn new(stops: &[String]) -> Self {
        let stops = stops.iter().filter(|s| !s.is_empty()).cloned().collect();
        Self {
            stops,
            held: String::new(),
            done: false,
        }
    }

    /// Adds `delta` and returns what may be sent now. After a stop string was found, every
    /// further push returns nothing.
    pub fn push(&mut self, delta: &str) -> StopCheck {
        if self.done {
            return StopCheck::default();
        }
        self.held.push_str(delta);
        if self.stops.is_empty() {
            return StopCheck {
                text: std::mem::take(&mut self.held),
                stopped: None,
            };
        }
        // Earliest match wins; at the same position, the first listed stop string.
        let found = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|(at, _)| *at);
        if let Some((at, stop)) = found {
            let stop = stop.clone();
            self.held.truncate(at);
            self.done = true;
            return StopCheck {
                text: std::mem::take(&mut self.held),
                stopped: Some(stop),
            };
        }
        let keep_from = self.partial_match_start();
        let tail = self.held.split_off(keep_from);
        StopCheck {
            text: std::mem::replace(&mut self.held, tail),
            stopped: None,
        }
    }

    /// Releases the held-back text at the end of generation (EOS, token limit): it never
    /// became a stop string.
    pub fn finish(&mut self) -> String {
        self.done = true;
        std::mem::take(&mut self.held)
    }

    /// The text currently held back.
    pub fn held(&self) -> &str {
        &self.held
    }

    /// Start of the longest suffix of `held` that is a proper prefix of some stop string.
    fn partial_match_start(&self) -> usize {
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        let min_start = self.held.len().saturating_sub(longest.saturating_sub(1));
        self.held
            .char_indices()
            .map(|(i, _)| i)
            .filter(|&i| i >= min_start)
            .find(|&i| self.stops.iter().any(|s| s.starts_with(&self.held[i..])))
            .unwrap_or(self.held.len())
    }
}
