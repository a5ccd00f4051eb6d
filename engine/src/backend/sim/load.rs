//! Starting a server on the sim backend: the profile (a file or the built-in default), the
//! byte-level tokenizer, and the batch limits the profile describes.

use std::path::Path;

use tokenscale_common::perf_model::PerfProfile;

use super::{SimBackend, SimVocab};
use crate::server::{LoadError, LoadedModel, ServeConfig, start_engine};
use crate::tokenizer::Tokenizer;

/// The default profile: a Llama-3-8B-class model on one H100 (the same figures as the CLI's
/// bundled `llama3-8b-h100` profile, which documents their source).
pub const DEFAULT_PROFILE_YAML: &str = "
name: llama3-8b-h100
description: Llama-3-8B bf16 on one H100 80GB SXM (vLLM-class engine)
source: published model and H100 figures; see the CLI's bundled profile
gpus_per_replica: 1
step: {t0_s: 0.0065, prefill_s_per_token: 0.0000295, decode_s_per_seq: 0.00002, kv_read_s_per_token: 0.000000051}
kv: {block_tokens: 16, blocks: 24750}
max_num_seqs: 256
max_batch_tokens: 8192
cold_start_s: 60
";

/// Context length the sim model claims (prompt plus completion), in tokens.
const SIM_CONTEXT_TOKENS: usize = 32_768;

/// Reads a profile file, or the default when `path` is `None`.
pub fn read_profile(path: Option<&Path>) -> Result<PerfProfile, LoadError> {
    let config_error = |message: String| LoadError::Config(message);
    let text = match path {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| config_error(format!("sim profile {}: {e}", path.display())))?,
        None => DEFAULT_PROFILE_YAML.to_string(),
    };
    PerfProfile::from_yaml(&text).map_err(|e| config_error(format!("sim profile: {e}")))
}

/// Starts the engine loop over a sim backend following `profile`. The profile's KV budget
/// and batch limits replace the server's (they describe the modelled hardware).
pub fn load_sim(config: &ServeConfig, profile: PerfProfile) -> Result<LoadedModel, LoadError> {
    let tokenizer = Tokenizer::from_spec(&SimVocab::new().tokenizer_spec())?;
    let mut config = config.clone();
    config.max_num_seqs = profile.max_num_seqs as usize;
    config.max_batch_tokens = profile.max_batch_tokens as usize;
    config.block_size = profile.kv.block_tokens as usize;
    config.kv_cache_tokens = profile.kv_capacity_tokens() as usize;
    let backend = SimBackend::new(profile, SIM_CONTEXT_TOKENS);
    start_engine(Box::new(backend), tokenizer, &config)
}
