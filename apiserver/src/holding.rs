//! A response body that keeps something alive for as long as the body is
//! sent: a watch's slot in the per-client limit, its audit record's end.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};

/// `body`, holding `held` until the body is dropped (its stream ended or
/// its client gone). Polls go straight to `body`: one layer, not a stream
/// adapter per frame.
pub(crate) struct Holding<H> {
    body: Body,
    _held: H,
}

impl<H: Send + Unpin + 'static> Holding<H> {
    pub(crate) fn body(body: Body, held: H) -> Body {
        Body::new(Holding { body, _held: held })
    }
}

impl<H: Unpin> http_body::Body for Holding<H> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    /// The body passes through whole, and what it holds is let go only
    /// when the body is dropped.
    #[tokio::test]
    async fn the_body_passes_through_and_holds_until_dropped() {
        let dropped = Arc::new(AtomicBool::new(false));
        let chunks = futures::stream::iter(["a", "b"].map(Ok::<_, std::io::Error>));
        let body = Holding::body(Body::from_stream(chunks), Flag(dropped.clone()));
        let mut stream = body.into_data_stream();
        use futures::StreamExt;
        assert_eq!(stream.next().await.unwrap().unwrap(), "a");
        assert!(!dropped.load(Ordering::SeqCst));
        assert_eq!(stream.next().await.unwrap().unwrap(), "b");
        assert!(stream.next().await.is_none());
        assert!(!dropped.load(Ordering::SeqCst));
        drop(stream);
        assert!(dropped.load(Ordering::SeqCst));
        let sized = Holding::body(Body::from("abc"), ());
        assert_eq!(http_body::Body::size_hint(&sized).exact(), Some(3));
    }
}
