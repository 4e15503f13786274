//! `skiff member list|add|remove|move-leader`: the cluster's membership
//! through etcd's Cluster and Maintenance services, as etcdctl does it.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use skiff_store::grpc::pb::etcdserverpb::cluster_client::ClusterClient;
use skiff_store::grpc::pb::etcdserverpb::maintenance_client::MaintenanceClient;
use skiff_store::grpc::pb::etcdserverpb::{
    Member, MemberAddRequest, MemberListRequest, MemberRemoveRequest, MoveLeaderRequest,
};

use crate::client::{self, host_port, server_error};

#[derive(Debug, Args)]
pub struct MemberArgs {
    /// Client addresses of members to ask, host:port or URLs, comma-separated.
    #[arg(
        long,
        global = true,
        env = "SKIFF_ENDPOINTS",
        default_value = "127.0.0.1:2379"
    )]
    pub endpoints: String,
    /// The PKI directory the members use (their DATA_DIR/pki or
    /// --pki-dir): its etcd/ca.crt and etcd/client.crt and .key are the
    /// credentials for TLS endpoints.
    #[arg(
        long,
        global = true,
        env = "SKIFF_PKI_DIR",
        default_value = "./skiff-data/pki"
    )]
    pub pki_dir: PathBuf,
    #[command(subcommand)]
    pub command: MemberCommand,
}

#[derive(Debug, Subcommand)]
pub enum MemberCommand {
    /// Every member: ID (hex), name, peer and client URLs, whether it is a learner.
    List,
    /// Add a member and print the command line that starts it.
    Add {
        /// The new member's name (its --name when it starts).
        name: String,
        /// Where the new member will listen for peers, e.g. http://127.0.0.1:42380 (comma-separated).
        #[arg(long, required = true)]
        peer_urls: String,
        /// Add it as a learner (a non-voting member).
        #[arg(long)]
        learner: bool,
        /// The new member's client address in the printed command [default: the peer port - 1].
        #[arg(long)]
        client_listen: Option<String>,
        /// The new member's data directory in the printed command [default: ./skiff-data-NAME].
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
    /// Remove a member by its ID (hex, as `member list` shows it).
    Remove {
        #[arg(value_parser = parse_member_id)]
        id: u64,
    },
    /// Hand the leadership to a member (ID in hex); asks the leader, found among --endpoints.
    MoveLeader {
        #[arg(value_parser = parse_member_id)]
        id: u64,
    },
}

fn parse_member_id(id: &str) -> Result<u64, String> {
    let digits = id.trim().trim_start_matches("0x");
    u64::from_str_radix(digits, 16).map_err(|err| {
        format!("{id:?} is not a member ID in hex (as `skiff member list` shows): {err}")
    })
}

impl MemberArgs {
    pub async fn run(self) -> Result<()> {
        let endpoints = &client::StoreClients::new(&self.endpoints, &self.pki_dir)?;
        match self.command {
            MemberCommand::List => list(endpoints).await,
            MemberCommand::Add {
                name,
                peer_urls,
                learner,
                client_listen,
                data_dir,
            } => {
                let new_member = NewMember {
                    peer_urls: peer_urls
                        .split(',')
                        .map(str::trim)
                        .filter(|u| !u.is_empty())
                        // The store's own form of a peer URL.
                        .map(|url| match url.contains("://") {
                            true => url.to_string(),
                            false => format!("http://{url}"),
                        })
                        .collect(),
                    data_dir: data_dir
                        .unwrap_or_else(|| PathBuf::from(format!("./skiff-data-{name}"))),
                    name,
                    learner,
                    client_listen,
                    pki_dir: self.pki_dir.clone(),
                };
                add(endpoints, new_member).await
            }
            MemberCommand::Remove { id } => remove(endpoints, id).await,
            MemberCommand::MoveLeader { id } => move_leader(endpoints, id).await,
        }
    }
}

async fn list(endpoints: &client::StoreClients) -> Result<()> {
    let (_, channel) = endpoints.connect_any().await?;
    let members = ClusterClient::new(channel)
        .member_list(MemberListRequest::default())
        .await
        .map_err(server_error)?
        .into_inner()
        .members;
    print!("{}", member_table(&members));
    Ok(())
}

/// Aligned columns, one member a line, with a header.
pub fn member_table(members: &[Member]) -> String {
    let mut rows = vec![[
        "ID".to_string(),
        "NAME".to_string(),
        "PEER URLS".to_string(),
        "CLIENT URLS".to_string(),
        "LEARNER".to_string(),
    ]];
    for member in members {
        rows.push([
            format!("{:x}", member.id),
            if member.name.is_empty() {
                "<unstarted>".to_string()
            } else {
                member.name.clone()
            },
            or_none(member.peer_ur_ls.join(",")),
            or_none(member.client_ur_ls.join(",")),
            member.is_learner.to_string(),
        ]);
    }
    let mut widths = [0; 5];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut table = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:width$}"))
            .collect();
        table.push_str(cells.join("  ").trim_end());
        table.push('\n');
    }
    table
}

