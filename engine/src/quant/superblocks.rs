//! K-quant super-blocks (256 elements; ggml's on-disk layouts) → the 32-element blocks the
//! kernels run on. Exact: every value the repacked blocks give is the one ggml's (and PyPI
//! `gguf`'s) dequantisation gives, bit for bit.
//!
//! | type | sub-blocks | value | repacked as |
//! |---|---|---|---|
//! | Q2_K | 16 × 16 | `d·sc·q − dmin·m`, q < 4 | [`BlockQ2H`] |
//! | Q3_K | 16 × 16 | `d·(sc − 32)·q`, q in −4..4 | [`BlockQ8H`] |
//! | Q4_K | 8 × 32 | `d·sc·q − dmin·m`, q < 16 | [`BlockQ4_1`] |
//! | Q5_K | 8 × 32 | `d·sc·q − dmin·m`, q < 32 | [`BlockQ5_1`] |
//! | Q6_K | 16 × 16 | `d·sc·q`, q in −32..32 | [`BlockQ8H`] |

use half::f16;

use super::Error;
use super::blocks::{BlockQ2H, BlockQ4_1, BlockQ5_1, BlockQ8H, QK, pack_q4};
use crate::gguf::GgmlType;

/// Elements per super-block.
pub const QK_K: usize = 256;
/// 32-element blocks per super-block.
const SUB: usize = QK_K / QK;

fn half_at(bytes: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([bytes[at], bytes[at + 1]]).to_f32()
}

/// The super-blocks of `bytes`, checked to hold exactly `elements` elements of `ty`.
fn super_blocks(
    ty: GgmlType,
    bytes: &[u8],
    elements: usize,
) -> Result<impl Iterator<Item = &[u8]>, Error> {
    super::dequant::check(ty, bytes, elements)?;
    Ok(bytes.chunks_exact(ty.block_bytes()))
}

