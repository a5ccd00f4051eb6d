//! Starting a server on the sim backend: the profile (a bundled one by name, or a file), the
//! byte-level tokenizer, and the batch limits the profile describes.

use std::path::Path;

use tokenscale_common::metrics::engine::{START_PHASE_FETCH, START_PHASE_LOAD};
use tokenscale_common::perf_model::{PerfProfile, bundled_profile, bundled_profile_names};

use super::{SimBackend, SimVocab};
use crate::runtime::StartClock;
use crate::server::{LoadError, LoadedModel, ServeConfig, start_warmed};
use crate::tokenizer::Tokenizer;

/// The profile used when none is named: a Llama-3-8B-class model on one H100.
pub const DEFAULT_PROFILE: &str = "llama3-8b-h100";

/// Context length the sim model claims (prompt plus completion), in tokens.
const SIM_CONTEXT_TOKENS: usize = 32_768;

/// Reads `name_or_path`: a bundled profile's name, else a profile file; the default when
/// `None`. A name that is neither says which names exist.
pub fn read_profile(name_or_path: Option<&str>) -> Result<PerfProfile, LoadError> {
    let config_error = |message: String| LoadError::Config(message);
    let name_or_path = name_or_path.unwrap_or(DEFAULT_PROFILE);
    let text = match bundled_profile(name_or_path) {
        Some(text) => text.to_string(),
        None => std::fs::read_to_string(Path::new(name_or_path)).map_err(|e| {
            config_error(format!(
                "sim profile {name_or_path:?} is neither a bundled profile ({}) nor a readable file: {e}",
                bundled_profile_names()
            ))
        })?,
    };
    PerfProfile::from_yaml(&text).map_err(|e| config_error(format!("sim profile: {e}")))
}

/// Starts the engine loop over a sim backend following `profile`. The profile's KV budget
/// and batch limits replace the server's (they describe the modelled hardware).
pub fn load_sim(config: &ServeConfig, profile: PerfProfile) -> Result<LoadedModel, LoadError> {
    // No weights: nothing to fetch, and loading is building the tokenizer and the backend.
    let mut clock = StartClock::from_process_start();
    clock.end(START_PHASE_FETCH);
    let tokenizer = Tokenizer::from_spec(&SimVocab::new().tokenizer_spec())?;
    let mut config = config.clone();
    config.max_num_seqs = profile.max_num_seqs as usize;
    config.max_batch_tokens = profile.max_batch_tokens as usize;
    config.block_size = profile.kv.block_tokens as usize;
    config.kv_cache_tokens = profile.kv_capacity_tokens() as usize;
    let backend = SimBackend::new(profile, SIM_CONTEXT_TOKENS);
    clock.end(START_PHASE_LOAD);
    start_warmed(Box::new(backend), tokenizer, &config, clock)
}
