//! Storage Write rows natively: the records of a staged Avro block decoded under the file
//! schema and each written as the protobuf message `core/formats/avro_proto.py` declares for
//! that schema, in the rows-file framing `delivery/rows.py` writes (zigzag record index,
//! zigzag row length, row).
//!
//! The Python encoder (fastavro's reader, then `avro_proto._fill` and upb's
//! `SerializeToString`) is the reference. This module reproduces its bytes, not just its
//! meaning:
//! - field numbers are the Avro field positions from 1, as the descriptor numbers them, and a
//!   message's fields are written in that order (upb serializes in field-number order);
//! - every non-null value is written, defaults included (proto2 `optional` has presence), a
//!   null (a union's null branch) is left out, an empty array or map writes nothing, and a
//!   present record is written even when empty (`SetInParent`);
//! - repeated scalars are unpacked (proto2's default; the descriptor never asks for packed);
//! - the values are fastavro's converted values as `avro_proto` turns them into proto values
//!   (see `Node` below for each type).
//!
//! Whatever it is not certain of it refuses, and the caller encodes the whole file in Python:
//! a schema outside the grammar compiled here (`Unsupported`), and a block holding a value the
//! reference would refuse, convert inexactly or fail on (`Refuse`: a null array item, a date or
//! timestamp fastavro cannot convert, a decimal wider than its precision, a uuid not in its
//! canonical spelling, invalid UTF-8, a malformed body). So dead letters and errors are always
//! the Python path's.

use std::collections::HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde_json::{Map, Value as Json};

use crate::body::{canonical_uuid, Cursor, DATE_RANGE, MAX_DEPTH, MICROS_RANGE, MILLIS_RANGE};

/// Not certain: the caller encodes the file on the Python path.
struct Refuse;
type R<T> = Result<T, Refuse>;

impl From<crate::body::Stop> for Refuse {
    fn from(_: crate::body::Stop) -> Self {
        Refuse
    }
}

type NodeId = usize;

/// A type of the file schema with what its proto field carries (avro_proto's table).
enum Node {
    /// `bool`.
    Boolean,
    /// Avro int or long → `int64`.
    Long { int: bool },
    /// Avro float, widened exactly → `double`.
    Float,
    /// `double`.
    Double,
    /// bytes or fixed (size) → `bytes`.
    Bytes(Option<usize>),
    /// string → `string`.
    Str,
    /// uuid string → its canonical (lower-case) text.
    Uuid,
    /// enum → its symbol.
    Enum(Vec<String>),
    /// int date → `int32` days since 1970-01-01.
    Date,
    /// timestamp-millis/-micros → `int64` microseconds (millis × 1000).
    Timestamp { per_second: i64 },
    /// local-timestamp-millis/-micros → `YYYY-MM-DD HH:MM:SS.ffffff`.
    LocalTimestamp { per_second: i64 },
    /// time-millis (an int) / time-micros → `HH:MM:SS.ffffff`.
    Time { per_second: i64, int: bool },
    /// bytes or fixed (size) decimal → plain-notation text.
    Decimal { fixed: Option<usize>, precision: u32, scale: u32 },
    /// A record → a nested message; its fields' nodes in order.
    Record(Vec<NodeId>),
    /// A repeated field: an array's items (never an array or map).
    Array(NodeId),
    /// A repeated `{key = 1, value = 2}` message.
    Map(NodeId),
    /// `[null, T]` (nulls in any position, one other branch): the null branches' indexes.
    Nullable { other: usize, branches: usize, value: NodeId },
}

struct Unsupported(String);

struct Compiler {
    nodes: Vec<Node>,
    /// Named types by full name (Avro's rule, as `avro_names.full_name`); None while a record
    /// is being defined (a recursive reference is refused: the reference recurses forever).
    named: HashMap<String, Option<NodeId>>,
}

const PRIMITIVES: [&str; 8] = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"];

