//! Encryption of Secrets at rest: the `EncryptionConfiguration` file the
//! API server reads (`--encryption-provider-config`), and the one `skiff
//! up` and `skiff cluster up` create with a new random key when none is
//! given.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use skiff_apiserver::storage::Encryption;

/// The file's name in a data directory.
pub const DEFAULT_FILE: &str = "encryption-config.yaml";

/// `path`, created (readable by its owner only) with a new AES-256 key
/// for Secrets if it does not exist yet.
pub fn ensure_config(path: &Path) -> Result<PathBuf> {
    if !path.exists() {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        let config = Encryption::generate_config().map_err(anyhow::Error::msg)?;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode_owner_only()
            .open(path)
            .with_context(|| format!("creating {}", path.display()))?;
        file.write_all(config.as_bytes())
            .and_then(|()| file.sync_all())
            .with_context(|| format!("writing {}", path.display()))?;
        tracing::info!(path = %path.display(), "created an encryption configuration with a new key for Secrets");
    }
    Ok(path.to_path_buf())
}

/// The configuration at `path`.
pub fn load(path: &Path) -> Result<Arc<Encryption>> {
    Encryption::from_file(path).map_err(|e| anyhow::anyhow!("--encryption-provider-config {e}"))
}

trait OwnerOnly {
    fn mode_owner_only(&mut self) -> &mut Self;
}

impl OwnerOnly for std::fs::OpenOptions {
    fn mode_owner_only(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.mode(0o600)
    }
}
