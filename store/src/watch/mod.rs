//! Watch: streams of changes to a key or range from a start revision —
//! history from disk first, then live events, with no gap and no duplicate.

pub(crate) mod hub;
mod notifier;
#[cfg(test)]
mod tests;
mod watcher;

pub use hub::{WatchConfig, WatchHub};
pub use notifier::Notifier;
pub use watcher::Watcher;
