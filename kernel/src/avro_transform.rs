//! Confluent Avro topics with `transforms` the kernel does (formats/kernel_transforms.py's
//! `kernel_transforms`: renames, drops, constant adds, casts that keep bytes, int/long cast to
//! string). The Python path (formats/transform_stage.py) is the reference: fastavro decodes
//! the body, the transforms apply, fastavro encodes the record under the derived schema.
//!
//! The kernel instead copies the body's bytes: the top-level fields in order without the
//! dropped ones, each field cast to string rewritten as the string of its decimal digits, the
//! constants' encoding after them (renames and byte-keeping casts change no bytes). That is
//! Python's output exactly when fastavro's decode → encode round trip gives the body back
//! byte for byte, so the walk runs in canonical mode (body.rs, `Cursor::canonical`): every
//! encoding fastavro would write differently is handed back, and the Python path stages it.

use crate::body::{Cursor, Plan, Stop, Value, Walker, R};
use crate::json::as_digits;
use crate::schema::{Kind, Schema, Unsupported};

/// What one transformed writer schema's records become (see the module docstring).
pub struct Transform {
    /// Per top-level field: left out of the record (a `drop`).
    dropped: Vec<bool>,
    /// Per top-level field: `Some(nullable)` for an int or long (`["null", T]` when nullable)
    /// written as its digits (a `cast` to string).
    digits: Vec<Option<bool>>,
    /// The added constants' Avro encoding, after every record.
    constants: Vec<u8>,
}

impl Transform {
    /// The transform of `schema` (walked with `plan`) that drops the top-level fields `drops`,
    /// writes `digits` as strings and appends `constants`. Err for a
    /// name that is not a top-level field (of an int, long or `["null", int|long]` for
    /// `digits`), or one routing or event time reads.
    pub fn compile(schema: &Schema, plan: &Plan, drops: &[String], digits: &[String], constants: &[u8])
                   -> Result<Transform, Unsupported> {
        let (Kind::Record { fields, .. }, Plan::Record(plans)) = (&schema.nodes[schema.top], plan) else {
            return Err(Unsupported("not a record".into()));
        };
        let index = |name: &String, what: &str| -> Result<usize, Unsupported> {
            let at = fields.iter().position(|(n, _)| n == name)
                .ok_or_else(|| Unsupported(format!("no top-level field {name:?} to {what}")))?;
            if !matches!(plans[at], Plan::Skip) {
                return Err(Unsupported(format!("field {name:?} is read by routing or event time")));
            }
            Ok(at)
        };
        let mut transform = Transform {
            dropped: vec![false; fields.len()],
            digits: vec![None; fields.len()],
            constants: constants.to_vec(),
        };
        for name in drops {
            transform.dropped[index(name, "drop")?] = true;
        }
        let integer = |id: usize| matches!(schema.nodes[id], Kind::Int(_) | Kind::Long(_));
        for name in digits {
            let at = index(name, "cast")?;
            let nullable = match &schema.nodes[fields[at].1] {
                Kind::Int(_) | Kind::Long(_) => false,
                Kind::Union(b) if b.len() == 2 && matches!(schema.nodes[b[0]], Kind::Null) && integer(b[1]) => true,
                _ => return Err(Unsupported(format!("field {name:?} is not an int or long"))),
            };
            if transform.dropped[at] {
                return Err(Unsupported(format!("field {name:?} is dropped and cast")));
            }
            transform.digits[at] = Some(nullable);
        }
        Ok(transform)
    }

    /// Walk the whole body in canonical mode (validating it, reading the wanted values) and
    /// note where each top-level field starts, and where the last one ends, in `starts`.
    pub fn walk(&self, walker: &Walker, plan: &Plan, c: &mut Cursor, values: &mut [Value], starts: &mut Vec<usize>) -> R<()> {
        let schema = walker.schema;
        let (Kind::Record { fields, .. }, Plan::Record(plans)) = (&schema.nodes[schema.top], plan) else { return Err(Stop) };
        c.canonical = true;
        starts.clear();
        for ((_, t), p) in fields.iter().zip(plans) {
            starts.push(c.pos);
            walker.walk(*t, p, c, values, 1)?;
        }
        starts.push(c.pos);
        Ok(())
    }

    /// The transformed record's body into `out`.
    pub fn record(&self, body: &[u8], starts: &[usize], out: &mut Vec<u8>) -> R<()> {
        out.clear();
        let mut kept = 0; // the start of the run of kept fields not yet copied
        for (i, (&dropped, &digits)) in self.dropped.iter().zip(&self.digits).enumerate() {
            if !dropped && digits.is_none() {
                continue;
            }
            out.extend_from_slice(&body[kept..starts[i]]);
            kept = starts[i + 1];
            if let Some(nullable) = digits {
                let mark = out.len();
                out.extend_from_slice(&body[starts[i]..starts[i + 1]]);
                if as_digits(out, mark, nullable).is_err() {
                    crate::body::forget_why(); // a JSON kernel's detail, not this one's
                    return Err(Stop);
                }
            }
        }
        out.extend_from_slice(&body[kept..*starts.last().ok_or(Stop)?]);
        out.extend_from_slice(&self.constants);
        Ok(())
    }
}
