//! Writes the CRDs (`ModelDeployment`, `ModelRoute`) to `crds/` and the Helm chart's copies
//! (byte-identical), or the `ModelDeployment` one to stdout with `-`.

use std::path::PathBuf;

use anyhow::Context;
use tokenscale_operator::crd::generate::{all_files, crd_yaml};

fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("-") {
        print!("{}", crd_yaml()?);
        return Ok(());
    }
    // The workspace root is the operator crate's parent directory.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    for (relative, yaml) in all_files()? {
        let path = root.join(relative);
        std::fs::write(&path, &yaml).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {relative}");
    }
    Ok(())
}
