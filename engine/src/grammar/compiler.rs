//! One per model: llguidance's parser factory over the model's vocabulary (built once, ~0.3 s
//! for 49k tokens), turning each request's [`Grammar`] into a fresh [`Constraint`] (~1 ms).
//! [`LazyCompiler`] builds it on the first constrained request, so engines that never see one
//! (a simulated fleet, most tests) never pay for it.

use std::sync::{Arc, OnceLock};

use llguidance::{Matcher, ParserFactory};

use super::vocab::EngineTokEnv;
use super::{Constraint, Grammar, GrammarError};
use crate::tokenizer::Tokenizer;

/// Compiles grammars against one model's vocabulary.
pub struct GrammarCompiler {
    factory: ParserFactory,
    eos_ids: Arc<[u32]>,
    vocab_size: usize,
}

impl std::fmt::Debug for GrammarCompiler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarCompiler")
            .field("vocab_size", &self.vocab_size)
            .field("eos_ids", &self.eos_ids)
            .finish_non_exhaustive()
    }
}

impl GrammarCompiler {
    /// A compiler for `tokenizer`'s tokens over logits rows of `vocab_size`.
    pub fn new(tokenizer: Arc<Tokenizer>, vocab_size: usize) -> Result<Self, GrammarError> {
        let eos_ids: Arc<[u32]> = tokenizer
            .eos_token_ids()
            .iter()
            .copied()
            .filter(|&id| (id as usize) < vocab_size)
            .collect();
        let Some(&eos) = eos_ids.first() else {
            return Err(GrammarError::Vocabulary(
                "the model has no end-of-sequence token, so no grammar could end".into(),
            ));
        };
        let env = EngineTokEnv::new(tokenizer, vocab_size, eos)?;
        let env: llguidance::toktrie::TokEnv = Arc::new(env);
        let mut factory = ParserFactory::new_simple(&env)
            .map_err(|e| GrammarError::Vocabulary(format!("{e:#}")))?;
        // Grammar errors reach the client as 400s; nothing for stderr.
        factory.quiet();
        Ok(Self {
            factory,
            eos_ids,
            vocab_size,
        })
    }

    /// A fresh constraint for `grammar`; a grammar that is invalid or asks for what the engine
    /// cannot enforce is [`GrammarError::Unsupported`] naming its request field.
    pub fn compile(&self, grammar: &Grammar) -> Result<Constraint, GrammarError> {
        let top = grammar.to_llguidance()?;
        let parser = self
            .factory
            .create_parser(top)
            .map_err(|e| GrammarError::unsupported(grammar.param(), format!("{e:#}")))?;
        let matcher = Matcher::new(Ok(parser));
        if let Some(err) = matcher.get_error() {
            return Err(GrammarError::unsupported(grammar.param(), err));
        }
        Ok(Constraint::new(
            matcher,
            self.eos_ids.clone(),
            self.vocab_size,
        ))
    }

    /// Width of the masks this compiler's constraints produce.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }
}

/// A [`GrammarCompiler`] built on first use (or the reason it cannot be).
#[derive(Debug)]
pub struct LazyCompiler {
    tokenizer: Arc<Tokenizer>,
    vocab_size: usize,
    cell: OnceLock<Result<Arc<GrammarCompiler>, String>>,
}

impl LazyCompiler {
    /// A compiler for `tokenizer` over logits rows of `vocab_size`, not built yet.
    pub fn new(tokenizer: Arc<Tokenizer>, vocab_size: usize) -> Self {
        Self {
            tokenizer,
            vocab_size,
            cell: OnceLock::new(),
        }
    }

    /// The compiler, built now if this is the first call (blocking: ~0.3 s for 49k tokens).
    pub fn get(&self) -> Result<Arc<GrammarCompiler>, String> {
        self.cell
            .get_or_init(|| {
                let started = std::time::Instant::now();
                let built = GrammarCompiler::new(self.tokenizer.clone(), self.vocab_size)
                    .map(Arc::new)
                    .map_err(|e| e.to_string());
                match &built {
                    Ok(_) => tracing::info!(
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        vocab_size = self.vocab_size,
                        "grammar vocabulary built"
                    ),
                    Err(err) => tracing::warn!("constrained decoding unavailable: {err}"),
                }
                built
            })
            .clone()
    }
}
