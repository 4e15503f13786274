//! JSON Patch (RFC 6902): a list of add / remove / replace / move / copy /
//! test operations on JSON pointers (RFC 6901), applied all or nothing.

use serde_json::{Map, Value};

use super::PatchError;

/// Kubernetes refuses JSON patches with more operations than this (413).
pub const MAX_OPERATIONS: usize = 10_000;

/// What the `copy` operations of one patch may add in all, in bytes of
/// JSON (Kubernetes' `JSONPatchMaxCopyBytes`, 413 past it): each copy can
/// double the object, so a short patch could otherwise ask for 2^10000.
pub const MAX_COPY_BYTES: usize = 3 * 1024 * 1024;

enum Op {
    Add { path: String, value: Value },
    Remove { path: String },
    Replace { path: String, value: Value },
    Move { from: String, path: String },
    Copy { from: String, path: String },
    Test { path: String, value: Value },
}

/// Applies `patch` (the request body, already parsed) to a copy of `document`.
pub fn apply(document: &Value, patch: &Value) -> Result<Value, PatchError> {
    let ops = decode(patch)?;
    let mut doc = document.clone();
    let mut copied = 0;
    for op in ops {
        apply_op(&mut doc, op, &mut copied)?;
    }
    Ok(doc)
}

fn decode(patch: &Value) -> Result<Vec<Op>, PatchError> {
    let Value::Array(raw) = patch else {
        return Err(PatchError::Malformed(
            "a JSON patch must be a JSON array of operations".into(),
        ));
    };
    if raw.len() > MAX_OPERATIONS {
        return Err(PatchError::TooManyOperations(raw.len()));
    }
    raw.iter()
        .enumerate()
        .map(|(i, op)| {
            decode_op(op).map_err(|why| PatchError::Malformed(format!("operation {i}: {why}")))
        })
        .collect()
}

fn decode_op(op: &Value) -> Result<Op, String> {
    let Value::Object(fields) = op else {
        return Err("an operation must be a JSON object".into());
    };
    let text = |name: &str| -> Result<String, String> {
        match fields.get(name) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(format!("\"{name}\" must be a string")),
            None => Err(format!("missing \"{name}\"")),
        }
    };
    let value = || -> Result<Value, String> {
        fields
            .get("value")
            .cloned()
            .ok_or_else(|| "missing \"value\"".to_string())
    };
    let path = text("path")?;
    let op_name = text("op")?;
    // The root is the object itself: replacing or removing it would take
    // its identity and everything only the server sets with it.
    let from_root =
        matches!(op_name.as_str(), "move") && fields.get("from") == Some(&Value::from(""));
    if (path.is_empty() && op_name != "test") || from_root {
        return Err(format!(
            "{op_name} operation does not apply: the root of the object cannot be replaced, removed or moved"
        ));
    }
    Ok(match op_name.as_str() {
        "add" => Op::Add {
            path,
            value: value()?,
        },
        "remove" => Op::Remove { path },
        "replace" => Op::Replace {
            path,
            value: value()?,
        },
        "move" => Op::Move {
            from: text("from")?,
            path,
        },
        "copy" => Op::Copy {
            from: text("from")?,
            path,
        },
        "test" => Op::Test {
            path,
            value: value()?,
        },
        other => return Err(format!("unknown op \"{other}\"")),
    })
}

/// Applies one operation; `copied` is what earlier copies added, in bytes.
fn apply_op(doc: &mut Value, op: Op, copied: &mut usize) -> Result<(), PatchError> {
    match op {
        Op::Add { path, value } => add(doc, &path, value),
        Op::Remove { path } => remove(doc, &path).map(|_| ()),
        Op::Replace { path, value } => {
            let target = get_mut(doc, &path).ok_or_else(|| {
                unprocessable(format!(
                    "replace operation does not apply: doc is missing key: {path}"
                ))
            })?;
            *target = value;
            Ok(())
        }
        Op::Move { from, path } => {
            if path != from && path.starts_with(&format!("{from}/")) {
                return Err(unprocessable(format!(
                    "move operation cannot move \"{from}\" into its own child \"{path}\""
                )));
            }
            let value = remove(doc, &from).map_err(|_| {
                unprocessable(format!(
                    "move operation does not apply: doc is missing from path: {from}"
                ))
            })?;
            add(doc, &path, value)
        }
        Op::Copy { from, path } => {
            let value = get_mut(doc, &from).ok_or_else(|| {
                unprocessable(format!(
                    "copy operation does not apply: doc is missing from path: {from}"
                ))
            })?;
            // Measured before it is cloned: the clone is what would not fit.
            *copied = copied.saturating_add(json_size(value, MAX_COPY_BYTES - *copied));
            if *copied > MAX_COPY_BYTES {
                return Err(PatchError::CopyTooLarge);
            }
            let value = value.clone();
            add(doc, &path, value)
        }
        Op::Test { path, value } => match get_mut(doc, &path) {
            Some(found) if json_equal(found, &value) => Ok(()),
            _ => Err(unprocessable(format!(
                "testing value {path} failed: test failed"
            ))),
        },
    }
}

