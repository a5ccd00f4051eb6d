//! tokenizer (being written).
