//! The Kubernetes REST API over the store. Not built yet: see the apiserver issues.
