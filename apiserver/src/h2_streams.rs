//! An HTTP/2 connection's streams polled by the connection's own task.
//!
//! hyper spawns a task per HTTP/2 stream, and every stream task takes the
//! connection's stream-state lock several times for each DATA frame it
//! sends (capacity, reset, send). A write's events to 1 000 watches
//! multiplexed on one connection woke 1 000 tasks, which tokio spread over
//! both workers, and the two contended for that one lock: by perf, 9 % of
//! the API server's CPU was spent spinning and sleeping on it, and more in
//! the futex calls and context switches it caused.
//!
//! Here hyper's spawns for one connection go to a [`StreamExecutor`], whose
//! futures the connection's task polls itself ([`WithStreams`]) between
//! its own turns, so the lock is taken by one thread at a time. The
//! requests' handlers do not run there: the HTTP/2 service spawns each on
//! the runtime (see `serving.rs`), so a slow handler holds up neither the
//! connection nor its other streams; only the responses' bodies are polled
//! here. Every [`CONNECTION_EVERY`] stream polls the connection is polled
//! too, so the first frames go out while later streams still queue theirs.

use std::collections::VecDeque;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;
use tokio::sync::mpsc;

/// A stream's future as hyper hands it over.
type StreamFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Stream polls between two polls of the connection itself.
const CONNECTION_EVERY: usize = 32;

/// Stream polls in one turn of the task before it yields to the runtime
/// (waking itself), as a task that polls many futures should.
const POLLS_PER_TURN: usize = 4096;

/// hyper's executor for one connection: what it spawns is polled by that
/// connection's [`WithStreams`]; once the connection is gone, by a task of
/// its own.
#[derive(Clone)]
pub struct StreamExecutor {
    spawned: mpsc::UnboundedSender<StreamFuture>,
}

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, future: F) {
        if let Err(mpsc::error::SendError(future)) = self.spawned.send(Box::pin(future)) {
            tokio::spawn(future);
        }
    }
}

/// An executor for one connection, and the connection's future wrapped to
/// poll what is spawned on it.
pub fn executor() -> (StreamExecutor, Spawned) {
    let (spawned, inbox) = mpsc::unbounded_channel();
    (StreamExecutor { spawned }, Spawned { inbox })
}

/// What a [`StreamExecutor`] was given, to hand to [`WithStreams::new`].
pub struct Spawned {
    inbox: mpsc::UnboundedReceiver<StreamFuture>,
}

/// Indices of the streams woken since the task last looked, and the
/// task's waker.
#[derive(Default)]
struct Ready {
    woken: Mutex<Vec<usize>>,
    task: AtomicWaker,
}

/// A stream's waker: queues its index (once until it is polled) and wakes
/// the connection's task.
struct StreamWaker {
    index: usize,
    queued: AtomicBool,
    ready: Arc<Ready>,
}

impl Wake for StreamWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            // A poisoned lock only means a panic elsewhere mid-push; the
            // indices are still plain numbers.
            let mut woken = self.ready.woken.lock().unwrap_or_else(|e| e.into_inner());
            woken.push(self.index);
            drop(woken);
            self.ready.task.wake();
        }
    }
}

struct Slot {
    future: StreamFuture,
    waker: Arc<StreamWaker>,
}

/// A connection's future that also polls the streams spawned for it.
pub struct WithStreams<C> {
    connection: Pin<Box<C>>,
    inbox: mpsc::UnboundedReceiver<StreamFuture>,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    ready: Arc<Ready>,
    /// Indices taken from `ready`, polled in order.
    due: VecDeque<usize>,
}

impl<C: Future> WithStreams<C> {
    pub fn new(connection: C, spawned: Spawned) -> WithStreams<C> {
        WithStreams {
            connection: Box::pin(connection),
            inbox: spawned.inbox,
            slots: Vec::new(),
            free: Vec::new(),
            ready: Arc::default(),
            due: VecDeque::new(),
        }
    }

