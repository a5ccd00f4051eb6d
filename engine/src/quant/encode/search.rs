//! llama.cpp's scale searches for the K-quants (`make_qx_quants`, `make_q3_quants`,
//! `make_qkx2_quants` of `ggml-quants.c`, without an importance matrix), ported operation
//! for operation so a file this quantiser writes matches what `llama-quantize` writes.

/// Round to nearest, ties to even, through the float adder (ggml's `nearest_int`): valid for
/// `|x| ≤ 2^22`, which every caller's values are.
pub(super) fn nearest_int(x: f32) -> i32 {
    let v = x + 12_582_912.0;
    (v.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// Below this every value of a group counts as zero (ggml's `GROUP_MAX_EPS`).
pub(super) const GROUP_MAX_EPS: f32 = 1e-15;

/// The value of largest magnitude (the first one on ties) and that magnitude.
fn signed_max(x: &[f32]) -> (f32, f32) {
    let (mut max, mut amax) = (0f32, 0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    (max, amax)
}

/// Symmetric levels `L[i] − nmax` in `−nmax .. nmax` and their scale, weighting errors by
/// `x²` and trying 18 scales around `nmax / max` (`rmse_type` 1, Q6_K's search).
pub(super) fn make_qx_quants(nmax: i32, x: &[f32], levels: &mut [i8]) -> f32 {
    let (max, amax) = signed_max(x);
    if amax < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    let clamp = |l: i32| l.clamp(-nmax, nmax - 1);
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0f32, 0f32);
        for &v in x {
            let l = clamp(nearest_int(iscale * v));
            let w = v * v;
            sumlx += w * v * l as f32;
            suml2 += w * l as f32 * l as f32;
        }
        (sumlx, suml2)
    };
    let fill = |iscale: f32, levels: &mut [i8]| {
        for (o, &v) in levels.iter_mut().zip(x) {
            *o = (nmax + clamp(nearest_int(iscale * v))) as i8;
        }
    };
    let iscale = -(nmax as f32) / max;
    fill(iscale, levels);
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        let iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            fill(iscale, levels);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Q3_K's search: levels in `0 .. 2 nmax` (offset by `nmax`) refined one at a time for five
/// passes, errors weighted by `x²`.
pub(super) fn make_q3_quants(nmax: i32, x: &[f32], levels: &mut [i8]) -> f32 {
    let (max, amax) = signed_max(x);
    if amax < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0f32, 0f32);
    for (o, &v) in levels.iter_mut().zip(x) {
        let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *o = l as i8;
        let w = v * v;
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    for _ in 0..5 {
        let mut changed = 0;
        for (i, &v) in x.iter().enumerate() {
            let w = v * v;
            let li = f32::from(levels[i]);
            let mut slx = sumlx - w * v * li;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * li * li;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != i32::from(levels[i]) {
                    slx += w * v * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        levels[i] = new_l as i8;
                        sumlx = slx;
                        suml2 = sl2;
                        changed += 1;
                    }
                }
            }
        }
        if changed == 0 {
            break;
        }
    }
    for l in levels.iter_mut() {
        *l += nmax as i8;
    }
    if suml2 > 0.0 { sumlx / suml2 } else { 0.0 }
}

/// How [`make_qkx2_quants`] searches.
pub(super) struct Qkx2 {
    pub nmax: i32,
    pub rmin: f32,
    pub rdelta: f32,
    pub nstep: i32,
    /// Absolute errors (Q2_K) instead of squared ones.
    pub use_mad: bool,
}

/// Asymmetric levels `0 ..= nmax` with a scale and a minimum, chosen by weighted least
/// squares over `nstep + 1` candidate scales. Returns `(scale, −min)`.
pub(super) fn make_qkx2_quants(
    p: &Qkx2,
    x: &[f32],
    weights: &[f32],
    levels: &mut [u8],
) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        min = min.min(x[i]);
        max = max.max(x[i]);
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        levels.fill(0);
        return (0.0, -min);
    }
    let err = |d: f32| if p.use_mad { d.abs() } else { d * d };
    let level =
        |iscale: f32, v: f32, min: f32| nearest_int(iscale * (v - min)).clamp(0, p.nmax) as u8;
    let iscale = p.nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0f32;
    for i in 0..n {
        levels[i] = level(iscale, x[i], min);
        best_error += weights[i] * err(scale * f32::from(levels[i]) + min - x[i]);
    }
    if p.nstep < 1 {
        return (scale, -min);
    }
    let mut aux = [0u8; 32];
    let aux = &mut aux[..n];
    for is in 0..=p.nstep {
        // `min` moves when a candidate wins, and later candidates start from it (as ggml's).
        let iscale = (p.rmin + p.rdelta * is as f32 + p.nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0f32, 0f32, 0f32);
        for i in 0..n {
            let l = level(iscale, x[i], min);
            aux[i] = l;
            let (w, l) = (weights[i], f32::from(l));
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0f32;
            for i in 0..n {
                cur_error += weights[i] * err(this_scale * f32::from(aux[i]) + this_min - x[i]);
            }
            if cur_error < best_error {
                levels.copy_from_slice(aux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}
