//! CustomResourceDefinitions: the schema of each served version applied
//! to custom objects.

pub mod columns;
pub mod structural;
