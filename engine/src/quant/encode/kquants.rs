//! The K-quant super-blocks, written as ggml's reference quantisers write them
//! (`quantize_row_q{2..6}_K_ref` in `ggml-quants.c`, no importance matrix): per sub-block a
//! scale search, then the sub-block scales quantised against the super-block's, then every
//! value requantised against the scale it will really be read with.

use half::f16;

use super::search::{
    GROUP_MAX_EPS, Qkx2, make_q3_quants, make_qkx2_quants, make_qx_quants, nearest_int,
};
use crate::quant::superblocks::QK_K;

fn half(v: f32) -> [u8; 2] {
    f16::from_f32(v).to_le_bytes()
}

/// What an f16 field reads back as.
fn rounded(v: f32) -> f32 {
    f16::from_f32(v).to_f32()
}

/// Two-bit levels of 256 values packed as Q2_K and Q3_K hold them: byte `32 h + l` of the
/// 64 has `L[128 h + l + 32 k]` in bits `2 k`.
fn pack_2bit(levels: &[u8; QK_K]) -> [u8; 64] {
    std::array::from_fn(|b| {
        let (h, l) = (b / 32, b % 32);
        (0..4).fold(0u8, |acc, k| {
            acc | (levels[128 * h + l + 32 * k] << (2 * k))
        })
    })
}

/// Q2_K (84 bytes): sixteen sub-blocks of 16, 4-bit scales and mins.
pub(super) fn q2_k(x: &[f32; QK_K], out: &mut Vec<u8>) {
    let mut levels = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; 16], [0f32; 16]);
    let search = Qkx2 {
        nmax: 3,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: true,
    };
    for j in 0..16 {
        let xs = &x[16 * j..16 * j + 16];
        let weights: Vec<f32> = xs.iter().map(|v| v.abs()).collect();
        (scales[j], mins[j]) =
            make_qkx2_quants(&search, xs, &weights, &mut levels[16 * j..16 * j + 16]);
    }
    let max_scale = scales.iter().fold(0f32, |m, &s| if s > m { s } else { m });
    let max_min = mins.iter().fold(0f32, |m, &s| if s > m { s } else { m });
    let mut sc = [0u8; 16];
    let mut d = 0f32;
    if max_scale > 0.0 {
        let iscale = 15.0 / max_scale;
        for (o, &s) in sc.iter_mut().zip(&scales) {
            *o = nearest_int(iscale * s) as u8;
        }
        d = max_scale / 15.0;
    }
    let mut dmin = 0f32;
    if max_min > 0.0 {
        let iscale = 15.0 / max_min;
        for (o, &m) in sc.iter_mut().zip(&mins) {
            *o |= (nearest_int(iscale * m) as u8) << 4;
        }
        dmin = max_min / 15.0;
    }
    let (dr, dminr) = (rounded(d), rounded(dmin));
    for (j, &s) in sc.iter().enumerate() {
        let dl = dr * f32::from(s & 0x0F);
        if dl == 0.0 {
            continue;
        }
        let ml = dminr * f32::from(s >> 4);
        for i in 16 * j..16 * j + 16 {
            levels[i] = nearest_int((x[i] + ml) / dl).clamp(0, 3) as u8;
        }
    }
    out.extend_from_slice(&sc);
    out.extend_from_slice(&pack_2bit(&levels));
    out.extend_from_slice(&half(d));
    out.extend_from_slice(&half(dmin));
}