/// An empty cell as kubectl shows one, so that columns stay countable.
fn or_none(cell: String) -> String {
    if cell.is_empty() {
        "<none>".to_string()
    } else {
        cell
    }
}

struct NewMember {
    name: String,
    peer_urls: Vec<String>,
    learner: bool,
    client_listen: Option<String>,
    data_dir: PathBuf,
    /// The members' PKI directory, which the new member shares.
    pki_dir: PathBuf,
}

async fn add(endpoints: &client::StoreClients, new_member: NewMember) -> Result<()> {
    let (_, channel) = endpoints.connect_any().await?;
    let response = ClusterClient::new(channel)
        .member_add(MemberAddRequest {
            peer_ur_ls: new_member.peer_urls.clone(),
            is_learner: new_member.learner,
        })
        .await
        .map_err(server_error)?
        .into_inner();
    let added = response
        .member
        .context("the server added a member but did not say which")?;
    let cluster_id = response.header.map_or(0, |h| h.cluster_id);
    println!("Member {:x} added to cluster {cluster_id:x}", added.id);
    println!();
    println!("Start it with:");
    println!(
        "  {}",
        start_command(&new_member, added.id, &response.members)
    );
    Ok(())
}

/// The `skiff store` command line that starts a member just added.
fn start_command(new_member: &NewMember, new_id: u64, members: &[Member]) -> String {
    let mut initial_cluster = Vec::new();
    for member in members {
        let name = if member.id == new_id {
            new_member.name.as_str()
        } else {
            member.name.as_str()
        };
        if name.is_empty() {
            eprintln!(
                "warning: member {:x} has not started yet, so its name is unknown; fill it in below",
                member.id
            );
        }
        for url in &member.peer_ur_ls {
            initial_cluster.push(format!("{name}={}", host_port(url)));
        }
    }
    // Any order works; by name reads best.
    initial_cluster.sort();
    let peer = new_member
        .peer_urls
        .first()
        .map(|url| host_port(url).to_string())
        .unwrap_or_default();
    let client = new_member
        .client_listen
        .clone()
        .unwrap_or_else(|| client_next_to(&peer));
    format!(
        "skiff store --name {} --data-dir {} --pki-dir {} --client-listen {client} --peer-listen {peer} \
         --initial-cluster {} --initial-cluster-state existing",
        new_member.name,
        new_member.data_dir.display(),
        new_member.pki_dir.display(),
        initial_cluster.join(",")
    )
}

/// etcd's convention: the client port just below the peer port (2379/2380).
fn client_next_to(peer: &str) -> String {
    match peer.rsplit_once(':') {
        Some((host, port)) => match port.parse::<u16>() {
            Ok(port) if port > 1 => format!("{host}:{}", port - 1),
            _ => format!("{host}:2379"),
        },
        None => "127.0.0.1:2379".to_string(),
    }
}

async fn remove(endpoints: &client::StoreClients, id: u64) -> Result<()> {
    let (_, channel) = endpoints.connect_any().await?;
    let response = ClusterClient::new(channel)
        .member_remove(MemberRemoveRequest { id })
        .await
        .map_err(server_error)?
        .into_inner();
    let cluster_id = response.header.map_or(0, |h| h.cluster_id);
    println!("Member {id:x} removed from cluster {cluster_id:x}");
    Ok(())
}

