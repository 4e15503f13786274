//! Data a plugin keeps between the extension points of one scheduling
//! cycle (PreFilter computes, Filter reads), by key.

use std::any::Any;
use std::collections::{HashMap, HashSet};

#[derive(Default)]
pub struct CycleState {
    data: HashMap<&'static str, Box<dyn Any + Send + Sync>>,
    /// Plugins whose PreFilter said Skip: their Filter is not run.
    pub skip_filter: HashSet<&'static str>,
    /// Plugins whose PreScore said Skip: their Score is not run.
    pub skip_score: HashSet<&'static str>,
}

impl CycleState {
    pub fn write<T: Any + Send + Sync>(&mut self, key: &'static str, value: T) {
        self.data.insert(key, Box::new(value));
    }

    pub fn read<T: Any>(&self, key: &'static str) -> Option<&T> {
        self.data.get(key)?.downcast_ref()
    }

    pub fn read_mut<T: Any>(&mut self, key: &'static str) -> Option<&mut T> {
        self.data.get_mut(key)?.downcast_mut()
    }
}

impl std::fmt::Debug for CycleState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CycleState")
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .finish()
    }
}
