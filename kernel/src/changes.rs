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
//! A row with Kafka Connect semantic values whose bytes change (connect_types.py `NEW_BYTES`:
//! ZonedTimestamp, VariableScaleDecimal, Nano*) is not a slice on the Python path: its row is
//! decoded, converted and encoded again (`ChangeLayout.converted`). The kernel then walks the
//! body in canonical mode (body.rs: every encoding fastavro's round trip would not give back
//! byte for byte is handed back) and copies the row's fields' spans, each converted field's
//! replaced by its new encoding (rewrite.rs `FieldRewrite::semantic`, connect_types.rs), as
//! avro_transform.rs does for transforms. A value it is not certain of is handed back.
//!
//! Everything else of the message (frame, validation, event day, prefix, file) is the append
//! kernel's (stage.rs). What this module is not certain about — a value the Python path would
//! dead-letter as `not_a_change` (an unknown op, a null version, a missing image), a value of a
//! type `body()` would read in a way not copied here, a body whose slice the Python skippers
//! might cut elsewhere (a sized array/map block) — is a `Stop`: the message is handed back.

use crate::body::{Cursor, Plan, Stop, Value, Walker, R};
use crate::prefix::put_long;
use crate::rewrite::FieldRewrite;
use crate::schema::{Kind, Logical, NodeId, Schema, Unsupported};

/// How one writer schema's messages become changelog records: the cut, and the row fields
/// whose values are re-encoded (their index among the row's fields, in order; empty: the row
/// is one slice).
pub struct Layout {
    cut: Cut,
    /// The row fields edited, by index among the row's fields, in order: semantic values
    /// re-encoded (`compile`), the topic's transforms' rewrites and drops (`with_transforms`).
    edits: Vec<(usize, Edit)>,
    /// The transforms' added constants' encoding, after the row.
    constants: Vec<u8>,
    /// The Avro string encoding of Debezium's unavailable-value placeholder (empty: none): a
    /// transform rewriting a field that holds it hands the message back (keyed_rows.py keeps
    /// the placeholder meaning "unchanged").
    placeholder: Vec<u8>,
    /// The row record's field count (the envelope's images: `walk` notes their fields' starts).
    row_len: usize,
}

/// What becomes of one row field's bytes.
enum Edit {
    /// Re-encoded (rewrite.rs): a semantic value's conversion, or a transform's rewrite (a
    /// mask, a timestamp, a cast), the latter guarded against the placeholder (`true`).
    Rewrite(FieldRewrite, bool),
    /// Left out (a `drop`).
    Drop,
    /// Left out after its semantic value is converted (a dropped semantic value: Python
    /// converts before its transforms, so a value it cannot convert is still its verdict).
    DropConverted(FieldRewrite),
}

