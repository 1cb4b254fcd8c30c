//! `format: protobuf` topics: a Confluent-framed Protobuf binary decoded by a small wire
//! decoder driven by a per-message-type *program* the Python side derives from the descriptors
//! it already compiled (`kbqe_dagster/core/formats/protobuf_program.py`), and encoded straight
//! to the Avro body of the record `core/formats/protobuf_avro.py` maps it to, exactly as the
//! Python path (`upb`'s `FromString`, the mapping's converter, fastavro's `schemaless_writer`)
//! encodes it — or `Err(Stop)`: the message goes back to the Python path, which stays the
//! reference and gives every bad message its reason.
//!
//! The kernel is stricter than the Python runtime, never more lenient. What it hands back:
//! - anything malformed on the wire (a truncated value or length, a varint over 10 bytes,
//!   field number 0, groups, wire types 6/7), and tags and lengths over 5 bytes or padded;
//! - a `uint64`/`fixed64` above 2^63-1 (the mapping's `protobuf_decode_error`), a NaN or
//!   infinite `float`/`double`, a string that is not UTF-8 (also one a later occurrence
//!   replaces: upb checks each as it reads it), an enum number without a name, a `Timestamp`
//!   outside years 1-9999;
//! - a singular message field given twice (upb merges the two), and an absent map value of an
//!   enum type whose default it was not told.
//!
//! What upb reads leniently, it reads the same way (`_upb_Decoder_Munge`): an `int32`,
//! `uint32`, `sint32` or enum varint keeps its low 32 bits, a `bool` is true when not 0, a
//! varint's bits past 64 are dropped; a known field of another wire type than its own is an
//! unknown field; a map entry with an unknown field is parsed, then left out of the map (upb
//! moves it to the parent's unknown fields).
//! Unknown fields are skipped (upb keeps them aside; the mapping never reads them). Fields
//! are read into a per-message table first (each field's occurrences, in wire order), then
//! encoded in declaration order, as the mapping's record lists them: last one wins for
//! singular fields, oneof members other than the last one set are null, repeated fields
//! concatenate their packed and unpacked occurrences, map entries keep the last value of a key
//! and are written sorted by key (the mapping's deterministic order).

use crate::body::{Stop, Value, R};
use crate::prefix::put_long;
use crate::rewrite::{Base, FieldRewrite};
use crate::schema::Unsupported;
use serde_json::Value as Json;
use std::io::Write;

/// Nesting deeper than this goes to the Python path (schemas are not recursive: the mapping
/// refuses them; this bounds the native stack anyway).
const MAX_DEPTH: u32 = 64;
/// Timestamp range of Python's `datetime` (years 1-9999), in microseconds.
const MICROS_RANGE: (i64, i64) = (-62_135_596_800_000_000, 253_402_300_799_999_999);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Scalar {
    Int32,
    Int64,
    UInt32,
    UInt64,
    SInt32,
    SInt64,
    Fixed32,
    Fixed64,
    SFixed32,
    SFixed64,
    Float,
    Double,
    Bool,
    String,
    Bytes,
}

impl Scalar {
    fn parse(name: &str) -> Option<Scalar> {
        Some(match name {
            "int32" => Scalar::Int32,
            "int64" => Scalar::Int64,
            "uint32" => Scalar::UInt32,
            "uint64" => Scalar::UInt64,
            "sint32" => Scalar::SInt32,
            "sint64" => Scalar::SInt64,
            "fixed32" => Scalar::Fixed32,
            "fixed64" => Scalar::Fixed64,
            "sfixed32" => Scalar::SFixed32,
            "sfixed64" => Scalar::SFixed64,
            "float" => Scalar::Float,
            "double" => Scalar::Double,
            "bool" => Scalar::Bool,
            "string" => Scalar::String,
            "bytes" => Scalar::Bytes,
            _ => return None,
        })
    }

