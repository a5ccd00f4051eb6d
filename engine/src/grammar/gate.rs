//! The reasoning gate in front of a grammar: with a reasoning parser on, the model reasons
//! freely and the grammar constrains only what follows the end of the reasoning. The markers
//! are matched as the token ids the tokenizer gives them (one id where `</think>` is a single
//! token, its pieces otherwise), so the gate needs no detokeniser on the mask worker.

/// Where a gated sequence stands before its grammar starts.
#[derive(Debug, Clone)]
pub struct ReasoningGate {
    /// Forced first (Qwen3 opens `<think>` itself: forcing it makes the output reasoning, as
    /// the parser reads it, whatever the weights); empty where the prompt opened it.
    open: Vec<u32>,
    /// The end marker; the grammar starts after its last token.
    close: Vec<u32>,
    /// `thinking_token_budget`: reasoning tokens allowed before the end marker is forced.
    budget: Option<usize>,
    /// Tokens seen so far (the forced opening included).
    seen: usize,
    /// How many of `close`'s tokens the latest tokens match.
    matched: usize,
}

/// What the gate allows next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateStep {
    /// Only this token (a marker being forced).
    Force(u32),
    /// Any token: the model is reasoning.
    Free,
    /// The reasoning has ended: the grammar applies from now on.
    Open,
}

impl ReasoningGate {
    /// A gate that forces `open`, then lets the model reason until `close` (forced after
    /// `budget` reasoning tokens).
    pub fn new(open: Vec<u32>, close: Vec<u32>, budget: Option<usize>) -> Self {
        Self {
            open,
            close,
            budget,
            seen: 0,
            matched: 0,
        }
    }

    /// Takes the token the sequence generated.
    pub fn observe(&mut self, token: u32) {
        self.seen += 1;
        if self.seen <= self.open.len() {
            return;
        }
        self.matched = if self.close.get(self.matched) == Some(&token) {
            self.matched + 1
        } else {
            usize::from(self.close.first() == Some(&token))
        };
    }

    /// What may come next.
    pub fn step(&self) -> GateStep {
        if let Some(&token) = self.open.get(self.seen) {
            return GateStep::Force(token);
        }
        if self.close.is_empty() || self.matched == self.close.len() {
            return GateStep::Open;
        }
        let reasoned = self.seen - self.open.len() - self.matched;
        match self.budget {
            Some(budget) if reasoned >= budget => GateStep::Force(self.close[self.matched]),
            _ => GateStep::Free,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{GateStep, ReasoningGate};

    #[test]
    fn the_gate_forces_the_opening_then_opens_after_the_end_marker() {
        let mut gate = ReasoningGate::new(vec![1], vec![7, 8], None);
        assert_eq!(gate.step(), GateStep::Force(1));
        for token in [1, 7, 5, 7] {
            gate.observe(token);
            assert_eq!(gate.step(), GateStep::Free);
        }
        gate.observe(8);
        assert_eq!(gate.step(), GateStep::Open);
    }

    #[test]
    fn a_spent_budget_forces_the_rest_of_the_end_marker() {
        let mut gate = ReasoningGate::new(Vec::new(), vec![7, 8], Some(2));
        gate.observe(3);
        assert_eq!(gate.step(), GateStep::Free);
        gate.observe(7);
        // One reasoning token and one of the marker: the model may still finish it.
        assert_eq!(gate.step(), GateStep::Free);
        gate.observe(4);
        assert_eq!(gate.step(), GateStep::Force(7));
        gate.observe(7);
        assert_eq!(gate.step(), GateStep::Force(8));
        gate.observe(8);
        assert_eq!(gate.step(), GateStep::Open);
    }
}
