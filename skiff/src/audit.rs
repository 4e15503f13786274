//! The API server's audit log on the command line, with kube-apiserver's
//! flag names: where the log goes, which policy selects what it records,
//! and when it rotates.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use skiff_apiserver::audit::{AuditLog, Auditor, LogConfig, Policy};

#[derive(Debug, Clone, Args)]
pub struct AuditFlags {
    /// Where audit events go, one JSON line each (`-`: standard output)
    /// [default: DATA_DIR/audit.log].
    #[arg(long)]
    pub audit_log_path: Option<PathBuf>,
    /// An audit Policy (audit.k8s.io/v1) choosing what is recorded and at
    /// which level [default: writes (but of Events) and every access to
    /// Secrets at Metadata, other reads not at all].
    #[arg(long)]
    pub audit_policy_file: Option<PathBuf>,
    /// Megabytes of the log before it is rotated to FILE.1 (0: never).
    #[arg(long, default_value_t = 100)]
    pub audit_log_maxsize: u64,
    /// Rotated files kept.
    #[arg(long, default_value_t = 3)]
    pub audit_log_maxbackup: usize,
}

impl AuditFlags {
    /// The auditor for a server whose data directory is `data_dir`.
    pub fn auditor(&self, data_dir: &Path) -> Result<Auditor> {
        let policy = match &self.audit_policy_file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading --audit-policy-file {}", path.display()))?;
                Policy::parse(&text)
                    .map_err(|e| anyhow::anyhow!("--audit-policy-file {}: {e}", path.display()))?
            }
            None => Policy::default_policy(),
        };
        let path = self
            .audit_log_path
            .clone()
            .unwrap_or_else(|| data_dir.join("audit.log"));
        let mut config = LogConfig::new(path.clone());
        config.max_size = self.audit_log_maxsize.saturating_mul(1 << 20);
        config.max_backups = self.audit_log_maxbackup;
        let log = AuditLog::open(config)
            .with_context(|| format!("opening the audit log {}", path.display()))?;
        Ok(Auditor::new(policy, log))
    }
}
