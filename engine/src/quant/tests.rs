//! Dequantisation against hand-made blocks, and SIMD kernels against the portable ones.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use half::{bf16, f16};

use super::*;
use crate::gguf::GgmlType;

fn f16_bytes(x: f32) -> [u8; 2] {
    f16::from_f32(x).to_le_bytes()
}

#[test]
fn q4_1_hand_made_block() {
    // d = 0.5, m = -1; nibble byte j = (hi = 15 - j%16, lo = j%16).
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&f16_bytes(0.5));
    bytes.extend_from_slice(&f16_bytes(-1.0));
    bytes.extend((0..16u8).map(|j| ((15 - j) << 4) | j));
    let mut out = [0f32; 32];
    dequantize(GgmlType::Q4_1, &bytes, &mut out).unwrap();
    for j in 0..16 {
        assert_eq!(out[j], 0.5 * j as f32 - 1.0);
        assert_eq!(out[j + 16], 0.5 * (15 - j) as f32 - 1.0);
    }
}

#[test]
fn q4_0_hand_made_block() {
    let mut bytes = f16_bytes(2.0).to_vec();
    bytes.extend((0..16u8).map(|j| (j << 4) | (15 - j)));
    let mut out = [0f32; 32];
    dequantize(GgmlType::Q4_0, &bytes, &mut out).unwrap();
    for j in 0..16 {
        assert_eq!(out[j], 2.0 * (15.0 - j as f32 - 8.0));
        assert_eq!(out[j + 16], 2.0 * (j as f32 - 8.0));
    }
}

#[test]
fn q8_0_hand_made_block() {
    let mut bytes = f16_bytes(0.25).to_vec();
    bytes.extend((0..32i8).map(|j| (j * 4 - 64) as u8));
    let mut out = [0f32; 32];
    dequantize(GgmlType::Q8_0, &bytes, &mut out).unwrap();
    for (j, v) in out.iter().enumerate() {
        assert_eq!(*v, 0.25 * (j as f32 * 4.0 - 64.0));
    }
}

#[test]
fn float_formats() {
    let vals = [1.5f32, -2.25, 0.0, 65504.0];
    let f32_bytes: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    let f16b: Vec<u8> = vals
        .iter()
        .flat_map(|v| f16::from_f32(*v).to_le_bytes())
        .collect();
    let bf16b: Vec<u8> = vals
        .iter()
        .flat_map(|v| bf16::from_f32(*v).to_le_bytes())
        .collect();
    let mut out = [0f32; 4];
    dequantize(GgmlType::F32, &f32_bytes, &mut out).unwrap();
    assert_eq!(out, vals);
    dequantize(GgmlType::F16, &f16b, &mut out).unwrap();
    assert_eq!(out, vals);
    dequantize(GgmlType::BF16, &bf16b, &mut out).unwrap();
    assert_eq!(&out[..3], &vals[..3]);
    assert_eq!(out[3], 65536.0); // bf16 keeps 8 mantissa bits
}

#[test]
fn wrong_sizes_and_types_are_errors() {
    let mut out = [0f32; 32];
    assert!(matches!(
        dequantize(GgmlType::Q4_1, &[0; 19], &mut out),
        Err(Error::SizeMismatch { .. })
    ));
    let mut out = [0f32; 256];
    assert!(matches!(
        dequantize(GgmlType::Q6K, &[0; 209], &mut out),
        Err(Error::SizeMismatch { .. })
    ));
    assert!(matches!(
        dequantize(GgmlType::Q4K, &[0; 144], &mut out[..255]),
        Err(Error::SizeMismatch { .. })
    ));
}

