//! A spawned task tied to its owner: aborted when the owner drops it
//! (a connection's driver when the call ends, an HTTP/2 stream's handler
//! when the client resets the stream).

pub(crate) struct AbortOnDrop<T>(pub(crate) tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A task whose guard is dropped is aborted, not left running.
    #[tokio::test]
    async fn a_dropped_guard_aborts_its_task() {
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let (_finish, finish) = tokio::sync::oneshot::channel::<()>();
        let handler = AbortOnDrop(tokio::spawn(async move {
            let _ = started_tx.send(());
            let _ = finish.await;
        }));
        started.await.unwrap();
        let task = handler.0.abort_handle();
        assert!(!task.is_finished());
        drop(handler);
        for _ in 0..100 {
            if task.is_finished() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(task.is_finished(), "the task was aborted");
    }
}
