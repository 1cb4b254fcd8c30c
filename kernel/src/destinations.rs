//! Confluent Avro topics with `destinations` (formats/avro_destination_kernel.py): one message,
//! one record per destination, each into its own file slot. The Python path
//! (formats/destination_stage.py, `DestinationFanOut`) is the reference: fastavro decodes the
//! body, per destination the topic's then the destination's transforms apply, the record is
//! projected to the destination's `fields` and encoded under its derived schema.
//!
//! The kernel walks the body once in canonical mode (avro_transform.rs, `Transform::walk`) and
//! builds each destination's record from the body's top-level field spans. An [`Output`] is a
//! sequence of pieces: the whole record through one [`Transform`] (the composed transforms'
//! drops, digits, rewrites and constants: no projection), or, for a projection, runs of kept
//! declared fields in the listed order (each run's spans copied in that order, then reshaped by
//! its own `Transform`: digits and rewrites, rewrite.rs) and the encodings of the constants
//! listed between them, and a check of each rewritten field the projection leaves out (Python
//! runs the step before projecting: a value its rewrite is not certain of goes back whole). An
//! Avro record is its fields' encodings one after the other, so that is the projected record's
//! encoding.
//! The message is staged into every output or handed back whole (stage.rs).

use crate::avro_transform::Transform;
use crate::body::{Plan, R};
use crate::rewrite::{append_parts, Appended, FieldRewrite};
use crate::schema::{Kind, Schema, Unsupported};

enum Piece {
    /// Every top-level field, in the body's order, through the transform.
    All(Transform),
    /// The top-level fields at these indexes, in this order, through a transform over them.
    Fields(Vec<usize>, Transform),
    /// Bytes as they are: an added constant's encoding.
    Bytes(Vec<u8>),
    /// The top-level fields at these indexes through a transform whose output is left out:
    /// a rewritten field the projection does not keep. The Python path still runs the step
    /// (a timestamp or a cast may fail it); the rewrite's checks decide the hand-back.
    Check(Vec<usize>, Transform),
    /// A part of the message (`add` of its offset, timestamp, key or a header), per message.
    Part(Appended),
    /// A part of the message the projection leaves out, read and left out: Python's step
    /// still reads it (a key or header that is not UTF-8 for a string fails it).
    CheckPart(Appended),
}

/// What a message's parts are read from (stage.rs fills the key and headers columns only when
/// an output appends them).
pub struct MessageParts<'m> {
    pub offset: i64,
    pub timestamp_ms: Option<i64>,
    pub key: &'m [u8],
    pub headers: &'m [u8],
}

/// One destination of a writer schema (see the module docstring).
pub struct Output {
    /// The file slot of every record (a static or schema-name route, decided per schema).
    pub slot: usize,
    pieces: Vec<Piece>,
    /// Whether a piece appends the message's key (`key`) or one of its headers (`headers`).
    pub key: bool,
    pub headers: bool,
}

/// A piece as the driver gives it: `(kind, names, drops, digits, bytes, rewrites)` with kind
/// `all` (drops, digits, rewrites, and the constants' encoding as bytes), `fields` (the kept
/// names in order, the digits and rewrites among them), `check` (names rewritten but not
/// kept: their rewrites run, their output is left out), `bytes`, or `part:` and a kind
/// `rewrite::Appended::parse` reads (its argument as bytes), or `check:` and such a kind (a
/// part the projection leaves out: read, then left out). A rewrite is
/// `(name, FieldRewrite.spec(), hmac key)` as `add_transformed_schema` takes it.
pub type PieceSpec = (String, Vec<String>, Vec<String>, Vec<String>, Vec<u8>, Vec<(String, String, Vec<u8>)>);

