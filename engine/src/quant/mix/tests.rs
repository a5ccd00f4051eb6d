//! The mixes against llama.cpp's rules on two shapes: SmolLM2-135M (rows of 576, most
//! K-quants fall back to 32-element types) and a Llama-3-8B-like model (rows of 4096).

use super::*;

fn smollm2_tensors() -> Vec<(String, Vec<u64>)> {
    let mut t = vec![("token_embd.weight".to_string(), vec![576, 49152])];
    for i in 0..30 {
        for (name, dims) in [
            ("attn_norm.weight", vec![576]),
            ("attn_q.weight", vec![576, 576]),
            ("attn_k.weight", vec![576, 192]),
            ("attn_v.weight", vec![576, 192]),
            ("attn_output.weight", vec![576, 576]),
            ("ffn_gate.weight", vec![576, 1536]),
            ("ffn_up.weight", vec![576, 1536]),
            ("ffn_down.weight", vec![1536, 576]),
        ] {
            t.push((format!("blk.{i}.{name}"), dims));
        }
    }
    t.push(("output_norm.weight".to_string(), vec![576]));
    t
}

fn types(
    ftype: FileType,
    model: &ModelShape,
    tensors: &[(String, Vec<u64>)],
) -> Vec<(String, GgmlType)> {
    let shapes: Vec<TensorShape<'_>> = tensors
        .iter()
        .map(|(n, d)| TensorShape {
            name: n,
            dims: d,
            ty: GgmlType::F32,
        })
        .collect();
    let chosen = choose_types(ftype, model, &shapes);
    tensors.iter().map(|t| t.0.clone()).zip(chosen).collect()
}

fn get(types: &[(String, GgmlType)], name: &str) -> GgmlType {
    types
        .iter()
        .find(|t| t.0 == name)
        .map(|t| t.1)
        .expect("tensor")
}

#[test]
fn q4_k_m_on_smollm2_falls_back_where_rows_are_576() {
    let model = ModelShape {
        arch: "llama".into(),
        n_layer: 30,
        n_gqa: 3,
        n_expert: 0,
    };
    let t = types(FileType::Q4_K_M, &model, &smollm2_tensors());
    // Tied embeddings take the output's Q6_K, which needs rows of 256: Q8_0.
    assert_eq!(get(&t, "token_embd.weight"), GgmlType::Q8_0);
    assert_eq!(get(&t, "blk.0.attn_norm.weight"), GgmlType::F32);
    // Q4_K → Q5_0 on rows of 576.
    assert_eq!(get(&t, "blk.5.attn_q.weight"), GgmlType::Q5_0);
    assert_eq!(get(&t, "blk.5.ffn_up.weight"), GgmlType::Q5_0);
    // attn_v: Q6_K (→ Q8_0) in the first/last eighth and every third layer, else Q5_0.
    assert_eq!(get(&t, "blk.0.attn_v.weight"), GgmlType::Q8_0);
    assert_eq!(get(&t, "blk.5.attn_v.weight"), GgmlType::Q8_0);
    assert_eq!(get(&t, "blk.6.attn_v.weight"), GgmlType::Q5_0);
    // ffn_down has rows of 1536: real K-quants, Q6_K on the use_more_bits layers.
    let downs: Vec<GgmlType> = (0..30)
        .map(|i| get(&t, &format!("blk.{i}.ffn_down.weight")))
        .collect();
    for (i, ty) in downs.iter().enumerate() {
        let want = if use_more_bits(i, 30) {
            GgmlType::Q6K
        } else {
            GgmlType::Q4K
        };
        assert_eq!(*ty, want, "layer {i}");
    }
    assert_eq!(downs.iter().filter(|t| **t == GgmlType::Q6K).count(), 14);
}

#[test]
fn use_more_bits_matches_llama_cpp() {
    // n = 30: i < 3, i ≥ 26, or (i − 3) % 3 == 2 (C's % on a negative i − 3 is never 2).
    let more: Vec<usize> = (0..30).filter(|&i| use_more_bits(i, 30)).collect();
    assert_eq!(more, [0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29]);
}

#[test]
fn q5_k_m_q6_k_and_q3_k_m_on_an_8b_shape() {
    let model = ModelShape {
        arch: "llama".into(),
        n_layer: 32,
        n_gqa: 4,
        n_expert: 0,
    };
    let mut tensors = vec![
        ("token_embd.weight".to_string(), vec![4096, 128256]),
        ("output.weight".to_string(), vec![4096, 128256]),
    ];
    for i in 0..32 {
        tensors.push((format!("blk.{i}.attn_v.weight"), vec![4096, 1024]));
        tensors.push((format!("blk.{i}.attn_output.weight"), vec![4096, 4096]));
        tensors.push((format!("blk.{i}.ffn_down.weight"), vec![14336, 4096]));
    }
    let t = types(FileType::Q4_K_M, &model, &tensors);
    assert_eq!(get(&t, "token_embd.weight"), GgmlType::Q4K);
    assert_eq!(get(&t, "output.weight"), GgmlType::Q6K);
    assert_eq!(get(&t, "blk.0.attn_v.weight"), GgmlType::Q6K);
    assert_eq!(get(&t, "blk.7.attn_v.weight"), GgmlType::Q4K);
    assert_eq!(get(&t, "blk.6.attn_output.weight"), GgmlType::Q4K);
    let t = types(FileType::Q5_K_M, &model, &tensors);
    assert_eq!(get(&t, "blk.7.ffn_down.weight"), GgmlType::Q5K);
    assert_eq!(get(&t, "blk.6.ffn_down.weight"), GgmlType::Q6K);
    let t = types(FileType::Q6_K, &model, &tensors);
    assert!(t.iter().all(|(_, ty)| *ty == GgmlType::Q6K));
    let t = types(FileType::Q3_K_M, &model, &tensors);
    assert_eq!(get(&t, "blk.0.attn_v.weight"), GgmlType::Q5K);
    assert_eq!(get(&t, "blk.2.attn_v.weight"), GgmlType::Q4K);
    assert_eq!(get(&t, "blk.0.ffn_down.weight"), GgmlType::Q5K);
    assert_eq!(get(&t, "blk.9.ffn_down.weight"), GgmlType::Q4K);
    assert_eq!(get(&t, "blk.9.attn_output.weight"), GgmlType::Q4K);
}

#[test]
fn file_type_names_parse_and_print() {
    for name in ["Q4_K_M", "q5_k_m", "Q6_K", "Q8_0", "Q3_K_S"] {
        let f: FileType = name.parse().expect("known");
        assert_eq!(f.to_string(), name.to_uppercase());
    }
    let err = "IQ4_XS".parse::<FileType>().expect_err("refused");
    assert!(err.contains("IQ4_XS") && err.contains("Q4_K_M"), "{err}");
    assert_eq!(FileType::Q4_K_M.id(), 15);
}

#[test]
fn llama_order_puts_blocks_in_numeric_order_after_the_rest() {
    let names = [
        "blk.10.a",
        "token_embd.weight",
        "blk.2.b",
        "blk.2.a",
        "output_norm.weight",
    ];
    let order: Vec<&str> = llama_order(&names).into_iter().map(|i| names[i]).collect();
    assert_eq!(
        order,
        [
            "output_norm.weight",
            "token_embd.weight",
            "blk.2.a",
            "blk.2.b",
            "blk.10.a"
        ]
    );
}
