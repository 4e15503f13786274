//! What an operator does to a store with the real etcdctl, against `skiff
//! store` and, to compare, against a real etcd: compaction of a store never
//! compacted. Without etcdctl (or etcd, for the comparison) the tests are
//! skipped (under CI=true they fail).

use anyhow::{ensure, Result};
use skiff_tests::api_server::etcd_or_skip;
use skiff_tests::etcdctl::{etcdctl_or_skip, Etcdctl};
use skiff_tests::real_etcd::RealEtcd;
use skiff_tests::store_cluster::StoreCluster;

/// `compaction 0` on a store never compacted is accepted once, as etcd's
/// compacted revision starts below 0; then refused as compacted. A future
/// revision is refused.
fn compaction_of_revision_zero(etcdctl: &Etcdctl) -> Result<()> {
    assert_eq!(etcdctl.ok(&["compaction", "0"])?, "compacted revision 0\n");
    let again = etcdctl.fails(&["compaction", "0"])?;
    ensure!(
        again.contains("Error: etcdserver: mvcc: required revision has been compacted"),
        "compaction 0 again: {again}"
    );
    let future = etcdctl.fails(&["compaction", "1000"])?;
    ensure!(
        future.contains("Error: etcdserver: mvcc: required revision is a future revision"),
        "compaction 1000: {future}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_zero_on_a_fresh_skiff_store() -> Result<()> {
    let Some(etcdctl) = etcdctl_or_skip("compaction_zero_on_a_fresh_skiff_store") else {
        return Ok(());
    };
    let cluster = StoreCluster::single().await?;
    compaction_of_revision_zero(&Etcdctl::new(etcdctl, cluster.endpoints()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_zero_on_a_fresh_real_etcd() -> Result<()> {
    let test = "compaction_zero_on_a_fresh_real_etcd";
    let (Some(etcdctl), Some(etcd)) = (etcdctl_or_skip(test), etcd_or_skip(test)) else {
        return Ok(());
    };
    let etcd = RealEtcd::start(&etcd).await?;
    compaction_of_revision_zero(&Etcdctl::plain(etcdctl, etcd.client.to_string()))
}