/// Q3_K (110 bytes): sixteen sub-blocks of 16, signed 6-bit scales, a high-bit mask.
pub(super) fn q3_k(x: &[f32; QK_K], out: &mut Vec<u8>) {
    let mut levels = [0i8; QK_K];
    let mut scales = [0f32; 16];
    let (mut max_scale, mut amax) = (0f32, 0f32);
    for j in 0..16 {
        scales[j] = make_q3_quants(4, &x[16 * j..16 * j + 16], &mut levels[16 * j..16 * j + 16]);
        if scales[j].abs() > amax {
            amax = scales[j].abs();
            max_scale = scales[j];
        }
    }
    let mut sc = [0u8; 12];
    let mut d = 0f32;
    if max_scale != 0.0 {
        let iscale = -32.0 / max_scale;
        for (j, &s) in scales.iter().enumerate() {
            let l = ((nearest_int(iscale * s) as i8).clamp(-32, 31) + 32) as u8;
            if j < 8 {
                sc[j] = l & 0x0F;
            } else {
                sc[j - 8] |= (l & 0x0F) << 4;
            }
            sc[8 + j % 4] |= (l >> 4) << (2 * (j / 4));
        }
        d = 1.0 / iscale;
    }
    let dr = rounded(d);
    for j in 0..16 {
        let lo = if j < 8 { sc[j] & 0x0F } else { sc[j - 8] >> 4 };
        let s = (lo | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) as i8 - 32;
        let dl = dr * f32::from(s);
        if dl == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            levels[i] = (nearest_int(x[i] / dl).clamp(-4, 3) + 4) as i8;
        }
    }
    // High bit of value j in bit j / 32 of mask byte j % 32; the two low bits packed as Q2_K.
    let mut hmask = [0u8; 32];
    let mut low = [0u8; QK_K];
    for (j, &l) in levels.iter().enumerate() {
        let l = l as u8;
        if l > 3 {
            hmask[j % 32] |= 1 << (j / 32);
        }
        low[j] = l & 3;
    }
    out.extend_from_slice(&hmask);
    out.extend_from_slice(&pack_2bit(&low));
    out.extend_from_slice(&sc);
    out.extend_from_slice(&half(d));
}

