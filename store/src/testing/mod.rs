//! Test support that is compiled into the library so that every test — unit,
//! simulation and process-level — can use it: the linearizability checker.

pub mod linearizability;
