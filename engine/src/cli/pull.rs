//! `tokenscale-engine pull MODEL`: makes sure a model alias is in the cache (fetching it, or
//! fetching it again when the cached file fails its SHA-256 check) and prints the file's path.

use anyhow::Context;

use crate::fetch;

/// Arguments of `pull`.
#[derive(Debug, clap::Args)]
pub struct PullArgs {
    /// Model alias (e.g. smollm2-135m); a path to a file is only checked and printed.
    pub model: String,
}

/// Runs `pull`: progress goes to stderr, the cached path to stdout.
pub fn run(args: PullArgs) -> anyhow::Result<()> {
    let path = match fetch::find_alias(&args.model) {
        Some(alias) => {
            let cache_dir = fetch::default_cache_dir()?;
            fetch::pull(alias, &cache_dir).with_context(|| format!("pulling {}", alias.name))?
        }
        None => fetch::ensure_model(&args.model)?,
    };
    println!("{}", path.display());
    Ok(())
}