enum Cut {
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
    /// `rewrites`: the row fields (index among the row record's fields) whose semantic values
    /// are re-encoded, and their kind (rewrite.rs `FieldRewrite::semantic`); each must be of
    /// the kind's Avro type or a union of null and it. `plan`: the walk's (with rewrites, an
    /// envelope's images are walked here, reading what it reads in them).
    pub fn compile(
        schema: &Schema,
        plan: &Plan,
        kind: &str,
        fields: &[usize],
        slots: &[Option<usize>],
        rewrites: &[(usize, String)],
    ) -> Result<Layout, Unsupported> {
        let bad = || Unsupported(format!("a {kind} layout with fields {fields:?} and slots {slots:?}"));
        let Kind::Record { fields: top, .. } = &schema.nodes[schema.top] else { return Err(bad()) };
        let slot = |i: usize| slots.get(i).copied().flatten().ok_or_else(bad);
        let cut = match (kind, fields, slots.len()) {
            ("envelope", &[before, after], 2) => Cut::Envelope {
                before: image(schema, top, before, "before")?,
                after: image(schema, top, after, "after")?,
                op: slot(0)?,
                version: slot(1)?,
            },
            ("flat", &[row_fields], 3) if row_fields <= top.len() => {
                Cut::Flat { row_fields, op: slot(0)?, version: slot(1)?, deleted: slot(2)? }
            }
            ("plain", &[], 2) => Cut::Plain { version: slot(0)?, delete: slots[1] },
            _ => return Err(bad()),
        };
        // The row records (an envelope's two images may be two records), whose fields the
        // rewrites index.
        let rows: Vec<&[(String, NodeId)]> = match cut {
            Cut::Envelope { before, after, .. } => {
                if !rewrites.is_empty() && !matches!(plan, Plan::Record(_)) {
                    return Err(bad());
                }
                [before, after].iter().map(|&(i, branch)| row_of(schema, top, i, branch)).collect::<Result<_, _>>()?
            }
            Cut::Flat { row_fields, .. } => vec![&top[..row_fields]],
            Cut::Plain { .. } => vec![&top[..]],
        };
        let row_len = rows[0].len();
        if rows.iter().any(|r| r.len() != row_len) {
            return Err(Unsupported("the envelope's images are different records".into()));
        }
        let mut compiled: Vec<(usize, Edit)> = Vec::with_capacity(rewrites.len());
        for (at, kind) in rewrites {
            let refuse = |why: &str| Unsupported(format!("row field {at} re-encoded as {kind}: {why}"));
            if compiled.last().is_some_and(|(last, _)| last >= at) {
                return Err(refuse("not after the previous one"));
            }
            let mut declared_null = None;
            for row in &rows {
                let (_, t) = row.get(*at).ok_or_else(|| refuse("no such field"))?;
                let (null, value) = nullable(schema, *t);
                if !semantic_type(schema, value, kind) {
                    return Err(refuse("not of the kind's Avro type"));
                }
                if declared_null.is_some_and(|d| d != null) {
                    return Err(refuse("the images' unions differ"));
                }
                declared_null = Some(null);
            }
            let declared_null = declared_null.ok_or_else(|| refuse("no row"))?;
            compiled.push((*at, Edit::Rewrite(FieldRewrite::semantic(kind, declared_null)?, false)));
        }
        Ok(Layout { cut, edits: compiled, constants: Vec::new(), placeholder: Vec::new(), row_len })
    }

    /// This layout with the topic's transforms over the row (keyed/changes.py `RowTransform`,
    /// as core/transforms/kernel_transforms.py finds the kernel can do them): the row fields `drops`
    /// left out, the fields `rewrites` re-encoded (by index among the row's fields), the added
    /// constants' encoding `constants` after the row; a rewritten field holding `placeholder`
    /// (Debezium's unavailable value; empty: none) is handed back. Err for an index outside
    /// the row, a field edited twice (a semantic value is re-encoded already), or an
    /// envelope's walk that reads nothing of its images (`plan`).
    pub fn with_transforms(
        mut self,
        plan: &Plan,
        drops: &[usize],
        rewrites: Vec<(usize, FieldRewrite)>,
        constants: &[u8],
        placeholder: &str,
    ) -> Result<Layout, Unsupported> {
        if drops.is_empty() && rewrites.is_empty() && constants.is_empty() {
            return Ok(self); // no transforms (or renames only: no bytes change)
        }
        if matches!(self.cut, Cut::Envelope { .. }) && !matches!(plan, Plan::Record(_)) {
            return Err(Unsupported("an envelope walked whole".into()));
        }
        let edits = drops
            .iter()
            .map(|&at| (at, Edit::Drop))
            .chain(rewrites.into_iter().map(|(at, r)| (at, Edit::Rewrite(r, true))));
        for (at, edit) in edits {
            if at >= self.row_len {
                return Err(Unsupported(format!("row field {at} of {}", self.row_len)));
            }
            match self.edits.iter().position(|(i, _)| *i == at) {
                Some(k) if matches!((&self.edits[k].1, &edit), (Edit::Rewrite(_, false), Edit::Drop)) => {
                    let Edit::Rewrite(semantic, _) = std::mem::replace(&mut self.edits[k].1, Edit::Drop) else {
                        unreachable!()
                    };
                    self.edits[k].1 = Edit::DropConverted(semantic);
                }
                Some(_) => return Err(Unsupported(format!("row field {at} edited twice"))),
                None => self.edits.push((at, edit)),
            }
        }
        self.edits.sort_by_key(|(at, _)| *at);
        self.constants = constants.to_vec();
        self.placeholder.clear();
        if !placeholder.is_empty() {
            put_long(&mut self.placeholder, placeholder.len() as i64);
            self.placeholder.extend_from_slice(placeholder.as_bytes());
        }
        Ok(self)
    }

