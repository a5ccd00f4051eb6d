//! Which models a tenant may use: served names or globs (`*` any run of characters, `?` one).

pub use tokenscale_common::glob::glob_match;

/// A tenant's model list.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ModelAccess {
    /// No list configured: every model (the behaviour before model lists; warned at load).
    #[default]
    All,
    /// Only models matching one of these patterns.
    Only(Vec<String>),
}

impl ModelAccess {
    /// Whether `model` may be used.
    pub fn allows(&self, model: &str) -> bool {
        match self {
            Self::All => true,
            Self::Only(patterns) => patterns.iter().any(|p| glob_match(p, model)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_list_allows_everything_and_a_list_only_its_models() {
        assert!(ModelAccess::All.allows("anything"));
        let only = ModelAccess::Only(vec!["m".into(), "team-*".into()]);
        assert!(only.allows("m") && only.allows("team-x"));
        assert!(!only.allows("mm") && !only.allows("other"));
        assert!(!ModelAccess::Only(vec![]).allows("m"));
    }
}
