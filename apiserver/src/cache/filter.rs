//! Which cached objects and events a list or watch sees: its namespace and
//! selectors. An object that stops matching is seen as DELETED, one that
//! starts matching as ADDED.

use super::object::{CachedObject, ChangeType, EventType, WatchEvent};
use skiff_machinery::selectors::{FieldSelector, LabelSelector};

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Filter {
    /// The store prefix of the namespace asked (None: every namespace).
    pub key_prefix: Option<String>,
    pub labels: Option<LabelSelector>,
    pub fields: Option<FieldSelector>,
}

impl Filter {
    /// Whether the filter can only pass everything in its namespace.
    pub fn selects_all(&self) -> bool {
        self.labels.as_ref().is_none_or(LabelSelector::is_empty)
            && self.fields.as_ref().is_none_or(FieldSelector::is_empty)
    }

    /// Whether the selectors pass `object` (its namespace aside).
    pub fn selected(&self, object: &CachedObject) -> bool {
        let selectable = object.selectable();
        self.labels
            .as_ref()
            .is_none_or(|s| s.matches_by(|key| selectable.label(key)))
            && self
                .fields
                .as_ref()
                .is_none_or(|s| s.matches_by(|field| selectable.field(field)))
    }

    pub fn in_namespace(&self, object: &CachedObject) -> bool {
        self.key_prefix
            .as_deref()
            .is_none_or(|prefix| object.key.starts_with(prefix))
    }

    /// Whether a list (or the initial events of a watch) holds `object`.
    pub fn selects(&self, object: &CachedObject) -> bool {
        self.in_namespace(object) && self.selected(object)
    }

    /// The event a watcher with this filter sees for `event`, if any.
    pub fn event_type(&self, event: &WatchEvent) -> Option<EventType> {
        if !self.in_namespace(&event.object) {
            return None;
        }
        match event.change {
            ChangeType::Delete => self.selected(&event.object).then_some(EventType::Deleted),
            ChangeType::Put => {
                let was = event.prev.as_deref().is_some_and(|p| self.selected(p));
                let is = self.selected(&event.object);
                match (was, is) {
                    (true, true) => Some(EventType::Modified),
                    (false, true) => Some(EventType::Added),
                    (true, false) => Some(EventType::Deleted),
                    (false, false) => None,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn pod(namespace: &str, app: &str, revision: i64) -> Arc<CachedObject> {
        let pods = crate::resources::find("", "v1", "pods").unwrap();
        let body = serde_json::json!({"metadata": {"name": "p", "namespace": namespace, "labels": {"app": app}}});
        Arc::new(CachedObject::new(
            pods,
            format!("/registry/core/pods/{namespace}/p").into(),
            revision,
            serde_json::to_vec(&body).unwrap().into(),
        ))
    }

    fn put(now: Arc<CachedObject>, before: Option<Arc<CachedObject>>) -> WatchEvent {
        WatchEvent::new(now.mod_revision, ChangeType::Put, now, before)
    }

    #[test]
    fn selectors_turn_changes_into_the_events_a_watcher_sees() {
        let web = Filter {
            labels: Some(LabelSelector::parse("app=web").unwrap()),
            ..Filter::default()
        };
        let (w, d) = (pod("a", "web", 9), pod("a", "db", 9));
        let e = |t| Some(t);
        assert_eq!(web.event_type(&put(w.clone(), None)), e(EventType::Added));
        assert_eq!(
            web.event_type(&put(w.clone(), Some(w.clone()))),
            e(EventType::Modified)
        );
        assert_eq!(
            web.event_type(&put(w.clone(), Some(d.clone()))),
            e(EventType::Added),
            "starts matching"
        );
        assert_eq!(
            web.event_type(&put(d.clone(), Some(w.clone()))),
            e(EventType::Deleted),
            "stops matching"
        );
        assert_eq!(web.event_type(&put(d.clone(), Some(d.clone()))), None);
        let delete = |last: Arc<CachedObject>| WatchEvent::new(10, ChangeType::Delete, last, None);
        assert_eq!(web.event_type(&delete(w.clone())), e(EventType::Deleted));
        assert_eq!(web.event_type(&delete(d)), None);
        let other_namespace = Filter {
            key_prefix: Some("/registry/core/pods/b/".into()),
            ..Filter::default()
        };
        assert_eq!(other_namespace.event_type(&put(w.clone(), None)), None);
        assert!(!other_namespace.selects(&w));
        assert!(Filter::default().selects(&w));
    }
}