/// Q4_K and Q5_K's sub-block search: eight sub-blocks of 32 with 6-bit scales and mins, each
/// value's weight `rms(sub-block) + |x|`. Returns the header (`d, dmin, 12 scale bytes`) and
/// the levels requantised against the stored scales.
fn k4_scales(x: &[f32; QK_K], nmax: i32, search: &Qkx2) -> ([u8; 16], [u8; QK_K]) {
    let mut levels = [0u8; QK_K];
    let (mut scales, mut mins) = ([0f32; 8], [0f32; 8]);
    for j in 0..8 {
        let xs = &x[32 * j..32 * j + 32];
        let sum_x2: f32 = xs.iter().fold(0f32, |s, v| s + v * v);
        let av_x = (sum_x2 / 32.0).sqrt();
        let weights: Vec<f32> = xs.iter().map(|v| av_x + v.abs()).collect();
        (scales[j], mins[j]) =
            make_qkx2_quants(search, xs, &weights, &mut levels[32 * j..32 * j + 32]);
    }
    let max_scale = scales.iter().fold(0f32, |m, &s| if s > m { s } else { m });
    let max_min = mins.iter().fold(0f32, |m, &s| if s > m { s } else { m });
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut sc = [0u8; 12];
    for j in 0..8 {
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0x0F) | ((lm & 0x0F) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    let (d, dmin) = (max_scale / 63.0, max_min / 63.0);
    let (dr, dminr) = (rounded(d), rounded(dmin));
    for (j, (s, m)) in crate::quant::superblocks::scale_min_k4(&sc)
        .into_iter()
        .enumerate()
    {
        let dl = dr * f32::from(s);
        if dl == 0.0 {
            continue;
        }
        let dm = dminr * f32::from(m);
        for i in 32 * j..32 * j + 32 {
            levels[i] = nearest_int((x[i] + dm) / dl).clamp(0, nmax) as u8;
        }
    }
    let mut header = [0u8; 16];
    header[..2].copy_from_slice(&half(d));
    header[2..4].copy_from_slice(&half(dmin));
    header[4..].copy_from_slice(&sc);
    (header, levels)
}

/// Q4_K (144 bytes).
pub(super) fn q4_k(x: &[f32; QK_K], out: &mut Vec<u8>) {
    let search = Qkx2 {
        nmax: 15,
        rmin: -1.0,
        rdelta: 0.1,
        nstep: 20,
        use_mad: false,
    };
    let (header, levels) = k4_scales(x, 15, &search);
    out.extend_from_slice(&header);
    // Byte 32 g + l: value 64 g + l in the low nibble, 64 g + 32 + l in the high one.
    out.extend((0..128).map(|b| {
        let (g, l) = (b / 32, b % 32);
        levels[64 * g + l] | (levels[64 * g + 32 + l] << 4)
    }));
}

/// Q5_K (176 bytes).
pub(super) fn q5_k(x: &[f32; QK_K], out: &mut Vec<u8>) {
    let search = Qkx2 {
        nmax: 31,
        rmin: -0.5,
        rdelta: 0.1,
        nstep: 15,
        use_mad: false,
    };
    let (header, levels) = k4_scales(x, 31, &search);
    out.extend_from_slice(&header);
    // High bit of value j in bit j / 32 of byte j % 32; nibbles as Q4_K.
    let mut qh = [0u8; 32];
    for (j, &l) in levels.iter().enumerate() {
        qh[j % 32] |= (l >> 4) << (j / 32);
    }
    out.extend_from_slice(&qh);
    out.extend((0..128).map(|b| {
        let (g, l) = (b / 32, b % 32);
        (levels[64 * g + l] & 0x0F) | ((levels[64 * g + 32 + l] & 0x0F) << 4)
    }));
}

/// Q6_K (210 bytes): sixteen sub-blocks of 16, signed 8-bit scales.
pub(super) fn q6_k(x: &[f32; QK_K], out: &mut Vec<u8>) {
    let mut levels = [0i8; QK_K];
    let mut scales = [0f32; 16];
    let (mut max_scale, mut max_abs) = (0f32, 0f32);
    for j in 0..16 {
        scales[j] = make_qx_quants(
            32,
            &x[16 * j..16 * j + 16],
            &mut levels[16 * j..16 * j + 16],
        );
        if scales[j].abs() > max_abs {
            max_abs = scales[j].abs();
            max_scale = scales[j];
        }
    }
    if max_abs < GROUP_MAX_EPS {
        out.extend_from_slice(&[0u8; 210]);
        return;
    }
    let iscale = -128.0 / max_scale;
    let d = 1.0 / iscale;
    let sc: [i8; 16] = std::array::from_fn(|j| nearest_int(iscale * scales[j]).min(127) as i8);
    let dr = rounded(d);
    for (j, &s) in sc.iter().enumerate() {
        let dl = dr * f32::from(s);
        if dl == 0.0 {
            continue;
        }
        for i in 16 * j..16 * j + 16 {
            levels[i] = (nearest_int(x[i] / dl).clamp(-32, 31) + 32) as i8;
        }
    }
    let l = |i: usize| levels[i] as u8;
    // Per half h of 128: ql[64 h + l] holds values l (low) and l + 64 (high nibble),
    // ql[64 h + 32 + l] values l + 32 and l + 96; qh[32 h + l] the top two bits of all four.
    let mut ql = [0u8; 128];
    let mut qh = [0u8; 64];
    for h in 0..2 {
        let base = 128 * h;
        for i in 0..32 {
            let q = [0, 32, 64, 96].map(|k| l(base + i + k));
            ql[64 * h + i] = (q[0] & 0x0F) | ((q[2] & 0x0F) << 4);
            ql[64 * h + 32 + i] = (q[1] & 0x0F) | ((q[3] & 0x0F) << 4);
            qh[32 * h + i] =
                (q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6);
        }
    }
    out.extend_from_slice(&ql);
    out.extend_from_slice(&qh);
    out.extend(sc.iter().map(|&s| s as u8));
    out.extend_from_slice(&half(d));
}
