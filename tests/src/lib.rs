//! Whole-process tests of skiff. The crash tests run `store-writer` as a child that prints
//! `ack <key> <revision>` only after each put is acknowledged, SIGKILL it mid-stream, then
//! reopen its data directory in-process and require every printed ack to be there unchanged.
//! The Raft tests run three `store-member` children as one cluster, printing the same acks.

pub mod api_server;
pub mod captured;
pub mod etcdctl;
pub mod kube_http;
pub mod kubectl;
pub mod line_printer;
pub mod local_node;
pub mod member_process;
pub mod node_client;
pub mod node_processes;
pub mod python;
pub mod real_etcd;
pub mod skiff_bin;
pub mod skiff_process;
pub mod store_client;
pub mod store_cluster;
pub mod test_pki;
pub mod tool;
pub mod writer_process;
pub mod writer_protocol;
