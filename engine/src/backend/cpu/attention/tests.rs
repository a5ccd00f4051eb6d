//! The fast path (both kernels) against the f32 reference on random heads, contexts that end
//! inside, at and past groups of eight slots, and scattered blocks of odd sizes.
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

use super::*;
use crate::backend::cpu::kv_store::{F16Bits, KvElem, KvStore};

/// A small deterministic generator (xorshift), values in [-2, 2).
struct Gen(u64);
impl Gen {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
    }
}

/// Both stores hold the same keys and values (the f32 one holds them already rounded to f16,
/// so the comparison measures the kernels, not the rounding).
fn stores(
    heads: Heads,
    block_size: usize,
    table: &[u32],
    ctx: usize,
    seed: u64,
) -> (KvStore<f32>, KvStore<F16Bits>) {
    let num_blocks = *table.iter().max().unwrap() as usize + 1;
    let (kvh, hd) = (heads.num_kv_heads, heads.head_dim);
    let mut exact = KvStore::<f32>::new(1, num_blocks, block_size, kvh, hd).unwrap();
    let mut half = KvStore::<F16Bits>::new(1, num_blocks, block_size, kvh, hd).unwrap();
    let mut rng = Gen(seed);
    for pos in 0..ctx {
        let row = |rng: &mut Gen| -> Vec<f32> {
            (0..kvh * hd)
                .map(|_| F16Bits::from_f32(rng.next()).to_f32())
                .collect()
        };
        let (k, v) = (row(&mut rng), row(&mut rng));
        exact.write(0, table, pos, &k, &v);
        half.write(0, table, pos, &k, &v);
    }
    (exact, half)
}

/// Runs `attend` for every KV head of one token (`q`: `[heads, head_dim]`) into `out`.
fn each_head(
    heads: Heads,
    q: &[f32],
    place: TokenPlace<'_>,
    out: &mut [f32],
    mut attend: impl FnMut(Token<'_>, &mut [f32]),
) {
    let group_dim = heads.group() * heads.head_dim;
    for (g, (q, out)) in q
        .chunks_exact(group_dim)
        .zip(out.chunks_exact_mut(group_dim))
        .enumerate()
    {
        attend(
            Token {
                q,
                kv_head: g,
                place,
            },
            out,
        );
    }
}

fn check(heads: Heads, block_size: usize, ctx: usize) {
    let blocks_needed = ctx.div_ceil(block_size);
    // Scattered, descending block ids: the kernels must follow the table.
    let table: Vec<u32> = (0..blocks_needed as u32)
        .map(|b| 3 * (blocks_needed as u32 - b))
        .collect();
    let (exact, half) = stores(heads, block_size, &table, ctx, 7 + ctx as u64);
    let mut rng = Gen(99 + ctx as u64);
    let q: Vec<f32> = (0..heads.num_heads * heads.head_dim)
        .map(|_| rng.next())
        .collect();
    let place = TokenPlace {
        pos: ctx - 1,
        block_table: &table,
    };
    let q_dim = q.len();
    let mut want = vec![0f32; q_dim];
    each_head(heads, &q, place, &mut want, |token, out| {
        reference::attend(token, &exact, 0, heads, &mut Scratch::default(), out)
    });
    let plans = [fast::Plan::detect(heads), fast::Plan::portable()];
    for plan in plans {
        let mut got = vec![0f32; q_dim];
        let mut scratch = Scratch::default();
        each_head(heads, &q, place, &mut got, |token, out| {
            fast::attend(plan, token, &half, 0, heads, &mut scratch, out)
        });
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
                "{plan:?}, heads {heads:?}, block {block_size}, ctx {ctx}: out[{i}] = {g}, reference {w}"
            );
        }
    }
}

#[test]
fn fast_path_matches_the_reference() {
    let smollm = Heads {
        num_heads: 9,
        num_kv_heads: 3,
        head_dim: 64,
    };
    let wide = Heads {
        num_heads: 4,
        num_kv_heads: 1,
        head_dim: 136, // two 64-dimension passes and a tail of 8
    };
    for ctx in [1, 7, 8, 9, 16, 17, 31, 100] {
        check(smollm, 16, ctx);
        check(smollm, 5, ctx);
        check(wide, 16, ctx);
    }
}

#[test]
fn a_token_attends_the_same_whatever_its_scratch_held() {
    let heads = Heads {
        num_heads: 2,
        num_kv_heads: 2,
        head_dim: 8,
    };
    let table = [0u32, 1, 2];
    let (_, half) = stores(heads, 16, &table, 40, 3);
    let q = [0.5f32; 16];
    let run = |ctx: usize, scratch: &mut Scratch| {
        let mut out = vec![0f32; 16];
        let place = TokenPlace {
            pos: ctx - 1,
            block_table: &table,
        };
        each_head(heads, &q, place, &mut out, |token, out| {
            fast::attend(
                fast::Plan::detect(heads),
                token,
                &half,
                0,
                heads,
                scratch,
                out,
            )
        });
        out
    };
    let fresh = run(9, &mut Scratch::default());
    let mut used = Scratch::default();
    run(40, &mut used);
    assert_eq!(run(9, &mut used), fresh);
}

/// The 512-bit value pass gives the 256-bit one's bits: heads of 64 dimensions and of 80 (a
/// 16-dimension tail), groups of 3 and of 5 (four heads at a time, then one).
#[test]
fn the_wide_value_pass_gives_the_narrow_ones_bits() {
    let plan = |heads| fast::Plan::detect(heads);
    for heads in [
        Heads {
            num_heads: 9,
            num_kv_heads: 3,
            head_dim: 64,
        },
        Heads {
            num_heads: 5,
            num_kv_heads: 1,
            head_dim: 80,
        },
    ] {
        if plan(heads).narrow() == plan(heads) {
            return; // this CPU has no 512-bit pass to compare
        }
        for (block_size, ctx) in [(16usize, 1usize), (16, 17), (16, 100), (5, 33)] {
            let table: Vec<u32> = (0..ctx.div_ceil(block_size) as u32).rev().collect();
            let (_, half) = stores(heads, block_size, &table, ctx, 3 + ctx as u64);
            let mut rng = Gen(5 + ctx as u64);
            let q: Vec<f32> = (0..heads.num_heads * heads.head_dim)
                .map(|_| rng.next())
                .collect();
            let place = TokenPlace {
                pos: ctx - 1,
                block_table: &table,
            };
            let run = |plan: fast::Plan| {
                let mut out = vec![0f32; q.len()];
                each_head(heads, &q, place, &mut out, |token, out| {
                    fast::attend(plan, token, &half, 0, heads, &mut Scratch::default(), out)
                });
                out.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
            };
            assert_eq!(
                run(plan(heads)),
                run(plan(heads).narrow()),
                "{heads:?}, block {block_size}, ctx {ctx}"
            );
        }
    }
}
