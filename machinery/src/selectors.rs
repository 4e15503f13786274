//! Label and field selectors of list and watch requests, parsed and matched
//! as the Kubernetes API documents them, with the apiserver's error wording.
//! Clients match with them too (the scheduler's affinity terms, a
//! controller's pods).

use std::fmt;

use serde_json::{Map, Value};

use crate::quote::{go_quote, go_string_slice};
use crate::validation::{is_qualified_name, is_valid_label_value};

/// A selector that cannot be read or is not supported: the message of
/// the Kubernetes apiserver's 400 for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SelectorError {
    pub message: String,
}

impl SelectorError {
    fn new(message: impl Into<String>) -> Self {
        SelectorError {
            message: message.into(),
        }
    }
}

// ---------------------------------------------------------------------------
// Label selectors
// ---------------------------------------------------------------------------

/// A parsed `labelSelector`: a conjunction of requirements, sorted by key.
/// The empty selector selects everything.
#[derive(Debug, Clone, PartialEq, Hash, Eq, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq, Hash, Eq)]
struct Requirement {
    key: String,
    operator: Operator,
    /// Sorted and without duplicates, as Kubernetes keeps them.
    values: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Hash, Eq)]
enum Operator {
    Equals,
    DoubleEquals,
    NotEquals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

impl LabelSelector {
    /// Parses the `labelSelector` query syntax: `a=b`, `a==b`, `a!=b`,
    /// `a in (x,y)`, `a notin (x)`, `a`, `!a`, `a>1`, `a<1`, joined by `,`.
    /// A bad selector is an error worded as the Kubernetes apiserver words it.
    pub fn parse(selector: &str) -> Result<LabelSelector, SelectorError> {
        let mut requirements = Parser::new(selector).parse().map_err(SelectorError::new)?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// The selector of a `metav1.LabelSelector` object (`matchLabels`,
    /// `matchExpressions`), as workload specs carry it. `{}` selects
    /// everything; a missing selector is the caller's case (it selects
    /// nothing in Kubernetes).
    pub fn from_json(selector: &Value) -> Result<LabelSelector, SelectorError> {
        label_selector_from_json(selector).map_err(SelectorError::new)
    }

    /// True when the selector has no requirement (selects everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object with these `metadata.labels` is selected.
    /// Values that are not strings count as absent.
    pub fn matches(&self, labels: &Map<String, Value>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches(labels.get(&r.key).and_then(Value::as_str)))
    }

    /// Whether an object whose label `key` is `label(key)` is selected.
    pub fn matches_by<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements.iter().all(|r| r.matches(label(&r.key)))
    }

    /// Whether `object` (its `metadata.labels`) is selected.
    pub fn matches_object(&self, object: &Value) -> bool {
        let empty = Map::new();
        let labels = object
            .get("metadata")
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        self.matches(labels)
    }
}

/// The canonical string form, e.g. `app=web,tier in (a,b),!canary`, as a
/// Scale's `status.selector` carries it.
impl fmt::Display for LabelSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = match self.operator {
            Operator::DoesNotExist => return write!(f, "!{}", self.key),
            Operator::Exists => return f.write_str(&self.key),
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
            Operator::In => " in ",
            Operator::NotIn => " notin ",
        };
        let values = self.values.join(",");
        match self.operator {
            Operator::In | Operator::NotIn => write!(f, "{}{op}({values})", self.key),
            _ => write!(f, "{}{op}{values}", self.key),
        }
    }
}

impl Requirement {
    /// Builds a requirement after the checks Kubernetes makes on key,
    /// operator and values; `Err` is the message of every problem found.
    fn new(key: &str, operator: Operator, mut values: Vec<String>) -> Result<Requirement, String> {
        let mut errors: Vec<String> = Vec::new();
        let key_messages = is_qualified_name(key);
        if !key_messages.is_empty() {
            errors.push(format!(
                "key: Invalid value: {}: {}",
                go_quote(key),
                key_messages.join("; ")
            ));
        }
        match operator {
            Operator::In | Operator::NotIn if values.is_empty() => {
                errors.push("values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty".into())
            }
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals if values.len() != 1 => errors.push(format!(
                "values: Invalid value: {}: exact-match compatibility requires one single value",
                go_string_slice(&values)
            )),
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => errors.push(format!(
                "values: Invalid value: {}: values set must be empty for exists and does not exist",
                go_string_slice(&values)
            )),
            Operator::GreaterThan | Operator::LessThan => {
                if values.len() != 1 {
                    errors.push(format!(
                        "values: Invalid value: {}: for 'Gt', 'Lt' operators, exactly one value is required",
                        go_string_slice(&values)
                    ));
                }
                for (i, v) in values.iter().enumerate() {
                    if v.parse::<i64>().is_err() {
                        errors.push(format!(
                            "values[{i}]: Invalid value: {}: for 'Gt', 'Lt' operators, the value must be an integer",
                            go_quote(v)
                        ));
                    }
                }
            }
            _ => {}
        }
        for (i, v) in values.iter().enumerate() {
            let messages = is_valid_label_value(v);
            if !messages.is_empty() {
                errors.push(format!(
                    "values[{i}][{key}]: Invalid value: {}: {}",
                    go_quote(v),
                    messages.join("; ")
                ));
            }
        }
        if !errors.is_empty() {
            return Err(aggregate(errors));
        }
        values.sort();
        values.dedup();
        Ok(Requirement {
            key: key.to_string(),
            operator,
            values,
        })
    }

