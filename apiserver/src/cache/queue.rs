//! A watcher's queue: bounded, one sender (the cache, under its lock) and
//! one receiver (the watch's response body).
//!
//! One event to a thousand watchers is a thousand pushes and a thousand
//! pops, so each should cost little: here a push or a pop takes one
//! uncontended lock and a wake, where tokio's bounded channel also takes a
//! semaphore and, on every receive, the semaphore's waiter lock (by perf,
//! its receive alone was a tenth of the server's CPU in a fan-out to 1 000
//! watches).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use futures::task::AtomicWaker;

struct Shared<T> {
    state: Mutex<State<T>>,
    /// The receiver's task, woken by a push or by the sender going.
    waker: AtomicWaker,
}

struct State<T> {
    items: VecDeque<T>,
    capacity: usize,
    /// One end is gone.
    closed: bool,
}

impl<T> Shared<T> {
    // Nothing panics while holding the lock (pushes and pops of a deque),
    // so a poisoned lock still holds a whole state.
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Why a push failed.
#[derive(Debug, PartialEq, Eq)]
pub enum PushError {
    /// `capacity` items wait already.
    Full,
    /// The receiver is gone.
    Closed,
}

/// The cache's end. Dropping it ends the queue once its items are read.
pub struct Sender<T>(Arc<Shared<T>>);

/// The watch's end. Dropping it makes every later push fail with `Closed`.
pub struct Receiver<T>(Arc<Shared<T>>);

/// A queue holding at most `capacity` items (at least one).
pub fn queue<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            items: VecDeque::new(),
            capacity: capacity.max(1),
            closed: false,
        }),
        waker: AtomicWaker::new(),
    });
    (Sender(shared.clone()), Receiver(shared))
}

impl<T> Sender<T> {
    pub fn try_send(&self, item: T) -> Result<(), PushError> {
        if let Some(waker) = self.push_quietly(item)? {
            waker.wake();
        }
        Ok(())
    }

    /// Queues `item` without waking the receiver: the receiver's waker, if
    /// it waits, is handed back to be woken by the caller. A fan-out to
    /// many watchers wakes them a share at a time (see
    /// `reflector::wake_in_turns`). A receiver whose waker was taken
    /// already (by an earlier push not yet read) gives `None`.
    pub fn push_quietly(&self, item: T) -> Result<Option<Waker>, PushError> {
        {
            let mut state = self.0.lock();
            if state.closed {
                return Err(PushError::Closed);
            }
            if state.items.len() >= state.capacity {
                return Err(PushError::Full);
            }
            state.items.push_back(item);
        }
        Ok(self.0.waker.take())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.0.lock().closed = true;
        self.0.waker.wake();
    }
}

impl<T> Receiver<T> {
    /// The next item; `None` once the sender is gone and every item read.
    #[cfg(test)]
    pub async fn recv(&mut self) -> Option<T> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        if let Some(ready) = self.ready() {
            return Poll::Ready(ready);
        }
        // Registered before looking again, so a push in between wakes us.
        self.0.waker.register(cx.waker());
        match self.ready() {
            Some(ready) => Poll::Ready(ready),
            None => Poll::Pending,
        }
    }

    /// The next item if there is one, without waiting.
    #[cfg(test)]
    pub fn try_recv(&mut self) -> Option<T> {
        self.0.lock().items.pop_front()
    }

    /// `Some(Some(item))`, `Some(None)` at the end, `None` for nothing yet.
    fn ready(&self) -> Option<Option<T>> {
        let mut state = self.0.lock();
        match state.items.pop_front() {
            Some(item) => Some(Some(item)),
            None if state.closed => Some(None),
            None => None,
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.closed = true;
        state.items.clear();
    }
}

/// A waker that counts its wakes in `count`, for tests of who is woken.
#[cfg(test)]
pub(super) fn counting_waker(count: &Arc<std::sync::atomic::AtomicUsize>) -> Waker {
    struct Counting(Arc<std::sync::atomic::AtomicUsize>);

    impl futures::task::ArcWake for Counting {
        fn wake_by_ref(arc_self: &Arc<Self>) {
            arc_self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    futures::task::waker(Arc::new(Counting(count.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn items_come_out_in_order_then_the_end() {
        let (tx, mut rx) = queue(4);
        tx.try_send(1).unwrap();
        tx.try_send(2).unwrap();
        drop(tx);
        assert_eq!(rx.recv().await, Some(1));
        assert_eq!(rx.recv().await, Some(2));
        assert_eq!(rx.recv().await, None);
    }

    #[tokio::test]
    async fn a_full_queue_refuses_and_a_read_makes_room() {
        let (tx, mut rx) = queue(2);
        tx.try_send(1).unwrap();
        tx.try_send(2).unwrap();
        assert_eq!(tx.try_send(3), Err(PushError::Full));
        assert_eq!(rx.try_recv(), Some(1));
        tx.try_send(3).unwrap();
        assert_eq!(rx.recv().await, Some(2));
        assert_eq!(rx.recv().await, Some(3));
        assert_eq!(rx.try_recv(), None);
    }

    #[tokio::test]
    async fn a_gone_receiver_refuses_pushes() {
        let (tx, rx) = queue(2);
        drop(rx);
        assert_eq!(tx.try_send(1), Err(PushError::Closed));
    }

    #[tokio::test]
    async fn a_waiting_receiver_is_woken_by_a_push_from_another_task() {
        let (tx, mut rx) = queue(8);
        let reader = tokio::spawn(async move {
            let mut seen = Vec::new();
            while let Some(item) = rx.recv().await {
                seen.push(item);
            }
            seen
        });
        for i in 0..5 {
            tokio::task::yield_now().await;
            tx.try_send(i).unwrap();
        }
        drop(tx);
        let seen = tokio::time::timeout(std::time::Duration::from_secs(10), reader)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(seen, [0, 1, 2, 3, 4]);
    }

    #[tokio::test]
    async fn a_quiet_push_hands_back_the_waiting_receivers_waker_once() {
        let (tx, mut rx) = queue(8);
        let woken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let waker = counting_waker(&woken);
        let mut cx = Context::from_waker(&waker);
        assert!(rx.poll_recv(&mut cx).is_pending());
        // The receiver waits: its waker comes back, unwoken.
        let handed = tx
            .push_quietly(1)
            .unwrap()
            .expect("the waiting receiver's waker");
        assert_eq!(woken.load(std::sync::atomic::Ordering::SeqCst), 0);
        // Until the receiver looks again, a second push has no waker.
        assert!(tx.push_quietly(2).unwrap().is_none());
        handed.wake();
        assert_eq!(woken.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(rx.poll_recv(&mut cx), Poll::Ready(Some(1)));
        assert_eq!(rx.poll_recv(&mut cx), Poll::Ready(Some(2)));
        assert!(rx.poll_recv(&mut cx).is_pending());
        assert!(tx.push_quietly(3).unwrap().is_some());
        drop(rx);
        assert_eq!(tx.push_quietly(4).unwrap_err(), PushError::Closed);
    }

    #[test]
    fn capacity_is_at_least_one() {
        let (tx, _rx) = queue(0);
        assert_eq!(tx.try_send(1), Ok(()));
        assert_eq!(tx.try_send(2), Err(PushError::Full));
    }
}
