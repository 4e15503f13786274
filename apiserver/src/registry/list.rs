//! Lists: served from the watch cache (as stored bytes, in chunks) or read
//! from the store a page at a time, with continue tokens and the
//! resourceVersion rules of a consistent or cached read.

use super::*;

impl Registry {
    /// A list the watch cache can serve, as the JSON body of the reply,
    /// built from each object's stored bytes without parsing them (the
    /// path of a plain `GET …/pods?resourceVersion=0`). `None`: the cache
    /// cannot serve it; [`Self::list`] will.
    pub async fn list_json(
        &self,
        target: &Target<'_>,
        options: &ListOptions,
    ) -> ApiResult<Option<ListJson>> {
        let resource = target.resource;
        let Some(cached) = self.cache.list(target, options).await? else {
            return Ok(None);
        };
        let mut head = b"{\"apiVersion\":".to_vec();
        head.extend(serde_json::to_vec(&resource.api_version()).unwrap_or_default());
        head.extend_from_slice(b",\"items\":[");
        let mut tail = b"],\"kind\":".to_vec();
        tail.extend(serde_json::to_vec(resource.list_kind).unwrap_or_default());
        tail.extend_from_slice(b",\"metadata\":");
        let metadata = list_metadata(cached.revision, cached.next_start.as_deref());
        tail.extend(serde_json::to_vec(&metadata).unwrap_or_default());
        tail.push(b'}');
        if cached.objects.iter().all(|o| o.splices()) {
            return Ok(Some(ListJson::Chunks(ListChunks {
                head: Some(head),
                objects: cached.objects.into_iter(),
                first: true,
                tail: Some(tail),
            })));
        }
        // Some object's bytes are not the registry's: parse those.
        let size: usize = cached.objects.iter().map(|o| o.stored.len() + 32).sum();
        let mut body = Vec::with_capacity(head.len() + size + tail.len());
        body.extend_from_slice(&head);
        for (i, object) in cached.objects.iter().enumerate() {
            if i > 0 {
                body.push(b',');
            }
            if !object.write_served(&mut body, object.mod_revision) {
                let value = object.served(resource, object.mod_revision)?;
                body.extend(serde_json::to_vec(&value).unwrap_or_default());
            }
        }
        body.extend_from_slice(&tail);
        Ok(Some(ListJson::Whole(body)))
    }

    /// GET of a collection: the objects that match, a page at a time.
    pub async fn list(&self, target: &Target<'_>, options: &ListOptions) -> ApiResult<Value> {
        let resource = target.resource;
        // The watch cache serves first pages (any resourceVersion but an
        // Exact one); a continued list reads the store at the first page's
        // revision, which the cache's state equals.
        if let Some(cached) = self.cache.list(target, options).await? {
            let items = cached
                .objects
                .iter()
                .map(|o| o.served(resource, o.mod_revision))
                .collect::<ApiResult<Vec<_>>>()?;
            return Ok(json!({
                "kind": resource.list_kind,
                "apiVersion": resource.api_version(),
                "metadata": list_metadata(cached.revision, cached.next_start.as_deref()),
                "items": items,
            }));
        }
        let prefix = match (resource.namespaced, target.namespace) {
            (true, Some(namespace)) => resource.namespace_prefix(namespace),
            _ => resource.storage_prefix(),
        };
        let end = prefix_end(&prefix);
        let (mut revision, mut start) = match &options.continue_token {
            Some(token) => decode_continue(token)?,
            None => {
                let revision = match (
                    options.resource_version.as_str(),
                    options.resource_version_match.as_str(),
                ) {
                    ("" | "0", _) => 0,
                    (rv, "Exact") => rv.parse::<i64>().map_err(|_| {
                        ApiError::bad_request(format!("invalid resourceVersion {rv:?}"))
                    })?,
                    _ => 0,
                };
                (revision, prefix.clone())
            }
        };
        let limit = options.limit.max(0);
        let mut items = Vec::new();
        let mut next_start = None;
        loop {
            let filtering = options.labels.is_some() || options.fields.is_some();
            let want = if limit > 0 && !filtering {
                limit - items.len() as i64
            } else {
                LIST_BATCH.max(limit)
            };
            let page = self
                .storage
                .list(&start, &end, revision, want)
                .await
                .map_err(|err| match err {
                    StorageError::Compacted { .. } if options.continue_token.is_some() => ApiError::gone(
                        "The provided continue parameter is too old to display a consistent list result. \
                         You can start a new list without the continue parameter.",
                    ),
                    other => storage_error(target, "", other),
                })?;
            // A page's header carries the store's newest revision, not the
            // one it was read at: take it only for a list at "now", so that
            // later batches and continued pages stay at the first page's.
            if revision == 0 {
                revision = page.revision;
                // A list "not older than" a revision the store has not
                // reached cannot be served (the cache waited for it).
                if let Some(asked) = newer_than_served(options, revision) {
                    return Err(too_large_resource_version(asked, revision));
                }
            }
            let mut last_key = None;
            for kv in &page.kvs {
                last_key = Some(kv.key.clone());
                let object = object::from_stored(resource, &kv.value, kv.mod_revision)?;
                if options.selects(&object) {
                    items.push(object);
                }
                if limit > 0 && items.len() as i64 >= limit {
                    break;
                }
            }
            let Some(last) = last_key else { break };
            let stopped_early = limit > 0 && items.len() as i64 >= limit;
            let reached_last_of_page = page.kvs.last().map(|kv| &kv.key) == Some(&last);
            if stopped_early {
                if !reached_last_of_page || page.more {
                    next_start = Some(format!("{last}\0"));
                }
                break;
            }
            if !page.more {
                break;
            }
            start = format!("{last}\0");
        }
        let mut metadata = json!({"resourceVersion": revision.to_string()});
        if let Some(start) = next_start {
            metadata["continue"] = json!(encode_continue(revision, &start));
        }
        Ok(json!({
            "kind": resource.list_kind,
            "apiVersion": resource.api_version(),
            "metadata": metadata,
            "items": items,
        }))
    }
}