impl Output {
    /// The output of `schema` (walked with `plan`) into file slot `slot` made of `pieces`.
    /// Err for what `Transform::compile` refuses, a name that is not a top-level field or is
    /// kept twice, an unknown kind.
    pub fn compile(schema: &Schema, plan: &Plan, slot: usize, pieces: Vec<PieceSpec>) -> Result<Output, Unsupported> {
        let Kind::Record { fields, .. } = &schema.nodes[schema.top] else {
            return Err(Unsupported("not a record".into()));
        };
        let mut kept: Vec<String> = Vec::new();
        let mut out = Vec::with_capacity(pieces.len());
        for (kind, names, drops, digits, bytes, rewrites) in pieces {
            let mut parsed = Vec::with_capacity(rewrites.len());
            for (name, spec, key) in rewrites {
                parsed.push((name, FieldRewrite::parse(&spec, &key)?));
            }
            out.push(match kind.as_str() {
                "all" => Piece::All(Transform::compile(schema, plan, &drops, &digits, parsed, &bytes)?),
                "bytes" => Piece::Bytes(bytes),
                part if part.starts_with("part:") => Piece::Part(Appended::parse(&part[5..], &bytes)?),
                part if part.starts_with("check:") => Piece::CheckPart(Appended::parse(&part[6..], &bytes)?),
                "check" => {
                    let projected = schema.projected(&names)?;
                    let mut indexes = Vec::with_capacity(names.len());
                    for name in &names {
                        indexes.push(fields.iter().position(|(f, _)| f == name).expect("projected checks it"));
                    }
                    let skip = Plan::Record(names.iter().map(|_| Plan::Skip).collect());
                    Piece::Check(indexes, Transform::compile(&projected, &skip, &[], &[], parsed, &[])?)
                }
                "fields" => {
                    let projected = schema.projected(&names)?;
                    let mut indexes = Vec::with_capacity(names.len());
                    for name in &names {
                        if kept.contains(name) {
                            return Err(Unsupported(format!("field {name:?} kept twice")));
                        }
                        indexes.push(fields.iter().position(|(f, _)| f == name).expect("projected checks it"));
                    }
                    kept.extend(names.iter().cloned());
                    // Routing and event time read the whole body's values (the kernel's walk),
                    // never a piece's: for its transform, nothing of it is read.
                    let skip = Plan::Record(names.iter().map(|_| Plan::Skip).collect());
                    Piece::Fields(indexes, Transform::compile(&projected, &skip, &[], &digits, parsed, &[])?)
                }
                other => return Err(Unsupported(format!("a piece of kind {other:?}"))),
            });
        }
        let raw = |p: &Piece| match p {
            Piece::Part(Appended::Raw { header, .. }) | Piece::CheckPart(Appended::Raw { header, .. }) => {
                Some(header.is_some())
            }
            _ => None,
        };
        let key = out.iter().any(|p| raw(p) == Some(false));
        let headers = out.iter().any(|p| raw(p) == Some(true));
        Ok(Output { slot, pieces: out, key, headers })
    }

    /// This destination's record of `body`, whose top-level fields start at `starts` (and the
    /// last ends at its last item: `Transform::walk`'s), into `out`; `scratch` is scratch space.
    /// `message`: what its parts read.
    pub fn record(
        &self,
        body: &[u8],
        starts: &[usize],
        message: &MessageParts,
        scratch: &mut Scratch,
        out: &mut Vec<u8>,
    ) -> R<()> {
        out.clear();
        for piece in &self.pieces {
            match piece {
                Piece::All(transform) => {
                    transform.record(body, starts, &mut scratch.piece)?;
                    out.extend_from_slice(&scratch.piece);
                }
                Piece::Fields(keep, transform) | Piece::Check(keep, transform) => {
                    scratch.kept.clear();
                    scratch.spans.clear();
                    for &i in keep {
                        scratch.spans.push(scratch.kept.len());
                        scratch.kept.extend_from_slice(&body[starts[i]..starts[i + 1]]);
                    }
                    scratch.spans.push(scratch.kept.len());
                    transform.record(&scratch.kept, &scratch.spans, &mut scratch.piece)?;
                    if matches!(piece, Piece::Fields(..)) {
                        out.extend_from_slice(&scratch.piece);
                    }
                }
                Piece::Bytes(bytes) => out.extend_from_slice(bytes),
                Piece::Part(part) => append_parts(
                    std::slice::from_ref(part),
                    out,
                    message.offset,
                    message.timestamp_ms,
                    message.key,
                    message.headers,
                )?,
                Piece::CheckPart(part) => {
                    scratch.piece.clear();
                    append_parts(
                        std::slice::from_ref(part),
                        &mut scratch.piece,
                        message.offset,
                        message.timestamp_ms,
                        message.key,
                        message.headers,
                    )?;
                }
            }
        }
        Ok(())
    }
}

/// Reused buffers of [`Output::record`].
#[derive(Default)]
pub struct Scratch {
    kept: Vec<u8>,
    spans: Vec<usize>,
    piece: Vec<u8>,
}
