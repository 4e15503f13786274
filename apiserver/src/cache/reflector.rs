//! The one task per resource that keeps its cache: list the store at a
//! revision, watch it from the next one, apply every change. A watch that
//! fails is resumed from the cache's revision; one whose revision was
//! compacted away means a relist (and the cache's watchers start again).

use std::sync::Arc;
use std::time::Duration;

use super::object::CachedObject;
use super::resource::ResourceCache;
use crate::storage::{prefix_end, ChangeStream, Storage, StorageError, WatchItem};

/// Keys read per store request while listing.
const LIST_PAGE: i64 = 1000;
/// Waits between attempts when the store fails, doubling up to the max.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// Keeps `cache` up to date until aborted. `start_at`: the revision of the
/// first list (0: the newest), so that the first watcher of a resource can
/// start from a revision the store still has.
pub async fn run(cache: Arc<ResourceCache>, storage: Storage, start_at: i64) {
    let end = prefix_end(&cache.prefix);
    let mut start_at = start_at;
    let mut retry = RETRY_FIRST;
    // Some(revision): watch after it without relisting.
    let mut resume: Option<i64> = None;
    loop {
        let revision = match resume.take() {
            Some(revision) => revision,
            None => match relist(&cache, &storage, &end, start_at).await {
                Ok(revision) => revision,
                Err(err) => {
                    tracing::warn!(resource = cache.resource.plural, error = %err, "watch cache list failed; retrying");
                    start_at = 0;
                    retry = pause(retry).await;
                    continue;
                }
            },
        };
        start_at = 0;
        let ended = match storage.watch(&cache.prefix, &end, revision + 1).await {
            Ok(stream) => {
                retry = RETRY_FIRST;
                follow(&cache, stream).await
            }
            Err(err) => err,
        };
        match ended {
            StorageError::Compacted { compacted, .. } => {
                tracing::info!(
                    resource = cache.resource.plural,
                    revision = cache.revision(),
                    compacted,
                    "the watch cache's revision was compacted; relisting"
                );
            }
            err => {
                tracing::warn!(resource = cache.resource.plural, error = %err, "watch cache's store watch ended; resuming");
                resume = Some(cache.revision());
                retry = pause(retry).await;
            }
        }
    }
}

async fn pause(retry: Duration) -> Duration {
    tokio::time::sleep(retry).await;
    (retry * 2).min(RETRY_MAX)
}

/// Reads every object of the resource at one revision (`at`, or the
/// newest when 0 or no longer readable) and makes it the cache's state.
async fn relist(
    cache: &ResourceCache,
    storage: &Storage,
    end: &str,
    at: i64,
) -> Result<i64, StorageError> {
    let (revision, kvs) = match list_all(storage, &cache.prefix, end, at).await {
        // The oldest revision the store still has, when it says which.
        Err(StorageError::Compacted { compacted, .. }) if at > 0 && compacted > at => {
            match list_all(storage, &cache.prefix, end, compacted).await {
                Err(StorageError::Compacted { .. }) => {
                    list_all(storage, &cache.prefix, end, 0).await?
                }
                other => other?,
            }
        }
        Err(StorageError::Compacted { .. } | StorageError::FutureRevision) if at > 0 => {
            list_all(storage, &cache.prefix, end, 0).await?
        }
        other => other?,
    };
    let objects = kvs
        .into_iter()
        .map(|kv| CachedObject::new(cache.resource, kv.key.into(), kv.mod_revision, kv.value))
        .collect();
    cache.replace(objects, revision);
    Ok(revision)
}

async fn list_all(
    storage: &Storage,
    start: &str,
    end: &str,
    at: i64,
) -> Result<(i64, Vec<crate::storage::Kv>), StorageError> {
    let mut revision = at;
    let mut from = start.to_string();
    let mut kvs = Vec::new();
    loop {
        let page = storage.list(&from, end, revision, LIST_PAGE).await?;
        // A page's header carries the store's newest revision: the first
        // one fixes the revision of the later pages.
        if revision == 0 {
            revision = page.revision;
        }
        let more = page.more;
        if let Some(last) = page.kvs.last() {
            from = format!("{}\0", last.key);
        }
        let empty = page.kvs.is_empty();
        kvs.extend(page.kvs);
        if !more || empty {
            return Ok((revision, kvs));
        }
    }
}

/// Applies the watch's changes until it ends; why it ended.
async fn follow(cache: &ResourceCache, mut stream: ChangeStream) -> StorageError {
    let mut progress = tokio::time::interval(cache.config.progress_interval);
    progress.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut bookmarks = tokio::time::interval(cache.config.bookmark_interval);
    bookmarks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    bookmarks.tick().await;
    loop {
        tokio::select! {
            item = stream.next_item() => match item {
                None => return StorageError::Unavailable("the store ended the watch".into()),
                Some(Err(err)) => return err,
                Some(Ok(WatchItem::Changes(changes))) => cache.apply(changes),
                Some(Ok(WatchItem::Progress(revision))) => cache.progress(revision),
            },
            _ = cache.progress_wanted.notified() => stream.request_progress(),
            _ = progress.tick() => stream.request_progress(),
            _ = bookmarks.tick() => cache.send_bookmarks(),
        }
    }
}
