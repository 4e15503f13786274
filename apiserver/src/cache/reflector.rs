//! The one task per resource that keeps its cache: list the store at a
//! revision, watch it from the next one, apply every change. A watch that
//! fails is resumed from the cache's revision; one whose revision was
//! compacted away means a relist (and the cache's watchers start again).

use std::sync::Arc;
use std::task::Waker;
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
        let ended = match storage
            .watch(&cache.prefix, &end, revision + 1, false)
            .await
        {
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
                Some(Ok(WatchItem::Changes(changes))) => {
                    wake_in_turns(cache.apply(changes)).await
                }
                Some(Ok(WatchItem::Progress(revision))) => cache.progress(revision),
            },
            _ = cache.progress_wanted.notified() => stream.request_progress(),
            _ = progress.tick() => stream.request_progress(),
            _ = bookmarks.tick() => cache.send_bookmarks(),
        }
    }
}

/// Watchers woken per turn of the reflector's task.
const WAKES_PER_TURN: usize = 64;

/// Wakes the watchers a change was queued for, `WAKES_PER_TURN` at a
/// time, letting the other tasks of this worker run between turns. A
/// thousand watches woken at once all queue ahead of the connection tasks
/// that write what they produce (an HTTP/2 connection's own task writes
/// its streams' frames), so no watcher's bytes left before every watch had
/// run; woken in turns, the first watchers' events are on the wire while
/// the rest are still being woken.
async fn wake_in_turns(wakes: Vec<Waker>) {
    let mut left = Unwoken(wakes.into_iter());
    loop {
        left.0.by_ref().take(WAKES_PER_TURN).for_each(Waker::wake);
        if left.0.len() == 0 {
            return;
        }
        tokio::task::yield_now().await;
    }
}

/// Wakers taken from watchers' queues and not yet woken. Dropped with
/// some left (the reflector aborted between turns), it wakes them: their
/// queues hold events, or are closed, and nothing else would wake them.
struct Unwoken(std::vec::IntoIter<Waker>);

impl Drop for Unwoken {
    fn drop(&mut self) {
        self.0.by_ref().for_each(Waker::wake);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::queue::counting_waker;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(flavor = "current_thread")]
    async fn every_watcher_is_woken_and_other_tasks_run_between_turns() {
        let woken = Arc::new(AtomicUsize::new(0));
        let wakes: Vec<Waker> = (0..WAKES_PER_TURN * 3 + 1)
            .map(|_| counting_waker(&woken))
            .collect();
        // Another task of the same (one-thread) runtime records how many
        // wakes it saw each time it ran.
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let other = tokio::spawn({
            let (woken, seen) = (woken.clone(), seen.clone());
            async move {
                for _ in 0..3 {
                    seen.lock().unwrap().push(woken.load(Ordering::SeqCst));
                    tokio::task::yield_now().await;
                }
            }
        });
        wake_in_turns(wakes).await;
        assert_eq!(woken.load(Ordering::SeqCst), WAKES_PER_TURN * 3 + 1);
        other.await.unwrap();
        let seen = seen.lock().unwrap().clone();
        // It ran after each of the first three turns: the fan-out
        // left the worker between turns.
        assert_eq!(
            seen,
            [WAKES_PER_TURN, WAKES_PER_TURN * 2, WAKES_PER_TURN * 3]
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_reflector_stopped_between_turns_still_wakes_every_watcher() {
        let woken = Arc::new(AtomicUsize::new(0));
        let wakes: Vec<Waker> = (0..WAKES_PER_TURN * 3)
            .map(|_| counting_waker(&woken))
            .collect();
        let task = tokio::spawn(wake_in_turns(wakes));
        // The task runs its first turn, then yields back here.
        tokio::task::yield_now().await;
        assert_eq!(woken.load(Ordering::SeqCst), WAKES_PER_TURN);
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        assert_eq!(woken.load(Ordering::SeqCst), WAKES_PER_TURN * 3);
    }
}
