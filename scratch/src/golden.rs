//! Golden files: a test's output compared with the copy kept in the repository, rewritten
//! when `TOKENSCALE_BLESS` is set (after a deliberate change).

use std::path::Path;

/// The golden file at `path` as the comparison should read it: after writing `actual` there
/// first when `TOKENSCALE_BLESS` is set; empty when the file is missing, so the comparison
/// fails and shows the whole output.
pub fn golden(path: impl AsRef<Path>, actual: &str) -> String {
    let path = path.as_ref();
    if std::env::var_os("TOKENSCALE_BLESS").is_some() {
        let _ = std::fs::write(path, actual);
    }
    std::fs::read_to_string(path).unwrap_or_default()
}
