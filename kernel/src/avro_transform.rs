//! Confluent Avro topics with `transforms` the kernel does (core/transforms/kernel_transforms.py's
//! `kernel_transforms`: renames, drops, constant adds, casts that keep bytes or whose result is
//! exact from the encoded value, masks, timestamps between numbers, adds of parts of the
//! message). The Python path (formats/transform_stage.py) is the reference: fastavro decodes
//! the body, the transforms apply, fastavro encodes the record under the derived schema.
//!
//! The kernel instead copies the body's bytes: the top-level fields in order without the
//! dropped ones, each rewritten field's encoding replaced as rewrite.rs does for the other
//! formats (an int or long cast to string as the string of its digits, a mask, a timestamp,
//! an exact cast), the constants' encoding after them (renames and byte-keeping casts change
//! no bytes; the parts of the message are stage.rs's, appended per message). That is Python's
//! output exactly when fastavro's decode → encode round trip gives the body back byte for
//! byte, so the walk runs in canonical mode (body.rs, `Cursor::canonical`): every encoding
//! fastavro would write differently is handed back, and the Python path stages it. A
//! top-level field's span is then its Avro encoding under the declared type, which is what
//! rewrite.rs reads back, and fastavro's decoded value is the one rewrite.rs assumes: an int
//! or long a Python int, a string the text of its (checked UTF-8) bytes, a boolean a bool, a
//! timestamp-millis/micros an aware datetime whose `to_micros` is the number times 1000 or 1
//! (body.rs keeps it within years 1-9999).

use crate::body::{Cursor, Plan, Stop, Value, Walker, R};
use crate::rewrite::FieldRewrite;
use crate::schema::{Kind, Schema, Unsupported};

/// What one transformed writer schema's records become (see the module docstring).
pub struct Transform {
    /// Per top-level field: left out of the record (a `drop`).
    dropped: Vec<bool>,
    /// Per top-level field: its encoding rewritten (rewrite.rs): a `cast` to string of an
    /// int or long (`FieldRewrite::digits`), a `mask`, a `timestamp` or an exact `cast`.
    rewrites: Vec<Option<FieldRewrite>>,
    /// The added constants' Avro encoding, after every record.
    constants: Vec<u8>,
}

impl Transform {
    /// The transform of `schema` (walked with `plan`) that drops the top-level fields `drops`,
    /// writes `digits` as strings, rewrites the fields `rewrites` names and appends
    /// `constants`. Err for a name that is not a top-level field (of an int, long or
    /// `["null", int|long]` for `digits`), one routing or event time reads, or one named twice.
    pub fn compile(
        schema: &Schema,
        plan: &Plan,
        drops: &[String],
        digits: &[String],
        rewrites: Vec<(String, FieldRewrite)>,
        constants: &[u8],
    ) -> Result<Transform, Unsupported> {
        let (Kind::Record { fields, .. }, Plan::Record(plans)) = (&schema.nodes[schema.top], plan) else {
            return Err(Unsupported("not a record".into()));
        };
        let index = |name: &String, what: &str| -> Result<usize, Unsupported> {
            let at = fields
                .iter()
                .position(|(n, _)| n == name)
                .ok_or_else(|| Unsupported(format!("no top-level field {name:?} to {what}")))?;
            if !matches!(plans[at], Plan::Skip) {
                return Err(Unsupported(format!("field {name:?} is read by routing or event time")));
            }
            Ok(at)
        };
        let mut transform = Transform {
            dropped: vec![false; fields.len()],
            rewrites: vec![None; fields.len()],
            constants: constants.to_vec(),
        };
        for name in drops {
            transform.dropped[index(name, "drop")?] = true;
        }
        let integer = |id: usize| matches!(schema.nodes[id], Kind::Int(_) | Kind::Long(_));
        let mut rewritten: Vec<(usize, FieldRewrite)> = Vec::new();
        for name in digits {
            let at = index(name, "cast")?;
            let nullable = match &schema.nodes[fields[at].1] {
                Kind::Int(_) | Kind::Long(_) => false,
                Kind::Union(b) if b.len() == 2 && matches!(schema.nodes[b[0]], Kind::Null) && integer(b[1]) => true,
                _ => return Err(Unsupported(format!("field {name:?} is not an int or long"))),
            };
            rewritten.push((at, FieldRewrite::digits(nullable)));
        }
        for (name, rewrite) in rewrites {
            // rewrite.rs checks each value's layout as it reads it; a field whose declared
            // layout is not the spec's hands every message back ("rewrite_layout").
            rewritten.push((index(&name, "rewrite")?, rewrite));
        }
        for (at, rewrite) in rewritten {
            let name = &fields[at].0;
            if transform.dropped[at] {
                return Err(Unsupported(format!("field {name:?} is dropped and rewritten")));
            }
            if transform.rewrites[at].replace(rewrite).is_some() {
                return Err(Unsupported(format!("field {name:?} is rewritten twice")));
            }
        }
        Ok(transform)
    }

    /// Walk the whole body in canonical mode (validating it, reading the wanted values) and
    /// note where each top-level field starts, and where the last one ends, in `starts`.
    pub fn walk(
        &self,
        walker: &Walker,
        plan: &Plan,
        c: &mut Cursor,
        values: &mut [Value],
        starts: &mut Vec<usize>,
    ) -> R<()> {
        c.canonical = true;
        walker.walk_fields(plan, c, values, starts)
    }

    /// The transformed record's body into `out`; Err (its reason in body.rs's `stop_detail`)
    /// hands the message back.
    pub fn record(&self, body: &[u8], starts: &[usize], out: &mut Vec<u8>) -> R<()> {
        out.clear();
        let mut kept = 0; // the start of the run of kept fields not yet copied
        for (i, (&dropped, rewrite)) in self.dropped.iter().zip(&self.rewrites).enumerate() {
            if !dropped && rewrite.is_none() {
                continue;
            }
            out.extend_from_slice(&body[kept..starts[i]]);
            kept = starts[i + 1];
            if let Some(rewrite) = rewrite {
                let mark = out.len();
                out.extend_from_slice(&body[starts[i]..starts[i + 1]]);
                rewrite.apply(out, mark)?;
            }
        }
        out.extend_from_slice(&body[kept..*starts.last().ok_or(Stop)?]);
        out.extend_from_slice(&self.constants);
        Ok(())
    }
}
