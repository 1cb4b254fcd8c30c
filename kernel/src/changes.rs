//! Keyed change topics (`format: debezium`, keyed `format: avro`): the changelog record of one
//! change message. `kbqe_dagster/keyed/changes.py` is the reference (`ChangeLayout.body`):
//! the three change columns (`_op` string, `_source_ts_ms` long, `_deleted` boolean), then a
//! byte slice of the validated body, never decoded and re-encoded —
//!
//! - **the Debezium envelope**: the record branch of `after` (of `before` for a delete),
//!   without its union index; `op` and `source.ts_ms` give the columns;
//! - **ExtractNewRecordState's flat form**: the leading row fields, up to the first `__`
//!   field; `__op`, `__source_ts_ms` and `__deleted` give the columns;
//! - **plain keyed records**: the whole body; the configured version and delete fields.
//!
//! Everything else of the message (frame, validation, event day, prefix, file) is the append
//! kernel's (lib.rs). What this module is not certain about — a value the Python path would
//! dead-letter as `not_a_change` (an unknown op, a null version, a missing image), a value of a
//! type `body()` would read in a way not copied here, a body whose slice the Python skippers
//! might cut elsewhere (a sized array/map block) — is a `Stop`: the message is handed back.

use crate::body::{Cursor, Plan, Stop, Value, Walker, R};
use crate::prefix::put_long;
use crate::schema::{Kind, NodeId, Schema, Unsupported};

/// How one writer schema's messages become changelog records.
pub enum Layout {
    /// The image fields' indexes among the top-level fields, each a `[null, row]` union (the
    /// row branch's index with it), and the wanted slots of `op` and `source.ts_ms`.
    Envelope { before: (usize, u64), after: (usize, u64), op: usize, version: usize },
    /// The number of leading row fields, and the slots of `__op`, `__source_ts_ms`, `__deleted`.
    Flat { row_fields: usize, op: usize, version: usize, deleted: usize },
    /// The slots of the configured version field and delete field.
    Plain { version: usize, delete: Option<usize> },
}

impl Layout {
    /// The layout `kind` ("envelope", "flat" or "plain", as keyed/changes.py's
    /// `ChangeLayout.cut` names it) with its top-level field indexes and wanted slots.
    pub fn compile(schema: &Schema, kind: &str, fields: &[usize], slots: &[Option<usize>]) -> Result<Layout, Unsupported> {
        let bad = || Unsupported(format!("a {kind} layout with fields {fields:?} and slots {slots:?}"));
        let Kind::Record { fields: top, .. } = &schema.nodes[schema.top] else { return Err(bad()) };
        let slot = |i: usize| slots.get(i).copied().flatten().ok_or_else(bad);
        Ok(match (kind, fields, slots.len()) {
            ("envelope", &[before, after], 2) => Layout::Envelope {
                before: image(schema, top, before, "before")?,
                after: image(schema, top, after, "after")?,
                op: slot(0)?,
                version: slot(1)?,
            },
            ("flat", &[row_fields], 3) if row_fields <= top.len() => {
                Layout::Flat { row_fields, op: slot(0)?, version: slot(1)?, deleted: slot(2)? }
            }
            ("plain", &[], 2) => Layout::Plain { version: slot(0)?, delete: slots[1] },
            _ => return Err(bad()),
        })
    }

    /// Walk the whole body as the append path does (validating it, reading the wanted values)
    /// and note where each top-level field starts, and where the last one ends, in `starts`.
    pub fn walk(&self, walker: &Walker, plan: &Plan, c: &mut Cursor, values: &mut [Value], starts: &mut Vec<usize>) -> R<()> {
        let schema = walker.schema;
        if let Layout::Plain { .. } = self {
            return walker.walk(schema.top, plan, c, values, 0);
        }
        walker.walk_fields(plan, c, values, starts)
    }

