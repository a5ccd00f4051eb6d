//! `tokenscale-engine pull MODEL`: makes sure a model is in the cache and prints where it is.
//! `hf://` sources are fetched from the Hub (what is cached is not downloaded again; cut
//! downloads resume); the test alias is fetched again when its cached file fails its SHA-256
//! check; a local path is only checked.

use anyhow::Context;

use crate::fetch;
use tokenscale_common::hub_source::HubSource;

/// Arguments of `pull`.
#[derive(Debug, clap::Args)]
pub struct PullArgs {
    /// `hf://ORG/REPO[@REVISION][/FILE]`, the test alias `smollm2-135m`, or a path (only
    /// checked and printed).
    pub model: String,
    /// Ranged connections per large `hf://` file (1 to 32; default 4).
    #[arg(long, env = fetch::hub::CONNECTIONS_ENV, value_parser = fetch::hub::parse_connections)]
    pub hub_connections: Option<usize>,
}

/// Runs `pull`: progress goes to stderr, the cached path to stdout (and the resolved commit
/// of an `hf://` source to stderr).
pub fn run(args: PullArgs) -> anyhow::Result<()> {
    let path = if let Some(source) = HubSource::parse(&args.model) {
        let source = source?;
        let mut config = fetch::hub::HubConfig::from_env()?;
        if let Some(n) = args.hub_connections {
            config.connections = n;
        }
        let snapshot = fetch::hub::fetch(&source, &config)?;
        eprintln!(
            "{source} is at commit {} ({} downloaded)",
            snapshot.commit,
            fetch::human_bytes(snapshot.downloaded_bytes)
        );
        snapshot.path
    } else if let Some(alias) = fetch::find_alias(&args.model) {
        let cache_dir = fetch::default_cache_dir()?;
        fetch::pull(alias, &cache_dir).with_context(|| format!("pulling {}", alias.name))?
    } else {
        fetch::ensure_model(&args.model)?
    };
    println!("{}", path.display());
    Ok(())
}