#[test]
fn the_iq_tq_and_fp4_families_are_refused_by_name() {
    for ty in [
        GgmlType::IQ2XXS,
        GgmlType::IQ2XS,
        GgmlType::IQ3XXS,
        GgmlType::IQ1S,
        GgmlType::IQ4NL,
        GgmlType::IQ3S,
        GgmlType::IQ2S,
        GgmlType::IQ4XS,
        GgmlType::IQ1M,
        GgmlType::TQ1_0,
        GgmlType::TQ2_0,
        GgmlType::MXFP4,
        GgmlType::NVFP4,
        GgmlType::Q1_0,
    ] {
        let elements = 256.max(ty.block_len());
        let bytes = vec![0u8; ty.bytes_for(elements as u64).unwrap() as usize];
        let err = QMatrix::from_ggml(ty, &bytes, 1, elements).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("tensor type {ty} is not supported")),
            "{msg}"
        );
        assert!(quantize(ty, &vec![0f32; elements]).is_err());
    }
}

#[test]
fn quantised_values_come_back_within_each_types_error() {
    // Weights-like data: mostly small, a few outliers per block.
    let mut seed = 17;
    let x: Vec<f32> = (0..4096)
        .map(|i| lcg(&mut seed) * if i % 37 == 0 { 0.3 } else { 0.05 })
        .collect();
    // Limits: 1.25 × what each type measured on this data (the error halves per bit; a
    // wrong layout or scale search is off by far more).
    let rms = |v: &[f32]| (v.iter().map(|a| a * a).sum::<f32>() / v.len() as f32).sqrt();
    for (ty, limit) in [
        (GgmlType::Q8_0, 0.011),
        (GgmlType::Q6K, 0.031),
        (GgmlType::Q5_0, 0.088),
        (GgmlType::Q5_1, 0.057),
        (GgmlType::Q5K, 0.055),
        (GgmlType::Q4_0, 0.175),
        (GgmlType::Q4_1, 0.116),
        (GgmlType::Q4K, 0.11),
        (GgmlType::Q3K, 0.28),
        (GgmlType::Q2K, 0.41),
    ] {
        let bytes = quantize(ty, &x).unwrap();
        assert_eq!(bytes.len() as u64, ty.bytes_for(x.len() as u64).unwrap());
        let mut back = vec![0f32; x.len()];
        dequantize(ty, &bytes, &mut back).unwrap();
        let err: Vec<f32> = x.iter().zip(&back).map(|(a, b)| a - b).collect();
        let rel = rms(&err) / rms(&x);
        println!("{ty}: relative RMS error {rel:.4}");
        assert!(rel < limit, "{ty}: relative RMS error {rel} ≥ {limit}");
    }
}

#[test]
fn k_quant_repacking_keeps_each_sub_blocks_values() {
    // Q4_K: a super-block whose sub-block s has scale s + 1 and min 2 s, values q = j % 16.
    let mut b = vec![0u8; 144];
    b[..2].copy_from_slice(&f16_bytes(0.5));
    b[2..4].copy_from_slice(&f16_bytes(0.25));
    let (sc, mn): (Vec<u8>, Vec<u8>) = (0..8u8).map(|s| (s + 1, 2 * s)).unzip();
    for j in 0..4 {
        b[4 + j] = sc[j];
        b[8 + j] = mn[j];
        b[12 + j] = (sc[j + 4] & 0x0F) | ((mn[j + 4] & 0x0F) << 4);
    }
    for g in 0..4 {
        for l in 0..32 {
            b[16 + 32 * g + l] = ((l % 16) as u8) | ((((l + 1) % 16) as u8) << 4);
        }
    }
    let mut out = [0f32; 256];
    dequantize(GgmlType::Q4K, &b, &mut out).unwrap();
    for (e, v) in out.iter().enumerate() {
        let s = e / 32;
        let q = (e % 32 + s % 2) % 16;
        let want = 0.5 * (s as f32 + 1.0) * q as f32 - 0.25 * (2.0 * s as f32);
        assert_eq!(*v, want, "element {e}");
    }
}