impl Compiler {
    fn push(&mut self, node: Node) -> NodeId {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    /// A field's type: nullable, repeated, a map, a record or a scalar.
    fn field(&mut self, json: &Json, ns: Option<&str>, depth: u32) -> Result<NodeId, Unsupported> {
        if depth > 64 {
            return Err(Unsupported("nesting deeper than 64".into()));
        }
        if let Json::Array(branches) = json {
            let others: Vec<usize> = (0..branches.len()).filter(|i| branches[*i] != "null").collect();
            if others.len() != 1 {
                return Err(Unsupported("a union that is not [null, T]".into()));
            }
            let value = self.non_union(&branches[others[0]], ns, depth)?;
            return Ok(self.push(Node::Nullable { other: others[0], branches: branches.len(), value }));
        }
        self.non_union(json, ns, depth)
    }

    fn non_union(&mut self, json: &Json, ns: Option<&str>, depth: u32) -> Result<NodeId, Unsupported> {
        match json {
            Json::String(name) => self.named_or_primitive(name, ns),
            Json::Object(map) => self.object(map, ns, depth),
            _ => Err(Unsupported("a nested union or an unreadable type".into())),
        }
    }

    fn named_or_primitive(&mut self, name: &str, ns: Option<&str>) -> Result<NodeId, Unsupported> {
        let node = match name {
            "boolean" => Node::Boolean,
            "int" => Node::Long { int: true },
            "long" => Node::Long { int: false },
            "float" => Node::Float,
            "double" => Node::Double,
            "bytes" => Node::Bytes(None),
            "string" => Node::Str,
            _ if PRIMITIVES.contains(&name) => return Err(Unsupported(format!("type {name}"))),
            _ => {
                // A reference: the full name in the enclosing namespace, as fastavro and
                // NamedTypes.resolve (its first candidate) both look it up; anything else
                // (a short-name fallback, a forward or recursive reference) is refused.
                let qualified = match ns {
                    Some(ns) if !ns.is_empty() && !name.contains('.') => format!("{ns}.{name}"),
                    _ => name.to_string(),
                };
                return match self.named.get(&qualified) {
                    Some(Some(id)) => Ok(*id),
                    _ => Err(Unsupported(format!("reference {name}"))),
                };
            }
        };
        Ok(self.push(node))
    }

    fn define(&mut self, map: &Map<String, Json>, ns: Option<&str>, id: Option<NodeId>) -> Result<String, Unsupported> {
        let name = map
            .get("name")
            .and_then(Json::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| Unsupported("a named type without a name".into()))?;
        let full = if name.contains('.') {
            name.to_string()
        } else {
            let namespace = match map.get("namespace") {
                None => ns.map(str::to_string),
                Some(Json::String(s)) => Some(s.clone()),
                Some(_) => return Err(Unsupported("a namespace that is not a string".into())),
            };
            match namespace {
                Some(n) if !n.is_empty() => format!("{n}.{name}"),
                _ => name.to_string(),
            }
        };
        if self.named.contains_key(&full) {
            return Err(Unsupported(format!("{full} defined twice")));
        }
        self.named.insert(full.clone(), id);
        Ok(full)
    }

    fn object(&mut self, map: &Map<String, Json>, ns: Option<&str>, depth: u32) -> Result<NodeId, Unsupported> {
        let Some(Json::String(kind)) = map.get("type") else {
            return Err(Unsupported("a type object whose type is not a name".into()));
        };
        let logical = match map.get("logicalType") {
            None => None,
            Some(Json::String(l)) => Some(l.as_str()),
            Some(_) => return Err(Unsupported("a logicalType that is not a string".into())),
        };
        let node = match (kind.as_str(), logical) {
            ("record" | "error", None) => {
                let full = self.define(map, ns, None)?;
                let inner = namespace_of(&full);
                let Some(Json::Array(fields)) = map.get("fields") else {
                    return Err(Unsupported(format!("record {full} without a field list")));
                };
                let mut seen = Vec::with_capacity(fields.len());
                let mut ids = Vec::with_capacity(fields.len());
                for f in fields {
                    let name = f
                        .get("name")
                        .and_then(Json::as_str)
                        .ok_or_else(|| Unsupported(format!("a field of {full} without a name")))?;
                    if seen.contains(&name) {
                        return Err(Unsupported(format!("field {name} twice in {full}")));
                    }
                    seen.push(name);
                    let t = f.get("type").ok_or_else(|| Unsupported(format!("field {name} without a type")))?;
                    ids.push(self.field(t, inner.as_deref(), depth + 1)?);
                }
                let id = self.push(Node::Record(ids));
                self.named.insert(full, Some(id));
                return Ok(id);
            }
            ("enum", None) => {
                let Some(Json::Array(symbols)) = map.get("symbols") else {
                    return Err(Unsupported("an enum without symbols".into()));
                };
                let symbols: Option<Vec<String>> = symbols.iter().map(|s| s.as_str().map(str::to_string)).collect();
                let symbols = symbols.ok_or_else(|| Unsupported("an enum symbol that is not a string".into()))?;
                let id = self.push(Node::Enum(symbols));
                self.define(map, ns, Some(id))?;
                return Ok(id);
            }
            ("fixed", None | Some("decimal")) => {
                let size = map
                    .get("size")
                    .and_then(Json::as_u64)
                    .ok_or_else(|| Unsupported("a fixed without a size".into()))? as usize;
                let node = match logical {
                    Some(_) => decimal(map, Some(size))?,
                    None => Node::Bytes(Some(size)),
                };
                let id = self.push(node);
                self.define(map, ns, Some(id))?;
                return Ok(id);
            }
            ("array", None) => {
                let items = map.get("items").ok_or_else(|| Unsupported("an array without items".into()))?;
                let items = self.field(items, ns, depth + 1)?;
                let inner = match &self.nodes[items] {
                    Node::Nullable { value, .. } => *value,
                    _ => items,
                };
                if matches!(self.nodes[inner], Node::Array(_) | Node::Map(_)) {
                    return Err(Unsupported("an array of arrays".into())); // avro_proto refuses it
                }
                Node::Array(items)
            }
            ("map", None) => {
                let values = map.get("values").ok_or_else(|| Unsupported("a map without values".into()))?;
                Node::Map(self.field(values, ns, depth + 1)?)
            }
            ("bytes", Some("decimal")) => decimal(map, None)?,
            ("int", Some("date")) => Node::Date,
            ("int", Some("time-millis")) => Node::Time { per_second: 1_000, int: true },
            ("long", Some("time-micros")) => Node::Time { per_second: 1_000_000, int: false },
            ("long", Some("timestamp-millis")) => Node::Timestamp { per_second: 1_000 },
            ("long", Some("timestamp-micros")) => Node::Timestamp { per_second: 1_000_000 },
            ("long", Some("local-timestamp-millis")) => Node::LocalTimestamp { per_second: 1_000 },
            ("long", Some("local-timestamp-micros")) => Node::LocalTimestamp { per_second: 1_000_000 },
            ("string", Some("uuid")) => Node::Uuid,
            (p, None) if PRIMITIVES.contains(&p) => return self.named_or_primitive(p, ns),
            // An unknown or misplaced logical type: the two sides' readings are not worth
            // proving here (rare); the Python path decides.
            _ => return Err(Unsupported(format!("type {kind} with logical type {logical:?}"))),
        };
        Ok(self.push(node))
    }
}

/// The namespace a record gives the types inside it (`avro_names.namespace_of`, applied to
/// its full name).
fn namespace_of(full: &str) -> Option<String> {
    full.rfind('.').map(|i| full[..i].to_string())
}

/// `avro_proto._decimal_text`'s schema rule: BigQuery's NUMERIC/BIGNUMERIC bounds.
fn decimal(map: &Map<String, Json>, fixed: Option<usize>) -> Result<Node, Unsupported> {
    let precision = map
        .get("precision")
        .and_then(Json::as_i64)
        .ok_or_else(|| Unsupported("a decimal without an integer precision".into()))?;
    let scale = match map.get("scale") {
        None => 0,
        Some(s) => s.as_i64().ok_or_else(|| Unsupported("a decimal scale that is not an integer".into()))?,
    };
    let digits = precision - scale;
    if !(0..=38).contains(&scale) || !(1..=38).contains(&digits) {
        return Err(Unsupported(format!("decimal({precision}, {scale})")));
    }
    Ok(Node::Decimal { fixed, precision: precision as u32, scale: scale as u32 })
}

// --- protobuf wire -------------------------------------------------------------------------
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LEN: u32 = 2;

#[inline]
fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
fn tag(out: &mut Vec<u8>, field: u32, wire: u32) {
    varint(out, ((field as u64) << 3) | wire as u64);
}

#[inline]
fn zigzag(out: &mut Vec<u8>, v: i64) {
    varint(out, ((v << 1) ^ (v >> 63)) as u64);
}

/// A length-delimited field whose content `fill` appends: written in place, then the length
/// put before it (one move of the content; most lengths take one byte).
#[inline]
fn delimited(out: &mut Vec<u8>, field: u32, fill: impl FnOnce(&mut Vec<u8>) -> R<()>) -> R<()> {
    tag(out, field, LEN);
    let start = out.len();
    fill(out)?;
    let len = out.len() - start;
    if len < 0x80 {
        out.insert(start, len as u8);
    } else {
        let mut prefix = Vec::with_capacity(5);
        varint(&mut prefix, len as u64);
        out.splice(start..start, prefix);
    }
    Ok(())
}

#[inline]
fn len_field(out: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    tag(out, field, LEN);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

// --- values --------------------------------------------------------------------------------
fn within(v: i64, (low, high): (i64, i64)) -> R<i64> {
    if v < low || v > high {
        return Err(Refuse); // fastavro's converter raises: the Python path fails the same way
    }
    Ok(v)
}

/// (year, month, day) of days since 1970-01-01 (proleptic Gregorian; H. Hinnant's algorithm).
fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + (m <= 2) as i64, m, d)
}

