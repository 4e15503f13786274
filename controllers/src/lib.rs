//! The controller-manager: level-triggered reconcilers over the REST API. Not built yet.