/// The eight 6-bit (scale, min) pairs of Q4_K and Q5_K (ggml's `get_scale_min_k4`).
pub(crate) fn scale_min_k4(q: &[u8]) -> [(u8, u8); SUB] {
    std::array::from_fn(|j| {
        if j < 4 {
            (q[j] & 63, q[j + 4] & 63)
        } else {
            (
                (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
                (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
            )
        }
    })
}

/// Q4_K (144 bytes: `f16 d, f16 dmin, 12 scale bytes, 128 nibble bytes`).
pub(crate) fn repack_q4_k(bytes: &[u8], elements: usize) -> Result<Vec<BlockQ4_1>, Error> {
    let mut out = Vec::with_capacity(elements / QK);
    for b in super_blocks(GgmlType::Q4K, bytes, elements)? {
        let (d, dmin) = (half_at(b, 0), half_at(b, 2));
        let qs = &b[16..144];
        for (s, (sc, m)) in scale_min_k4(&b[4..16]).into_iter().enumerate() {
            let group = &qs[(s / 2) * 32..][..32];
            let q: [u8; QK] = std::array::from_fn(|j| (group[j] >> (4 * (s % 2))) & 0x0F);
            out.push(BlockQ4_1 {
                d: d * f32::from(sc),
                m: -(dmin * f32::from(m)),
                qs: pack_q4(&q),
            });
        }
    }
    Ok(out)
}

/// Q5_K (176 bytes: `f16 d, f16 dmin, 12 scale bytes, 32 high-bit bytes, 128 nibble bytes`).
pub(crate) fn repack_q5_k(bytes: &[u8], elements: usize) -> Result<Vec<BlockQ5_1>, Error> {
    let mut out = Vec::with_capacity(elements / QK);
    for b in super_blocks(GgmlType::Q5K, bytes, elements)? {
        let (d, dmin) = (half_at(b, 0), half_at(b, 2));
        let (qh, qs) = (&b[16..48], &b[48..176]);
        for (s, (sc, m)) in scale_min_k4(&b[4..16]).into_iter().enumerate() {
            let group = &qs[(s / 2) * 32..][..32];
            let q: [u8; QK] = std::array::from_fn(|j| {
                ((group[j] >> (4 * (s % 2))) & 0x0F) | (((qh[j] >> s) & 1) << 4)
            });
            out.push(BlockQ5_1::pack(
                d * f32::from(sc),
                -(dmin * f32::from(m)),
                &q,
            ));
        }
    }
    Ok(out)
}

/// Q6_K (210 bytes: `128 low-nibble bytes, 64 high-2-bit bytes, 16 i8 scales, f16 d`).
pub(crate) fn repack_q6_k(bytes: &[u8], elements: usize) -> Result<Vec<BlockQ8H>, Error> {
    let mut out = Vec::with_capacity(elements / QK);
    for b in super_blocks(GgmlType::Q6K, bytes, elements)? {
        let (ql, qh, scales, d) = (&b[..128], &b[128..192], &b[192..208], half_at(b, 208));
        // Element e: half h = e / 128; within it r = e % 128 takes nibble r / 64 of
        // ql[64 h + r % 64] and bits 2 (r / 32) of qh[32 h + r % 32].
        let value = |e: usize| {
            let (h, r) = (e / 128, e % 128);
            let lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
            let hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
            ((lo | (hi << 4)) as i8) - 32
        };
        for s in 0..SUB {
            out.push(BlockQ8H {
                d: [0, 1].map(|k| d * f32::from(scales[2 * s + k] as i8)),
                qs: std::array::from_fn(|j| value(s * QK + j)),
            });
        }
    }
    Ok(out)
}

/// Q3_K (110 bytes: `32 high-bit-mask bytes, 64 2-bit bytes, 12 scale bytes, f16 d`).
pub(crate) fn repack_q3_k(bytes: &[u8], elements: usize) -> Result<Vec<BlockQ8H>, Error> {
    let mut out = Vec::with_capacity(elements / QK);
    for b in super_blocks(GgmlType::Q3K, bytes, elements)? {
        let (hmask, qs, sc, d) = (&b[..32], &b[32..96], &b[96..108], half_at(b, 108));
        // Sixteen 6-bit scales: low four bits from nibble i / 8 of sc[i % 8], high two from
        // bits 2 (i / 4) of sc[8 + i % 4]; stored with an offset of 32.
        let scale = |i: usize| {
            let lo = (sc[i % 8] >> (4 * (i / 8))) & 0x0F;
            let hi = (sc[8 + i % 4] >> (2 * (i / 4))) & 3;
            d * f32::from(((lo | (hi << 4)) as i8) - 32)
        };
        // Element e: two low bits as in Q2_K, and 4 subtracted when its bit of the mask is 0.
        let value = |e: usize| {
            let lo = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
            let high = (hmask[e % 32] >> (e / 32)) & 1;
            lo as i8 - if high == 0 { 4 } else { 0 }
        };
        for s in 0..SUB {
            out.push(BlockQ8H {
                d: [scale(2 * s), scale(2 * s + 1)],
                qs: std::array::from_fn(|j| value(s * QK + j)),
            });
        }
    }
    Ok(out)
}

/// Q2_K (84 bytes: `16 scale bytes (4-bit scale, 4-bit min), 64 2-bit bytes, f16 d, f16 dmin`).
pub(crate) fn repack_q2_k(bytes: &[u8], elements: usize) -> Result<Vec<BlockQ2H>, Error> {
    let mut out = Vec::with_capacity(elements / QK);
    for b in super_blocks(GgmlType::Q2K, bytes, elements)? {
        let (scales, qs) = (&b[..16], &b[16..80]);
        let (d, dmin) = (half_at(b, 80), half_at(b, 82));
        let value = |e: usize| (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        for s in 0..SUB {
            let sc = [scales[2 * s], scales[2 * s + 1]];
            let q: [u8; QK] = std::array::from_fn(|j| value(s * QK + j));
            out.push(BlockQ2H::pack(
                sc.map(|v| d * f32::from(v & 0x0F)),
                sc.map(|v| -(dmin * f32::from(v >> 4))),
                &q,
            ));
        }
    }
    Ok(out)
}