    /// The wire type of one unpacked value.
    fn wire_type(self) -> u8 {
        match self {
            Scalar::Fixed64 | Scalar::SFixed64 | Scalar::Double => 1,
            Scalar::Fixed32 | Scalar::SFixed32 | Scalar::Float => 5,
            Scalar::String | Scalar::Bytes => 2,
            _ => 0,
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Scalar(Scalar),
    Enum(usize),
    Message(usize),
    Timestamp,
    Wrapper(Scalar),
}

impl Kind {
    fn wire_type(self) -> u8 {
        match self {
            Kind::Scalar(s) => s.wire_type(),
            Kind::Enum(_) => 0,
            Kind::Message(_) | Kind::Timestamp | Kind::Wrapper(_) => 2,
        }
    }

    /// Whether a repeated field of this kind may be packed (numeric scalars and enums).
    fn packable(self) -> bool {
        match self {
            Kind::Scalar(s) => !matches!(s, Scalar::String | Scalar::Bytes),
            Kind::Enum(_) => true,
            _ => false,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Label {
    /// A field without presence: its default when unset.
    Single,
    /// `["null", T]`: a field with presence (message, oneof member, `optional`).
    Nullable,
    Repeated,
    /// `map<key, value>`: entries of a message whose field 1 is the key, 2 the value.
    Map(Scalar),
}

#[derive(Debug)]
struct Field {
    name: String,
    number: u32,
    kind: Kind,
    label: Label,
    /// The oneof it belongs to (index in its message), for the last-member-wins rule.
    oneof: Option<usize>,
}

#[derive(Debug)]
struct Message {
    fields: Vec<Field>,
    oneofs: usize,
    /// Field number → field index (`u32::MAX`: unknown), for numbers below its length.
    by_number: Vec<u32>,
}

#[derive(Debug)]
struct Enum {
    /// (number, Avro symbol index), sorted by number.
    symbols: Vec<(i32, u32)>,
    /// The Avro index of the value an unset field reads as (None: hand it back).
    default: Option<u32>,
}

impl Enum {
    fn index(&self, number: i32) -> R<u32> {
        self.symbols.binary_search_by_key(&number, |s| s.0).map(|at| self.symbols[at].1).map_err(|_| Stop)
    }
}

/// The wanted paths (routing's and event time's) over the fields of the top message.
#[derive(Default, Debug)]
struct Want {
    slot: Option<usize>,
    children: Vec<(usize, Want)>,
}

/// One occurrence of a known field in the message being read.
#[derive(Clone, Copy)]
struct Occurrence {
    wire_type: u8,
    start: u32,
    end: u32,
    /// The next occurrence of the same field (`u32::MAX`: none).
    next: u32,
}

#[derive(Clone, Copy)]
struct Head {
    first: u32,
    last: u32,
    count: u32,
}

const NONE: u32 = u32::MAX;

/// A map entry read: its key (for sorting) and value bytes.
#[derive(Clone, Copy)]
struct MapEntry {
    key: Key,
    /// The value's occurrence (`NONE`: absent, the default).
    value: (u8, u32, u32),
    present: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Signed(i64),
    Unsigned(u64),
    /// A string key's byte range in the input (UTF-8 byte order is code point order: Python's).
    Text(u32, u32),
}

/// One message type of one schema compiled, with scratch space reused across messages.
pub struct Decoder {
    messages: Vec<Message>,
    enums: Vec<Enum>,
    top: usize,
    want: Want,
    occurrences: Vec<Occurrence>,
    heads: Vec<Head>,
    oneof_last: Vec<u32>,
    entries: Vec<MapEntry>,
    body: Vec<u8>,
    /// Per top-level field: dropped by a `drop` transform (`transform`): decoded and checked
    /// as declared, then cut from the body.
    dropped: Vec<bool>,
    /// `add` transforms of constants (`transform`): their encoding, after every body.
    constants: Vec<u8>,
    /// Per top-level field: a `mask` or `timestamp` transform (`rewrite_field`): decoded and
    /// written as declared, then rewritten as the step gives it (rewrite.rs).
    rewrites: Vec<Option<FieldRewrite>>,
}

/// Where a Confluent Protobuf frame's message indexes end (core/formats/protobuf_wire.py), or
/// None when they are not well formed (the Python path's verdict).
pub fn frame_prefix(value: &[u8]) -> Option<usize> {
    fn zigzag(value: &[u8], pos: &mut usize) -> Option<i64> {
        let mut n = 0u64;
        for i in 0..10 {
            let byte = *value.get(*pos)?;
            *pos += 1;
            n |= ((byte & 0x7F) as u64) << (7 * i);
            if byte & 0x80 == 0 {
                return Some((n >> 1) as i64 ^ -((n & 1) as i64));
            }
        }
        None
    }
    let mut pos = 5;
    let count = zigzag(value, &mut pos)?;
    if !(0..=32).contains(&count) {
        return None;
    }
    for _ in 0..count {
        if zigzag(value, &mut pos)? < 0 {
            return None;
        }
    }
    Some(pos)
}

fn unsupported(what: impl Into<String>) -> Unsupported {
    Unsupported(what.into())
}

impl Decoder {
    /// `program`: the JSON of `core/formats/protobuf_program.py`; `wanted`: the dotted paths
    /// routing and event time read (slot i is `wanted[i]`).
    pub fn compile(program: &str, wanted: &[String]) -> Result<Decoder, Unsupported> {
        let json: Json = serde_json::from_str(program).map_err(|e| unsupported(format!("program JSON: {e}")))?;
        let list = |key: &str| {
            json.get(key).and_then(Json::as_array).ok_or_else(|| unsupported(format!("program without {key}")))
        };
        let mut enums = Vec::new();
        for e in list("enums")? {
            let mut symbols = Vec::new();
            for pair in
                e.get("symbols").and_then(Json::as_array).ok_or_else(|| unsupported("an enum without symbols"))?
            {
                let number = pair.get(0).and_then(Json::as_i64).and_then(|n| i32::try_from(n).ok());
                let index = pair.get(1).and_then(Json::as_u64).and_then(|n| u32::try_from(n).ok());
                match (number, index) {
                    (Some(n), Some(i)) => symbols.push((n, i)),
                    _ => return Err(unsupported("an enum symbol that is not (number, index)")),
                }
            }
            symbols.sort_unstable();
            symbols.dedup_by_key(|s| s.0);
            let default = e.get("default").and_then(Json::as_u64).map(|d| d as u32);
            enums.push(Enum { symbols, default });
        }
        let kinds = list("messages")?;
        let mut messages = Vec::with_capacity(kinds.len());
        for m in kinds {
            let mut fields = Vec::new();
            let mut oneofs = 0;
            for f in m.get("fields").and_then(Json::as_array).ok_or_else(|| unsupported("a message without fields"))? {
                let field = Self::field(f, enums.len(), kinds.len())?;
                if let Some(o) = field.oneof {
                    oneofs = oneofs.max(o + 1);
                }
                fields.push(field);
            }
            if fields.is_empty() {
                return Err(unsupported("a message without fields"));
            }
            let max = fields.iter().map(|f| f.number).max().unwrap_or(0) as usize;
            if max > 4096 {
                return Err(unsupported("field numbers above 4096"));
            }
            let mut by_number = vec![NONE; max + 1];
            for (i, f) in fields.iter().enumerate() {
                if by_number[f.number as usize] != NONE {
                    return Err(unsupported(format!("field number {} twice", f.number)));
                }
                by_number[f.number as usize] = i as u32;
            }
            messages.push(Message { fields, oneofs, by_number });
        }
        let top = json
            .get("top")
            .and_then(Json::as_u64)
            .map(|t| t as usize)
            .filter(|&t| t < messages.len())
            .ok_or_else(|| unsupported("program without a top message"))?;
        let want = plan(&messages, top, wanted)?;
        Ok(Decoder {
            messages,
            enums,
            top,
            want,
            occurrences: Vec::new(),
            heads: Vec::new(),
            oneof_last: Vec::new(),
            entries: Vec::new(),
            body: Vec::new(),
            dropped: Vec::new(),
            constants: Vec::new(),
            rewrites: Vec::new(),
        })
    }

    fn field(f: &Json, enums: usize, messages: usize) -> Result<Field, Unsupported> {
        let text =
            |key: &str| f.get(key).and_then(Json::as_str).ok_or_else(|| unsupported(format!("a field without {key}")));
        let name = text("name")?.to_string();
        let number = f
            .get("number")
            .and_then(Json::as_u64)
            .filter(|&n| n > 0 && n < (1 << 29))
            .ok_or_else(|| unsupported(format!("{name}: no field number")))? as u32;
        let reference = f.get("ref").and_then(Json::as_u64).map(|r| r as usize);
        let kind = match text("kind")? {
            "enum" => {
                Kind::Enum(reference.filter(|&r| r < enums).ok_or_else(|| unsupported(format!("{name}: enum ref")))?)
            }
            "message" => Kind::Message(
                reference.filter(|&r| r < messages).ok_or_else(|| unsupported(format!("{name}: message ref")))?,
            ),
            "timestamp" => Kind::Timestamp,
            "wrapper" => Kind::Wrapper(
                Scalar::parse(text("wrapped")?).ok_or_else(|| unsupported(format!("{name}: wrapped type")))?,
            ),
            other => Kind::Scalar(Scalar::parse(other).ok_or_else(|| unsupported(format!("{name}: type {other}")))?),
        };
        let label = match text("label")? {
            "single" => Label::Single,
            "nullable" => Label::Nullable,
            "repeated" => Label::Repeated,
            "map" => {
                let key = Scalar::parse(text("key")?).ok_or_else(|| unsupported(format!("{name}: map key type")))?;
                if matches!(key, Scalar::Float | Scalar::Double | Scalar::Bytes) {
                    return Err(unsupported(format!("{name}: a {key:?} map key")));
                }
                Label::Map(key)
            }
            other => return Err(unsupported(format!("{name}: label {other}"))),
        };
        if label == Label::Single && matches!(kind, Kind::Message(_) | Kind::Timestamp | Kind::Wrapper(_)) {
            return Err(unsupported(format!("{name}: a message field without presence")));
        }
        let oneof = f.get("oneof").and_then(Json::as_u64).map(|o| o as usize);
        if oneof.is_some() && label != Label::Nullable {
            return Err(unsupported(format!("{name}: a oneof member that is not nullable")));
        }
        Ok(Field { name, number, kind, label, oneof })
    }

    /// `drop` and `add` (constant) transforms of the converted record: leave the top-level
    /// fields `names` out of every body (Python converts the whole message, then drops them,
    /// and the derived schema's encoding is the other fields' in order) and append `constants`
    /// (the added constants' Avro encoding, the derived schema's last fields) after it. Err
    /// for a name that is not a top-level field, or one routing or event time reads.
    pub fn transform(&mut self, names: &[String], constants: &[u8]) -> Result<(), Unsupported> {
        let fields = &self.messages[self.top].fields;
        let mut dropped = vec![false; fields.len()];
        for name in names {
            let index = fields
                .iter()
                .position(|f| &f.name == name)
                .ok_or_else(|| unsupported(format!("no top-level field {name:?} to drop")))?;
            if self.want.children.iter().any(|(i, _)| *i == index) {
                return Err(unsupported(format!("field {name:?} is read by routing or event time")));
            }
            dropped[index] = true;
        }
        self.dropped = dropped;
        self.constants = constants.to_vec();
        Ok(())
    }

    /// Rewrite the top-level field `name` after writing it as declared (rewrite.rs). Err for
    /// a name that is not a top-level field, one whose Avro mapping is not laid out as
    /// `rewrite` expects, or one routing or event time reads.
    pub fn rewrite_field(&mut self, name: &str, rewrite: FieldRewrite) -> Result<(), Unsupported> {
        let fields = &self.messages[self.top].fields;
        let index = fields
            .iter()
            .position(|f| f.name == name)
            .ok_or_else(|| unsupported(format!("no top-level field {name:?} to rewrite")))?;
        if self.want.children.iter().any(|(i, _)| *i == index) {
            return Err(unsupported(format!("field {name:?} is read by routing or event time")));
        }
        let field = &fields[index];
        // The mapping's layout (protobuf_avro.py): a nullable is ["null", T], null first.
        let declared_null = match field.label {
            Label::Single => None,
            Label::Nullable => Some(0),
            _ => return Err(unsupported(format!("field {name:?} is repeated or a map"))),
        };
        let value = match field.kind {
            Kind::Scalar(Scalar::Int32 | Scalar::SInt32 | Scalar::SFixed32)
            | Kind::Wrapper(Scalar::Int32 | Scalar::SInt32 | Scalar::SFixed32) => Base::Int,
            Kind::Scalar(
                Scalar::Int64
                | Scalar::SInt64
                | Scalar::SFixed64
                | Scalar::UInt32
                | Scalar::Fixed32
                | Scalar::UInt64
                | Scalar::Fixed64,
            )
            | Kind::Wrapper(
                Scalar::Int64
                | Scalar::SInt64
                | Scalar::SFixed64
                | Scalar::UInt32
                | Scalar::Fixed32
                | Scalar::UInt64
                | Scalar::Fixed64,
            )
            | Kind::Timestamp => Base::Long,
            Kind::Scalar(Scalar::String | Scalar::Bytes) | Kind::Wrapper(Scalar::String | Scalar::Bytes) => Base::Text,
            Kind::Scalar(Scalar::Bool) | Kind::Wrapper(Scalar::Bool) => Base::Boolean,
            _ => Base::Any,
        };
        let fits = rewrite.declared_null == declared_null && (rewrite.base == Base::Any || rewrite.base == value);
        if !fits {
            return Err(unsupported(format!("field {name:?} is not laid out as the rewrite expects")));
        }
        if self.rewrites.len() != fields.len() {
            self.rewrites = vec![None; fields.len()];
        }
        self.rewrites[index] = Some(rewrite);
        Ok(())
    }

    /// The Avro body of the last [`encode`](Self::encode).
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Decode the Protobuf binary `input` and encode its Avro record into [`body`](Self::body);
    /// the wanted values go to `values` (which the caller reset to `Null`).
    pub fn encode(&mut self, input: &[u8], values: &mut [Value]) -> R<()> {
        if input.len() >= u32::MAX as usize {
            return Err(Stop);
        }
        self.body.clear();
        self.occurrences.clear();
        self.heads.clear();
        self.oneof_last.clear();
        self.entries.clear();
        let mut out = std::mem::take(&mut self.body);
        let want = std::mem::take(&mut self.want);
        let result = self.message(self.top, input, 0, input.len() as u32, &mut out, Some(&want), values, 0);
        self.want = want;
        out.extend_from_slice(&self.constants);
        self.body = out;
        result
    }

    /// Read the message `id` at `input[start..end]` into the occurrence table, then write its
    /// fields in declaration order.
    #[allow(clippy::too_many_arguments)]
    fn message(
        &mut self,
        id: usize,
        input: &[u8],
        start: u32,
        end: u32,
        out: &mut Vec<u8>,
        want: Option<&Want>,
        values: &mut [Value],
        depth: u32,
    ) -> R<()> {
        if depth > MAX_DEPTH {
            return Err(Stop);
        }
        let (occ_base, head_base, oneof_base) = (self.occurrences.len(), self.heads.len(), self.oneof_last.len());
        let message = &self.messages[id];
        self.heads.resize(head_base + message.fields.len(), Head { first: NONE, last: NONE, count: 0 });
        self.oneof_last.resize(oneof_base + message.oneofs, NONE);
        let mut pos = start as usize;
        let end_usize = end as usize;
        let buf = &input[..end_usize];
        while pos < end_usize {
            let (number, wire_type) = tag(buf, &mut pos)?;
            let (from, to) = value_range(buf, &mut pos, wire_type)?;
            let index = message.by_number.get(number as usize).copied().unwrap_or(NONE);
            if index == NONE {
                continue; // an unknown field: upb keeps it aside, the mapping never reads it
            }
            let field = &message.fields[index as usize];
            let own = field.kind.wire_type();
            let packed = wire_type == 2 && field.label == Label::Repeated && field.kind.packable();
            let fits = match field.label {
                Label::Map(_) => wire_type == 2,
                _ => wire_type == own || packed,
            };
            if !fits {
                continue; // another wire type than the field's: upb keeps it as an unknown field
            }
            let at = self.occurrences.len() as u32;
            self.occurrences.push(Occurrence { wire_type, start: from as u32, end: to as u32, next: NONE });
            let head = &mut self.heads[head_base + index as usize];
            if head.last == NONE {
                head.first = at;
            } else {
                self.occurrences[head.last as usize].next = at;
            }
            head.last = at;
            head.count += 1;
            if let Some(o) = field.oneof {
                self.oneof_last[oneof_base + o] = index;
            }
        }
        if pos != end_usize {
            return Err(Stop);
        }
        let fields = self.messages[id].fields.len();
        // A dropped top-level field is written as any other (so it is checked as Python
        // converts it), then cut: `cut` is where it began, applied before the next field is
        // written (the loop `continue`s) and after the last.
        let mut cut: Option<usize> = None;
        // A rewritten top-level field likewise: where it began, rewritten before the next.
        let mut rewrite: Option<(usize, usize)> = None;
        for index in 0..fields {
            if let Some(at) = cut.take() {
                out.truncate(at);
            }
            if let Some((mark, of)) = rewrite.take() {
                self.rewrites[of].as_ref().expect("a rewritten field").apply(out, mark)?;
            }
            if depth == 0 && want.is_some() && self.rewrites.get(index).is_some_and(Option::is_some) {
                rewrite = Some((out.len(), index));
            }
            // (the top message: depth 0 with a plan; an absent map value's empty message is
            // written at depth 0 too, without one)
            if depth == 0 && want.is_some() && self.dropped.get(index) == Some(&true) {
                cut = Some(out.len());
            }
            let head = self.heads[head_base + index];
            let field = &self.messages[id].fields[index];
            let (kind, label, oneof) = (field.kind, field.label, field.oneof);
            let below = want.and_then(|w| w.children.iter().find(|(i, _)| *i == index)).map(|(_, w)| w);
            let slot = below.and_then(|w| w.slot);
            let children = below.filter(|w| !w.children.is_empty());
            match label {
                Label::Single | Label::Nullable => {
                    let mut present = head.last != NONE;
                    if let Some(o) = oneof {
                        present &= self.oneof_last[oneof_base + o] == index as u32;
                    }
                    if head.count > 1 || (head.count == 1 && !present) {
                        // upb checks every occurrence as it reads it, also those a later one
                        // replaces (or a later oneof member clears); the one encoded is checked
                        // when it is.
                        match kind {
                            // upb merges a message given twice
                            Kind::Message(_) | Kind::Timestamp | Kind::Wrapper(_) if head.count > 1 => {
                                return Err(Stop)
                            }
                            // a oneof member a later one cleared: upb parsed it all the same
                            Kind::Message(_) | Kind::Timestamp | Kind::Wrapper(_) => {
                                let o = self.occurrences[head.first as usize];
                                let mut scratch = Vec::new();
                                self.element(
                                    kind,
                                    input,
                                    o.wire_type,
                                    o.start,
                                    o.end,
                                    &mut scratch,
                                    None,
                                    values,
                                    depth,
                                )?;
                            }
                            Kind::Scalar(Scalar::String) => {
                                let mut at = head.first;
                                while at != NONE {
                                    let o = self.occurrences[at as usize];
                                    std::str::from_utf8(&input[o.start as usize..o.end as usize]).map_err(|_| Stop)?;
                                    at = o.next;
                                }
                            }
                            _ => {}
                        }
                    }
                    let occurrence = present.then(|| self.occurrences[head.last as usize]);
                    if label == Label::Nullable {
                        match occurrence {
                            None => {
                                out.push(0); // the union's "null" branch
                                continue;
                            }
                            Some(_) => out.push(2), // branch 1, zig-zag
                        }
                    }
                    let value = match occurrence {
                        Some(o) => {
                            self.element(kind, input, o.wire_type, o.start, o.end, out, children, values, depth)?
                        }
                        None => self.default(kind, out)?,
                    };
                    if let Some(slot) = slot {
                        values[slot] = match value {
                            Value::Str(len, _) => Value::Str(out.len() - len, out.len()),
                            v => v,
                        };
                    }
                }
                Label::Repeated => {
                    let mut count: u64 = 0;
                    let mut at = head.first;
                    while at != NONE {
                        let o = self.occurrences[at as usize];
                        count += if o.wire_type == 2 && kind.packable() {
                            packed_count(kind, input, o.start, o.end)?
                        } else {
                            1
                        };
                        at = o.next;
                    }
                    if count > 0 {
                        put_long(out, count as i64);
                        let mut at = head.first;
                        while at != NONE {
                            let o = self.occurrences[at as usize];
                            if o.wire_type == 2 && kind.packable() {
                                let (mut p, own) = (o.start as usize, kind.wire_type());
                                while p < o.end as usize {
                                    let item = p;
                                    skip(&input[..o.end as usize], &mut p, own)?;
                                    self.element(kind, input, own, item as u32, p as u32, out, None, values, depth)?;
                                }
                            } else {
                                self.element(kind, input, o.wire_type, o.start, o.end, out, None, values, depth)?;
                            }
                            at = o.next;
                        }
                    }
                    out.push(0);
                    if let Some(slot) = slot {
                        values[slot] = Value::Other;
                    }
                }
                Label::Map(key) => {
                    self.map(kind, key, input, head, out, values, depth)?;
                    if let Some(slot) = slot {
                        values[slot] = Value::Other;
                    }
                }
            }
        }
        if let Some(at) = cut {
            out.truncate(at);
        }
        if let Some((mark, of)) = rewrite {
            self.rewrites[of].as_ref().expect("a rewritten field").apply(out, mark)?;
        }
        self.occurrences.truncate(occ_base);
        self.heads.truncate(head_base);
        self.oneof_last.truncate(oneof_base);
        Ok(())
    }

    /// A map field: each entry's key and value (last one wins in an entry), the last entry of
    /// each key, written sorted by key as the mapping writes them.
    #[allow(clippy::too_many_arguments)]
    fn map(
        &mut self,
        kind: Kind,
        key: Scalar,
        input: &[u8],
        head: Head,
        out: &mut Vec<u8>,
        values: &mut [Value],
        depth: u32,
    ) -> R<()> {
        let base = self.entries.len();
        let mut at = head.first;
        while at != NONE {
            let o = self.occurrences[at as usize];
            at = o.next;
            let buf = &input[..o.end as usize];
            let mut pos = o.start as usize;
            let mut entry = MapEntry { key: default_key(key), value: (0, 0, 0), present: false };
            let (mut value_count, mut unknown) = (0, false);
            while pos < o.end as usize {
                let (number, wire_type) = tag(buf, &mut pos)?;
                let (from, to) = value_range(buf, &mut pos, wire_type)?;
                match number {
                    1 if wire_type == key.wire_type() => entry.key = read_key(key, buf, from, to)?,
                    2 if wire_type == kind.wire_type() => {
                        if matches!(kind, Kind::Scalar(Scalar::String)) {
                            // checked as upb reads it, whether or not a later one replaces it
                            std::str::from_utf8(&buf[from..to]).map_err(|_| Stop)?;
                        }
                        entry.value = (wire_type, from as u32, to as u32);
                        entry.present = true;
                        value_count += 1;
                    }
                    _ => unknown = true,
                }
            }
            if value_count > 1 && matches!(kind, Kind::Message(_) | Kind::Timestamp | Kind::Wrapper(_)) {
                return Err(Stop); // merged by upb
            }
            if unknown {
                // upb moves an entry with an unknown field (or a key or value of another wire
                // type) to the parent's unknown fields, after parsing it: not in the map.
                if entry.present && matches!(kind, Kind::Message(_) | Kind::Timestamp | Kind::Wrapper(_)) {
                    let (w, s, e) = entry.value;
                    let mut scratch = Vec::new();
                    self.element(kind, input, w, s, e, &mut scratch, None, values, depth)?;
                }
                continue;
            }
            // The last entry of a key wins (upb's map), at the key's sorted place.
            match self.entries[base..].iter().position(|e| same_key(input, e.key, entry.key)) {
                Some(at) => {
                    let earlier = std::mem::replace(&mut self.entries[base + at], entry);
                    if earlier.present && matches!(kind, Kind::Message(_) | Kind::Timestamp | Kind::Wrapper(_)) {
                        // upb parsed the replaced value all the same: a message it may refuse
                        let (w, s, e) = earlier.value;
                        let mut scratch = Vec::new();
                        self.element(kind, input, w, s, e, &mut scratch, None, values, depth)?;
                    }
                }
                None => self.entries.push(entry),
            }
        }
        let count = self.entries.len() - base;
        let result = (|| {
            if count > 0 {
                self.entries[base..].sort_unstable_by(|a, b| match (a.key, b.key) {
                    (Key::Text(s1, e1), Key::Text(s2, e2)) => {
                        input[s1 as usize..e1 as usize].cmp(&input[s2 as usize..e2 as usize])
                    }
                    (x, y) => x.cmp(&y),
                });
                put_long(out, count as i64);
                for i in base..base + count {
                    let entry = self.entries[i];
                    match entry.key {
                        Key::Text(s, e) => {
                            put_long(out, (e - s) as i64);
                            out.extend_from_slice(&input[s as usize..e as usize]);
                        }
                        Key::Signed(v) if key == Scalar::Bool => put_text(out, if v != 0 { "true" } else { "false" }),
                        Key::Signed(v) => put_number(out, v as i128),
                        Key::Unsigned(v) => put_number(out, v as i128),
                    }
                    if entry.present {
                        let (w, s, e) = entry.value;
                        self.element(kind, input, w, s, e, out, None, values, depth)?;
                    } else {
                        self.default(kind, out)?;
                    }
                }
            }
            out.push(0);
            Ok(())
        })();
        self.entries.truncate(base);
        result
    }

    /// Encode one present value of `kind` at `input[start..end]` (a varint's, a fixed value's
    /// or a length-delimited payload's bytes); returns what routing and event time read of it
    /// (a string as `Str(len, _)`: the caller places it at the end of `out`).
    #[allow(clippy::too_many_arguments)]
    fn element(
        &mut self,
        kind: Kind,
        input: &[u8],
        wire_type: u8,
        start: u32,
        end: u32,
        out: &mut Vec<u8>,
        want: Option<&Want>,
        values: &mut [Value],
        depth: u32,
    ) -> R<Value> {
        let bytes = &input[start as usize..end as usize];
        match kind {
            Kind::Scalar(s) => scalar(s, bytes, out),
            Kind::Enum(e) => {
                let number = int32(read_varint(bytes)?);
                put_long(out, self.enums[e].index(number)? as i64);
                Ok(Value::Other)
            }
            Kind::Message(m) => {
                debug_assert_eq!(wire_type, 2);
                self.message(m, input, start, end, out, want, values, depth + 1)?;
                Ok(Value::Other)
            }
            Kind::Timestamp => {
                let micros = timestamp(bytes)?;
                put_long(out, micros);
                Ok(Value::Micros(micros))
            }
            Kind::Wrapper(s) => {
                // `value` (field 1), the last one given; unset: the scalar's default.
                let (mut pos, mut value) = (0, None);
                while pos < bytes.len() {
                    let (number, wt) = tag(bytes, &mut pos)?;
                    let (from, _) = value_range(bytes, &mut pos, wt)?;
                    // another wire type than the value's: an unknown field to upb
                    if number == 1 && wt == s.wire_type() {
                        if s == Scalar::String {
                            std::str::from_utf8(&bytes[from..pos]).map_err(|_| Stop)?;
                        }
                        value = Some((from, pos));
                    }
                }
                match value {
                    Some((f, t)) => scalar(s, &bytes[f..t], out),
                    None => default_scalar(s, out),
                }
            }
        }
    }

    /// The encoding of an unset value of `kind` (Protobuf's default).
    fn default(&mut self, kind: Kind, out: &mut Vec<u8>) -> R<Value> {
        match kind {
            Kind::Scalar(s) | Kind::Wrapper(s) => default_scalar(s, out),
            Kind::Enum(e) => {
                put_long(out, self.enums[e].default.ok_or(Stop)? as i64);
                Ok(Value::Other)
            }
            Kind::Timestamp => {
                out.push(0);
                Ok(Value::Micros(0))
            }
            Kind::Message(m) => {
                // An absent map value: the empty message, every field its default.
                self.message(m, &[], 0, 0, out, None, &mut [], 0)?;
                Ok(Value::Other)
            }
        }
    }
}

fn default_scalar(s: Scalar, out: &mut Vec<u8>) -> R<Value> {
    Ok(match s {
        Scalar::Float => {
            out.extend_from_slice(&[0; 4]);
            Value::Float(0.0)
        }
        Scalar::Double => {
            out.extend_from_slice(&[0; 8]);
            Value::Float(0.0)
        }
        Scalar::Bool => {
            out.push(0);
            Value::Other
        }
        Scalar::String => {
            out.push(0);
            Value::Str(0, 0)
        }
        Scalar::Bytes => {
            out.push(0);
            Value::Other
        }
        _ => {
            out.push(0);
            Value::Int(0)
        }
    })
}

/// One scalar's Avro encoding from its wire bytes, and its wanted value.
fn scalar(s: Scalar, bytes: &[u8], out: &mut Vec<u8>) -> R<Value> {
    let v = match s {
        Scalar::Int32 => int32(read_varint(bytes)?) as i64,
        Scalar::Int64 => read_varint(bytes)? as i64,
        Scalar::UInt32 => read_varint(bytes)? as u32 as i64, // upb keeps the low 32 bits
        Scalar::UInt64 => i64::try_from(read_varint(bytes)?).map_err(|_| Stop)?,
        Scalar::SInt32 => {
            let z = read_varint(bytes)? as u32; // the low 32 bits, as upb
            ((z >> 1) as i32 ^ -((z & 1) as i32)) as i64
        }
        Scalar::SInt64 => {
            let z = read_varint(bytes)?;
            (z >> 1) as i64 ^ -((z & 1) as i64)
        }
        Scalar::Fixed32 => u32::from_le_bytes(fixed(bytes)?) as i64,
        Scalar::SFixed32 => i32::from_le_bytes(fixed(bytes)?) as i64,
        Scalar::Fixed64 => i64::try_from(u64::from_le_bytes(fixed(bytes)?)).map_err(|_| Stop)?,
        Scalar::SFixed64 => i64::from_le_bytes(fixed(bytes)?),
        Scalar::Float => {
            let x = f32::from_le_bytes(fixed(bytes)?);
            if !x.is_finite() {
                return Err(Stop);
            }
            out.extend_from_slice(&x.to_le_bytes());
            return Ok(Value::Float(x as f64));
        }
        Scalar::Double => {
            let x = f64::from_le_bytes(fixed(bytes)?);
            if !x.is_finite() {
                return Err(Stop);
            }
            out.extend_from_slice(&x.to_le_bytes());
            return Ok(Value::Float(x));
        }
        Scalar::Bool => {
            out.push((read_varint(bytes)? != 0) as u8); // upb: any other value than 0 is true
            return Ok(Value::Other);
        }
        Scalar::String => {
            std::str::from_utf8(bytes).map_err(|_| Stop)?;
            put_long(out, bytes.len() as i64);
            out.extend_from_slice(bytes);
            return Ok(Value::Str(bytes.len(), 0));
        }
        Scalar::Bytes => {
            put_long(out, bytes.len() as i64);
            out.extend_from_slice(bytes);
            return Ok(Value::Other);
        }
    };
    put_long(out, v);
    Ok(Value::Int(v))
}

/// A `google.protobuf.Timestamp` as microseconds: `seconds` (1) and `nanos` (2), the last of
/// each; nanos floor-divided by 1000 as the mapping's `timedelta` does; outside years 1-9999
/// the mapping refuses it.
fn timestamp(bytes: &[u8]) -> R<i64> {
    let (mut pos, mut seconds, mut nanos) = (0, 0i64, 0i64);
    while pos < bytes.len() {
        let (number, wt) = tag(bytes, &mut pos)?;
        match (number, wt) {
            (1, 0) => seconds = varint(bytes, &mut pos)? as i64,
            (2, 0) => nanos = int32(varint(bytes, &mut pos)?) as i64,
            _ => skip(bytes, &mut pos, wt)?, // unknown, or another wire type: unknown to upb
        }
    }
    let micros = seconds.checked_mul(1_000_000).and_then(|s| s.checked_add(nanos.div_euclid(1000))).ok_or(Stop)?;
    if micros < MICROS_RANGE.0 || micros > MICROS_RANGE.1 {
        return Err(Stop);
    }
    Ok(micros)
}

fn default_key(key: Scalar) -> Key {
    match key {
        Scalar::String => Key::Text(0, 0),
        Scalar::UInt32 | Scalar::UInt64 | Scalar::Fixed32 | Scalar::Fixed64 => Key::Unsigned(0),
        _ => Key::Signed(0),
    }
}

fn read_key(key: Scalar, input: &[u8], from: usize, to: usize) -> R<Key> {
    let bytes = &input[from..to];
    Ok(match key {
        Scalar::String => {
            std::str::from_utf8(bytes).map_err(|_| Stop)?;
            Key::Text(from as u32, to as u32)
        }
        Scalar::UInt32 | Scalar::Fixed32 | Scalar::UInt64 | Scalar::Fixed64 => {
            let v = match key {
                Scalar::UInt32 => read_varint(bytes)? as u32 as u64,
                Scalar::Fixed32 => u32::from_le_bytes(fixed(bytes)?) as u64,
                Scalar::UInt64 => read_varint(bytes)?,
                _ => u64::from_le_bytes(fixed(bytes)?),
            };
            Key::Unsigned(v)
        }
        Scalar::Bool => Key::Signed((read_varint(bytes)? != 0) as i64),
        _ => {
            let mut scratch = Vec::new();
            match scalar(key, bytes, &mut scratch)? {
                Value::Int(v) => Key::Signed(v),
                _ => return Err(Stop),
            }
        }
    })
}

fn same_key(input: &[u8], a: Key, b: Key) -> bool {
    match (a, b) {
        (Key::Text(s1, e1), Key::Text(s2, e2)) => input[s1 as usize..e1 as usize] == input[s2 as usize..e2 as usize],
        _ => a == b,
    }
}

fn put_text(out: &mut Vec<u8>, text: &str) {
    put_long(out, text.len() as i64);
    out.extend_from_slice(text.as_bytes());
}

fn put_number(out: &mut Vec<u8>, v: i128) {
    let mut digits = [0u8; 48];
    let mut cursor = std::io::Cursor::new(&mut digits[..]);
    let _ = write!(cursor, "{v}");
    let len = cursor.position() as usize;
    put_long(out, len as i64);
    out.extend_from_slice(&digits[..len]);
}

/// How many values a packed field's payload holds (each value must be whole).
fn packed_count(kind: Kind, input: &[u8], start: u32, end: u32) -> R<u64> {
    let bytes = &input[start as usize..end as usize];
    match kind.wire_type() {
        1 if bytes.len().is_multiple_of(8) => Ok(bytes.len() as u64 / 8),
        5 if bytes.len().is_multiple_of(4) => Ok(bytes.len() as u64 / 4),
        0 => {
            if bytes.last().is_some_and(|b| b & 0x80 != 0) {
                return Err(Stop); // a varint cut off by the end
            }
            Ok(bytes.iter().filter(|b| **b & 0x80 == 0).count() as u64)
        }
        _ => Err(Stop),
    }
}

/// An `int32` or enum varint as upb reads it: its low 32 bits (a negative value is
/// sign-extended to 10 bytes on the wire; anything past 32 bits is dropped).
#[inline]
fn int32(v: u64) -> i32 {
    v as u32 as i32
}

/// Where the value starting at `*pos` lies (a length-delimited one without its length), and
/// `*pos` moved past it.
#[inline]
fn value_range(buf: &[u8], pos: &mut usize, wire_type: u8) -> R<(usize, usize)> {
    if wire_type == 2 {
        let len = short_varint(buf, pos)? as usize;
        if len > buf.len() - *pos {
            return Err(Stop);
        }
        let from = *pos;
        *pos += len;
        return Ok((from, *pos));
    }
    let from = *pos;
    skip(buf, pos, wire_type)?;
    Ok((from, *pos))
}

#[inline]
fn fixed<const N: usize>(bytes: &[u8]) -> R<[u8; N]> {
    bytes.try_into().map_err(|_| Stop)
}

/// The varint that is all of `bytes`.
#[inline]
fn read_varint(bytes: &[u8]) -> R<u64> {
    let mut pos = 0;
    let v = varint(bytes, &mut pos)?;
    if pos != bytes.len() {
        return Err(Stop);
    }
    Ok(v)
}

#[inline]
fn varint(buf: &[u8], pos: &mut usize) -> R<u64> {
    let mut value = 0u64;
    for i in 0..10 {
        let byte = *buf.get(*pos).ok_or(Stop)?;
        *pos += 1;
        if i == 9 && byte & 0x80 != 0 {
            return Err(Stop);
        }
        // The tenth byte's bits past 64 are dropped, as upb drops them.
        value |= ((byte & 0x7F) as u64) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(Stop)
}

/// A tag or a length: a varint of at most 5 bytes in its shortest form (what upb reads as
/// such; a padded or longer one is handed back rather than judged), below 2^32.
#[inline]
fn short_varint(buf: &[u8], pos: &mut usize) -> R<u64> {
    let start = *pos;
    let v = varint(buf, pos)?;
    let len = *pos - start;
    if len > 5 || (len > 1 && buf[*pos - 1] == 0) || v > u32::MAX as u64 {
        return Err(Stop);
    }
    Ok(v)
}

/// A field's tag: (field number, wire type); field number 0 is malformed.
#[inline]
fn tag(buf: &[u8], pos: &mut usize) -> R<(u32, u8)> {
    let tag = short_varint(buf, pos)?;
    if tag >> 3 == 0 {
        return Err(Stop);
    }
    Ok(((tag >> 3) as u32, (tag & 7) as u8))
}

/// Move past one value of `wire_type` (groups and wire types 6/7 are not accepted).
#[inline]
fn skip(buf: &[u8], pos: &mut usize, wire_type: u8) -> R<()> {
    match wire_type {
        0 => {
            varint(buf, pos)?;
        }
        1 | 5 => {
            let n = if wire_type == 1 { 8 } else { 4 };
            if buf.len() - *pos < n {
                return Err(Stop);
            }
            *pos += n;
        }
        2 => {
            let len = short_varint(buf, pos)?;
            if len > (buf.len() - *pos) as u64 {
                return Err(Stop);
            }
            *pos += len as usize;
        }
        _ => return Err(Stop),
    }
    Ok(())
}

/// The wanted paths planned over the top message, through nullable message fields, to a field
/// read whole. Python's `field_values` reads `None` for a path naming no field or going through
/// a value that is not a record (a list, a scalar, a `Timestamp`): such a slot stays `Null`. A
/// path into a map reads one of its keys: refused (the type's messages stay on the Python path).
fn plan(messages: &[Message], top: usize, wanted: &[String]) -> Result<Want, Unsupported> {
    let mut want = Want::default();
    'paths: for (slot, path) in wanted.iter().enumerate() {
        let mut id = Some(top);
        let mut at = &mut want;
        let parts: Vec<&str> = path.split('.').collect();
        for (depth, part) in parts.iter().enumerate() {
            let Some(message_id) = id else { continue 'paths };
            let message = &messages[message_id];
            if at.slot.is_some() {
                return Err(unsupported(format!("{path}: a path wanted whole and in parts")));
            }
            let Some(index) = message.fields.iter().position(|f| f.name == *part) else { continue 'paths };
            let field = &message.fields[index];
            id = match (field.kind, field.label) {
                (Kind::Message(m), Label::Nullable) => Some(m),
                (_, Label::Map(_)) if depth + 1 < parts.len() => {
                    return Err(unsupported(format!("{path}: a path into a map")));
                }
                _ => None,
            };
            let child = match at.children.iter().position(|(i, _)| *i == index) {
                Some(c) => c,
                None => {
                    at.children.push((index, Want::default()));
                    at.children.len() - 1
                }
            };
            at = &mut at.children[child].1;
        }
        if at.slot.is_some() || !at.children.is_empty() {
            return Err(unsupported(format!("{path}: a path wanted twice or whole and in parts")));
        }
        at.slot = Some(slot);
    }
    Ok(want)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `kernel_program` of `message R { int64 id = 1; string name = 2; bool ok = 3; }` (proto3).
    const PROGRAM: &str = r#"{"top": 0, "messages": [{"fields": [
        {"name": "id", "number": 1, "kind": "int64", "label": "single"},
        {"name": "name", "number": 2, "kind": "string", "label": "single"},
        {"name": "ok", "number": 3, "kind": "bool", "label": "single"}]}], "enums": []}"#;

    /// The Avro body of the wire bytes `input`, or None: handed back.
    fn encode(input: &[u8]) -> Option<Vec<u8>> {
        let mut decoder = Decoder::compile(PROGRAM, &[]).unwrap();
        decoder.encode(input, &mut []).ok().map(|_| decoder.body().to_vec())
    }

    #[test]
    fn fields_are_encoded_in_declaration_order_absent_ones_as_their_defaults() {
        assert_eq!(encode(b"\x08\x05\x12\x02ab\x18\x01"), Some(b"\x0a\x04ab\x01".to_vec()));
        assert_eq!(encode(b"\x18\x01\x08\x05"), Some(b"\x0a\x00\x01".to_vec()));
        assert_eq!(encode(b""), Some(b"\x00\x00\x00".to_vec()));
    }

    #[test]
    fn the_last_occurrence_wins_and_unknown_fields_are_skipped() {
        assert_eq!(encode(b"\x08\x05\x08\x07"), Some(b"\x0e\x00\x00".to_vec()));
        assert_eq!(encode(b"\x48\x2a\x08\x05"), Some(b"\x0a\x00\x00".to_vec())); // field 9
                                                                                 // a known field of another wire type is an unknown field (upb)
        assert_eq!(encode(b"\x0a\x01x\x08\x05"), Some(b"\x0a\x00\x00".to_vec()));
        assert_eq!(encode(b"\x18\x02"), Some(b"\x00\x00\x01".to_vec())); // a bool not 0 is true
    }

    #[test]
    fn what_is_malformed_on_the_wire_is_handed_back() {
        for input in [
            &b"\x08"[..],                                        // a truncated varint
            b"\x12\x05ab",                                       // a truncated length
            b"\x00\x01",                                         // field number 0
            b"\x0b\x0c",                                         // a group
            b"\x0f\x00",                                         // wire type 7
            b"\x12\x01\xff",                                     // a string that is not UTF-8
            b"\x08\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01", // a varint over 10 bytes
        ] {
            assert!(encode(input).is_none(), "{input:?}");
        }
    }
}
