//! Shared wire types of tokenscale: one definition of every name that crosses a process
//! boundary (OpenAI API shapes, metric names, header names, `hf://` model sources) and the
//! performance model used by both the engine's `sim` backend and `tokenscale sim`.

pub mod duration;
pub mod engines;
pub mod exposition;
pub mod glob;
pub mod headers;
pub mod hub_source;
pub mod metrics;
pub mod openai;
pub mod perf_model;
pub mod priority;
pub mod prom_text;
pub mod served_name;
