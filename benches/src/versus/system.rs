//! The two systems under test — skiff's `skiff store` and real etcd — as
//! programs to find and command lines to run: the same member names, the
//! same loopback addresses, each its own data directory.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// Debian's package that ships etcd 3.4 (`/usr/bin/etcd`).
pub const ETCD_PACKAGE: &str = "etcd-server";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum System {
    Skiff,
    Etcd,
}

impl System {
    pub fn label(self) -> &'static str {
        match self {
            System::Skiff => "skiff",
            System::Etcd => "etcd",
        }
    }
}

/// A program to run, and what it says its version is.
#[derive(Debug, Clone)]
pub struct Program {
    pub path: PathBuf,
    pub version: String,
}

/// One member's name and loopback addresses.
#[derive(Debug, Clone)]
pub struct MemberAddrs {
    pub name: String,
    pub client: SocketAddr,
    pub peer: SocketAddr,
}

/// Names n1…nN and free loopback ports. Every port is held until all are
/// chosen, so no two members get the same one.
pub fn layout(members: usize) -> Result<Vec<MemberAddrs>> {
    let listeners = (0..2 * members)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()
        .context("finding free ports on 127.0.0.1")?;
    let addrs = listeners
        .iter()
        .map(TcpListener::local_addr)
        .collect::<std::io::Result<Vec<_>>>()
        .context("reading the address of a free port")?;
    Ok((0..members)
        .map(|i| MemberAddrs {
            name: format!("n{}", i + 1),
            client: addrs[2 * i],
            peer: addrs[2 * i + 1],
        })
        .collect())
}

/// The command line of `member` of the cluster `all`, its data in `data_dir`.
pub fn member_args(
    system: System,
    member: &MemberAddrs,
    all: &[MemberAddrs],
    data_dir: &Path,
) -> Vec<String> {
    let data_dir = data_dir.display().to_string();
    match system {
        System::Skiff => skiff_args(member, all, data_dir),
        System::Etcd => etcd_args(member, all, data_dir),
    }
}

fn skiff_args(member: &MemberAddrs, all: &[MemberAddrs], data_dir: String) -> Vec<String> {
    // The members share one CA (beside their data directories) and talk
    // to each other over TLS, as they always do. The bench's clients use
    // the plain loopback port, as they do with etcd; the TLS client port
    // goes on any free port.
    let pki_dir = Path::new(&data_dir)
        .parent()
        .map_or_else(|| PathBuf::from("pki"), |parent| parent.join("pki"));
    let mut args = vec![
        "store".to_string(),
        "--name".into(),
        member.name.clone(),
        "--data-dir".into(),
        data_dir,
        "--pki-dir".into(),
        pki_dir.display().to_string(),
        "--client-listen".into(),
        "127.0.0.1:0".into(),
        "--insecure-client-listen".into(),
        member.client.to_string(),
    ];
    if all.len() > 1 {
        let cluster: Vec<String> = all
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer))
            .collect();
        args.extend([
            "--peer-listen".into(),
            member.peer.to_string(),
            "--initial-cluster".into(),
            cluster.join(","),
            "--initial-cluster-state".into(),
            "new".into(),
        ]);
    }
    args
}

/// etcd as shipped (fsync on, default heartbeat, snapshot and quota), its
/// only changes the addresses, the structured logger and a token unique to
/// this run.
fn etcd_args(member: &MemberAddrs, all: &[MemberAddrs], data_dir: String) -> Vec<String> {
    let client = format!("http://{}", member.client);
    let peer = format!("http://{}", member.peer);
    let cluster: Vec<String> = all
        .iter()
        .map(|m| format!("{}=http://{}", m.name, m.peer))
        .collect();
    vec![
        format!("--name={}", member.name),
        format!("--data-dir={data_dir}"),
        format!("--listen-client-urls={client}"),
        format!("--advertise-client-urls={client}"),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster={}", cluster.join(",")),
        "--initial-cluster-state=new".into(),
        format!("--initial-cluster-token=skiff-bench-{}", std::process::id()),
        "--logger=zap".into(),
    ]
}

/// The `skiff` binary: `requested`, or the one beside this benchmark's
/// executable. Run through `cargo run`, the benchmark first builds it with
/// the same profile and target directory, so that it is never stale.
pub fn skiff_program(requested: Option<&Path>) -> Result<Program> {
    let path = match requested {
        Some(path) => path.to_path_buf(),
        None => {
            let exe = std::env::current_exe().context("finding the skiff-bench executable")?;
            let dir = exe
                .parent()
                .context("the skiff-bench executable has no directory")?;
            let path = dir.join("skiff");
            if let Some(cargo) = std::env::var_os("CARGO") {
                match build_skiff(Path::new(&cargo), dir) {
                    Ok(()) => {}
                    // An older build still measures something; say so loudly.
                    Err(err) if path.is_file() => eprintln!(
                        "skiff-bench: WARNING: {err:#}; measuring the skiff binary already at {}, which may be stale",
                        path.display()
                    ),
                    Err(err) => return Err(err),
                }
            }
            path
        }
    };
    if !path.is_file() {
        bail!(
            "no skiff binary at {}: build it with `cargo build --release -p skiff`, or pass --skiff-bin",
            path.display()
        );
    }
    let version = version_of(&path, "--version").unwrap_or_else(|| "unknown version".into());
    Ok(Program { path, version })
}

/// `cargo build -p skiff` into `profile_dir` (`<target>/release` or
/// `<target>/debug`), the directory this benchmark was built into.
fn build_skiff(cargo: &Path, profile_dir: &Path) -> Result<()> {
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(name) => name,
        None => bail!("cannot tell the build profile of {}", profile_dir.display()),
    };
    let target_dir = profile_dir
        .parent()
        .context("the build directory has no parent")?;
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    eprintln!("building skiff (cargo build --profile {profile} -p skiff)…");
    let status = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "--profile",
            profile,
            "-p",
            "skiff",
            "--bin",
            "skiff",
        ])
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target_dir)
        .status()
        .context("running cargo to build skiff")?;
    if !status.success() {
        bail!("building skiff failed ({status}); fix the build, or pass --skiff-bin");
    }
    Ok(())
}

/// The etcd binary (`requested`, or `etcd` in PATH) and its version;
/// `None` when none is installed and `ci` is false (the run goes on
/// without it); an error when none is installed and `ci` is true.
pub fn etcd_program(requested: Option<&Path>, ci: bool) -> Result<Option<Program>> {
    if let Some(path) = requested {
        let version = version_of(path, "--version").with_context(|| {
            format!(
                "--etcd-bin {} does not run (`{} --version` failed); point it at an etcd binary",
                path.display(),
                path.display()
            )
        })?;
        return Ok(Some(Program {
            path: path.to_path_buf(),
            version,
        }));
    }
    let found = find_in_path("etcd").and_then(|path| {
        let version = version_of(&path, "--version")?;
        Some(Program { path, version })
    });
    match found {
        Some(program) => Ok(Some(program)),
        None if ci => bail!(
            "etcd is not installed (no runnable `etcd` in PATH), and CI=true needs the side-by-side figures: \
             run `apt-get install -y {ETCD_PACKAGE}`, or pass --etcd-bin"
        ),
        None => Ok(None),
    }
}

fn find_in_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// The first line `program flag` prints, if it runs and succeeds.
fn version_of(program: &Path, flag: &str) -> Option<String> {
    let output = Command::new(program).arg(flag).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines().next().map(|l| l.trim().to_string())
}