    /// Whether the row is copied field by field (edits or constants), not as one slice.
    fn reshapes(&self) -> bool {
        !self.edits.is_empty() || !self.constants.is_empty()
    }

    /// Whether a field's bytes are the placeholder string (or a union's branch of it).
    fn holds_placeholder(&self, field: &[u8]) -> bool {
        let p = &self.placeholder[..];
        !p.is_empty() && (field == p || (field.len() == p.len() + 1 && &field[1..] == p))
    }

    /// Walk the whole body as the append path does (validating it, reading the wanted values)
    /// and note where each top-level field starts, and where the last one ends, in `starts`.
    /// With rewrites the walk is canonical, and an envelope's `starts` are instead, per image
    /// (before, then after), where it starts and ends, then per image the starts of its row's
    /// fields and the row's end (all 0 for a null image): [`Layout::record`] reads them.
    pub fn walk(
        &self,
        walker: &Walker,
        plan: &Plan,
        c: &mut Cursor,
        values: &mut [Value],
        starts: &mut Vec<usize>,
    ) -> R<()> {
        let schema = walker.schema;
        if !self.reshapes() {
            if let Cut::Plain { .. } = self.cut {
                return walker.walk(schema.top, plan, c, values, 0);
            }
            return walker.walk_fields(plan, c, values, starts);
        }
        c.canonical = true;
        let Cut::Envelope { before, after, .. } = self.cut else {
            return walker.walk_fields(plan, c, values, starts);
        };
        let (Kind::Record { fields, .. }, Plan::Record(plans)) = (&schema.nodes[schema.top], plan) else {
            return Err(Stop);
        };
        let n = self.row_len + 1;
        starts.clear();
        starts.resize(4 + 2 * n, 0);
        for (i, ((_, t), p)) in fields.iter().zip(plans).enumerate() {
            let (which, row_branch) = match i {
                _ if i == before.0 => (0, before.1),
                _ if i == after.0 => (1, after.1),
                _ => {
                    walker.walk(*t, p, c, values, 1)?;
                    continue;
                }
            };
            starts[2 * which] = c.pos;
            let row = 4 + which * n;
            walk_image(walker, *t, p, row_branch, c, values, &mut starts[row..row + n])?;
            starts[2 * which + 1] = c.pos;
        }
        Ok(())
    }