/// `HH:MM:SS.ffffff` of microseconds into a day (0 ≤ micros < 86,400,000,000).
fn clock(out: &mut Vec<u8>, micros: i64) {
    use std::io::Write;
    let (s, f) = (micros / 1_000_000, micros % 1_000_000);
    let _ = write!(out, "{:02}:{:02}:{:02}.{:06}", s / 3600, s / 60 % 60, s % 60, f);
}

/// The plain-notation text of `format(Decimal(unscaled).scaleb(-scale), "f")`, `unscaled`
/// the big-endian two's-complement bytes; refused when fastavro's context (precision digits)
/// would round it.
fn decimal_text(out: &mut Vec<u8>, bytes: &[u8], precision: u32, scale: u32) -> R<()> {
    let negative = bytes.first().is_some_and(|b| b & 0x80 != 0);
    let mut magnitude: Vec<u8> = bytes.to_vec();
    if negative {
        // Two's complement negation: invert, add one.
        magnitude.iter_mut().for_each(|b| *b = !*b);
        for b in magnitude.iter_mut().rev() {
            let (v, carry) = b.overflowing_add(1);
            *b = v;
            if !carry {
                break;
            }
        }
    }
    // Base 10^9 limbs, little-endian.
    let mut limbs: Vec<u32> = vec![0];
    for byte in magnitude {
        let mut carry = byte as u64;
        for limb in limbs.iter_mut() {
            let v = (*limb as u64) * 256 + carry;
            *limb = (v % 1_000_000_000) as u32;
            carry = v / 1_000_000_000;
        }
        if carry > 0 {
            limbs.push(carry as u32);
        }
    }
    let mut digits = limbs.last().unwrap().to_string();
    for limb in limbs.iter().rev().skip(1) {
        digits.push_str(&format!("{limb:09}"));
    }
    if digits.len() > precision as usize {
        return Err(Refuse);
    }
    let is_zero = digits == "0";
    if negative && !is_zero {
        out.push(b'-');
    }
    let scale = scale as usize;
    if scale == 0 {
        out.extend_from_slice(digits.as_bytes());
        return Ok(());
    }
    if digits.len() < scale + 1 {
        digits = format!("{}{}", "0".repeat(scale + 1 - digits.len()), digits);
    }
    let point = digits.len() - scale;
    out.extend_from_slice(&digits.as_bytes()[..point]);
    out.push(b'.');
    out.extend_from_slice(&digits.as_bytes()[point..]);
    Ok(())
}