async fn move_leader(endpoints: &client::StoreClients, target: u64) -> Result<()> {
    let (leader_id, leader_endpoint) = find_leader(endpoints).await?;
    if leader_id == target {
        println!("Member {target:x} is already the leader");
        return Ok(());
    }
    let channel = endpoints.connect(&leader_endpoint).await?;
    MaintenanceClient::new(channel)
        .move_leader(MoveLeaderRequest { target_id: target })
        .await
        .map_err(server_error)?;
    println!("Leadership transferred from {leader_id:x} to {target:x}");
    Ok(())
}

/// The leader's ID and client endpoint: the endpoint whose member leads,
/// or else the leader's client URL in the member list.
async fn find_leader(endpoints: &client::StoreClients) -> Result<(u64, String)> {
    let mut leader = 0;
    let mut failures = Vec::new();
    for endpoint in &endpoints.endpoints {
        let status = match endpoints.connect(endpoint).await {
            Ok(channel) => client::status(channel).await,
            Err(err) => Err(err),
        };
        match status {
            Ok(status) => {
                let member_id = status.header.map_or(0, |h| h.member_id);
                if status.leader != 0 && status.leader == member_id {
                    return Ok((member_id, endpoint.clone()));
                }
                leader = leader.max(status.leader);
            }
            Err(err) => failures.push(format!("{}: {err:#}", host_port(endpoint))),
        }
    }
    if leader == 0 {
        if failures.len() == endpoints.endpoints.len() {
            bail!("no endpoint answered: {}", failures.join("; "));
        }
        bail!("the cluster has no leader now (an election may be under way); try again");
    }
    let (_, channel) = endpoints.connect_any().await?;
    let members = ClusterClient::new(channel)
        .member_list(MemberListRequest::default())
        .await
        .map_err(server_error)?
        .into_inner()
        .members;
    let url = members
        .iter()
        .find(|m| m.id == leader)
        .and_then(|m| m.client_ur_ls.first());
    match url {
        Some(url) => Ok((leader, url.clone())),
        None => bail!(
            "the leader ({leader:x}) is not among --endpoints and its client address is unknown; \
             add it to --endpoints"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: u64, name: &str, peer: &str, client: &str) -> Member {
        Member {
            id,
            name: name.into(),
            peer_ur_ls: vec![peer.into()],
            client_ur_ls: if client.is_empty() {
                vec![]
            } else {
                vec![client.into()]
            },
            is_learner: false,
        }
    }

    #[test]
    fn member_ids_are_hex_as_listed() {
        assert_eq!(parse_member_id("8b37b07b558d4c0"), Ok(0x8b37b07b558d4c0));
        assert_eq!(parse_member_id("0x1f"), Ok(0x1f));
        assert!(parse_member_id("n1")
            .unwrap_err()
            .contains("not a member ID in hex"));
    }

    #[test]
    fn the_member_table_aligns_its_columns() {
        let table = member_table(&[
            member(
                0xabc,
                "n1",
                "http://127.0.0.1:2380",
                "http://127.0.0.1:2379",
            ),
            member(0x1, "", "http://127.0.0.1:42380", ""),
        ]);
        assert_eq!(
            table,
            "ID   NAME         PEER URLS               CLIENT URLS            LEARNER\n\
             abc  n1           http://127.0.0.1:2380   http://127.0.0.1:2379  false\n\
             1    <unstarted>  http://127.0.0.1:42380  <none>                 false\n"
        );
    }

    #[test]
    fn the_start_command_names_every_member_and_the_new_one() {
        let new_member = NewMember {
            name: "n4".into(),
            peer_urls: vec!["http://127.0.0.1:42380".into()],
            learner: false,
            client_listen: None,
            data_dir: PathBuf::from("./skiff-data-n4"),
            pki_dir: PathBuf::from("./skiff-data/pki"),
        };
        let members = [
            member(1, "n1", "http://127.0.0.1:2380", ""),
            member(4, "", "http://127.0.0.1:42380", ""),
        ];
        assert_eq!(
            start_command(&new_member, 4, &members),
            "skiff store --name n4 --data-dir ./skiff-data-n4 --pki-dir ./skiff-data/pki \
             --client-listen 127.0.0.1:42379 \
             --peer-listen 127.0.0.1:42380 --initial-cluster n1=127.0.0.1:2380,n4=127.0.0.1:42380 \
             --initial-cluster-state existing"
        );
    }
}
