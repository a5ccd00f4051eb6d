//! tokenscale-engine: one serving replica. Loads a GGUF model, runs the Llama-family forward
//! over a paged KV cache, and batches requests continuously behind an OpenAI-compatible API.
//!
//! Module map (each folder owns one concept):
//! - `gguf`: the model file format (metadata, tensor infos, mmap).
//! - `quant`: quantised block formats, dequantisation and quantised dot products.
//! - `model`: model configuration and the Llama-family forward (CPU reference).
//! - `backend`: the trait every compute backend implements, and the backends.
//! - `kv`: KV block pool, block tables, prefix cache (pure bookkeeping, no tensors).
//! - `lora`: LoRA adapters beside the base model: PEFT folders, the LRU set, the per-row delta.
//! - `sched`: the iteration-level scheduler (pure).
//! - `runtime`: the engine loop (owns scheduler, KV manager and backend; channels in and out).
//! - `server`: the OpenAI-compatible HTTP server (`serve`), metrics, graceful drain.
//! - `tokenizer`: tokenizer and chat template from GGUF metadata, incremental detokenisation.
//! - `sampling`: logits → next token (greedy, temperature, top-k/p, min-p, penalties).
//! - `spec`: speculative decoding: n-gram drafts, their length, the verify loop (pure).
//! - `grammar`: constrained decoding (JSON schema, regex, choices, Lark) as token masks.
//! - `tools`: tool calling: rendering tools into the prompt, parsing each model family's calls.
//! - `reasoning`: a reasoning model's `<think>…</think>` split out of the answer, per family.
//! - `fetch`: model aliases and the cached download of the default model.
//! - `cli`: the `tokenscale-engine` subcommands.

pub mod backend;
pub mod cli;
pub mod error;
pub mod fetch;
pub mod gguf;
pub mod grammar;
pub mod kv;
pub mod lora;
pub mod model;
pub mod quant;
pub mod reasoning;
pub mod runtime;
pub mod sampling;
pub mod sched;
pub mod server;
pub mod spec;
pub mod tokenizer;
pub mod tools;

pub use error::{Error, Result};