struct Walker<'a> {
    nodes: &'a [Node],
}

impl<'a> Walker<'a> {
    /// One value of `id` read from `c`, written as proto field `field` (nothing for a null).
    fn value(&self, id: NodeId, field: u32, c: &mut Cursor, out: &mut Vec<u8>, depth: u32) -> R<()> {
        if depth > MAX_DEPTH {
            return Err(Refuse);
        }
        match &self.nodes[id] {
            Node::Nullable { other, branches, value } => {
                let branch = c.length()? as usize;
                if branch >= *branches {
                    return Err(Refuse);
                }
                if branch == *other {
                    self.value(*value, field, c, out, depth + 1)?;
                }
                Ok(())
            }
            Node::Array(items) => {
                let items = *items;
                self.blocks(c, |c| {
                    let inner = match &self.nodes[items] {
                        Node::Nullable { other, branches, value } => {
                            let branch = c.length()? as usize;
                            if branch >= *branches || branch != *other {
                                return Err(Refuse); // a null item: avro_proto's RowEncodeError
                            }
                            *value
                        }
                        _ => items,
                    };
                    self.value(inner, field, c, out, depth + 1)
                })
            }
            Node::Map(values) => {
                let values = *values;
                self.blocks(c, |c| {
                    delimited(out, field, |out| {
                        let (s, e) = c.string()?;
                        len_field(out, 1, &c.buf[s..e]);
                        self.value(values, 2, c, out, depth + 1)
                    })
                })
            }
            Node::Record(fields) => delimited(out, field, |out| self.fields(fields, c, out, depth + 1)),
            Node::Boolean => {
                let b = c.byte()?;
                if b > 1 {
                    return Err(Refuse);
                }
                tag(out, field, VARINT);
                out.push(b);
                Ok(())
            }
            Node::Long { int } => {
                let v = if *int { c.int()? } else { c.long()? };
                tag(out, field, VARINT);
                varint(out, v as u64);
                Ok(())
            }
            Node::Float => {
                let (s, _) = c.take(4)?;
                let v = f32::from_le_bytes(c.buf[s..s + 4].try_into().unwrap()) as f64;
                tag(out, field, FIXED64);
                out.extend_from_slice(&v.to_le_bytes());
                Ok(())
            }
            Node::Double => {
                let (s, e) = c.take(8)?;
                tag(out, field, FIXED64);
                out.extend_from_slice(&c.buf[s..e]);
                Ok(())
            }
            Node::Bytes(size) => {
                let n = match size {
                    Some(n) => *n as u64,
                    None => c.length()?,
                };
                let (s, e) = c.take(n)?;
                len_field(out, field, &c.buf[s..e]);
                Ok(())
            }
            Node::Str => {
                let (s, e) = c.string()?;
                len_field(out, field, &c.buf[s..e]);
                Ok(())
            }
            Node::Uuid => {
                let (s, e) = c.string()?;
                if !canonical_uuid(&c.buf[s..e]) {
                    return Err(Refuse); // uuid.UUID takes other spellings: Python decides
                }
                let lower = c.buf[s..e].to_ascii_lowercase();
                len_field(out, field, &lower);
                Ok(())
            }
            Node::Enum(symbols) => {
                let i = c.length()? as usize;
                let symbol = symbols.get(i).ok_or(Refuse)?;
                len_field(out, field, symbol.as_bytes());
                Ok(())
            }
            Node::Date => {
                let v = within(c.int()?, DATE_RANGE)?;
                tag(out, field, VARINT);
                varint(out, v as u64); // int32: a negative one sign-extended to 10 bytes
                Ok(())
            }
            Node::Timestamp { per_second } => {
                let range = if *per_second == 1_000 { MILLIS_RANGE } else { MICROS_RANGE };
                let v = within(c.long()?, range)?;
                tag(out, field, VARINT);
                varint(out, (v * (1_000_000 / per_second)) as u64);
                Ok(())
            }
            Node::LocalTimestamp { per_second } => {
                let range = if *per_second == 1_000 { MILLIS_RANGE } else { MICROS_RANGE };
                let micros = within(c.long()?, range)? * (1_000_000 / per_second);
                delimited(out, field, |out| {
                    use std::io::Write;
                    let (days, in_day) = (micros.div_euclid(86_400_000_000), micros.rem_euclid(86_400_000_000));
                    let (y, m, d) = civil(days);
                    let _ = write!(out, "{y:04}-{m:02}-{d:02} ");
                    clock(out, in_day);
                    Ok(())
                })
            }
            Node::Time { per_second, int } => {
                let v = if *int { c.int()? } else { c.long()? };
                let micros = within(v, (0, 86_400 * per_second - 1))? * (1_000_000 / per_second);
                delimited(out, field, |out| {
                    clock(out, micros);
                    Ok(())
                })
            }
            Node::Decimal { fixed, precision, scale } => {
                let n = match fixed {
                    Some(n) => *n as u64,
                    None => c.length()?,
                };
                let (s, e) = c.take(n)?;
                delimited(out, field, |out| decimal_text(out, &c.buf[s..e], *precision, *scale))
            }
        }
    }

