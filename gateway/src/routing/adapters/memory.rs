//! What the gateway believes a replica holds in memory: the adapters it last sent there and
//! those its `/metrics` named, in least-recently-used order, bounded like the engine's cache.

use std::collections::VecDeque;

/// What one scrape of `vllm:lora_requests_info` tells (its newest series).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoraInfo {
    /// Adapters of the requests running now.
    pub running: Vec<String>,
    /// Adapters of the requests waiting now.
    pub waiting: Vec<String>,
    /// Adapters the engine keeps in memory at most (`max_lora`), when it said.
    pub max_lora: Option<usize>,
}

/// Adapters kept in mind per replica before the engine says its bound: our engine's
/// `--max-loras` default (vLLM's is 1, and it exports `max_lora`).
pub const DEFAULT_MAX_LORAS: usize = 4;

/// The adapters a replica likely holds, most recent last. An engine evicts the least
/// recently used adapter past its bound, so the same rule here tracks its cache: an adapter
/// sent there (or seen running there) is held until `capacity` others came after it.
#[derive(Debug, Clone)]
pub struct AdapterMemory {
    recent: VecDeque<String>,
    capacity: usize,
}

impl Default for AdapterMemory {
    fn default() -> Self {
        Self {
            recent: VecDeque::new(),
            capacity: DEFAULT_MAX_LORAS,
        }
    }
}

impl AdapterMemory {
    /// Whether `adapter` is likely in the replica's memory.
    pub fn holds(&self, adapter: &str) -> bool {
        self.recent.iter().any(|a| a == adapter)
    }

    /// `adapter` was just used there: it becomes the most recent; the least recent past the
    /// bound is forgotten, as the engine evicts it.
    pub fn touch(&mut self, adapter: &str) {
        if let Some(at) = self.recent.iter().position(|a| a == adapter) {
            self.recent.remove(at);
        }
        self.recent.push_back(adapter.to_string());
        while self.recent.len() > self.capacity {
            self.recent.pop_front();
        }
    }

    /// Learns from a scrape: the engine's bound, and its running and waiting requests'
    /// adapters (in memory now, so the most recent).
    pub fn scraped(&mut self, info: &LoraInfo) {
        if let Some(max) = info.max_lora {
            self.capacity = max.max(1);
        }
        for adapter in info.waiting.iter().chain(&info.running) {
            self.touch(adapter);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recent_adapter_is_forgotten_past_the_engines_bound() {
        let mut memory = AdapterMemory::default();
        let info = LoraInfo {
            running: vec!["a".into()],
            waiting: vec![],
            max_lora: Some(2),
        };
        memory.scraped(&info);
        memory.touch("b");
        assert!(memory.holds("a") && memory.holds("b"));
        // `a` used again: `b` is now the least recent, and goes when `c` comes.
        memory.touch("a");
        memory.touch("c");
        assert!(memory.holds("a") && memory.holds("c"));
        assert!(!memory.holds("b"));
    }
}