/// `{"rv": N, "start": key}` in URL-safe base64: where a list goes on.
pub(super) fn encode_continue(revision: i64, start: &str) -> String {
    use base64::Engine;
    let token = json!({"rv": revision, "start": start}).to_string();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token)
}

pub(super) fn decode_continue(token: &str) -> ApiResult<(i64, String)> {
    use base64::Engine;
    let bad = || ApiError::bad_request("invalid continue token: start the list again without it");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|_| bad())?;
    let value: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    let revision = value["rv"].as_i64().filter(|r| *r > 0).ok_or_else(bad)?;
    let start = value["start"].as_str().ok_or_else(bad)?.to_string();
    Ok((revision, start))
}

/// The JSON body of a list served by the watch cache.
pub enum ListJson {
    /// Written a chunk at a time as the connection takes it.
    Chunks(ListChunks),
    Whole(Vec<u8>),
}

/// Bytes of a list body per chunk: the server copies the next chunk while
/// the client reads the last, and a list of 100 000 objects never sits in
/// memory a second time as one buffer.
pub(super) const LIST_CHUNK: usize = 256 << 10;

/// A cached list's body, a chunk of about [`LIST_CHUNK`] bytes at a time:
/// every object's stored bytes with its resourceVersion spliced in.
pub struct ListChunks {
    head: Option<Vec<u8>>,
    objects: std::vec::IntoIter<std::sync::Arc<crate::cache::CachedObject>>,
    first: bool,
    tail: Option<Vec<u8>>,
}

impl Iterator for ListChunks {
    type Item = bytes::Bytes;

    fn next(&mut self) -> Option<bytes::Bytes> {
        let mut chunk = self
            .head
            .take()
            .unwrap_or_else(|| Vec::with_capacity(LIST_CHUNK + 4096));
        for object in self.objects.by_ref() {
            if !std::mem::take(&mut self.first) {
                chunk.push(b',');
            }
            // Every object splices: `list_json` checked.
            object.write_served(&mut chunk, object.mod_revision);
            if chunk.len() >= LIST_CHUNK {
                return Some(chunk.into());
            }
        }
        if let Some(tail) = self.tail.take() {
            chunk.extend_from_slice(&tail);
        }
        (!chunk.is_empty()).then(|| chunk.into())
    }
}

/// The resourceVersion a first page asked not to be older than, if it is
/// newer than `served`.
pub(super) fn newer_than_served(options: &ListOptions, served: i64) -> Option<i64> {
    if options.continue_token.is_some() || options.resource_version_match == "Exact" {
        return None;
    }
    let asked: i64 = options.resource_version.parse().ok()?;
    (asked > served).then_some(asked)
}

/// Kubernetes' answer to a read at a revision still to come: 504 with the
/// cause ResourceVersionTooLarge, to be retried.
pub(super) fn too_large_resource_version(asked: i64, current: i64) -> ApiError {
    let mut err = ApiError::timeout(format!(
        "Too large resource version: {asked}, current: {current}"
    ));
    err.details = Some(Box::new(crate::status::Details {
        causes: vec![crate::status::Cause {
            reason: "ResourceVersionTooLarge",
            message: "Too large resource version".into(),
            field: String::new(),
        }],
        retry_after_seconds: Some(1),
        ..Default::default()
    }));
    err
}

pub(super) fn list_metadata(revision: i64, next_start: Option<&str>) -> Value {
    let mut metadata = json!({"resourceVersion": revision.to_string()});
    if let Some(start) = next_start {
        metadata["continue"] = json!(encode_continue(revision, start));
    }
    metadata
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip_and_bad_ones_are_refused() {
        let token = encode_continue(42, "/registry/core/pods/default/b\0");
        assert_eq!(
            decode_continue(&token).unwrap(),
            (42, "/registry/core/pods/default/b\0".into())
        );
        assert_eq!(decode_continue("not base64!").unwrap_err().code, 400);
    }
}
