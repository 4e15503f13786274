//! The Accept header as Kubernetes clients write it: JSON media ranges
//! with `g` (group), `v` (version) and `as` (kind) parameters, e.g.
//! `application/json;as=Table;v=v1;g=meta.k8s.io`. Ranges with `q=0` are
//! refusals and left out.
//!
//! [`negotiate`] picks the form of a reply (JSON, YAML or protobuf) from
//! the whole header, with its q-values, as Kubernetes' negotiation does.

use axum::http::{header, HeaderMap};

/// The form a reply is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Json,
    Yaml,
    Protobuf,
}

impl Output {
    /// The media type a reply in this form names in its `Content-Type`.
    pub fn media_type(self) -> &'static str {
        match self {
            Output::Json => "application/json",
            Output::Yaml => "application/yaml",
            Output::Protobuf => crate::protobuf::MEDIA_TYPE,
        }
    }
}

/// What a resource can be answered in.
#[derive(Debug, Clone, Copy)]
pub struct Offer {
    /// Built-in kinds have a protobuf form; custom resources do not.
    pub protobuf: bool,
    /// A watch stream: JSON or protobuf frames, never YAML.
    pub watch: bool,
}

impl Offer {
    fn offers(self, output: Output) -> bool {
        match output {
            Output::Json => true,
            Output::Yaml => !self.watch,
            Output::Protobuf => self.protobuf,
        }
    }

    /// The media types this offer serves, in Kubernetes' order, for the
    /// message of a 406.
    pub fn media_types(self) -> Vec<&'static str> {
        [Output::Json, Output::Yaml, Output::Protobuf]
            .into_iter()
            .filter(|o| self.offers(*o))
            .map(Output::media_type)
            .collect()
    }
}

/// The reply's form for this request's Accept header: the offered form of
/// the range with the highest q (the more specific first among equals,
/// else in the order sent). No header, or an empty one, is JSON. `None`
/// when the header accepts nothing offered: Kubernetes' 406.
pub fn negotiate(headers: &HeaderMap, offer: Offer) -> Option<Output> {
    struct Range {
        q: f32,
        specificity: u8,
        output: Option<Output>,
    }
    let mut ranges = Vec::new();
    for accept in headers.get_all(header::ACCEPT).iter() {
        let Ok(accept) = accept.to_str() else {
            continue;
        };
        for range in accept.split(',').filter(|r| !r.trim().is_empty()) {
            let mut parts = range.split(';').map(str::trim);
            let media_type = parts.next().unwrap_or_default().to_ascii_lowercase();
            let mut q = 1.0_f32;
            let mut converted = false;
            for param in parts {
                match param.split_once('=').map(|(k, v)| (k.trim(), v.trim())) {
                    // An unreadable q is 0, as Go's parser leaves it.
                    Some(("q", value)) => q = value.parse().unwrap_or(0.0),
                    Some(("as", _)) => converted = true,
                    _ => {}
                }
            }
            if q.is_nan() || q <= 0.0 {
                continue;
            }
            let (specificity, output) = match media_type.as_str() {
                "*/*" => (0, Some(Output::Json)),
                "application/*" => (1, Some(Output::Json)),
                "application/json" => (2, Some(Output::Json)),
                // Tables and metadata-only lists are JSON here.
                _ if converted => (2, None),
                "application/yaml" => (2, Some(Output::Yaml)),
                crate::protobuf::MEDIA_TYPE => (2, Some(Output::Protobuf)),
                _ => (2, None),
            };
            ranges.push(Range {
                q,
                specificity,
                output: output.filter(|o| offer.offers(*o)),
            });
        }
    }
    if ranges.is_empty() {
        // No header, or only refusals and blanks: JSON, as for no header
        // (a header of only q=0 ranges refuses everything).
        let refused = headers.get_all(header::ACCEPT).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|r| !r.trim().is_empty()))
        });
        return (!refused).then_some(Output::Json);
    }
    ranges.sort_by(|a, b| {
        b.q.total_cmp(&a.q)
            .then_with(|| b.specificity.cmp(&a.specificity))
    });
    ranges.into_iter().find_map(|r| r.output)
}

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

    fn accept(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, value.parse().unwrap());
        headers
    }

    const BUILT_IN: Offer = Offer {
        protobuf: true,
        watch: false,
    };
    const CUSTOM: Offer = Offer {
        protobuf: false,
        watch: false,
    };
    const WATCH: Offer = Offer {
        protobuf: true,
        watch: true,
    };

    #[test]
    fn replies_take_the_form_the_client_prefers() {
        use Output::*;
        let cases: &[(&str, Offer, Option<Output>)] = &[
            // client-go with protobuf (kubectl 1.32+, informers).
            (
                "application/vnd.kubernetes.protobuf, application/json",
                BUILT_IN,
                Some(Protobuf),
            ),
            (
                "application/vnd.kubernetes.protobuf, application/json",
                CUSTOM,
                Some(Json),
            ),
            ("application/vnd.kubernetes.protobuf", CUSTOM, None),
            ("application/vnd.kubernetes.protobuf", WATCH, Some(Protobuf)),
            ("application/json", BUILT_IN, Some(Json)),
            ("application/yaml", BUILT_IN, Some(Yaml)),
            ("application/yaml", WATCH, None),
            (
                "application/yaml, application/json;q=0.5",
                WATCH,
                Some(Json),
            ),
            // q-values outrank the order sent.
            (
                "application/json;q=0.5, application/vnd.kubernetes.protobuf",
                BUILT_IN,
                Some(Protobuf),
            ),
            (
                "application/vnd.kubernetes.protobuf;q=0.2, application/json;q=0.9",
                BUILT_IN,
                Some(Json),
            ),
            // Among equals, the more specific range wins.
            ("*/*, application/yaml", BUILT_IN, Some(Yaml)),
            ("*/*", BUILT_IN, Some(Json)),
            ("application/*", CUSTOM, Some(Json)),
            (
                "text/html,application/xhtml+xml,*/*;q=0.8",
                BUILT_IN,
                Some(Json),
            ),
            ("text/plain", BUILT_IN, None),
            ("application/json;q=0", BUILT_IN, None),
            ("application/json;q=bogus", BUILT_IN, None),
            (
                "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, application/json",
                BUILT_IN,
                Some(Json),
            ),
        ];
        for (value, offer, want) in cases {
            assert_eq!(
                negotiate(&accept(value), *offer),
                *want,
                "{value} {offer:?}"
            );
        }
        assert_eq!(negotiate(&HeaderMap::new(), CUSTOM), Some(Json));
        assert_eq!(negotiate(&accept(""), BUILT_IN), Some(Json));
    }

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