/// The length of `value` written as JSON, counted up to a little past
/// `limit` (a value larger than that is not written out whole).
fn json_size(value: &Value, limit: usize) -> usize {
    struct Counter {
        written: usize,
        limit: usize,
    }
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.written += buf.len();
            if self.written > self.limit {
                return Err(std::io::ErrorKind::FileTooLarge.into());
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter { written: 0, limit };
    // An error is only ever the counter stopping past the limit.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.written
}

fn unprocessable(message: String) -> PatchError {
    PatchError::Unprocessable(message)
}

/// The reference tokens of a JSON pointer, unescaped (`~1` is `/`, `~0` is `~`).
fn tokens(pointer: &str) -> Result<Vec<String>, PatchError> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(PatchError::Malformed(format!(
            "invalid JSON pointer \"{pointer}\": it must be empty or start with \"/\""
        )));
    };
    rest.split('/')
        .map(|token| {
            unescape(token).ok_or_else(|| {
                PatchError::Malformed(format!(
                    "invalid JSON pointer \"{pointer}\": \"~\" must be followed by 0 or 1"
                ))
            })
        })
        .collect()
}

fn unescape(token: &str) -> Option<String> {
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars();
    while let Some(c) = chars.next() {
        match c {
            '~' => match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return None,
            },
            c => out.push(c),
        }
    }
    Some(out)
}

/// An array index as RFC 6901 spells it: digits, no leading zero.
fn index(token: &str) -> Option<usize> {
    let canonical = token == "0" || (!token.starts_with('0') && !token.is_empty());
    if canonical && token.bytes().all(|b| b.is_ascii_digit()) {
        token.parse().ok()
    } else {
        None
    }
}

fn child_mut<'a>(value: &'a mut Value, token: &str) -> Option<&'a mut Value> {
    match value {
        Value::Object(map) => map.get_mut(token),
        Value::Array(items) => index(token).and_then(|i| items.get_mut(i)),
        _ => None,
    }
}

fn get_mut<'a>(doc: &'a mut Value, pointer: &str) -> Option<&'a mut Value> {
    let tokens = tokens(pointer).ok()?;
    tokens
        .iter()
        .try_fold(doc, |value, token| child_mut(value, token))
}

/// The container holding the last token of `pointer`, and that token.
fn parent_mut<'a>(
    doc: &'a mut Value,
    pointer: &str,
    op: &str,
) -> Result<(&'a mut Value, String), PatchError> {
    let mut tokens = tokens(pointer)?;
    let missing = || {
        unprocessable(format!(
            "{op} operation does not apply: doc is missing path: \"{pointer}\""
        ))
    };
    let last = tokens.pop().ok_or_else(missing)?;
    let parent = tokens
        .iter()
        .try_fold(doc, |value, token| child_mut(value, token))
        .ok_or_else(missing)?;
    Ok((parent, last))
}

fn add(doc: &mut Value, pointer: &str, value: Value) -> Result<(), PatchError> {
    if pointer.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = parent_mut(doc, pointer, "add")?;
    match parent {
        Value::Object(map) => {
            map.insert(last, value);
            Ok(())
        }
        Value::Array(items) if last == "-" => {
            items.push(value);
            Ok(())
        }
        Value::Array(items) => match index(&last) {
            Some(i) if i <= items.len() => {
                items.insert(i, value);
                Ok(())
            }
            _ => Err(unprocessable(format!(
                "add operation does not apply: index {last} is out of bounds at \"{pointer}\""
            ))),
        },
        _ => Err(unprocessable(format!(
            "add operation does not apply: the parent of \"{pointer}\" is neither an object nor an array"
        ))),
    }
}

fn remove(doc: &mut Value, pointer: &str) -> Result<Value, PatchError> {
    let (parent, last) = parent_mut(doc, pointer, "remove")?;
    let removed = match parent {
        Value::Object(map) => map.remove(&last),
        Value::Array(items) => match index(&last) {
            Some(i) if i < items.len() => Some(items.remove(i)),
            _ => None,
        },
        _ => None,
    };
    removed.ok_or_else(|| {
        unprocessable(format!(
            "remove operation does not apply: doc is missing path: \"{pointer}\""
        ))
    })
}

/// JSON equality as RFC 6902 `test` defines it: numbers by value
/// (`1` equals `1.0`), objects regardless of member order.
pub fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            match (x.as_i64(), y.as_i64(), x.as_u64(), y.as_u64()) {
                (Some(x), Some(y), _, _) => x == y,
                (_, _, Some(x), Some(y)) => x == y,
                _ => x.as_f64() == y.as_f64(),
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_equal(x, y))
        }
        (Value::Object(x), Value::Object(y)) => objects_equal(x, y),
        _ => a == b,
    }
}

fn objects_equal(x: &Map<String, Value>, y: &Map<String, Value>) -> bool {
    x.len() == y.len()
        && x.iter()
            .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
}
