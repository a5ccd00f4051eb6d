//! The demand history as status carries it: per resolution, its bins as u16 levels of a
//! per-resolution scale, base64 (little-endian pairs of bytes), so two weeks of history stay
//! a few kilobytes and a new leader starts from what the last one learned.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::tier::Tier;
use super::{Foresight, TIERS};

/// The level written for a bin without a sample.
const NO_SAMPLE: u16 = u16::MAX;
/// The highest level of a sample: the resolution's peak.
const TOP_LEVEL: f64 = (u16::MAX - 1) as f64;
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// The learned demand history of a model, in status.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ForesightRecord {
    /// One entry per resolution kept.
    #[serde(default)]
    pub tiers: Vec<TierRecord>,
}

/// One resolution's history.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TierRecord {
    /// Width of a bin, seconds.
    pub bin_seconds: f64,
    /// When the first bin begins (RFC 3339).
    pub start: String,
    /// Output tokens/s of one level step.
    pub tokens_per_second_per_level: f64,
    /// The bins' mean demand in levels: u16 little-endian, base64; 65535 is a bin without a
    /// sample.
    pub levels: String,
}

impl Foresight {
    /// The record of the history, its instants written by `wall` (policy clock to RFC 3339);
    /// `None` when nothing was recorded.
    pub(crate) fn to_record(
        &self,
        wall: impl Fn(f64) -> Option<String>,
    ) -> Option<ForesightRecord> {
        if self.is_empty() {
            return None;
        }
        let tiers = self.tiers.iter().filter_map(|tier| {
            let levels: Vec<f64> = tier.levels().collect();
            let top = levels
                .iter()
                .copied()
                .filter(|v| v.is_finite())
                .fold(0.0, f64::max);
            let per_level = if top > 0.0 { top / TOP_LEVEL } else { 1.0 };
            let quantised: Vec<u16> = levels
                .iter()
                .map(|v| {
                    if v.is_finite() {
                        (v / per_level).round().clamp(0.0, TOP_LEVEL) as u16
                    } else {
                        NO_SAMPLE
                    }
                })
                .collect();
            Some(TierRecord {
                bin_seconds: tier.bin_s,
                start: wall(tier.start_s)?,
                tokens_per_second_per_level: per_level,
                levels: encode(&quantised),
            })
        });
        Some(ForesightRecord {
            tiers: tiers.collect(),
        })
    }

    /// The history a record describes, its instants read by `policy` (RFC 3339 to the policy
    /// clock). A resolution this build does not keep, or whose record does not parse, starts
    /// empty.
    pub(crate) fn from_record(
        record: &ForesightRecord,
        policy: impl Fn(&str) -> Option<f64>,
    ) -> Self {
        let mut foresight = Self::default();
        for (slot, &(bin_s, capacity)) in foresight.tiers.iter_mut().zip(TIERS.iter()) {
            let restored = record
                .tiers
                .iter()
                .find(|r| r.bin_seconds == bin_s)
                .and_then(|r| {
                    let start_s = policy(&r.start)?;
                    let levels = decode(&r.levels)?;
                    let per_level = r.tokens_per_second_per_level;
                    let bins = levels.into_iter().map(|l| {
                        if l == NO_SAMPLE {
                            f64::NAN
                        } else {
                            f64::from(l) * per_level
                        }
                    });
                    Some(Tier::restored(bin_s, capacity, start_s, bins.collect()))
                });
            if let Some(tier) = restored {
                *slot = tier;
            }
        }
        foresight
    }
}

/// u16 values as little-endian bytes in base64 (standard alphabet, padded).
pub(super) fn encode(values: &[u16]) -> String {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The inverse of [`encode`]; `None` for text that is not its output.
pub(super) fn decode(text: &str) -> Option<Vec<u16>> {
    let digits: Vec<u32> = text
        .bytes()
        .filter(|&c| c != b'=')
        .map(|c| ALPHABET.iter().position(|&a| a == c).map(|p| p as u32))
        .collect::<Option<_>>()?;
    let mut bytes = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, d)| n | (d << (18 - 6 * i)));
        let take = chunk.len().saturating_sub(1);
        bytes.extend(n.to_be_bytes()[1..=take.min(3)].iter());
    }
    if bytes.len() % 2 != 0 {
        return None;
    }
    Some(
        bytes
            .chunks(2)
            .map(|pair| u16::from_le_bytes([pair[0], pair[1]]))
            .collect(),
    )
}
