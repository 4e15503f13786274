//! Warnings a request earns besides its answer, sent back as
//! `Warning: 299 - "…"` headers: collected while the request is served, as
//! k8s.io/apiserver's warning recorder collects them from the strategies
//! and admission webhooks. Not a log.

use std::cell::RefCell;
use std::future::Future;

tokio::task_local! {
    static RECORDED: RefCell<Vec<String>>;
}

/// Runs `serve` with a recorder, and returns its output with the
/// warnings added while it ran, each once, in the order added.
pub async fn collect<F: Future>(serve: F) -> (F::Output, Vec<String>) {
    RECORDED
        .scope(RefCell::new(Vec::new()), async {
            let output = serve.await;
            let warnings = RECORDED.with(RefCell::take);
            (output, warnings)
        })
        .await
}

/// Adds a warning to the request this task serves; nothing outside one.
pub fn add(text: impl Into<String>) {
    let text = text.into();
    let _ = RECORDED.try_with(|recorded| {
        let mut recorded = recorded.borrow_mut();
        if !recorded.contains(&text) {
            recorded.push(text);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn warnings_are_collected_once_each_and_only_inside_a_request() {
        add("lost: no request is being served");
        let ((), warnings) = collect(async {
            add("first");
            tokio::task::yield_now().await;
            add("second");
            add("first");
        })
        .await;
        assert_eq!(warnings, ["first", "second"]);
        let ((), none) = collect(async {}).await;
        assert!(none.is_empty());
    }
}
