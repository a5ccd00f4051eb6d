//! The interleaved forms (`interleaved`) against the reference dequantisation and the
//! portable kernel, on whole groups, a padded last group and row ranges that cut groups.

#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use super::tests::{lcg, random_matrix};
use super::*;
use crate::gguf::GgmlType;

/// 37 rows: two whole groups of 16 and a last one padded with 11 zero rows.
const ROWS: usize = 37;

/// The types kept in interleaved rows: Q5_0, Q4_K, and Q8_0, Q6_K, Q3_K (signed bytes).
const INTERLEAVED: [GgmlType; 5] = [
    GgmlType::Q5_0,
    GgmlType::Q4K,
    GgmlType::Q8_0,
    GgmlType::Q6K,
    GgmlType::Q3K,
];

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn interleaved_rows_dequantise_to_the_files_values() {
    let mut seed = 41;
    let cols = 512;
    for ty in INTERLEAVED {
        let bytes = random_matrix(ty, ROWS, cols, &mut seed);
        let mut dense = vec![0f32; ROWS * cols];
        dequantize(ty, &bytes, &mut dense).unwrap();
        let w = QMatrix::from_ggml(ty, &bytes, ROWS, cols).unwrap();
        for row in 0..ROWS {
            let mut out = vec![0f32; cols];
            w.row_f32(row, &mut out);
            assert_eq!(out, &dense[row * cols..(row + 1) * cols], "{ty} row {row}");
        }
    }
}

#[test]
fn interleaved_kernels_give_the_portable_bits_on_every_path_and_range() {
    for ty in INTERLEAVED {
        portable_bits_everywhere(ty);
    }
}

/// Checks one type: the portable path near the exact dot, every path and range on its bits.
fn portable_bits_everywhere(ty: GgmlType) {
    let (cols, m) = (768, TILE_ROWS + 1);
    let mut seed = 43;
    let x: Vec<f32> = (0..m * cols).map(|_| lcg(&mut seed)).collect();
    let mut q8 = Q8Rows::default();
    q8.quantize(&x, cols);
    let acts = Acts {
        f32: &x,
        q8: Some(&q8),
    };
    let bytes = random_matrix(ty, ROWS, cols, &mut seed);
    let mut dense = vec![0f32; ROWS * cols];
    dequantize(ty, &bytes, &mut dense).unwrap();
    let portable = QMatrix::from_ggml(ty, &bytes, ROWS, cols)
        .unwrap()
        .with_simd(Simd::Scalar);
    // Each row alone, one activation row at a time, on the portable path.
    let mut alone = vec![0f32; m * ROWS];
    for r in 0..m {
        portable.gemv_tile(acts, r, 1, 0..ROWS, &mut alone[r * ROWS..(r + 1) * ROWS]);
    }
    for r in 0..m {
        for n in 0..ROWS {
            let want: f32 = dense[n * cols..(n + 1) * cols]
                .iter()
                .zip(&x[r * cols..(r + 1) * cols])
                .map(|(w, v)| w * v)
                .sum();
            // Quantised activations: within half a step per element, as for every type.
            let got = alone[r * ROWS + n];
            assert!(
                (got - want).abs() < 0.05 * (1.0 + want.abs()),
                "{got} vs {want}"
            );
        }
    }
    for simd in Simd::available() {
        let w = portable.clone().with_simd(simd);
        for tile in 1..=TILE_ROWS {
            for range in [0..ROWS, 16..32, 5..21, 17..18, 33..ROWS] {
                let len = range.len();
                let mut out = vec![0f32; tile * len];
                w.gemv_tile(acts, m - tile, tile, range.clone(), &mut out);
                for r in 0..tile {
                    let want = &alone[(m - tile + r) * ROWS + range.start..][..len];
                    assert_eq!(
                        bits(&out[r * len..][..len]),
                        bits(want),
                        "{ty} {simd:?} tile {tile} rows {range:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn interleaved_parts_merge_on_whole_groups_only() {
    let (cols, m) = (64, 2);
    let mut seed = 47;
    let x: Vec<f32> = (0..m * cols).map(|_| lcg(&mut seed)).collect();
    let mut q8 = Q8Rows::default();
    q8.quantize(&x, cols);
    let acts = Acts {
        f32: &x,
        q8: Some(&q8),
    };
    // 16 | 21 merge into one part (the first ends on a group); 21 | 16 stay two.
    for sizes in [[16, 21], [21, 16]] {
        let parts: Vec<QMatrix> = sizes
            .iter()
            .map(|&rows| {
                let bytes = random_matrix(GgmlType::Q5_0, rows, cols, &mut seed);
                QMatrix::from_ggml(GgmlType::Q5_0, &bytes, rows, cols).unwrap()
            })
            .collect();
        let stacked = QMatrix::stack(&parts).unwrap();
        assert_eq!(stacked.part_count(), if sizes[0] == 16 { 1 } else { 2 });
        let mut want = Vec::new();
        for r in 0..m {
            for p in &parts {
                let mut o = vec![0f32; p.rows()];
                p.gemv_tile(acts, r, 1, 0..p.rows(), &mut o);
                want.extend(o);
            }
        }
        let mut out = vec![0f32; m * 37];
        stacked.gemv_tile(acts, 0, m, 0..37, &mut out);
        assert_eq!(bits(&out), bits(&want), "{sizes:?}");
        let mut row = vec![0f32; cols];
        stacked.row_f32(20, &mut row);
        let mut own = vec![0f32; cols];
        let (p, i) = if sizes[0] == 16 { (1, 4) } else { (0, 20) };
        parts[p].row_f32(i, &mut own);
        assert_eq!(row, own, "{sizes:?}");
    }
}

#[test]
fn q8_0_keeps_one_scale_a_block_and_the_k_quants_bytes_two() {
    use super::interleaved::GROUP;
    let (rows, cols) = (GROUP, 256);
    let mut seed = 53;
    let mut bytes_of = |ty| {
        let bytes = random_matrix(ty, rows, cols, &mut seed);
        let w = QMatrix::from_ggml(ty, &bytes, rows, cols).unwrap();
        w.weight_ranges().iter().map(|&(_, n)| n).sum::<usize>()
    };
    // Per block of 32 columns: sixteen rows of 32 bytes plus sixteen f32 scales, or two sets
    // of sixteen (one per half block).
    assert_eq!(bytes_of(GgmlType::Q8_0), 8 * (GROUP * 32 + GROUP * 4));
    assert_eq!(bytes_of(GgmlType::Q6K), 8 * (GROUP * 32 + 2 * GROUP * 4));
}
