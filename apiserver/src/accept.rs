//! The Accept header as Kubernetes clients write it: JSON media ranges
//! with `g` (group), `v` (version) and `as` (kind) parameters, e.g.
//! `application/json;as=Table;v=v1;g=meta.k8s.io`. Ranges with `q=0` are
//! refusals and left out.

use axum::http::{header, HeaderMap};

/// One `application/json` media range a client accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonRange {
    pub group: String,
    pub version: String,
    pub kind: String,
}

/// Every accepted `application/json` range, in the order sent.
pub fn json_ranges(headers: &HeaderMap) -> Vec<JsonRange> {
    let mut ranges = Vec::new();
    for accept in headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
    {
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media_type = parts.next().unwrap_or_default();
            if !media_type.eq_ignore_ascii_case("application/json") {
                continue;
            }
            let mut found = JsonRange {
                group: String::new(),
                version: String::new(),
                kind: String::new(),
            };
            let mut refused = false;
            for param in parts {
                match param.split_once('=').map(|(k, v)| (k.trim(), v.trim())) {
                    Some(("g", value)) => found.group = value.to_string(),
                    Some(("v", value)) => found.version = value.to_string(),
                    Some(("as", value)) => found.kind = value.to_string(),
                    Some(("q", value)) => refused = value.parse::<f32>().is_ok_and(|q| q <= 0.0),
                    _ => {}
                }
            }
            if !refused {
                ranges.push(found);
            }
        }
    }
    ranges
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_accept_headers_split_into_ranges() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::ACCEPT,
            "application/json;as=Table;v=v1;g=meta.k8s.io, application/json;as=Table;v=v1beta1;g=meta.k8s.io;q=0, application/json"
                .parse()
                .unwrap(),
        );
        let ranges = json_ranges(&headers);
        assert_eq!(ranges.len(), 2, "the q=0 range is a refusal");
        assert_eq!(
            (
                ranges[0].kind.as_str(),
                ranges[0].version.as_str(),
                ranges[0].group.as_str()
            ),
            ("Table", "v1", "meta.k8s.io")
        );
        assert_eq!(ranges[1].kind, "");
    }
}
