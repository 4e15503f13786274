//! The node agent: runs pods bound to its node as local processes. Not built yet.