    /// The changelog record's body into `out`: the change columns, then the row's bytes.
    pub fn record(&self, body: &[u8], values: &[Value], starts: &[usize], out: &mut Vec<u8>) -> R<()> {
        out.clear();
        match *self {
            Layout::Envelope { before, after, op, version } => {
                let op = op_of(values[op], body)?;
                let version = version_of(values[version])?;
                let delete = op == b'd';
                let (field, row_branch) = if delete { before } else { after };
                let (start, end) = (starts[field], starts[field + 1]);
                let mut c = Cursor::new(&body[..end]);
                c.pos = start;
                // The null branch (or an empty row): "without an image", Python's verdict.
                if c.length()? != row_branch || c.pos == end {
                    return Err(Stop);
                }
                columns(out, op, version, delete);
                out.extend_from_slice(&body[c.pos..end]);
            }
            Layout::Flat { row_fields, op, version, deleted } => {
                let version = version_of(values[version])?;
                // `fields.get("__deleted") in (True, "true")`: other values are the Python path's.
                let deleted = match values[deleted] {
                    Value::Null => false,
                    Value::Bool(b) => b,
                    Value::Str(s, e) => &body[s..e] == b"true",
                    _ => return Err(Stop),
                };
                // `fields.get("__op") or ("d" if deleted else "u")`.
                let op = match values[op] {
                    Value::Null => None,
                    Value::Str(s, e) if s == e => None,
                    value => Some(op_of(value, body)?),
                }
                .unwrap_or(if deleted { b'd' } else { b'u' });
                columns(out, op, version, deleted || op == b'd');
                out.extend_from_slice(&body[..starts[row_fields]]);
            }
            Layout::Plain { version, delete } => {
                // `int(value)`, or a timestamp as epoch milliseconds (floored).
                let version = match values[version] {
                    Value::Int(v) | Value::Millis(v) => v,
                    Value::Micros(us) => us.div_euclid(1000),
                    _ => return Err(Stop),
                };
                let deleted = match delete.map(|slot| values[slot]) {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(b)) => b,
                    Some(_) => return Err(Stop),
                };
                columns(out, if deleted { b'd' } else { b'u' }, version, deleted);
                out.extend_from_slice(body);
            }
        }
        Ok(())
    }
}

/// The top-level field `index` named `name`, a union of null and one record: (index, the
/// record branch's index). Other shapes are sliced differently by Python's `read_long`: not
/// copied here.
fn image(schema: &Schema, top: &[(String, NodeId)], index: usize, name: &str) -> Result<(usize, u64), Unsupported> {
    let refuse = || Unsupported(format!("the envelope's {name} is not a union of null and a record"));
    let (field, t) = top.get(index).ok_or_else(refuse)?;
    let Kind::Union(branches) = &schema.nodes[*t] else { return Err(refuse()) };
    match branches.iter().map(|b| &schema.nodes[*b]).collect::<Vec<_>>().as_slice() {
        _ if field != name => Err(refuse()),
        [Kind::Null, Kind::Record { .. }] => Ok((index, 1)),
        [Kind::Record { .. }, Kind::Null] => Ok((index, 0)),
        _ => Err(refuse()),
    }
}

/// A row change's op: exactly `c`, `r`, `u` or `d` (`not_a_change` otherwise, Python's).
fn op_of(value: Value, body: &[u8]) -> R<u8> {
    match value {
        Value::Str(s, e) if e == s + 1 && matches!(body[s], b'c' | b'r' | b'u' | b'd') => Ok(body[s]),
        _ => Err(Stop),
    }
}

/// A change's version: an `int`/`long` value (`encode_long(version)`); null is `not_a_change`.
fn version_of(value: Value) -> R<i64> {
    match value {
        Value::Int(v) => Ok(v),
        _ => Err(Stop),
    }
}

/// `change_columns(op, version, deleted)`: `_op` (a one-letter string), `_source_ts_ms`,
/// `_deleted`.
fn columns(out: &mut Vec<u8>, op: u8, version: i64, deleted: bool) {
    out.push(2);
    out.push(op);
    put_long(out, version);
    out.push(deleted as u8);
}
