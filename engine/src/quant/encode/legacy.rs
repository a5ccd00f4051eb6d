//! The 32-element block types, written as ggml's reference quantisers write them
//! (`quantize_row_q*_ref` in `ggml-quants.c`).

use half::f16;

use crate::quant::blocks::{QK, pack_q5};

fn put_half(out: &mut Vec<u8>, v: f32) {
    out.extend_from_slice(&f16::from_f32(v).to_le_bytes());
}

/// The value of largest magnitude (the first one on ties).
fn signed_max(x: &[f32]) -> f32 {
    let (mut amax, mut max) = (0f32, 0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

fn min_max(x: &[f32]) -> (f32, f32) {
    x.iter()
        .fold((f32::MAX, -f32::MAX), |(lo, hi), &v| (lo.min(v), hi.max(v)))
}

fn inverse(d: f32) -> f32 {
    if d != 0.0 { 1.0 / d } else { 0.0 }
}

/// Q4_0: `d = max / −8`, `q = min(15, trunc(x / d + 8.5))`.
pub(super) fn q4_0(x: &[f32; QK], out: &mut Vec<u8>) {
    let d = signed_max(x) / -8.0;
    let id = inverse(d);
    put_half(out, d);
    let q = |v: f32| ((v * id + 8.5) as i8).min(15) as u8;
    out.extend((0..16).map(|j| q(x[j]) | (q(x[j + 16]) << 4)));
}

/// Q4_1: `d = (max − min) / 15`, `m = min`, `q = min(15, trunc((x − min) / d + 0.5))`.
pub(super) fn q4_1(x: &[f32; QK], out: &mut Vec<u8>) {
    let (min, max) = min_max(x);
    let d = (max - min) / 15.0;
    let id = inverse(d);
    put_half(out, d);
    put_half(out, min);
    let q = |v: f32| (((v - min) * id + 0.5) as i8).min(15) as u8;
    out.extend((0..16).map(|j| q(x[j]) | (q(x[j + 16]) << 4)));
}

/// Q5_0: `d = max / −16`, `q = min(31, trunc(x / d + 16.5))`.
pub(super) fn q5_0(x: &[f32; QK], out: &mut Vec<u8>) {
    let d = signed_max(x) / -16.0;
    let id = inverse(d);
    put_half(out, d);
    let q: [u8; QK] = std::array::from_fn(|j| ((x[j] * id + 16.5) as i8).min(31) as u8);
    let (qs, qh) = pack_q5(&q);
    out.extend_from_slice(&qh.to_le_bytes());
    out.extend_from_slice(&qs);
}

/// Q5_1: `d = (max − min) / 31`, `m = min`, `q = trunc((x − min) / d + 0.5)`.
pub(super) fn q5_1(x: &[f32; QK], out: &mut Vec<u8>) {
    let (min, max) = min_max(x);
    let d = (max - min) / 31.0;
    let id = inverse(d);
    put_half(out, d);
    put_half(out, min);
    // ggml casts to uint8_t without a clamp; values are within 0..=31 up to rounding.
    let q: [u8; QK] = std::array::from_fn(|j| (((x[j] - min) * id + 0.5) as u8).min(31));
    let (qs, qh) = pack_q5(&q);
    out.extend_from_slice(&qh.to_le_bytes());
    out.extend_from_slice(&qs);
}

/// Q8_0: `d = amax / 127`, `q = round(x / d)` (half away from zero).
pub(super) fn q8_0(x: &[f32; QK], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = inverse(d);
    put_half(out, d);
    out.extend(x.iter().map(|&v| (v * id).round() as i8 as u8));
}