    fn has_value(&self, value: &str) -> bool {
        self.values.iter().any(|v| v == value)
    }

    fn matches(&self, label: Option<&str>) -> bool {
        match (self.operator, label) {
            (Operator::Equals | Operator::DoubleEquals | Operator::In, Some(v)) => {
                self.has_value(v)
            }
            (Operator::Equals | Operator::DoubleEquals | Operator::In, None) => false,
            (Operator::NotEquals | Operator::NotIn, Some(v)) => !self.has_value(v),
            (Operator::NotEquals | Operator::NotIn, None) => true,
            (Operator::Exists, label) => label.is_some(),
            (Operator::DoesNotExist, label) => label.is_none(),
            (Operator::GreaterThan | Operator::LessThan, Some(v)) => {
                let (Ok(have), Some(Ok(want))) = (
                    v.parse::<i64>(),
                    self.values.first().map(|w| w.parse::<i64>()),
                ) else {
                    return false;
                };
                match self.operator {
                    Operator::GreaterThan => have > want,
                    _ => have < want,
                }
            }
            (Operator::GreaterThan | Operator::LessThan, None) => false,
        }
    }
}

/// Several field errors read as Kubernetes' aggregate: one alone, or
/// `[a, b]`, duplicates dropped.
fn aggregate(mut errors: Vec<String>) -> String {
    let mut seen = std::collections::HashSet::new();
    errors.retain(|e| seen.insert(e.clone()));
    if errors.len() == 1 {
        errors.remove(0)
    } else {
        format!("[{}]", errors.join(", "))
    }
}

fn label_selector_from_json(selector: &Value) -> Result<LabelSelector, String> {
    let Some(selector) = selector.as_object() else {
        return Err(
            "a label selector must be an object with matchLabels and matchExpressions".into(),
        );
    };
    let mut requirements = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (key, value) in labels {
            let value = value.as_str().unwrap_or_default().to_string();
            requirements.push(Requirement::new(key, Operator::Equals, vec![value])?);
        }
    }
    for expression in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let text = |name: &str| {
            expression
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let operator = match text("operator") {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            other => {
                return Err(format!(
                    "{} is not a valid label selector operator",
                    go_quote(other)
                ))
            }
        };
        let values = expression
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|v| v.as_str().unwrap_or_default().to_string())
            .collect();
        requirements.push(Requirement::new(text("key"), operator, values)?);
    }
    requirements.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(LabelSelector { requirements })
}

// --- The label selector grammar, token by token as Kubernetes reads it. ---

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

/// Whether `in`/`notin` are keywords (after a key) or plain words (keys
/// and values may be called `in`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