    fn fields(&self, fields: &[NodeId], c: &mut Cursor, out: &mut Vec<u8>, depth: u32) -> R<()> {
        for (i, id) in fields.iter().enumerate() {
            self.value(*id, i as u32 + 1, c, out, depth)?;
        }
        Ok(())
    }

    /// An array's or map's blocks (a negative count is followed by the block's byte size).
    fn blocks(&self, c: &mut Cursor, mut each: impl FnMut(&mut Cursor) -> R<()>) -> R<()> {
        loop {
            let count = c.block_count()?;
            if count == 0 {
                return Ok(());
            }
            // Items of zero bytes (empty records) could claim any count: bound the loop.
            if count > 1_000_000 && count > (c.buf.len() - c.pos) as u64 {
                return Err(Refuse);
            }
            for _ in 0..count {
                each(c)?;
            }
        }
    }
}

/// The rows of one file schema. Immutable once made: one per schema, shared by threads.
#[pyclass(module = "kbqe_dagster_kernel", frozen)]
pub struct RowEncoder {
    nodes: Vec<Node>,
    top: Vec<NodeId>,
}

#[pymethods]
impl RowEncoder {
    /// `schema_json`: the file schema, a record. ValueError for a schema this module does not
    /// implement (the Python encoder then encodes its files).
    #[new]
    fn new(schema_json: &str) -> PyResult<Self> {
        let json: Json =
            serde_json::from_str(schema_json).map_err(|e| PyValueError::new_err(format!("schema JSON: {e}")))?;
        let mut c = Compiler { nodes: Vec::new(), named: HashMap::new() };
        let top = match &json {
            Json::Object(map) if matches!(map.get("type"), Some(Json::String(t)) if t == "record" || t == "error") => {
                c.object(map, None, 0).map_err(|Unsupported(why)| PyValueError::new_err(why))?
            }
            _ => return Err(PyValueError::new_err("the file schema is not a record")),
        };
        let Node::Record(fields) = &c.nodes[top] else { unreachable!() };
        let top = fields.clone();
        Ok(RowEncoder { nodes: c.nodes, top })
    }