/// A deterministic pseudo-random stream (no dependency needed for test data).
pub(super) fn lcg(seed: &mut u64) -> f32 {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    ((*seed >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
}

/// A `[rows, cols]` matrix of valid `ty` blocks: random weights through the quantiser.
pub(super) fn random_matrix(ty: GgmlType, rows: usize, cols: usize, seed: &mut u64) -> Vec<u8> {
    let x: Vec<f32> = (0..rows * cols).map(|_| lcg(seed) * 0.1).collect();
    quantize(ty, &x).unwrap()
}

#[test]
fn kernels_agree_with_dequantised_reference() {
    let (rows, cols, m) = (13, 512, TILE_ROWS + 2);
    let mut seed = 7;
    let x: Vec<f32> = (0..m * cols).map(|_| lcg(&mut seed)).collect();
    let mut q8 = Q8Rows::default();
    q8.quantize(&x, cols);
    let xq = &q8.blocks;
    for ty in BLOCK_TYPES {
        let bytes = random_matrix(ty, rows, cols, &mut seed);
        let mut dense = vec![0f32; rows * cols];
        dequantize(ty, &bytes, &mut dense).unwrap();
        let portable = QMatrix::from_ggml(ty, &bytes, rows, cols)
            .expect("valid blocks")
            .with_simd(Simd::Scalar);
        for (simd, q8) in Simd::available()
            .into_iter()
            .flat_map(|s| [(s, None), (s, Some(&q8))])
        {
            let fast = portable.clone().with_simd(simd);
            let acts = Acts { f32: &x, q8 };
            for tile in 1..=TILE_ROWS {
                for m0 in 0..=(m - tile) {
                    let (mut a, mut b) = (vec![0f32; tile * rows], vec![0f32; tile * rows]);
                    fast.gemv_tile(acts, m0, tile, 0..rows, &mut a);
                    portable.gemv_tile(acts, m0, tile, 0..rows, &mut b);
                    for r in 0..tile {
                        for n in 0..rows {
                            let xr = &x[(m0 + r) * cols..(m0 + r + 1) * cols];
                            let exact: f32 = dense[n * cols..(n + 1) * cols]
                                .iter()
                                .zip(xr)
                                .map(|(w, v)| w * v)
                                .sum();
                            let (fa, pb) = (a[r * rows + n], b[r * rows + n]);
                            assert!((fa - pb).abs() < 1e-4, "{ty} {simd:?} {fa} vs scalar {pb}");
                            // Quantised activations are off by at most half a step per
                            // element: |Σ w·(x − x̂)| ≤ Σ_blocks Σ|w| · d / 2.
                            let wrow = &dense[n * cols..(n + 1) * cols];
                            let bound: f32 = wrow
                                .chunks(32)
                                .zip(&xq[(m0 + r) * cols / 32..])
                                .map(|(w, b)| w.iter().map(|v| v.abs()).sum::<f32>() * b.d * 0.5)
                                .sum();
                            let tol = if q8.is_some() { bound + 1e-4 } else { 1e-4 };
                            assert!((fa - exact).abs() < tol, "{ty} {simd:?} {fa} vs {exact}");
                        }
                    }
                }
            }
        }
        let mut row = vec![0f32; cols];
        portable.row_f32(5, &mut row);
        assert_eq!(row, &dense[5 * cols..6 * cols]);
    }
}

#[test]
fn q8_quantisation_round_trips_within_half_a_step() {
    let mut seed = 3;
    let x: Vec<f32> = (0..64).map(|_| lcg(&mut seed) * 4.0).collect();
    let mut q = [BlockQ8::default(); 2];
    quantize_q8(&x, &mut q);
    for (b, xs) in q.iter().zip(x.chunks(32)) {
        let sum: i32 = b.qs.iter().map(|&v| i32::from(v)).sum();
        assert!((b.s - b.d * sum as f32).abs() < 1e-5);
        for (&v, &qv) in xs.iter().zip(&b.qs) {
            assert!((v - b.d * f32::from(qv)).abs() <= b.d * 0.5 + 1e-6);
        }
    }
}

#[test]
fn simd_quantisation_matches_the_portable_one_exactly() {
    let mut seed = 11;
    // Random values, exact halves of the quantisation step (ties round away from zero), an
    // all-zero block and one with a single value.
    let mut x: Vec<f32> = (0..32 * 6).map(|_| lcg(&mut seed) * 3.0).collect();
    for (j, v) in x[32..64].iter_mut().enumerate() {
        *v = (j as f32 - 15.5) * 0.5;
    }
    x[64] = 127.0;
    x[66] = 2.5;
    x[67] = -2.5;
    x[96..128].fill(0.0);
    let mut fast = vec![BlockQ8::default(); x.len() / 32];
    let mut portable = fast.clone();
    quantize_q8(&x, &mut fast);
    kernels::scalar::quantize_q8(&x, &mut portable);
    assert_eq!(fast, portable);
}

#[test]
fn a_row_gets_the_same_bits_in_every_tile() {
    // The batching invariance of the engine rests on this: whatever tile size, position in
    // the tile and group of weight rows a dot product is computed in, its result is the same.
    let (rows, cols, m) = (11, 768, TILE_ROWS + 3);
    let mut seed = 5;
    let x: Vec<f32> = (0..m * cols).map(|_| lcg(&mut seed)).collect();
    let mut q8 = Q8Rows::default();
    q8.quantize(&x, cols);
    let paths = Simd::available();
    for (ty, simd) in BLOCK_TYPES
        .iter()
        .flat_map(|&t| paths.iter().map(move |&s| (t, s)))
    {
        let bytes = random_matrix(ty, rows, cols, &mut seed);
        let w = QMatrix::from_ggml(ty, &bytes, rows, cols)
            .expect("valid blocks")
            .with_simd(simd);
        let acts = Acts {
            f32: &x,
            q8: Some(&q8),
        };
        let mut alone = vec![0f32; m * rows];
        for r in 0..m {
            w.gemv_tile(acts, r, 1, 0..rows, &mut alone[r * rows..(r + 1) * rows]);
        }
        for tile in 2..=TILE_ROWS {
            for m0 in 0..=(m - tile) {
                for start in [0, 1, 3] {
                    let len = rows - start;
                    let mut out = vec![0f32; tile * len];
                    w.gemv_tile(acts, m0, tile, start..rows, &mut out);
                    for r in 0..tile {
                        let want = &alone[(m0 + r) * rows + start..(m0 + r + 1) * rows];
                        assert_eq!(&out[r * len..][..len], want, "{ty} {simd:?} tile {tile}");
                    }
                }
            }
        }
    }
}

#[test]
fn the_avx512_kernels_give_the_avx2_kernels_bits() {
    // Same integers (`vpdpbusd` and `maddubs` + `madd` never saturate here) and the same float
    // operations in the same order: a model's outputs do not depend on which of the two runs.
    if !Simd::available().contains(&Simd::Avx512) {
        println!("skipped: this CPU lacks AVX-512 F/BW/VL + VNNI");
        return;
    }
    let (rows, cols, m) = (9, 768, TILE_ROWS);
    let mut seed = 29;
    let x: Vec<f32> = (0..m * cols).map(|_| lcg(&mut seed) * 2.0).collect();
    let mut q8 = Q8Rows::default();
    q8.quantize(&x, cols);
    let acts = Acts {
        f32: &x,
        q8: Some(&q8),
    };
    for ty in BLOCK_TYPES {
        let bytes = random_matrix(ty, rows, cols, &mut seed);
        let avx2 = QMatrix::from_ggml(ty, &bytes, rows, cols)
            .expect("valid blocks")
            .with_simd(Simd::Avx2);
        let avx512 = avx2.clone().with_simd(Simd::Avx512);
        for tile in 1..=TILE_ROWS {
            let (mut a, mut b) = (vec![0f32; tile * rows], vec![0f32; tile * rows]);
            avx2.gemv_tile(acts, m - tile, tile, 0..rows, &mut a);
            avx512.gemv_tile(acts, m - tile, tile, 0..rows, &mut b);
            assert_eq!(a, b, "{ty} tile {tile}");
        }
    }
}

#[test]
fn the_simd_cap_names_parse() {
    assert_eq!(Simd::parse("AVX2"), Some(Simd::Avx2));
    assert_eq!(Simd::parse(" scalar "), Some(Simd::Scalar));
    assert_eq!(Simd::parse("avx512"), Some(Simd::Avx512));
    assert_eq!(Simd::parse("neon"), None);
    assert!(Simd::available().contains(&Simd::detect()));
}

#[test]
fn a_simd_cap_lowers_the_choice_and_a_bad_one_is_warned_about() {
    let cap = |best, value: &str| Simd::capped(best, Some(value.to_string()));
    assert_eq!(Simd::capped(Simd::Avx512, None), (Simd::Avx512, None));
    assert_eq!(cap(Simd::Avx512, "avx2"), (Simd::Avx2, None));
    let (chosen, warning) = cap(Simd::Avx2, "avx512");
    assert_eq!(chosen, Simd::Avx2, "a cap never raises the choice");
    let warning = warning.expect("a cap above the CPU is warned about");
    assert!(warning.contains("above what this CPU runs"), "{warning}");
    let (chosen, warning) = cap(Simd::Avx2, "avx-2");
    assert_eq!(chosen, Simd::Avx2);
    let warning = warning.expect("an unknown name is warned about");
    assert!(
        warning.contains("TOKENSCALE_SIMD=\"avx-2\" is not one of"),
        "{warning}"
    );
}

#[test]
fn a_stack_of_mixed_types_computes_each_row_as_its_own_matrix_does() {
    // Q4_K_M's q|k|v: Q5_0, Q5_0, Q8_0 (or Q4_K, Q4_K, Q6_K); here three forms and runs of
    // the same form that merge.
    let (cols, m) = (512, 3);
    let mut seed = 23;
    let x: Vec<f32> = (0..m * cols).map(|_| lcg(&mut seed)).collect();
    let mut q8 = Q8Rows::default();
    q8.quantize(&x, cols);
    let pieces: Vec<(GgmlType, usize)> = vec![
        (GgmlType::Q5_0, 5),
        (GgmlType::Q5_0, 4),
        (GgmlType::Q6K, 7),
        (GgmlType::Q4K, 3),
        (GgmlType::F32, 2),
    ];
    let parts: Vec<QMatrix> = pieces
        .iter()
        .map(|&(ty, rows)| {
            QMatrix::from_ggml(ty, &random_matrix(ty, rows, cols, &mut seed), rows, cols).unwrap()
        })
        .collect();
    let stacked = QMatrix::stack(&parts).unwrap();
    let total: usize = pieces.iter().map(|p| p.1).sum();
    assert_eq!(stacked.rows(), total);
    for q8 in [None, Some(&q8)] {
        let acts = Acts { f32: &x, q8 };
        // Each row alone, from its own matrix.
        let mut want = vec![0f32; m * total];
        let mut start = 0;
        for p in &parts {
            for r in 0..m {
                let mut o = vec![0f32; p.rows()];
                p.gemv_tile(acts, r, 1, 0..p.rows(), &mut o);
                want[r * total + start..][..p.rows()].copy_from_slice(&o);
            }
            start += p.rows();
        }
        for (lo, hi) in [(0, total), (3, 12), (9, 16), (15, 21), (0, 1), (20, 21)] {
            let mut out = vec![0f32; m * (hi - lo)];
            stacked.gemv_tile(acts, 0, m, lo..hi, &mut out);
            for r in 0..m {
                assert_eq!(
                    &out[r * (hi - lo)..][..hi - lo],
                    &want[r * total + lo..][..hi - lo],
                    "rows {lo}..{hi}"
                );
            }
        }
        let mut row = vec![0f32; cols];
        stacked.row_f32(17, &mut row);
        let mut own = vec![0f32; cols];
        parts[3].row_f32(1, &mut own);
        assert_eq!(row, own);
    }
}
