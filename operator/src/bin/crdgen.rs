//! Writes the `ModelDeployment` CRD to `crds/modeldeployments.yaml` and the Helm chart's copy
//! (byte-identical), or to stdout with `-`.

use std::path::PathBuf;

use anyhow::Context;
use tokenscale_operator::crd::generate::{CRD_PATHS, crd_yaml};

fn main() -> anyhow::Result<()> {
    let yaml = crd_yaml()?;
    if std::env::args().nth(1).as_deref() == Some("-") {
        print!("{yaml}");
        return Ok(());
    }
    // The workspace root is the operator crate's parent directory.
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    for relative in CRD_PATHS {
        let path = root.join(relative);
        std::fs::write(&path, &yaml).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {relative}");
    }
    Ok(())
}