    /// The rows of one decompressed container block of `count` records, the first being the
    /// file's record `first_index`, in the rows-file framing; records whose top-level field
    /// `skip_field` (a long) holds one of `skip_offsets` are left out. Returns (framed rows,
    /// rows, row bytes), or None where the Python path must encode the file.
    #[pyo3(signature = (data, count, first_index, skip_field=None, skip_offsets=None))]
    fn encode_block<'py>(
        &self,
        py: Python<'py>,
        data: &[u8],
        count: u64,
        first_index: i64,
        skip_field: Option<usize>,
        skip_offsets: Option<std::collections::HashSet<i64>>,
    ) -> Option<(Bound<'py, PyBytes>, u64, u64)> {
        let (framed, rows, bytes) =
            py.detach(|| self.block(data, count, first_index, skip_field, skip_offsets.as_ref()).ok())?;
        Some((PyBytes::new(py, &framed), rows, bytes))
    }
}

impl RowEncoder {
    fn block(
        &self,
        data: &[u8],
        count: u64,
        first_index: i64,
        skip_field: Option<usize>,
        skip: Option<&std::collections::HashSet<i64>>,
    ) -> R<(Vec<u8>, u64, u64)> {
        let walker = Walker { nodes: &self.nodes };
        let mut c = Cursor::new(data);
        let mut framed = Vec::with_capacity(data.len() + data.len() / 4 + 64);
        let mut row = Vec::with_capacity(256);
        let (mut rows, mut bytes) = (0u64, 0u64);
        let skip = match (skip_field, skip) {
            (Some(f), Some(set)) if !set.is_empty() && f < self.top.len() => Some((f, set)),
            _ => None,
        };
        for n in 0..count {
            row.clear();
            let mut skipped = false;
            for (i, id) in self.top.iter().enumerate() {
                if let Some((f, set)) = skip {
                    if f == i {
                        // The offset column's value, read ahead of the field's own encoding.
                        let mut peek = Cursor::new(data);
                        peek.pos = c.pos;
                        skipped = match self.long_value(*id, &mut peek)? {
                            Some(v) => set.contains(&v),
                            None => false,
                        };
                    }
                }
                walker.value(*id, i as u32 + 1, &mut c, &mut row, 1)?;
            }
            if skipped {
                continue;
            }
            zigzag(&mut framed, first_index + n as i64);
            zigzag(&mut framed, row.len() as i64);
            framed.extend_from_slice(&row);
            rows += 1;
            bytes += row.len() as u64;
        }
        if !c.at_end() {
            return Err(Refuse); // bytes past the block's records: not a block we are sure of
        }
        Ok((framed, rows, bytes))
    }

    /// The value of a (nullable) int or long field as `record.get(column)` compares it with
    /// Kafka offsets; any other type is refused (its Python value is never such an int, but
    /// the rare skip of such a file is not worth the proof).
    fn long_value(&self, id: NodeId, c: &mut Cursor) -> R<Option<i64>> {
        match &self.nodes[id] {
            Node::Long { int } => Ok(Some(if *int { c.int()? } else { c.long()? })),
            Node::Nullable { other, value, .. } => {
                if c.length()? as usize != *other {
                    return Ok(None);
                }
                self.long_value(*value, c)
            }
            _ => Err(Refuse),
        }
    }
}