    /// Streams not finished yet.
    #[cfg(test)]
    fn live(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    fn add(&mut self, future: StreamFuture) {
        let index = self.free.pop().unwrap_or(self.slots.len());
        let waker = Arc::new(StreamWaker {
            index,
            // Queued below: a new stream is polled on this turn.
            queued: AtomicBool::new(true),
            ready: self.ready.clone(),
        });
        let slot = Slot { future, waker };
        if index == self.slots.len() {
            self.slots.push(Some(slot));
        } else {
            self.slots[index] = Some(slot);
        }
        self.due.push_back(index);
    }

    /// Polls one stream; a finished one frees its slot. A stream that
    /// panics is dropped, as its own task would have been, and the
    /// connection's other streams go on.
    fn poll_stream(&mut self, index: usize) {
        let Some(slot) = self.slots.get_mut(index).and_then(Option::as_mut) else {
            return;
        };
        slot.waker.queued.store(false, Ordering::Release);
        let waker = Waker::from(slot.waker.clone());
        let mut cx = Context::from_waker(&waker);
        let polled =
            std::panic::catch_unwind(AssertUnwindSafe(|| slot.future.as_mut().poll(&mut cx)));
        let finished = match polled {
            Ok(poll) => poll.is_ready(),
            Err(_) => {
                tracing::error!("an HTTP/2 stream's response panicked; the stream is dropped");
                true
            }
        };
        if finished {
            self.slots[index] = None;
            self.free.push(index);
        }
    }

    /// Hands the streams still running to a task of their own.
    fn release_streams(&mut self) {
        for slot in self.slots.drain(..).flatten() {
            tokio::spawn(slot.future);
        }
        self.free.clear();
        self.due.clear();
        while let Ok(future) = self.inbox.try_recv() {
            tokio::spawn(future);
        }
    }
}

impl<C: Future> Future for WithStreams<C> {
    type Output = C::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<C::Output> {
        let this = self.get_mut();
        this.ready.task.register(cx.waker());
        let mut polled = 0;
        loop {
            while let Poll::Ready(Some(future)) = this.inbox.poll_recv(cx) {
                this.add(future);
            }
            if this.due.is_empty() {
                let mut woken = this.ready.woken.lock().unwrap_or_else(|e| e.into_inner());
                this.due.extend(woken.drain(..));
            }
            if let Poll::Ready(output) = this.connection.as_mut().poll(cx) {
                this.release_streams();
                return Poll::Ready(output);
            }
            if this.due.is_empty() {
                return Poll::Pending;
            }
            if polled >= POLLS_PER_TURN {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            // The oldest first, a batch at a time, then the connection.
            for _ in 0..CONNECTION_EVERY {
                let Some(index) = this.due.pop_front() else {
                    break;
                };
                this.poll_stream(index);
            }
            polled += CONNECTION_EVERY;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::rt::Executor;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    /// A connection that stays open until told.
    async fn connection(until: tokio::sync::oneshot::Receiver<()>) -> &'static str {
        let _ = until.await;
        "closed"
    }

    #[tokio::test]
    async fn spawned_streams_run_in_the_connections_task_and_finish() {
        let (executor, spawned) = executor();
        let (close, until) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(WithStreams::new(connection(until), spawned));
        let done = Arc::new(AtomicUsize::new(0));
        let mut senders = Vec::new();
        for _ in 0..100 {
            let (tx, rx) = tokio::sync::oneshot::channel::<()>();
            senders.push(tx);
            let done = done.clone();
            executor.execute(async move {
                let _ = rx.await;
                done.fetch_add(1, Ordering::SeqCst);
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            done.load(Ordering::SeqCst),
            0,
            "the streams wait for their wakes"
        );
        for tx in senders {
            tx.send(()).unwrap();
        }
        for _ in 0..200 {
            if done.load(Ordering::SeqCst) == 100 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            done.load(Ordering::SeqCst),
            100,
            "every woken stream ran to its end"
        );
        close.send(()).unwrap();
        assert_eq!(task.await.unwrap(), "closed");
    }

    #[tokio::test]
    async fn streams_left_when_the_connection_ends_still_finish() {
        let (executor, spawned) = executor();
        let (close, until) = tokio::sync::oneshot::channel();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (finished_tx, finished) = tokio::sync::oneshot::channel();
        executor.execute(async move {
            let _ = rx.await;
            let _ = finished_tx.send(());
        });
        let task = tokio::spawn(WithStreams::new(connection(until), spawned));
        tokio::time::sleep(Duration::from_millis(10)).await;
        close.send(()).unwrap();
        assert_eq!(task.await.unwrap(), "closed");
        // And one spawned after it ended runs on a task of its own.
        let (late_tx, late) = tokio::sync::oneshot::channel();
        executor.execute(async move {
            let _ = late_tx.send(());
        });
        tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), finished)
            .await
            .expect("the stream left running finished")
            .unwrap();
        tokio::time::timeout(Duration::from_secs(5), late)
            .await
            .expect("the stream spawned late ran")
            .unwrap();
    }

    #[tokio::test]
    async fn a_panicking_stream_is_dropped_and_the_others_go_on() {
        let (executor, spawned) = executor();
        let (_close, until) = tokio::sync::oneshot::channel::<()>();
        let mut with = WithStreams::new(connection(until), spawned);
        let polls = Arc::new(AtomicUsize::new(0));
        let counted = polls.clone();
        executor.execute(futures::future::poll_fn(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            Poll::<()>::Pending
        }));
        executor.execute(async { panic!("a stream's body failed") });
        let noop = Waker::noop();
        let mut cx = Context::from_waker(noop);
        assert!(Pin::new(&mut with).poll(&mut cx).is_pending());
        assert_eq!(with.live(), 1, "the panicking stream's slot was freed");
        assert_eq!(polls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_finished_streams_slot_is_reused_and_a_stale_wake_is_harmless() {
        let (executor, spawned) = executor();
        let (_close, until) = tokio::sync::oneshot::channel::<()>();
        let mut with = WithStreams::new(connection(until), spawned);
        let stale: Arc<Mutex<Option<Waker>>> = Arc::default();
        let keep = stale.clone();
        executor.execute(futures::future::poll_fn(move |cx| {
            *keep.lock().unwrap() = Some(cx.waker().clone());
            Poll::Ready(())
        }));
        let noop = Waker::noop();
        let mut cx = Context::from_waker(noop);
        assert!(Pin::new(&mut with).poll(&mut cx).is_pending());
        assert_eq!(with.live(), 0);
        let polls = Arc::new(AtomicUsize::new(0));
        let counted = polls.clone();
        executor.execute(futures::future::poll_fn(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            Poll::<()>::Pending
        }));
        assert!(Pin::new(&mut with).poll(&mut cx).is_pending());
        assert_eq!(
            (with.live(), with.slots.len()),
            (1, 1),
            "the slot was reused"
        );
        assert_eq!(polls.load(Ordering::SeqCst), 1);
        // The first stream's waker, woken after it finished, only polls
        // the slot's new stream once more.
        stale.lock().unwrap().take().unwrap().wake();
        assert!(Pin::new(&mut with).poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }
}
