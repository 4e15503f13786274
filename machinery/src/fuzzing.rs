//! The bodies of the fuzz targets over this crate's parsers of client
//! input (`fuzz/fuzz_targets/`), here so that a stable test replays the
//! committed corpora through the same code. Not an API: each function
//! panics when an invariant is broken, which is what a fuzzer looks for.

use serde_json::{json, Map, Value};

use crate::quantity::Quantity;
use crate::selectors::{FieldSelector, LabelSelector};

/// A fuzz target: the name of its corpus folder, and what it runs on an input.
pub type Target = (&'static str, fn(&[u8]));

/// The fuzz targets of this crate, by the name of their corpus folder.
pub const TARGETS: &[Target] = &[
    ("label_selector", label_selector),
    ("field_selector", field_selector),
    ("quantity", quantity),
];

/// Text as the API server has it from a query string: percent-decoded
/// bytes read as UTF-8, lossily.
fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

/// A `labelSelector`, parsed as a list or watch parses it: a selector that
/// parses prints in a canonical form that parses to the same selector,
/// and matching never fails.
pub fn label_selector(data: &[u8]) {
    let Ok(selector) = LabelSelector::parse(&text(data)) else {
        return;
    };
    let canonical = selector.to_string();
    let again = LabelSelector::parse(&canonical)
        .unwrap_or_else(|err| panic!("canonical form {canonical:?} does not parse: {err}"));
    assert_eq!(again, selector, "canonical form {canonical:?}");
    assert_eq!(again.to_string(), canonical);
    let labels = sample_labels(&selector);
    let _ = selector.matches(&labels);
    let _ = selector.matches(&Map::new());
    let _ = selector.matches_by(|key| labels.get(key).and_then(Value::as_str));
}

/// Labels built from the selector's own words, so that matching gets past
/// the key lookup.
fn sample_labels(selector: &LabelSelector) -> Map<String, Value> {
    let canonical = selector.to_string();
    let words: Vec<&str> = canonical
        .split(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/')))
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .map(|pair| (pair[0].to_string(), json!(pair[1])))
        .collect()
}

/// A `fieldSelector`, parsed and checked against a few kinds as a list
/// does; matching never fails, and a term `field=value` it requires is
/// one an object with that value matches.
pub fn field_selector(data: &[u8]) {
    let Ok(selector) = FieldSelector::parse(&text(data)) else {
        return;
    };
    for kind in ["Pod", "Node", "Event", "Secret", "ConfigMap"] {
        let _ = selector.check_supported(kind);
    }
    let pod = json!({
        "kind": "Pod",
        "metadata": {"name": "web-0", "namespace": "default"},
        "spec": {"nodeName": "node-1", "hostNetwork": true},
        "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.7"}]},
    });
    let _ = selector.matches(&pod);
    let _ = selector.matches(&Value::Null);
    if let Some(name) = selector.required_value("metadata.name") {
        let _ = selector.matches_by(|field| (field == "metadata.name").then_some(name));
    }
}

/// A quantity, as validation reads it (`parse_strict`) and as quota and
/// limits read it (`parse`): the canonical form of a quantity parses to
/// the same value, both parsers agree where the lenient one accepts, and
/// the arithmetic quota does on two quantities never overflows.
pub fn quantity(data: &[u8]) {
    let text = text(data);
    let (first, second) = text.split_once('|').unwrap_or((&text, "1"));
    let strict = check_strict(first);
    if let Some(lenient) = check_lenient(first) {
        let strict = strict.unwrap_or_else(|| panic!("{first:?} parses leniently, not strictly"));
        assert_eq!(
            strict.milli, lenient.milli,
            "{first:?}: the parsers disagree"
        );
    }
    let other = check_strict(second);
    if let (Some(a), Some(b)) = (strict, other) {
        let _ = a.plus(b);
        let _ = a.minus(b);
        let _ = a.cmp(&b);
    }
}

/// The strict parse of `text`, after checking that its canonical form
/// parses to the same value.
fn check_strict(text: &str) -> Option<Quantity> {
    let parsed = Quantity::parse_strict(text.trim()).ok()?;
    let canonical = parsed.to_string();
    let again = Quantity::parse_strict(&canonical)
        .unwrap_or_else(|err| panic!("canonical form {canonical:?} of {text:?}: {err}"));
    assert_eq!(
        again.milli, parsed.milli,
        "{text:?} printed as {canonical:?}"
    );
    assert_eq!(again.to_string(), canonical);
    Some(parsed)
}

/// The lenient parse of `text`, after checking that its canonical form
/// parses leniently to the same value.
fn check_lenient(text: &str) -> Option<Quantity> {
    let parsed = Quantity::parse(text)?;
    let canonical = parsed.to_string();
    let again = Quantity::parse(&canonical)
        .unwrap_or_else(|| panic!("canonical form {canonical:?} of {text:?} does not parse"));
    assert_eq!(
        again.milli, parsed.milli,
        "{text:?} printed as {canonical:?}"
    );
    Some(parsed)
}

/// Every file of `fuzz/corpus/<target>/` for each target, through its
/// body: the corpora are replayed on every `cargo test`, without nightly.
#[doc(hidden)]
pub fn replay_corpora(corpus_root: &std::path::Path, targets: &[Target]) {
    for (name, body) in targets {
        let folder = corpus_root.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&folder)
            .unwrap_or_else(|err| panic!("corpus {}: {err}", folder.display()))
            .map(|entry| entry.expect("a corpus entry").path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "corpus {} is empty", folder.display());
        for file in files {
            let data = std::fs::read(&file).expect("a corpus file");
            let outcome = std::panic::catch_unwind(|| body(&data));
            assert!(outcome.is_ok(), "{name}: {} panics", file.display());
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn replays_the_fuzz_corpora() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
        super::replay_corpora(&root, super::TARGETS);
    }
}
