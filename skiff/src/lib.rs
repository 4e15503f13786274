//! The `skiff` command line: one binary whose subcommands start the parts of
//! skiff (`up`, `server`, `store`, `cluster up`, `scheduler`, `kubelet`) or
//! talk to running members (`member`).

pub mod api;
pub mod audit;
pub mod cli;
pub mod client;
pub mod cluster;
pub mod control_plane;
pub mod encryption;
pub mod files;
pub mod kubeconfig;
pub mod kubelet;
pub mod limits;
pub mod member;
pub mod pki;
pub mod proxy;
pub mod shutdown;
pub mod snapshot;
pub mod store;
pub mod up;

/// The text of an error chain on one line, as the command line prints it:
/// `context: cause`, with any line breaks of a message folded in.
pub fn one_line(err: &anyhow::Error) -> String {
    format!("{err:#}")
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_error_chain_prints_on_one_line() {
        let err = anyhow::anyhow!("data directory d belongs to another cluster:\nname=n1\n")
            .context("cannot open store member n1 in d");
        assert_eq!(
            super::one_line(&err),
            "cannot open store member n1 in d: data directory d belongs to another cluster: name=n1"
        );
    }
}
