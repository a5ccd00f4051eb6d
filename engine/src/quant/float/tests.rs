//! Float rows against an f64 reference, on every type, every tile height and both kernels.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use half::{bf16, f16};

use super::*;

fn rng(seed: &mut u64) -> f32 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    (*seed >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

/// `[rows, cols]` random values, encoded as `ty`, and the values the encoding holds.
fn encoded(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> (Vec<u8>, Vec<f32>) {
    let mut s = seed;
    let mut bytes = Vec::new();
    let mut exact = Vec::new();
    for _ in 0..rows * cols {
        let v = rng(&mut s);
        match ty {
            GgmlType::F32 => {
                bytes.extend(v.to_le_bytes());
                exact.push(v);
            }
            GgmlType::F16 => {
                let h = f16::from_f32(v);
                bytes.extend(h.to_le_bytes());
                exact.push(h.to_f32());
            }
            _ => {
                let h = bf16::from_f32(v);
                bytes.extend(h.to_le_bytes());
                exact.push(h.to_f32());
            }
        }
    }
    (bytes, exact)
}

fn matrix(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> (FloatRows, Vec<f32>) {
    let (bytes, exact) = encoded(ty, rows, cols, seed);
    let len = bytes.len();
    let shared: SharedBytes = Arc::new(bytes);
    (
        FloatRows::new(ty, rows, cols, shared, 0..len).unwrap(),
        exact,
    )
}

fn check_products(simd: Simd) {
    let (rows, cols) = (24, 72);
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
        let (m, w) = matrix(ty, rows, cols, 7);
        let mut s = 99;
        let acts: Vec<Vec<f32>> = (0..8)
            .map(|_| (0..cols).map(|_| rng(&mut s)).collect())
            .collect();
        for tile in 1..=8 {
            let xs: Vec<&[f32]> = acts[..tile].iter().map(Vec::as_slice).collect();
            let mut out = vec![0f32; tile * rows];
            m.gemv_tile(&xs, 0..rows, simd, &mut out);
            for r in 0..tile {
                for i in 0..rows {
                    let want: f64 = (0..cols)
                        .map(|k| f64::from(w[i * cols + k]) * f64::from(acts[r][k]))
                        .sum();
                    let got = out[r * rows + i];
                    assert!(
                        (f64::from(got) - want).abs() < 1e-4,
                        "{ty} {simd:?} tile {tile}"
                    );
                    // The same row alone gives the same bits: batching invariance.
                    let mut alone = [0f32; 1];
                    m.gemv_tile(&[&acts[r]], i..i + 1, simd, &mut alone);
                    assert_eq!(
                        alone[0].to_bits(),
                        got.to_bits(),
                        "{ty} {simd:?} tile {tile}"
                    );
                }
            }
        }
    }
}

#[test]
fn products_match_f64_and_do_not_depend_on_the_tile_scalar() {
    check_products(Simd::Scalar);
}

#[test]
fn products_match_f64_and_do_not_depend_on_the_tile_simd() {
    check_products(Simd::detect());
}

#[test]
fn stacking_keeps_rows_in_place_without_copying() {
    let (a, wa) = matrix(GgmlType::BF16, 3, 16, 1);
    let (b, wb) = matrix(GgmlType::BF16, 5, 16, 2);
    let s = FloatRows::stack(&[&a, &b]).unwrap();
    assert_eq!((s.rows(), s.cols(), s.byte_len()), (8, 16, 8 * 16 * 2));
    let mut row = vec![0f32; 16];
    s.row_f32(4, &mut row);
    assert_eq!(row, wb[16..32]);
    s.row_f32(2, &mut row);
    assert_eq!(row, wa[32..48]);
    // A tile that straddles the two parts.
    let x = vec![1f32; 16];
    let mut out = vec![0f32; 4];
    s.gemv_tile(&[&x], 1..5, Simd::Scalar, &mut out);
    let sum = |w: &[f32]| w.iter().sum::<f32>();
    assert!((out[1] - sum(&wa[32..48])).abs() < 1e-5);
    assert!((out[2] - sum(&wb[0..16])).abs() < 1e-5);
    let (c, _) = matrix(GgmlType::F16, 2, 16, 3);
    assert!(FloatRows::stack(&[&a, &c]).is_none(), "types differ");
}

#[test]
fn wrong_sizes_and_types_are_refused() {
    let shared: SharedBytes = Arc::new(vec![0u8; 64]);
    assert!(FloatRows::new(GgmlType::BF16, 2, 16, shared.clone(), 0..64).is_ok());
    assert!(FloatRows::new(GgmlType::BF16, 2, 16, shared.clone(), 0..62).is_err());
    assert!(FloatRows::new(GgmlType::BF16, 2, 16, shared.clone(), 8..72).is_err());
    assert!(FloatRows::new(GgmlType::BF16, 4, 8, shared.clone(), 0..64).is_ok());
    assert!(FloatRows::new(GgmlType::BF16, 8, 4, shared.clone(), 0..64).is_err());
    assert!(FloatRows::new(GgmlType::Q8_0, 1, 32, shared, 0..34).is_err());
}