    /// The changelog record's body into `out`: the change columns, then the row's bytes.
    pub fn record(&self, body: &[u8], values: &[Value], starts: &[usize], out: &mut Vec<u8>) -> R<()> {
        out.clear();
        match self.cut {
            Cut::Envelope { before, after, op, version } => {
                let op = op_of(values[op], body)?;
                let version = version_of(values[version])?;
                let delete = op == b'd';
                let (field, row_branch) = if delete { before } else { after };
                if self.reshapes() {
                    // `walk`'s starts: the image's span, then its row fields' (0: a null image).
                    let which = delete as usize ^ 1;
                    let n = self.row_len + 1;
                    let row = &starts[4 + which * n..4 + (which + 1) * n];
                    if row[n - 1] == 0 || row[0] == row[n - 1] {
                        return Err(Stop); // no image, or an empty row: Python's verdict
                    }
                    columns(out, op, version, delete);
                    return self.copy_row(body, row, out);
                }
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
            Cut::Flat { row_fields, op, version, deleted } => {
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
                if self.reshapes() {
                    return self.copy_row(body, &starts[..=row_fields], out);
                }
                out.extend_from_slice(&body[..starts[row_fields]]);
            }
            Cut::Plain { version, delete } => {
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
                if self.reshapes() {
                    return self.copy_row(body, starts, out);
                }
                out.extend_from_slice(body);
            }
        }
        Ok(())
    }

    /// The row whose fields start at `row` (and end at its last entry) onto `out`: its bytes,
    /// each re-encoded field's replaced and each dropped one left out, then the constants
    /// (avro_transform.rs's `Transform::record` does the same for append topics).
    fn copy_row(&self, body: &[u8], row: &[usize], out: &mut Vec<u8>) -> R<()> {
        let mut kept = row[0];
        for (i, edit) in &self.edits {
            out.extend_from_slice(&body[kept..row[*i]]);
            let field = &body[row[*i]..row[i + 1]];
            match edit {
                Edit::Rewrite(rewrite, guarded) => {
                    if *guarded && self.holds_placeholder(field) {
                        return Err(Stop); // "unchanged" through the transform: Python's to keep
                    }
                    let mark = out.len();
                    out.extend_from_slice(field);
                    rewrite.apply(out, mark)?;
                }
                Edit::DropConverted(semantic) => {
                    let mark = out.len();
                    out.extend_from_slice(field);
                    semantic.apply(out, mark)?; // its conversion's verdict, then nothing
                    out.truncate(mark);
                }
                Edit::Drop => {}
            }
            kept = row[i + 1];
        }
        out.extend_from_slice(&body[kept..row[row.len() - 1]]);
        out.extend_from_slice(&self.constants);
        Ok(())
    }
}

/// Walk an image (a union of null and the row record, `row_branch` its index) under `plan`
/// (validating it, reading the wanted values in it) noting in `row` where each of the row's
/// fields starts and where the row ends; a null image leaves `row` zeros. The same checks and
/// reads as `Walker::walk` of the union.
fn walk_image(
    walker: &Walker,
    union: NodeId,
    plan: &Plan,
    row_branch: u64,
    c: &mut Cursor,
    values: &mut [Value],
    row: &mut [usize],
) -> R<()> {
    let Kind::Union(branches) = &walker.schema.nodes[union] else { return Err(Stop) };
    let branch = c.length()?;
    if branch != row_branch {
        return if branch < branches.len() as u64 && matches!(walker.schema.nodes[branches[branch as usize]], Kind::Null)
        {
            Ok(())
        } else {
            Err(Stop)
        };
    }
    let Kind::Record { fields, .. } = &walker.schema.nodes[branches[branch as usize]] else { return Err(Stop) };
    let reads = match plan {
        Plan::Union(plans) => match plans.get(branch as usize) {
            Some(Plan::Record(plans)) => Some(plans),
            _ => None,
        },
        _ => None,
    };
    for (at, (_, t)) in fields.iter().enumerate() {
        row[at] = c.pos;
        match reads {
            Some(plans) => walker.walk(*t, &plans[at], c, values, 3)?,
            None => walker.skip(*t, c, 3)?,
        }
    }
    row[fields.len()] = c.pos;
    Ok(())
}

/// The row record of the envelope's image field `index` (its record branch `branch`).
fn row_of<'s>(
    schema: &'s Schema,
    top: &[(String, NodeId)],
    index: usize,
    branch: u64,
) -> Result<&'s [(String, NodeId)], Unsupported> {
    let refuse = || Unsupported("an envelope image that is not a union of null and a record".into());
    let Kind::Union(branches) = &schema.nodes[top.get(index).ok_or_else(refuse)?.1] else { return Err(refuse()) };
    match &schema.nodes[*branches.get(branch as usize).ok_or_else(refuse)?] {
        Kind::Record { fields, .. } => Ok(fields),
        _ => Err(refuse()),
    }
}

/// A field type as (its union's null branch, the value's type): `(None, t)` for a type that is
/// not a union; a union that is not of null and one other type is returned as itself.
pub(crate) fn nullable(schema: &Schema, t: NodeId) -> (Option<i64>, NodeId) {
    if let Kind::Union(b) = &schema.nodes[t] {
        if b.len() == 2 {
            match (&schema.nodes[b[0]], &schema.nodes[b[1]]) {
                (Kind::Null, other) if !matches!(other, Kind::Null) => return (Some(0), b[1]),
                (other, Kind::Null) if !matches!(other, Kind::Null) => return (Some(1), b[0]),
                _ => {}
            }
        }
    }
    (None, t)
}

