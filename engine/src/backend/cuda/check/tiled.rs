//! A host transcription of `attention_prefill_mma.cu`'s algorithm, to pin it without a GPU:
//! keys walked in tiles of `MMA_KEYS`, an online softmax per query row in fp32 and log2 units
//! (running max and sum, earlier output rescaled by 2^(m_old − m_new)), the causal mask by the
//! row's absolute position, and (with `bf16` on) the kernel's roundings: q·scale·log2(e) to
//! bf16 once, p to bf16 for the PV product, the output to bf16. The MMA fragment layouts are
//! the kernel's own; only the GPU parity table checks those.

use half::bf16;

use crate::backend::cuda::prefill::MMA_KEYS;

const LOG2E: f32 = std::f32::consts::LOG2_E;

fn round(x: f32, bf16_on: bool) -> f32 {
    if bf16_on {
        bf16::from_f32(x).to_f32()
    } else {
        x
    }
}

/// Attention of query rows `q` (`[rows][d]`, unscaled) at absolute positions `positions` over
/// `keys`/`values` (`[n][d]`, positions `0..n`), as the MMA kernel computes it.
pub fn prefill_rows(
    q: &[Vec<f32>],
    positions: &[usize],
    keys: &[Vec<f32>],
    values: &[Vec<f32>],
    scale: f32,
    bf16_on: bool,
) -> Vec<Vec<f32>> {
    let end = positions.iter().map(|&p| p + 1).max().unwrap_or(0);
    q.iter()
        .zip(positions)
        .map(|(q, &pos)| {
            let q: Vec<f32> = q
                .iter()
                .map(|&x| round(x * scale * LOG2E, bf16_on))
                .collect();
            let (mut m, mut l) = (f32::NEG_INFINITY, 0f32);
            let mut o = vec![0f32; q.len()];
            // Every tile up to the block's last position, as the kernel walks them.
            for t0 in (0..end).step_by(MMA_KEYS) {
                let tile = t0..(t0 + MMA_KEYS).min(end);
                let s: Vec<f32> = tile
                    .clone()
                    .map(|j| {
                        if j <= pos {
                            keys[j].iter().zip(&q).map(|(k, q)| k * q).sum()
                        } else {
                            f32::NEG_INFINITY
                        }
                    })
                    .collect();
                let m_new = s.iter().copied().fold(m, f32::max);
                let m_use = if m_new == f32::NEG_INFINITY {
                    0.0
                } else {
                    m_new
                };
                let alpha = (m - m_use).exp2();
                m = m_new;
                let p: Vec<f32> = s.iter().map(|s| (s - m_use).exp2()).collect();
                l = l * alpha + p.iter().sum::<f32>();
                for x in o.iter_mut() {
                    *x *= alpha;
                }
                for (j, &p) in tile.zip(&p) {
                    let p = round(p, bf16_on);
                    for (x, v) in o.iter_mut().zip(&values[j]) {
                        *x += p * v;
                    }
                }
            }
            let inv = if l > 0.0 { 1.0 / l } else { 0.0 };
            o.iter().map(|x| round(x * inv, bf16_on)).collect()
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::backend::cuda::check::reference::{attend, rel_err};
    use crate::sampling::Rng;

    /// Random bf16-valued rows.
    fn rows(rng: &mut Rng, n: usize, d: usize, spread: f64) -> Vec<Vec<f32>> {
        (0..n)
            .map(|_| {
                (0..d)
                    .map(|_| bf16::from_f64((rng.next_f64() * 2.0 - 1.0) * spread).to_f32())
                    .collect()
            })
            .collect()
    }

    /// ‖tiled − reference‖/‖reference‖ over a chunk of `tokens` queries continuing at `start`.
    fn error(start: usize, tokens: usize, d: usize, spread: f64, bf16_on: bool) -> f64 {
        let mut rng = Rng::seeded((start * 7919 + tokens * 31 + d) as u64);
        let end = start + tokens;
        let (keys, values) = (rows(&mut rng, end, d, spread), rows(&mut rng, end, d, 1.0));
        let q = rows(&mut rng, tokens, d, spread);
        let positions: Vec<usize> = (start..end).collect();
        let scale = 1.0 / (d as f32).sqrt();
        let got = prefill_rows(&q, &positions, &keys, &values, scale, bf16_on);
        let flat: Vec<f32> = got.concat();
        let want: Vec<f64> = q
            .iter()
            .zip(&positions)
            .flat_map(|(q, &p)| attend(q, &keys[..=p], &values[..=p], 1.0 / (d as f64).sqrt()))
            .collect();
        rel_err(&flat, &want)
    }

    #[test]
    fn the_tiled_online_softmax_is_exact_attention_without_roundings() {
        // Chunks inside one key tile, across tile borders, and past 512 keys; sharp and flat
        // scores (spread 4 makes the running max move between tiles).
        for (start, tokens) in [(0, 1), (0, 70), (37, 20), (520, 80), (1000, 40)] {
            for spread in [1.0, 4.0] {
                let e = error(start, tokens, 64, spread, false);
                assert!(
                    e < 1e-5,
                    "start {start} tokens {tokens} spread {spread}: {e:e}"
                );
            }
        }
    }

    #[test]
    fn the_kernels_bf16_roundings_stay_inside_the_gpu_check_tolerance() {
        for d in [64, 128] {
            for (start, tokens) in [(0, 130), (600, 65)] {
                let e = error(start, tokens, d, 4.0, true);
                assert!(e < 1e-2 / 2.0, "d {d} start {start}: {e:e}");
                assert!(e > 1e-5, "the roundings were not applied: {e:e}");
            }
        }
    }

    #[test]
    fn a_row_sees_only_keys_up_to_its_position() {
        // Keys after position 2 are huge: a leak of any of them into row 0 would dominate its
        // output. Row 1 (position 99) makes the walk cover all 100 keys, in two tiles.
        let d = 8;
        let mut keys = vec![vec![0.0f32; d]; 100];
        let mut values = vec![vec![1.0f32; d]; 100];
        for j in 3..100 {
            keys[j] = vec![50.0; d];
            values[j] = vec![-1000.0; d];
        }
        let q = vec![vec![1.0f32; d]; 2];
        let out = prefill_rows(&q, &[2, 99], &keys, &values, 1.0, false);
        assert!(
            out[0].iter().all(|&x| (x - 1.0).abs() < 1e-6),
            "{:?}",
            out[0]
        );
    }
}
