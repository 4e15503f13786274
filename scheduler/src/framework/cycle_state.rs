//! Data a plugin keeps between the extension points of one scheduling
//! cycle (PreFilter computes, Filter reads), by key.

use std::any::Any;
use std::collections::HashSet;

#[derive(Default)]
pub struct CycleState {
    /// A handful of entries, read once per plugin per node: a scan of a
    /// short list beats hashing the key every time.
    data: Vec<(&'static str, Box<dyn Any + Send + Sync>)>,
    /// Plugins whose PreFilter said Skip: their Filter is not run.
    pub skip_filter: HashSet<&'static str>,
    /// Plugins whose PreScore said Skip: their Score is not run.
    pub skip_score: HashSet<&'static str>,
}

impl CycleState {
    pub fn write<T: Any + Send + Sync>(&mut self, key: &'static str, value: T) {
        match self.data.iter_mut().find(|(k, _)| *k == key) {
            Some((_, slot)) => *slot = Box::new(value),
            None => self.data.push((key, Box::new(value))),
        }
    }

    pub fn read<T: Any>(&self, key: &'static str) -> Option<&T> {
        self.data
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.downcast_ref())
    }

    pub fn read_mut<T: Any>(&mut self, key: &'static str) -> Option<&mut T> {
        self.data
            .iter_mut()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.downcast_mut())
    }
}

impl std::fmt::Debug for CycleState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CycleState")
            .field(
                "keys",
                &self.data.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_read_back_by_key_and_type_and_rewritten() {
        let mut state = CycleState::default();
        state.write("PreFilterA", 1_i64);
        state.write("PreFilterB", String::from("b"));
        assert_eq!(state.read::<i64>("PreFilterA"), Some(&1));
        assert_eq!(
            state.read::<String>("PreFilterB").map(String::as_str),
            Some("b")
        );
        // The wrong type or an unknown key reads nothing.
        assert_eq!(state.read::<String>("PreFilterA"), None);
        assert_eq!(state.read::<i64>("PreFilterC"), None);
        state.write("PreFilterA", 2_i64);
        *state.read_mut::<i64>("PreFilterA").unwrap() += 1;
        assert_eq!(state.read::<i64>("PreFilterA"), Some(&3));
    }
}