/// Whether node `t` is the Avro type of semantic `kind` as rewrite.rs reads it: a plain
/// string (ZonedTimestamp), a plain long (Nano*), a record of exactly an int `scale` and
/// plain bytes `value`, in that order (VariableScaleDecimal).
pub(crate) fn semantic_type(schema: &Schema, t: NodeId, kind: &str) -> bool {
    match (kind, &schema.nodes[t]) {
        ("zoned_timestamp", Kind::String(Logical::None)) => true,
        ("nanos_to_micros", Kind::Long(Logical::None)) => true,
        ("variable_scale_decimal", Kind::Record { fields, .. }) => match fields.as_slice() {
            [(scale, s), (value, v)] => {
                scale == "scale"
                    && value == "value"
                    && matches!(schema.nodes[*s], Kind::Int(Logical::None))
                    && matches!(schema.nodes[*v], Kind::Bytes)
                    && !schema.decimals.contains_key(v)
            }
            _ => false,
        },
        _ => false,
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
pub(crate) fn columns(out: &mut Vec<u8>, op: u8, version: i64, deleted: bool) {
    out.push(2);
    out.push(op);
    put_long(out, version);
    out.push(deleted as u8);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::{plan, Cursor, Value, Walker};

    const ROW: &str = r#"{"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"},
        {"name": "email", "type": "string"}, {"name": "notes", "type": "string"},
        {"name": "v", "type": "long"}]}"#;
    const PLACEHOLDER: &str = "__debezium_unavailable_value";

    /// The changelog record of a plain keyed row `body` (version `v`) with a null mask of
    /// `email`, `notes` dropped and the constant string "pg" added.
    fn transformed(body: &[u8]) -> R<Vec<u8>> {
        let schema = Schema::compile(ROW, &[]).unwrap();
        let plan = plan(&schema, &["v".to_string()], true).unwrap();
        let null_mask = FieldRewrite::parse(r#"{"op": "null", "base": "string", "out_null": 0}"#, b"").unwrap();
        let layout = Layout::compile(&schema, &plan, "plain", &[], &[Some(0), None], &[])
            .and_then(|l| l.with_transforms(&plan, &[2], vec![(1, null_mask)], b"\x04pg", PLACEHOLDER))
            .unwrap();
        let (mut values, mut starts) = (vec![Value::Null], Vec::new());
        let mut c = Cursor::new(body);
        layout.walk(&Walker { schema: &schema }, &plan, &mut c, &mut values, &mut starts)?;
        let mut out = Vec::new();
        layout.record(body, &values, &starts, &mut out)?;
        Ok(out)
    }

    fn string(text: &str) -> Vec<u8> {
        let mut out = Vec::new();
        put_long(&mut out, text.len() as i64);
        out.extend_from_slice(text.as_bytes());
        out
    }

    #[test]
    fn a_row_s_transforms_drop_rewrite_and_append_after_the_change_columns() {
        let body = [&b"\x02"[..], &string("a@b.c"), &string("n"), b"\x0e"].concat(); // id 1, v 7
        let out = transformed(&body).unwrap();
        // u, version 7, not deleted; id 1, the e-mail masked to null (branch 0), no notes, v 7,
        // then the constant.
        assert_eq!(out, [&b"\x02u\x0e\x00\x02\x00\x0e"[..], b"\x04pg"].concat());
    }

    #[test]
    fn a_rewritten_field_holding_the_unavailable_value_is_handed_back() {
        let body = [&b"\x02"[..], &string(PLACEHOLDER), &string("n"), b"\x0e"].concat();
        assert!(transformed(&body).is_err()); // Python keeps it "unchanged" (keyed_rows.py)
        let dropped = [&b"\x02"[..], &string("a@b.c"), &string(PLACEHOLDER), b"\x0e"].concat();
        assert!(transformed(&dropped).is_ok()); // a dropped one is simply gone
    }
}
