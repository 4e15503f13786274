//! The scheduler: queue, cache and plugin framework over the REST API. Not built yet.
