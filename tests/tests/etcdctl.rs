//! The real `etcdctl` (ETCDCTL_API=3, Debian's etcd-client) against `skiff
//! store`: one member alone, and three member processes as one cluster,
//! commands spread over the members. Keys and values, revisions, deletes,
//! transactions (both branches), watches (history and live), leases,
//! compaction, member list and endpoint status, each checked to the value.
//! Without etcdctl the tests are skipped (under CI=true they fail).

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde_json::Value;
use skiff_tests::etcdctl::{base64_decode, etcdctl_or_skip, Etcdctl, WatchEvent};
use skiff_tests::store_client;
use skiff_tests::store_cluster::StoreCluster;

const WATCH_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a watch that has printed what it should is given to print more.
const QUIET: Duration = Duration::from_millis(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_against_a_lone_member() -> Result<()> {
    let Some(etcdctl) = etcdctl_or_skip("etcdctl_against_a_lone_member") else {
        return Ok(());
    };
    let cluster = StoreCluster::single().await?;
    Session::new(etcdctl, &cluster).run_all().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_against_three_members() -> Result<()> {
    let Some(etcdctl) = etcdctl_or_skip("etcdctl_against_three_members") else {
        return Ok(());
    };
    let cluster = StoreCluster::start(3).await?;
    Session::new(etcdctl, &cluster).run_all().await
}

/// etcdctl against one cluster; `at(i)` talks to member i (mod their count).
struct Session<'a> {
    etcdctl: PathBuf,
    cluster: &'a StoreCluster,
    /// The revision before the first write of the session.
    base: i64,
}

impl<'a> Session<'a> {
    fn new(etcdctl: PathBuf, cluster: &'a StoreCluster) -> Session<'a> {
        Session {
            etcdctl,
            cluster,
            base: 0,
        }
    }

    fn at(&self, member: usize) -> Etcdctl {
        let member = &self.cluster.members[member % self.cluster.members.len()];
        Etcdctl::new(self.etcdctl.clone(), member.client.to_string())
    }

    fn all(&self) -> Etcdctl {
        Etcdctl::new(self.etcdctl.clone(), self.cluster.endpoints())
    }

    fn rev(&self, offset: i64) -> String {
        (self.base + offset).to_string()
    }

    async fn run_all(mut self) -> Result<()> {
        self.base = current_revision(&self.at(0))?;
        self.put_get_delete().context("put, get, del")?;
        self.txn().context("txn")?;
        self.watch_history().await.context("watch --rev")?;
        self.watch_live().await.context("live watch")?;
        self.leases().context("leases")?;
        self.compaction().await.context("compaction")?;
        self.member_list().await.context("member list")?;
        self.endpoint_status().await.context("endpoint status")?;
        Ok(())
    }

    /// Revisions base+1..=base+4: a=1, b=2, a=3, b deleted.
    fn put_get_delete(&self) -> Result<()> {
        assert_eq!(self.at(0).ok(&["put", "/t/a", "1"])?, "OK\n");
        assert_eq!(self.at(1).ok(&["put", "/t/b", "2"])?, "OK\n");
        assert_eq!(self.at(2).ok(&["put", "/t/a", "3"])?, "OK\n");
        assert_eq!(
            self.at(1).ok(&["get", "/t/", "--prefix"])?,
            "/t/a\n3\n/t/b\n2\n"
        );
        assert_eq!(
            self.at(2)
                .ok(&["get", "/t/", "--prefix", "--rev", &self.rev(1)])?,
            "/t/a\n1\n"
        );
        assert_eq!(
            self.at(0)
                .ok(&["get", "/t/", "--prefix", "--rev", &self.rev(2)])?,
            "/t/a\n1\n/t/b\n2\n"
        );
        let limited = json(
            &self
                .at(0)
                .ok(&["get", "/t/", "--prefix", "--limit", "1", "-w", "json"])?,
        )?;
        assert_eq!(limited["count"], 2, "{limited}");
        assert_eq!(limited["more"], true, "{limited}");
        assert_eq!(
            limited["kvs"].as_array().map(Vec::len),
            Some(1),
            "{limited}"
        );

        let a = json(&self.at(2).ok(&["get", "/t/a", "-w", "json"])?)?;
        assert_eq!(a["header"]["revision"], self.base + 3, "{a}");
        assert_eq!(a["count"], 1, "{a}");
        let kv = &a["kvs"][0];
        assert_eq!(b64(&kv["key"])?, "/t/a");
        assert_eq!(b64(&kv["value"])?, "3");
        assert_eq!(kv["create_revision"], self.base + 1, "{a}");
        assert_eq!(kv["mod_revision"], self.base + 3, "{a}");
        assert_eq!(kv["version"], 2, "{a}");

        assert_eq!(self.at(0).ok(&["del", "/t/b"])?, "1\n");
        assert_eq!(self.at(1).ok(&["del", "/t/b"])?, "0\n");
        assert_eq!(self.at(2).ok(&["get", "/t/b"])?, "");
        assert_eq!(
            current_revision(&self.at(1))?,
            self.base + 4,
            "a delete of nothing takes no revision"
        );
        Ok(())
    }

    /// Revision base+5: a=4 by compare-and-swap; the same txn again fails.
    fn txn(&self) -> Result<()> {
        let cas = format!(
            "value(\"/t/a\") = \"3\"\nmod(\"/t/a\") = \"{}\"\n\nput /t/a 4\nget /t/a\n\nget /t/a\n\n",
            self.base + 3
        );
        assert_eq!(
            self.at(1).ok_with_stdin(&["txn"], &cas)?,
            "SUCCESS\n\nOK\n\n/t/a\n4\n"
        );
        assert_eq!(
            self.at(2).ok_with_stdin(&["txn"], &cas)?,
            "FAILURE\n\n/t/a\n4\n"
        );
        let a = json(&self.at(0).ok(&["get", "/t/a", "-w", "json"])?)?;
        assert_eq!(a["kvs"][0]["mod_revision"], self.base + 5, "{a}");
        assert_eq!(a["kvs"][0]["version"], 3, "{a}");
        assert_eq!(
            current_revision(&self.at(0))?,
            self.base + 5,
            "a failed txn without writes takes no revision"
        );
        Ok(())
    }

    /// Every change since base+1, from history, in order.
    async fn watch_history(&self) -> Result<()> {
        let mut watch = self
            .at(2)
            .watch(&["/t/", "--prefix", "--rev", &self.rev(1)])?;
        watch.wait_for_events(5, WATCH_TIMEOUT).await?;
        tokio::time::sleep(QUIET).await;
        assert_eq!(
            watch.events(),
            [
                WatchEvent::put("/t/a", "1"),
                WatchEvent::put("/t/b", "2"),
                WatchEvent::put("/t/a", "3"),
                WatchEvent::delete("/t/b"),
                WatchEvent::put("/t/a", "4"),
            ]
        );
        Ok(())
    }

    /// A watch from now sees the writes made after it started, and only those.
    async fn watch_live(&self) -> Result<()> {
        let mut watch = self.at(0).watch(&["/live/", "--prefix"])?;
        // Probe until the watch is known to be in place.
        let deadline = Instant::now() + WATCH_TIMEOUT;
        while watch.events().is_empty() {
            ensure!(
                Instant::now() < deadline,
                "the live watch saw no probe; stderr:\n{}",
                watch.stderr()
            );
            self.at(1).ok(&["put", "/live/probe", "p"])?;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        tokio::time::sleep(QUIET).await;
        let probes = watch.events().len();
        self.at(1).ok(&["put", "/live/x", "one"])?;
        self.at(2).ok(&["put", "/live/y", "two"])?;
        self.at(0).ok(&["del", "/live/x"])?;
        let events = watch.wait_for_events(probes + 3, WATCH_TIMEOUT).await?;
        tokio::time::sleep(QUIET).await;
        assert!(
            events[..probes]
                .iter()
                .all(|e| *e == WatchEvent::put("/live/probe", "p")),
            "{events:?}"
        );
        assert_eq!(
            watch.events()[probes..],
            [
                WatchEvent::put("/live/x", "one"),
                WatchEvent::put("/live/y", "two"),
                WatchEvent::delete("/live/x"),
            ]
        );
        Ok(())
    }

    /// Keys attached to a lease go with it, in one revision.
    fn leases(&self) -> Result<()> {
        let granted = self.at(0).ok(&["lease", "grant", "60"])?;
        let id = granted
            .strip_prefix("lease ")
            .and_then(|rest| rest.strip_suffix(" granted with TTL(60s)\n"))
            .with_context(|| format!("lease grant printed {granted:?}"))?
            .to_string();
        u64::from_str_radix(&id, 16).with_context(|| format!("lease id {id:?}"))?;
        let lease = format!("--lease={id}");
        assert_eq!(self.at(1).ok(&["put", "/lease/one", "1", &lease])?, "OK\n");
        assert_eq!(self.at(2).ok(&["put", "/lease/two", "2", &lease])?, "OK\n");
        let ttl = self.at(2).ok(&["lease", "timetolive", &id, "--keys"])?;
        ensure!(
            ttl.starts_with(&format!("lease {id} granted with TTL(60s), remaining(")),
            "timetolive: {ttl:?}"
        );
        ensure!(
            ttl.ends_with("attached keys([/lease/one /lease/two])\n")
                || ttl.ends_with("attached keys([/lease/two /lease/one])\n"),
            "timetolive: {ttl:?}"
        );
        assert_eq!(
            self.at(1).ok(&["lease", "keep-alive", "--once", &id])?,
            format!("lease {id} keepalived with TTL(60)\n")
        );
        let list = self.at(0).ok(&["lease", "list"])?;
        assert_eq!(list, format!("found 1 leases\n{id}\n"));

        let before = current_revision(&self.at(0))?;
        assert_eq!(
            self.at(0).ok(&["lease", "revoke", &id])?,
            format!("lease {id} revoked\n")
        );
        assert_eq!(self.at(1).ok(&["get", "/lease/", "--prefix"])?, "");
        assert_eq!(
            current_revision(&self.at(2))?,
            before + 1,
            "both keys go in one revision"
        );
        assert_eq!(
            self.at(2).ok(&["lease", "timetolive", &id])?,
            format!("lease {id} already expired\n")
        );
        assert_eq!(self.at(0).ok(&["lease", "list"])?, "found 0 leases\n");
        Ok(())
    }

    /// History below the compacted revision is gone for reads and watches.
    async fn compaction(&self) -> Result<()> {
        let compact_at = self.rev(3);
        assert_eq!(
            self.at(0).ok(&["compaction", &compact_at])?,
            format!("compacted revision {compact_at}\n")
        );
        let stderr = self.at(1).fails(&["get", "/t/a", "--rev", &self.rev(1)])?;
        ensure!(
            stderr.contains("required revision has been compacted"),
            "get --rev: {stderr}"
        );
        assert_eq!(
            self.at(2).ok(&["get", "/t/a", "--rev", &compact_at])?,
            "/t/a\n3\n"
        );

        let mut watch = self.at(2).watch(&["/t/a", "--rev", &self.rev(1)])?;
        watch.wait_exit(WATCH_TIMEOUT).await?;
        let stderr = watch.stderr();
        ensure!(
            stderr.contains(
                "watch was canceled (etcdserver: mvcc: required revision has been compacted)"
            ),
            "watch --rev of a compacted revision: stderr {stderr:?}, events {:?}",
            watch.events()
        );
        assert_eq!(watch.events(), []);
        Ok(())
    }

    /// Every member, started, with its own peer and client URLs (a member
    /// publishes its client URL through the log, so it may take a moment).
    async fn member_list(&self) -> Result<()> {
        let mut ids = BTreeSet::new();
        for member in &self.cluster.members {
            let status = store_client::status(member.client).await?;
            ids.insert(format!(
                "{:x}",
                status.header.context("status header")?.member_id
            ));
        }
        let deadline = Instant::now() + WATCH_TIMEOUT;
        let listed = loop {
            let listed = self.all().ok(&["member", "list"])?;
            if !listed.contains(", , false") || Instant::now() >= deadline {
                break listed;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let rows: Vec<Vec<&str>> = listed.lines().map(|l| l.split(", ").collect()).collect();
        assert_eq!(rows.len(), self.cluster.members.len(), "{listed}");
        let mut listed_ids = BTreeSet::new();
        for row in &rows {
            assert_eq!(row.len(), 6, "{listed}");
            listed_ids.insert(row[0].to_string());
            assert_eq!(row[1], "started", "{listed}");
            let member = self
                .cluster
                .member(row[2])
                .with_context(|| listed.clone())?;
            // Alone, a member lists where it would listen for peers: the
            // default peer port, as etcd lists its own.
            let peer_urls = member
                .peer
                .map_or("https://127.0.0.1:2380".to_string(), |peer| {
                    format!("https://{peer}")
                });
            assert_eq!(row[3], peer_urls, "peer URLs of {}: {listed}", member.name);
            assert_eq!(row[4], format!("https://{}", member.client), "{listed}");
            assert_eq!(row[5], "false", "{listed}");
        }
        assert_eq!(listed_ids, ids, "{listed}");
        Ok(())
    }

    async fn endpoint_status(&self) -> Result<()> {
        let expected = current_revision(&self.at(0))?;
        // A follower may apply the last write a moment after the leader answered.
        let deadline = Instant::now() + Duration::from_secs(10);
        let statuses = loop {
            let statuses = json(&self.all().ok(&["endpoint", "status", "-w", "json"])?)?;
            let revisions: Vec<&Value> = statuses
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| &s["Status"]["header"]["revision"])
                .collect();
            if revisions.iter().all(|r| **r == expected) || Instant::now() >= deadline {
                break statuses;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let statuses = statuses
            .as_array()
            .context("endpoint status is not a list")?;
        assert_eq!(statuses.len(), self.cluster.members.len());
        let mut member_ids = BTreeSet::new();
        let leader = &statuses[0]["Status"]["leader"];
        let term = &statuses[0]["Status"]["raftTerm"];
        for (entry, member) in statuses.iter().zip(&self.cluster.members) {
            let status = &entry["Status"];
            assert_eq!(entry["Endpoint"], member.client.to_string(), "{entry}");
            assert_eq!(status["header"]["revision"], expected, "{entry}");
            assert_eq!(
                &status["leader"], leader,
                "every member names the same leader: {entry}"
            );
            assert_eq!(&status["raftTerm"], term, "{entry}");
            assert_eq!(status["header"]["raft_term"], *term, "{entry}");
            let index = status["raftIndex"].as_u64().context("raftIndex")?;
            let applied = status["raftAppliedIndex"]
                .as_u64()
                .context("raftAppliedIndex")?;
            ensure!(
                index > 0 && applied > 0 && applied <= index,
                "raft indexes: {entry}"
            );
            ensure!(
                status["dbSize"].as_u64().is_some_and(|size| size > 0),
                "dbSize: {entry}"
            );
            member_ids.insert(
                status["header"]["member_id"]
                    .as_u64()
                    .context("member_id")?,
            );
        }
        assert_eq!(member_ids.len(), statuses.len(), "distinct member ids");
        ensure!(term.as_u64().is_some_and(|t| t >= 1), "raft term {term}");
        ensure!(
            leader.as_u64().is_some_and(|l| member_ids.contains(&l)),
            "the leader {leader} is one of the members {member_ids:?}"
        );
        // etcdctl 3.4 prints the health of each endpoint on stderr.
        let health = self.all().run(&["endpoint", "health"])?;
        ensure!(health.status.success(), "endpoint health: {health:?}");
        let health =
            String::from_utf8_lossy(&health.stderr) + String::from_utf8_lossy(&health.stdout);
        assert_eq!(
            health
                .lines()
                .filter(|l| l.contains(" is healthy: "))
                .count(),
            self.cluster.members.len(),
            "{health}"
        );
        Ok(())
    }
}

fn json(text: &str) -> Result<Value> {
    serde_json::from_str(text).with_context(|| format!("etcdctl printed no JSON: {text}"))
}

fn b64(value: &Value) -> Result<String> {
    let text = value
        .as_str()
        .with_context(|| format!("{value} is not base64 text"))?;
    Ok(String::from_utf8(base64_decode(text)?)?)
}

/// The store's revision as etcdctl's JSON header shows it (omitted when 0).
fn current_revision(etcdctl: &Etcdctl) -> Result<i64> {
    let answer = json(&etcdctl.ok(&["get", "/no-such-key", "-w", "json"])?)?;
    match &answer["header"]["revision"] {
        Value::Null => Ok(0),
        revision => revision
            .as_i64()
            .with_context(|| format!("revision {revision}")),
    }
}
