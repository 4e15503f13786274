//! skiff-apiserver: the Kubernetes REST API over the store.

pub mod resources;
pub mod status;
pub mod storage;