fn symbol_token(s: &str) -> Option<Token> {
    Some(match s {
        ")" => Token::ClosedPar,
        "," => Token::Comma,
        "!" => Token::DoesNotExist,
        "==" => Token::DoubleEquals,
        "=" => Token::Equals,
        ">" => Token::GreaterThan,
        "<" => Token::LessThan,
        "!=" => Token::NotEquals,
        "(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

/// Splits a selector into tokens; the last is always `EndOfString`.
fn scan(selector: &str) -> Vec<(Token, String)> {
    let bytes = selector.as_bytes();
    let mut pos = 0;
    let mut tokens = Vec::new();
    loop {
        while pos < bytes.len() && is_whitespace(bytes[pos]) {
            pos += 1;
        }
        if pos >= bytes.len() || bytes[pos] == 0 {
            tokens.push((Token::EndOfString, String::new()));
            return tokens;
        }
        let start = pos;
        if is_special(bytes[pos]) {
            // The longest run of symbols that is still an operator.
            let mut longest: Option<(Token, usize)> = None;
            while pos < bytes.len() && is_special(bytes[pos]) {
                pos += 1;
                match symbol_token(&selector[start..pos]) {
                    Some(token) => longest = Some((token, pos)),
                    None if longest.is_some() => {
                        pos -= 1;
                        break;
                    }
                    None => {}
                }
            }
            match longest {
                Some((token, end)) => {
                    pos = end;
                    tokens.push((token, selector[start..end].to_string()));
                }
                None => tokens.push((
                    Token::Error,
                    format!("error expected: keyword found '{}'", &selector[start..pos]),
                )),
            }
        } else {
            while pos < bytes.len()
                && bytes[pos] != 0
                && !is_special(bytes[pos])
                && !is_whitespace(bytes[pos])
            {
                pos += 1;
            }
            let word = &selector[start..pos];
            let token = match word {
                "in" => Token::In,
                "notin" => Token::NotIn,
                _ => Token::Identifier,
            };
            tokens.push((token, word.to_string()));
        }
    }
}

struct Parser {
    tokens: Vec<(Token, String)>,
    position: usize,
}

impl Parser {
    fn new(selector: &str) -> Parser {
        Parser {
            tokens: scan(selector),
            position: 0,
        }
    }

    fn token_at(&self, position: usize, context: Context) -> (Token, String) {
        let (token, literal) = self
            .tokens
            .get(position)
            .cloned()
            .unwrap_or((Token::EndOfString, String::new()));
        match (context, token) {
            (Context::Values, Token::In | Token::NotIn) => (Token::Identifier, literal),
            _ => (token, literal),
        }
    }

    fn lookahead(&self, context: Context) -> (Token, String) {
        self.token_at(self.position, context)
    }

    fn consume(&mut self, context: Context) -> (Token, String) {
        let item = self.token_at(self.position, context);
        self.position += 1;
        item
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut requirements = Vec::new();
        loop {
            let (token, literal) = self.lookahead(Context::Values);
            match token {
                Token::Identifier | Token::DoesNotExist => {
                    let requirement = self
                        .parse_requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(requirement);
                    let (token, literal) = self.consume(Context::Values);
                    match token {
                        Token::EndOfString => return Ok(requirements),
                        Token::Comma => {
                            let (next, next_literal) = self.lookahead(Context::Values);
                            if next != Token::Identifier && next != Token::DoesNotExist {
                                return Err(format!(
                                    "found '{next_literal}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => {
                            return Err(format!(
                                "found '{literal}', expected: ',' or 'end of string'"
                            ))
                        }
                    }
                }
                Token::EndOfString => return Ok(requirements),
                _ => {
                    return Err(format!(
                        "found '{literal}', expected: !, identifier, or 'end of string'"
                    ))
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, inferred) = self.parse_key_and_infer_operator()?;
        if let Some(operator @ (Operator::Exists | Operator::DoesNotExist)) = inferred {
            return Requirement::new(&key, operator, Vec::new());
        }
        let operator = self.parse_operator()?;
        let values = match operator {
            Operator::In | Operator::NotIn => self.parse_values()?,
            _ => self.parse_exact_value()?,
        };
        Requirement::new(&key, operator, values)
    }

    /// The key, and `Exists`/`DoesNotExist` when no operator follows it.
    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut operator = None;
        let (mut token, mut literal) = self.consume(Context::Values);
        if token == Token::DoesNotExist {
            operator = Some(Operator::DoesNotExist);
            (token, literal) = self.consume(Context::Values);
        }
        if token != Token::Identifier {
            return Err(format!("found '{literal}', expected: identifier"));
        }
        let messages = is_qualified_name(&literal);
        if !messages.is_empty() {
            return Err(format!(
                "<nil>: Invalid value: {}: {}",
                go_quote(&literal),
                messages.join("; ")
            ));
        }
        let (next, _) = self.lookahead(Context::Values);
        if (next == Token::EndOfString || next == Token::Comma) && operator.is_none() {
            operator = Some(Operator::Exists);
        }
        Ok((literal, operator))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (token, literal) = self.consume(Context::KeyAndOperator);
        Ok(match token {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => {
                return Err(format!(
                    "found '{literal}', expected: in, notin, =, ==, !=, gt, lt"
                ))
            }
        })
    }

    /// `(a,b,…)`; empty members are the empty value, as in Kubernetes.
    fn parse_values(&mut self) -> Result<Vec<String>, String> {
        let (token, literal) = self.consume(Context::Values);
        if token != Token::OpenPar {
            return Err(format!("found '{literal}' expected: '('"));
        }
        let (token, literal) = self.lookahead(Context::Values);
        match token {
            Token::Identifier | Token::Comma => {
                let values = self.parse_identifiers_list()?;
                let (token, _) = self.consume(Context::Values);
                if token != Token::ClosedPar {
                    return Err(format!("found '{literal}', expected: ')'"));
                }
                Ok(values)
            }
            Token::ClosedPar => {
                self.consume(Context::Values);
                Ok(vec![String::new()])
            }
            _ => Err(format!(
                "found '{literal}', expected: ',', ')' or identifier"
            )),
        }
    }

    fn parse_identifiers_list(&mut self) -> Result<Vec<String>, String> {
        let mut values: Vec<String> = Vec::new();
        loop {
            let (token, literal) = self.consume(Context::Values);
            match token {
                Token::Identifier => {
                    values.push(literal);
                    let (next, next_literal) = self.lookahead(Context::Values);
                    match next {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(values),
                        _ => return Err(format!("found '{next_literal}', expected: ',' or ')'")),
                    }
                }
                Token::Comma => {
                    if values.is_empty() {
                        values.push(String::new());
                    }
                    let (next, _) = self.lookahead(Context::Values);
                    if next == Token::ClosedPar {
                        values.push(String::new());
                        return Ok(values);
                    }
                    if next == Token::Comma {
                        self.consume(Context::Values);
                        values.push(String::new());
                    }
                }
                _ => return Err(format!("found '{literal}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<Vec<String>, String> {
        let (token, _) = self.lookahead(Context::Values);
        if token == Token::EndOfString || token == Token::Comma {
            return Ok(vec![String::new()]);
        }
        let (token, literal) = self.consume(Context::Values);
        if token == Token::Identifier {
            return Ok(vec![literal]);
        }
        Err(format!("found '{literal}', expected: identifier"))
    }
}

// ---------------------------------------------------------------------------
// Field selectors
// ---------------------------------------------------------------------------

/// A parsed `fieldSelector`: `field=value`, `field==value`, `field!=value`
/// terms joined by `,` (values may escape `\,` `\=` `\\`). A field an
/// object lacks reads as the empty string.
#[derive(Debug, Clone, PartialEq, Hash, Eq, Default)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

#[derive(Debug, Clone, PartialEq, Hash, Eq)]
struct FieldTerm {
    field: String,
    value: String,
    /// `=`/`==` when true, `!=` when false.
    equals: bool,
}

/// The fields every kind supports when it declares none of its own.
const META_FIELDS: &[&str] = &["metadata.name", "metadata.namespace"];

/// The fields a kind supports, when Kubernetes gives it its own list.
/// The fields a field selector may name for objects of `kind`.
pub fn supported_fields(kind: &str) -> &'static [&'static str] {
    kind_fields(kind).unwrap_or(META_FIELDS)
}

fn kind_fields(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
        "Pod" => &[
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ],
        "Node" => &["metadata.name", "spec.unschedulable"],
        "Namespace" => &["metadata.name", "status.phase"],
        "Event" => &[
            "metadata.name",
            "metadata.namespace",
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        "Secret" => &["metadata.name", "metadata.namespace", "type"],
        "Service" => &[
            "metadata.name",
            "metadata.namespace",
            "spec.clusterIP",
            "spec.type",
        ],
        "ReplicationController" | "ReplicaSet" => {
            &["metadata.name", "metadata.namespace", "status.replicas"]
        }
        "Job" => &["metadata.name", "metadata.namespace", "status.successful"],
        "CertificateSigningRequest" => &["metadata.name", "spec.signerName"],
        _ => return None,
    })
}

impl FieldSelector {
    /// Parses the `fieldSelector` query syntax. Which fields a kind
    /// supports is checked apart, by [`FieldSelector::check_supported`].
    pub fn parse(selector: &str) -> Result<FieldSelector, SelectorError> {
        let mut parts = split_terms(selector);
        parts.sort();
        let mut terms = Vec::new();
        for part in parts.iter().filter(|p| !p.is_empty()) {
            let Some((field, operator, value)) = split_term(part) else {
                return Err(SelectorError::new(format!(
                    "invalid selector: '{selector}'; can't understand '{part}'"
                )));
            };
            let value = unescape_value(value).map_err(SelectorError::new)?;
            terms.push(FieldTerm {
                field: field.to_string(),
                value,
                equals: operator != "!=",
            });
        }
        Ok(FieldSelector { terms })
    }

    /// True when the selector has no term (selects everything).
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// A 400 unless every field is one that `kind` supports, as the
    /// Kubernetes apiserver answers an unknown one.
    pub fn check_supported(&self, kind: &str) -> Result<(), SelectorError> {
        let supported = kind_fields(kind);
        for term in &self.terms {
            let field = term.field.as_str();
            match supported {
                Some(fields) if fields.contains(&field) => {}
                Some(_) => return Err(SelectorError::new(format!("field label not supported: {field}"))),
                None if META_FIELDS.contains(&field) => {}
                None => {
                    return Err(SelectorError::new(format!(
                        "{} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
                        go_quote(field)
                    )))
                }
            }
        }
        Ok(())
    }

    /// The value the selector requires `field` to equal, if it has such a
    /// term (e.g. `metadata.name=web` lets a list read one key).
    pub fn required_value(&self, field: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.equals && t.field == field)
            .map(|t| t.value.as_str())
    }

    /// Whether `object` is selected. The object's `kind`, when present,
    /// picks the kind's defaults (a Secret without `type` is `Opaque`).
    pub fn matches(&self, object: &Value) -> bool {
        self.terms
            .iter()
            .all(|t| (field_value(object, &t.field) == t.value) == t.equals)
    }

    /// Whether an object whose [`field_value`] of each field is
    /// `value(field)` is selected (`None` reads as the empty string).
    pub fn matches_by<'a>(&self, value: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.terms
            .iter()
            .all(|t| (value(&t.field).unwrap_or("") == t.value) == t.equals)
    }
}

/// Adds to `out` the dotted paths of an object that [`field_value`] reads
/// for `field` (besides `kind`), so that a reader may parse only those.
pub fn paths_read(field: &'static str, out: &mut Vec<&'static str>) {
    match field {
        "status.podIP" | "status.podIPs" => out.extend(["status.podIP", "status.podIPs"]),
        "source" => out.extend(["source.component", "reportingComponent"]),
        "status.successful" => out.push("status.succeeded"),
        _ => out.push(field),
    }
}

/// The value Kubernetes indexes for `field` of `object`, as a string.
pub fn field_value(object: &Value, field: &str) -> String {
    let at = |path: &str| path.split('.').try_fold(object, |v, part| v.get(part));
    let text = |path: &str| at(path).map(scalar_text).unwrap_or_default();
    match field {
        "spec.hostNetwork" | "spec.unschedulable" => at(field)
            .and_then(Value::as_bool)
            .unwrap_or(false)
            .to_string(),
        "status.replicas" => at(field).and_then(Value::as_i64).unwrap_or(0).to_string(),
        "status.successful" => at("status.succeeded")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            .to_string(),
        "status.podIP" | "status.podIPs" => {
            let first = at("status.podIPs")
                .and_then(|ips| ips.get(0))
                .and_then(|ip| ip.get("ip"));
            match text("status.podIP") {
                ip if !ip.is_empty() => ip,
                _ => first.map(scalar_text).unwrap_or_default(),
            }
        }
        "source" => match text("source.component") {
            component if !component.is_empty() => component,
            _ => text("reportingComponent"),
        },
        "type" if object.get("kind").and_then(Value::as_str) == Some("Secret") => {
            match text("type") {
                t if t.is_empty() => "Opaque".to_string(),
                t => t,
            }
        }
        _ => text(field),
    }
}

fn scalar_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        Value::Bool(b) => b.to_string(),
        _ => String::new(),
    }
}

/// Splits on commas that are not escaped with `\`.
fn split_terms(selector: &str) -> Vec<&str> {
    if selector.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in selector.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == ',' {
            terms.push(&selector[start..i]);
            start = i + 1;
        }
    }
    terms.push(&selector[start..]);
    terms
}

/// `field`, operator, `value`, at the first unescaped operator.
fn split_term(term: &str) -> Option<(&str, &'static str, &str)> {
    // Scanned as bytes, so a selector's non-ASCII text (or an escape
    // before it) never puts a cut inside a character: the cuts are made
    // only before and after an operator, which is ASCII.
    let bytes = term.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        for operator in ["!=", "==", "="] {
            if bytes[i..].starts_with(operator.as_bytes()) {
                return Some((&term[..i], operator, &term[i + operator.len()..]));
            }
        }
        i += 1;
    }
    None
}

fn unescape_value(value: &str) -> Result<String, String> {
    if !value.contains(['\\', ',', '=']) {
        return Ok(value.to_string());
    }
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escaped @ ('\\' | ',' | '=')) => out.push(escaped),
                Some(other) => {
                    return Err(format!(
                        "invalid field selector: invalid escape sequence: \\{other}"
                    ));
                }
                None => return Err("invalid field selector: invalid escape sequence: \\".into()),
            },
            ',' | '=' => {
                return Err(format!(
                    "invalid field selector: unescaped character in value: '{c}'"
                ))
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    fn sel(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s:?} should parse: {}", e.message))
    }

    fn label_error(s: &str) -> String {
        let err = LabelSelector::parse(s).expect_err(s);
        err.message
    }

    #[test]
    fn equality_operators() {
        let web = labels(json!({"app": "web", "tier": "fe"}));
        assert!(sel("app=web").matches(&web));
        assert!(sel("app==web").matches(&web));
        assert!(!sel("app=db").matches(&web));
        assert!(sel("app!=db").matches(&web));
        assert!(!sel("app!=web").matches(&web));
        // != and notin select objects without the label.
        assert!(sel("missing!=x").matches(&web));
        assert!(!sel("missing=x").matches(&web));
    }

    #[test]
    fn set_operators_exists_and_conjunction() {
        let s = sel("a in (x, y),!b,c!=d");
        assert!(s.matches(&labels(json!({"a": "x"}))));
        assert!(s.matches(&labels(json!({"a": "y", "c": "e"}))));
        assert!(!s.matches(&labels(json!({"a": "z"}))));
        assert!(!s.matches(&labels(json!({"a": "x", "b": ""}))));
        assert!(!s.matches(&labels(json!({"a": "x", "c": "d"}))));
        assert!(!s.matches(&labels(json!({}))));
        let notin = sel("environment notin (production)");
        assert!(notin.matches(&labels(json!({"environment": "dev"}))));
        assert!(notin.matches(&labels(json!({}))));
        assert!(!notin.matches(&labels(json!({"environment": "production"}))));
        let exists = sel("partition");
        assert!(exists.matches(&labels(json!({"partition": ""}))));
        assert!(!exists.matches(&labels(json!({"other": "x"}))));
    }

    #[test]
    fn whitespace_and_empty_values() {
        let s = sel("  app  =  web ,  tier   in(a,b)  ");
        assert!(s.matches(&labels(json!({"app": "web", "tier": "b"}))));
        // `a=` selects the empty value, not absence.
        let empty = sel("a=");
        assert!(empty.matches(&labels(json!({"a": ""}))));
        assert!(!empty.matches(&labels(json!({}))));
        assert!(!empty.matches(&labels(json!({"a": "x"}))));
        assert!(sel("a=,b=c").matches(&labels(json!({"a": "", "b": "c"}))));
        // `in ()` and `(x,)` hold the empty value.
        assert!(sel("a in ()").matches(&labels(json!({"a": ""}))));
        assert!(sel("a in (x,)").matches(&labels(json!({"a": ""}))));
        assert!(sel("").is_empty());
        assert!(sel("   ").is_empty());
        assert!(sel("").matches(&labels(json!({"any": "thing"}))));
    }

    #[test]
    fn keywords_as_keys_and_values_and_prefixed_keys() {
        assert!(sel("in=in").matches(&labels(json!({"in": "in"}))));
        assert!(sel("a in (in,notin)").matches(&labels(json!({"a": "notin"}))));
        let s = sel("app.kubernetes.io/name=web");
        assert!(s.matches(&labels(json!({"app.kubernetes.io/name": "web"}))));
    }

    #[test]
    fn numeric_comparisons() {
        assert!(sel("gen>3").matches(&labels(json!({"gen": "4"}))));
        assert!(!sel("gen>3").matches(&labels(json!({"gen": "3"}))));
        assert!(sel("gen<3").matches(&labels(json!({"gen": "-1"}))));
        assert!(!sel("gen<3").matches(&labels(json!({"gen": "x"}))));
        assert!(!sel("gen<3").matches(&labels(json!({}))));
        assert!(
            label_error("gen>x").contains("for 'Gt', 'Lt' operators, the value must be an integer")
        );
    }

    #[test]
    fn bad_selectors_are_worded_as_kubernetes() {
        assert_eq!(
            label_error("a b"),
            "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"
        );
        assert_eq!(
            label_error("a in b"),
            "unable to parse requirement: found 'b' expected: '('"
        );
        assert_eq!(
            label_error("a in (b"),
            "unable to parse requirement: found '', expected: ',' or ')'"
        );
        assert_eq!(
            label_error("a=b,"),
            "found '', expected: identifier after ','"
        );
        assert_eq!(
            label_error("a=b c"),
            "found 'c', expected: ',' or 'end of string'"
        );
        assert_eq!(
            label_error(",a"),
            "found ',', expected: !, identifier, or 'end of string'"
        );
        assert_eq!(
            label_error("a=(b"),
            "unable to parse requirement: found '(', expected: identifier"
        );
        assert_eq!(
            label_error("a=b=c"),
            "found '=', expected: ',' or 'end of string'"
        );
        assert_eq!(
            label_error("Foo_=x"),
            "unable to parse requirement: <nil>: Invalid value: \"Foo_\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        );
        assert_eq!(
            label_error("a=-x"),
            "unable to parse requirement: values[0][a]: Invalid value: \"-x\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        );
        assert!(label_error(&format!("a={}", "v".repeat(64)))
            .contains("must be no more than 63 characters"));
        assert!(label_error(&format!("{}=v", "k".repeat(64)))
            .contains("name part must be no more than 63 characters"));
        assert!(
            label_error("Bad.Prefix/x=y").contains("prefix part a lowercase RFC 1123 subdomain")
        );
        assert!(label_error("a/b/c=y").contains("a qualified name must consist of"));
        assert!(label_error("a=!b").contains("found '!', expected: identifier"));
        assert!(label_error("a<>b").starts_with("unable to parse requirement"));
    }

    #[test]
    fn display_is_canonical_and_sorted() {
        assert_eq!(
            sel("z=1,a in (y, x, y),!b,c").to_string(),
            "a in (x,y),!b,c,z=1"
        );
        assert_eq!(sel("a notin (p)").to_string(), "a notin (p)");
        assert_eq!(sel("a==b,c!=d,e>1").to_string(), "a==b,c!=d,e>1");
        let round = sel("tier in (fe,be),app=web");
        assert_eq!(sel(&round.to_string()), round);
    }

    #[test]
    fn metav1_label_selectors() {
        let s = LabelSelector::from_json(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["fe", "be"]},
                {"key": "canary", "operator": "DoesNotExist"}
            ]
        }))
        .unwrap();
        assert!(s.matches(&labels(json!({"app": "web", "tier": "fe"}))));
        assert!(!s.matches(&labels(json!({"app": "web", "tier": "fe", "canary": "1"}))));
        assert!(!s.matches(&labels(json!({"app": "web"}))));
        assert_eq!(s.to_string(), "app=web,!canary,tier in (be,fe)");
        assert!(LabelSelector::from_json(&json!({})).unwrap().is_empty());
        let bad = LabelSelector::from_json(
            &json!({"matchExpressions": [{"key": "a", "operator": "Gt"}]}),
        );
        assert_eq!(
            bad.unwrap_err().message,
            "\"Gt\" is not a valid label selector operator"
        );
        assert!(LabelSelector::from_json(
            &json!({"matchExpressions": [{"key": "a", "operator": "In"}]})
        )
        .is_err());
        assert!(LabelSelector::from_json(&json!({"matchLabels": {"a": "b c"}})).is_err());
    }

    #[test]
    fn matches_object_reads_metadata_labels() {
        let s = sel("app=web");
        assert!(s.matches_object(&json!({"metadata": {"labels": {"app": "web"}}})));
        assert!(!s.matches_object(&json!({"metadata": {}})));
        assert!(sel("!app").matches_object(&json!({})));
    }

    fn fsel(s: &str) -> FieldSelector {
        FieldSelector::parse(s).unwrap_or_else(|e| panic!("{s:?} should parse: {}", e.message))
    }

    #[test]
    fn field_selectors_match_fields() {
        let pod = json!({
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"nodeName": "n1", "restartPolicy": "Always"},
            "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.5"}]}
        });
        assert!(fsel("metadata.name=web").matches(&pod));
        assert!(fsel("metadata.name==web,metadata.namespace=default").matches(&pod));
        assert!(!fsel("metadata.name=db").matches(&pod));
        assert!(
            fsel("spec.nodeName=n1,status.phase!=Succeeded,status.phase!=Failed").matches(&pod)
        );
        assert!(!fsel("status.phase!=Running").matches(&pod));
        assert!(fsel("status.podIP=10.0.0.5").matches(&pod));
        assert!(fsel("spec.hostNetwork=false").matches(&pod));
        // A missing field is the empty string: unscheduled pods.
        let pending = json!({"kind": "Pod", "metadata": {"name": "p"}, "spec": {}});
        assert!(fsel("spec.nodeName=").matches(&pending));
        assert!(!fsel("spec.nodeName=").matches(&pod));
        assert!(fsel("").matches(&pod));
        assert!(fsel("").is_empty());
        assert_eq!(
            fsel("metadata.name=web,spec.nodeName!=x").required_value("metadata.name"),
            Some("web")
        );
        assert_eq!(
            fsel("metadata.name!=web").required_value("metadata.name"),
            None
        );
    }

    #[test]
    fn field_values_follow_kubernetes_defaults() {
        let node = json!({"kind": "Node", "metadata": {"name": "n1"}, "spec": {}});
        assert!(fsel("spec.unschedulable=false").matches(&node));
        let cordoned = json!({"kind": "Node", "spec": {"unschedulable": true}});
        assert!(fsel("spec.unschedulable=true").matches(&cordoned));
        let event = json!({"kind": "Event", "involvedObject": {"kind": "Pod", "name": "web", "uid": "u1"},
            "reportingComponent": "kubelet", "type": "Warning"});
        assert!(
            fsel("involvedObject.kind=Pod,involvedObject.name=web,involvedObject.uid=u1")
                .matches(&event)
        );
        assert!(fsel("source=kubelet,type=Warning").matches(&event));
        let with_source = json!({"kind": "Event", "source": {"component": "scheduler"}});
        assert!(fsel("source=scheduler").matches(&with_source));
        let secret = json!({"kind": "Secret", "metadata": {"name": "s"}});
        assert!(fsel("type=Opaque").matches(&secret));
        let job = json!({"kind": "Job", "status": {"succeeded": 2}});
        assert!(fsel("status.successful=2").matches(&job));
        assert!(fsel("status.successful=0").matches(&json!({"kind": "Job"})));
        assert!(fsel("status.replicas=0").matches(&json!({"kind": "ReplicaSet"})));
    }

    #[test]
    fn field_selector_escapes_and_errors() {
        let odd = json!({"metadata": {"name": "a,b=c\\d"}});
        assert!(fsel("metadata.name=a\\,b\\=c\\\\d").matches(&odd));
        let err = FieldSelector::parse("metadata.name").unwrap_err();
        assert_eq!(
            err.message,
            "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
        );
        assert!(FieldSelector::parse("a=b\\x")
            .unwrap_err()
            .message
            .contains("invalid escape sequence: \\x"));
        assert!(FieldSelector::parse("a=b=c")
            .unwrap_err()
            .message
            .contains("unescaped character in value"));
        // `!=` is found before `=`.
        assert!(fsel("a!=b").matches(&json!({"a": "c"})));
    }

    #[test]
    fn supported_fields_per_kind() {
        let unsupported = |s: &str, kind: &str| fsel(s).check_supported(kind).unwrap_err();
        assert!(
            fsel("spec.nodeName=n,status.phase=Running,spec.schedulerName=x")
                .check_supported("Pod")
                .is_ok()
        );
        assert!(
            fsel("status.nominatedNodeName=n,spec.serviceAccountName=sa,status.podIP=1")
                .check_supported("Pod")
                .is_ok()
        );
        let err = unsupported("spec.foo=x", "Pod");
        assert_eq!(err.message, "field label not supported: spec.foo");
        assert!(
            fsel("involvedObject.name=a,involvedObject.namespace=b,involvedObject.kind=Pod")
                .check_supported("Event")
                .is_ok()
        );
        assert!(fsel(
            "involvedObject.uid=u,involvedObject.apiVersion=v1,involvedObject.resourceVersion=1"
        )
        .check_supported("Event")
        .is_ok());
        assert!(fsel(
            "involvedObject.fieldPath=f,reason=r,reportingComponent=c,source=s,type=Normal"
        )
        .check_supported("Event")
        .is_ok());
        assert!(fsel("type=Opaque").check_supported("Secret").is_ok());
        assert!(fsel("spec.unschedulable=true,metadata.name=n")
            .check_supported("Node")
            .is_ok());
        assert_eq!(
            unsupported("metadata.namespace=x", "Node").message,
            "field label not supported: metadata.namespace"
        );
        assert!(fsel("status.phase=Active")
            .check_supported("Namespace")
            .is_ok());
        assert!(fsel("status.replicas=0")
            .check_supported("ReplicaSet")
            .is_ok());
        assert!(fsel("status.successful=1").check_supported("Job").is_ok());
        assert!(fsel("spec.clusterIP=None,spec.type=ClusterIP")
            .check_supported("Service")
            .is_ok());
        assert!(fsel("metadata.name=a,metadata.namespace=b")
            .check_supported("ConfigMap")
            .is_ok());
        assert_eq!(
            unsupported("status.replicas=1", "Deployment").message,
            "\"status.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
        assert!(fsel("spec.nodeName=n").check_supported("Job").is_err());
    }

    /// Found by a fuzzer: a non-ASCII character in a field selector was
    /// cut in half (a panic, and the client's connection dropped).
    #[test]
    fn non_ascii_field_selectors_are_read_whole() {
        let err = fsel("é=x").check_supported("Pod").unwrap_err();
        assert_eq!(err.message, "field label not supported: é");
        assert!(fsel("metadata.name=é").matches(&json!({"metadata": {"name": "é"}})));
        assert!(fsel("metadata.name!=日本").matches(&json!({"metadata": {"name": "é"}})));
        assert_eq!(
            FieldSelector::parse("a=\\é").unwrap_err().message,
            "invalid field selector: invalid escape sequence: \\é"
        );
        assert!(FieldSelector::parse("\\é").is_err());
    }

    /// Every short selector made of these pieces parses or is refused as
    /// a 400; none panics (a panic fails the test).
    #[test]
    fn selectors_of_any_text_parse_or_are_refused() {
        let pieces = [
            "é",
            "日",
            "\\",
            "=",
            "!",
            ",",
            "(",
            ")",
            "/",
            " ",
            "a",
            "in",
            "\0",
            ">",
            "\u{10ffff}",
        ];
        // Every sequence of up to four pieces.
        let mut selectors = vec![String::new()];
        let mut longest = vec![String::new()];
        for _ in 0..4 {
            longest = longest
                .iter()
                .flat_map(|s| pieces.iter().map(move |p| format!("{s}{p}")))
                .collect();
            selectors.extend(longest.iter().cloned());
        }
        for selector in &selectors {
            for err in [
                LabelSelector::parse(selector).err(),
                FieldSelector::parse(selector).err(),
            ]
            .into_iter()
            .flatten()
            {
                assert!(!err.message.is_empty(), "{selector:?}");
            }
        }
    }
}
