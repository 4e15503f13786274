//! Encryption of Secrets at rest: the `EncryptionConfiguration` file the
//! API server reads (`--encryption-provider-config`), and the one `skiff
//! up` and `skiff cluster up` create with a new random key when none is
//! given.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Result;
use skiff_apiserver::storage::Encryption;

/// The file's name in a data directory.
pub const DEFAULT_FILE: &str = "encryption-config.yaml";

/// `path`, created (readable by its owner only) with a new AES-256 key
/// for Secrets if it does not exist yet.
pub fn ensure_config(path: &Path) -> Result<PathBuf> {
    if !path.exists() {
        let config = Encryption::generate_config().map_err(anyhow::Error::msg)?;
        crate::files::write_private(path, config.as_bytes())?;
        tracing::info!(path = %path.display(), "created an encryption configuration with a new key for Secrets");
    }
    Ok(path.to_path_buf())
}

/// The configuration at `path`.
pub fn load(path: &Path) -> Result<Arc<Encryption>> {
    Encryption::from_file(path).map_err(|e| anyhow::anyhow!("--encryption-provider-config {e}"))
}
