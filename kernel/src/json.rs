//! `format: json` topics: a schemaless JSON value checked against the topic's declared Avro
//! schema and encoded as its Avro body, exactly as the Python path
//! (`kbqe_dagster/formats/json_stage.py`: `json.loads`, fastavro's `validate`, then
//! `schemaless_writer`) would encode it, or `Err(Stop)`: the message goes back to the Python
//! path, which stays the reference and gives every bad message its reason.
//!
//! The kernel is stricter than Python, never more lenient. What it hands back:
//! - JSON Python reads but this parser does not: other encodings than UTF-8 (UTF-16/32),
//!   `NaN`/`Infinity`, lone surrogates (raw or `\uD800` escapes), nesting deeper than
//!   [`MAX_DEPTH`]; and everything that is not JSON at all (Python's `json_decode_error`).
//! - a value that is not an object, and every value that does not fit the schema (Python's
//!   `json_schema_mismatch`, its reason and field path written by fastavro);
//! - integers outside 64 bits, non-finite numbers (`1e400`), maps of more than
//!   [`MAX_MAP_KEYS`] keys (a finite double beyond 32 bits is written to a `float` as
//!   fastavro's C cast writes it: an infinity);
//! - unions with a named, complex or logical branch other than `["null", X]` (a union of
//!   primitives is written under the branch fastavro's `write_union` picks), non-null
//!   `bytes` and `fixed` values (JSON has no bytes), a string for an `int`/`date` (fastavro
//!   parses it), a record object with a `-type` key (fastavro's union hint), a missing field
//!   whose default it cannot encode.
//!
//! Each hand-back notes the rule it stopped at (`StageKernel.stop_detail`: `lone_surrogate`,
//! `union_branch`, ...), which the driver counts for the hand-backs the Python path then
//! stages (`NativeStaging.handed_back_records`).
//!
//! Parsing is a small borrowed parser into a reused token tape rather than `serde_json`'s
//! `Value` (docs/architecture.md, "the JSON kernel"): a number's literal decides whether
//! Python reads an `int` or a `float` (a `long` field refuses `1.0`; an integer beyond 64 bits is
//! a Python `int`, which serde_json would turn into a float), doubles are read by Rust's
//! correctly rounded `str::parse` (what Python's `float()` does), and nothing is allocated per
//! message. Duplicate keys take the last value at the first key's place, as Python's `dict` does.

use crate::body::{forget_why, stop, Stop, Value, R};
use crate::prefix::put_long;
use crate::rewrite::{Base, FieldRewrite};
use crate::schema::Unsupported;
use serde_json::Value as Json;
use std::collections::HashMap;

/// Deeper JSON (or schema recursion) goes to the Python path.
const MAX_DEPTH: u32 = 64;
/// Bigger maps go to the Python path (duplicate keys are found by comparing pairs).
const MAX_MAP_KEYS: u32 = 256;

#[derive(Clone, Copy, Debug)]
pub(crate) enum Tok {
    Null,
    Bool(bool),
    Int(i64),
    /// An integer literal outside 64 bits (a Python `int`).
    Big,
    Float(f64),
    /// A string's bytes: `input[s..e]`, or `unescaped[s..e]` when it had escapes.
    Str {
        s: u32,
        e: u32,
        escaped: bool,
    },
    /// `n` items; `end`: the index after the last token of the array.
    Arr {
        n: u32,
        end: u32,
    },
    /// `n` members (key token, then the value's tokens); `end` as for arrays.
    Obj {
        n: u32,
        end: u32,
    },
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Default_ {
    /// No default: a missing field is `None` to fastavro.
    Absent,
    /// `"default": null`: the same.
    Null,
    /// A default the kernel does not encode: the message goes back (also: no default where
    /// fastavro's writer then refuses a missing field).
    Other,
    /// A default fastavro writes for a missing field: its encoding, `Encoder::defaults[i]`.
    Encoded(usize),
}

#[derive(Debug)]
struct Field {
    name: Vec<u8>,
    node: usize,
    default: Default_,
    /// A non-null default's JSON text, encoded once the schema is compiled.
    default_json: Option<String>,
}

#[derive(Debug)]
enum Node {
    Null,
    Boolean,
    Int,
    Long,
    Float,
    Double,
    String,
    Enum(Vec<Vec<u8>>),
    Array(usize),
    Map(usize),
    /// `["null", X]` (null_first) or `[X, "null"]`.
    Nullable {
        inner: usize,
        null_first: bool,
    },
    /// Any other union of primitives without logical types (`["null", "string", "long"]`,
    /// `["string", "long"]`, `["null"]`): each value written under the branch fastavro's
    /// `write_union` picks ([`Writer::union_branch`]). A union with a named, complex or
    /// logical branch is `Refused` (fastavro's logical writers parse strings on the way).
    Union(Vec<usize>),
    Record(Vec<Field>),
    /// A type whose JSON values the kernel does not encode (unions of named, complex or
    /// logical types): every value reaching it is handed back.
    Refused,
    /// `bytes` and `fixed` (decimals too): no JSON value is one (fastavro's validators want
    /// `bytes`), so every value reaching it is handed back, but a nullable of one is a
    /// nullable (`["null", "bytes"]`: its nulls are written natively).
    Opaque,
    /// `format: json_schema` (json_schema.rs): a `date-time` string written as its
    /// `timestamp-micros` long, and a `date` string as its `date` int.
    IsoMicros,
    IsoDate,
    /// A named type used before its definition ended: resolved after compiling.
    Pending(String),
}

/// The wanted paths (routing's and event time's) over the record fields.
#[derive(Default, Debug)]
struct Want {
    slot: Option<usize>,
    /// (field index, what is wanted below it).
    children: Vec<(usize, Want)>,
}

/// A declared schema compiled for encoding, with the wanted paths planned over it.
pub struct Encoder {
    /// `format: json_schema` (its values are converted to their Avro form first, in Python).
    json_schema: bool,
    /// `format: json_schema`: the event-time date rule (`utc`) that reads a `date-time` value.
    utc_rule: bool,
    nodes: Vec<Node>,
    top: usize,
    want: Want,
    defaults: Vec<Vec<u8>>,
    tape: Vec<Tok>,
    unescaped: Vec<u8>,
    body: Vec<u8>,
    /// Per top-level field: dropped by a `drop` transform (`drop_fields`): checked as
    /// declared, then left out of the body (into `dropped_bytes`).
    dropped: Vec<bool>,
    dropped_bytes: Vec<u8>,
    /// `add` transforms of constants (`append_constants`): their encoding, after every body.
    constants: Vec<u8>,
    /// Per top-level field: an int or long `cast` to a string (`cast_to_digits`): checked and
    /// encoded as declared, then rewritten as its decimal digits.
    digits: Vec<bool>,
    /// Per top-level field: a `mask` or `timestamp` transform (`rewrite_field`): checked and
    /// encoded as declared, then rewritten as the step gives it (rewrite.rs).
    rewrites: Vec<Option<FieldRewrite>>,
}

impl Encoder {
    /// Rewrite the top-level field `name` after encoding it as declared (rewrite.rs: a `mask`
    /// or a `timestamp` between numbers). Err for a name that is not a top-level field, one
    /// whose declared layout is not the one `rewrite` expects, or one routing or event time
    /// reads.
    pub fn rewrite_field(&mut self, name: &str, rewrite: FieldRewrite) -> Result<(), Unsupported> {
        let Node::Record(fields) = &self.nodes[self.top] else { return Err(Unsupported("not a record".into())) };
        let index = fields
            .iter()
            .position(|f| f.name == name.as_bytes())
            .ok_or_else(|| Unsupported(format!("no top-level field {name:?} to rewrite")))?;
        if self.want.children.iter().any(|(i, _)| *i == index) {
            return Err(Unsupported(format!("field {name:?} is read by routing or event time")));
        }
        let base = |node: usize| {
            matches!(
                (&self.nodes[node], rewrite.base),
                (_, Base::Any)
                    | (Node::Int, Base::Int)
                    | (Node::Long | Node::IsoMicros, Base::Long)
                    | (Node::String, Base::Text)
                    | (Node::Boolean, Base::Boolean)
            )
        };
        let fits = match (&self.nodes[fields[index].node], rewrite.declared_null) {
            (_, None) if rewrite.base == Base::Any => true,
            (Node::Nullable { inner, null_first }, Some(null)) => *null_first == (null == 0) && base(*inner),
            (Node::Nullable { .. } | Node::Union(_), None) => false,
            (_, None) => base(fields[index].node),
            _ => false,
        };
        if !fits {
            return Err(Unsupported(format!("field {name:?} is not laid out as the rewrite expects")));
        }
        if self.rewrites.len() != fields.len() {
            self.rewrites = vec![None; fields.len()];
        }
        self.rewrites[index] = Some(rewrite);
        Ok(())
    }

    /// Append `encoded` after every body: the constants `add` transforms append to the record
    /// as its last fields, encoded once by the Python side (fastavro).
    pub fn append_constants(&mut self, encoded: &[u8]) {
        self.constants.extend_from_slice(encoded);
    }

    /// Write the top-level int or long fields `names` (`["null", T]` too) as the strings of
    /// their decimal digits: a `cast` to string, whose step gives fastavro `str(value)` of the
    /// value Python checked as declared (every JSON integer that fits the type is a Python int
    /// whose `str` is the digits of its i64). Err for a name that is not such a field, or one
    /// routing or event time reads.
    pub fn cast_to_digits(&mut self, names: &[String]) -> Result<(), Unsupported> {
        let Node::Record(fields) = &self.nodes[self.top] else { return Err(Unsupported("not a record".into())) };
        let mut digits = vec![false; fields.len()];
        for name in names {
            let index = fields
                .iter()
                .position(|f| f.name == name.as_bytes())
                .ok_or_else(|| Unsupported(format!("no top-level field {name:?} to cast")))?;
            let integer = |node: usize| matches!(self.nodes[node], Node::Int | Node::Long);
            let castable = match self.nodes[fields[index].node] {
                Node::Int | Node::Long => true,
                Node::Nullable { inner, null_first: true } => integer(inner),
                _ => false,
            };
            if !castable {
                return Err(Unsupported(format!("field {name:?} is not an int or long")));
            }
            if self.want.children.iter().any(|(i, _)| *i == index) {
                return Err(Unsupported(format!("field {name:?} is read by routing or event time")));
            }
            digits[index] = true;
        }
        self.digits = digits;
        Ok(())
    }

    /// Leave the top-level fields `names` out of every body (a `drop` transform: Python
    /// checks the value against the declared schema, then drops the fields, and the derived
    /// schema's encoding is the other fields' encodings in order). Err for a name that is not
    /// a top-level field, or one routing or event time reads.
    pub fn drop_fields(&mut self, names: &[String]) -> Result<(), Unsupported> {
        let Node::Record(fields) = &self.nodes[self.top] else { return Err(Unsupported("not a record".into())) };
        let mut dropped = vec![false; fields.len()];
        for name in names {
            let index = fields
                .iter()
                .position(|f| f.name == name.as_bytes())
                .ok_or_else(|| Unsupported(format!("no top-level field {name:?} to drop")))?;
            if self.want.children.iter().any(|(i, _)| *i == index) {
                return Err(Unsupported(format!("field {name:?} is read by routing or event time")));
            }
            dropped[index] = true;
        }
        self.dropped = dropped;
        Ok(())
    }

    /// `text`: the declared schema as fastavro's `parse_schema` leaves it, as JSON; `wanted`:
    /// the dotted paths whose values routing and event time read (slot i is `wanted[i]`).
    pub fn compile(text: &str, wanted: &[String]) -> Result<Encoder, Unsupported> {
        Self::compile_as(text, wanted, None)
    }

    /// `compile` for `format: json_schema` (json_schema.rs): the Avro record derived from a
    /// JSON Schema, whose `timestamp-micros` and `date` fields take the JSON Schema's
    /// `date-time` and `date` strings; `utc_rule`: the topic's event-time date rule.
    pub fn compile_json_schema(text: &str, wanted: &[String], utc_rule: bool) -> Result<Encoder, Unsupported> {
        Self::compile_as(text, wanted, Some(utc_rule))
    }

    fn compile_as(text: &str, wanted: &[String], iso: Option<bool>) -> Result<Encoder, Unsupported> {
        let json: Json = serde_json::from_str(text).map_err(|e| Unsupported(format!("schema JSON: {e}")))?;
        let mut c = Compiler { nodes: Vec::new(), named: HashMap::new(), iso: iso.is_some() };
        let top = c.node(&json)?;
        let Compiler { mut nodes, named, .. } = c;
        let mut target = Vec::with_capacity(nodes.len());
        for (i, node) in nodes.iter().enumerate() {
            target.push(match node {
                Node::Pending(name) => *named.get(name).ok_or_else(|| Unsupported(format!("unknown type {name}")))?,
                _ => i,
            });
        }
        for node in nodes.iter_mut() {
            match node {
                Node::Array(id) | Node::Map(id) | Node::Nullable { inner: id, .. } => *id = target[*id],
                Node::Union(ids) => ids.iter_mut().for_each(|id| *id = target[*id]),
                Node::Record(fields) => fields.iter_mut().for_each(|f| f.node = target[f.node]),
                _ => {}
            }
        }
        // A nullable whose other branch turned out to be a union is not one; one whose other
        // branch is null too (`["null", {"type": "null"}]`) is a union of two nulls, whose
        // first fastavro picks for a null (format: json; json_schema's converter: handed back).
        for i in 0..nodes.len() {
            if let Node::Nullable { inner, .. } = nodes[i] {
                if matches!(nodes[inner], Node::Null) && iso.is_none() {
                    nodes[i] = Node::Union(vec![inner, inner]);
                } else if matches!(nodes[inner], Node::Nullable { .. } | Node::Union(_) | Node::Null | Node::Refused) {
                    nodes[i] = Node::Refused;
                }
            }
        }
        let top = target[top];
        if !matches!(nodes[top], Node::Record(_)) {
            return Err(Unsupported("the declared schema is not a record".into()));
        }
        // fastavro writes a missing field's default as it would write that value: encoded once
        // here by the same rules (a default they refuse stays `Other`: handed back).
        let mut defaults = Vec::new();
        let mut encoded = Vec::new();
        for (id, node) in nodes.iter().enumerate() {
            let Node::Record(fields) = node else { continue };
            for (index, field) in fields.iter().enumerate() {
                let Some(text) = &field.default_json else { continue };
                let mut tape = Vec::new();
                let mut unescaped = Vec::new();
                let mut p = Parser { s: text.as_bytes(), i: 0, tape: &mut tape, unescaped: &mut unescaped };
                if p.value(0).is_err() || p.i != text.len() {
                    continue;
                }
                let mut none = Vec::new();
                let w = Writer {
                    nodes: &nodes,
                    tape: &tape,
                    input: text.as_bytes(),
                    unescaped: &unescaped,
                    defaults: &[],
                    json_schema: false,
                    utc_rule: false,
                    dropped: &[],
                    dropped_bytes: std::cell::RefCell::new(&mut none),
                    digits: &[],
                    rewrites: &[],
                };
                let mut out = Vec::new();
                if w.encode(field.node, Some(0), None, &mut out, &mut [], 0).is_ok() {
                    encoded.push((id, index, defaults.len()));
                    defaults.push(out);
                }
            }
        }
        for (id, index, at) in encoded {
            if let Node::Record(fields) = &mut nodes[id] {
                fields[index].default = Default_::Encoded(at);
            }
        }
        let mut want = Want::default();
        for (slot, path) in wanted.iter().enumerate() {
            let mut node_id = top;
            let mut at = &mut want;
            for part in path.split('.') {
                if at.slot.is_some() {
                    return Err(Unsupported(format!("{path}: a path wanted whole and in parts")));
                }
                let record = match &nodes[node_id] {
                    Node::Record(fields) => fields,
                    Node::Nullable { inner, .. } => match &nodes[*inner] {
                        Node::Record(fields) => fields,
                        _ => return Err(Unsupported(format!("{path}: not a path through records"))),
                    },
                    _ => return Err(Unsupported(format!("{path}: not a path through records"))),
                };
                let index = record
                    .iter()
                    .position(|f| f.name == part.as_bytes())
                    .ok_or_else(|| Unsupported(format!("{path}: {part} is not a field of the schema")))?;
                node_id = record[index].node;
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
                return Err(Unsupported(format!("{path}: a path wanted twice or whole and in parts")));
            }
            at.slot = Some(slot);
        }
        Ok(Encoder {
            json_schema: iso.is_some(),
            utc_rule: iso.unwrap_or(false),
            nodes,
            top,
            want,
            defaults,
            tape: Vec::new(),
            unescaped: Vec::new(),
            body: Vec::new(),
            dropped: Vec::new(),
            dropped_bytes: Vec::new(),
            constants: Vec::new(),
            digits: Vec::new(),
            rewrites: Vec::new(),
        })
    }

    /// The Avro body of the last [`encode`](Self::encode).
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Parse `value`, check it against the schema and encode it into [`body`](Self::body);
    /// the wanted values go to `values` (which the caller reset to `Null`).
    pub fn encode(&mut self, value: &[u8], values: &mut [Value]) -> R<()> {
        self.encode_checked(value, values, |_, _, _| true)
    }

    /// [`encode`](Self::encode) of a value that `valid` accepts (given the parsed tape, the
    /// input and the unescaped strings' buffer) before it is encoded; `Err(Stop)` otherwise.
    pub fn encode_checked(
        &mut self,
        value: &[u8],
        values: &mut [Value],
        valid: impl FnOnce(&[Tok], &[u8], &[u8]) -> bool,
    ) -> R<()> {
        // Python decodes the whole value before parsing (`json.detect_encoding`: a UTF-8 BOM
        // means `utf-8-sig`, which drops it); invalid UTF-8 anywhere is an error.
        let value = value.strip_prefix(b"\xef\xbb\xbf").unwrap_or(value);
        forget_why();
        std::str::from_utf8(value).map_err(|_| stop("utf8"))?;
        self.tape.clear();
        self.unescaped.clear();
        self.body.clear();
        let mut p = Parser { s: value, i: 0, tape: &mut self.tape, unescaped: &mut self.unescaped };
        p.ws();
        p.value(0).map_err(|_| stop("syntax"))?;
        p.ws();
        if p.i != value.len() {
            return Err(stop("syntax"));
        }
        let w = Writer {
            nodes: &self.nodes,
            tape: &self.tape,
            input: value,
            unescaped: &self.unescaped,
            defaults: &self.defaults,
            json_schema: self.json_schema,
            utc_rule: self.utc_rule,
            dropped: &self.dropped,
            dropped_bytes: std::cell::RefCell::new(&mut self.dropped_bytes),
            digits: &self.digits,
            rewrites: &self.rewrites,
        };
        if !matches!(self.tape[0], Tok::Obj { .. }) {
            return Err(stop("not_object"));
        }
        if !valid(&self.tape, value, &self.unescaped) {
            return Err(stop("invalid")); // the validator noted which rule
        }
        forget_why(); // what a valid value's failed branches noted
        w.encode(self.top, Some(0), Some(&self.want), &mut self.body, values, 0)?;
        self.body.extend_from_slice(&self.constants);
        Ok(())
    }
}

struct Compiler {
    nodes: Vec<Node>,
    named: HashMap<String, usize>,
    /// `format: json_schema`: `timestamp-micros` and `date` take ISO strings (Node::IsoMicros,
    /// Node::IsoDate), as its converter (core/formats/json_values.py) gives them to fastavro.
    iso: bool,
}

impl Compiler {
    fn push(&mut self, node: Node) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    fn node(&mut self, json: &Json) -> Result<usize, Unsupported> {
        match json {
            Json::String(name) => Ok(self.named_or_primitive(name, None)),
            Json::Array(branches) => {
                let id = self.push(Node::Refused);
                let nulls: Vec<bool> = branches.iter().map(|b| b.as_str() == Some("null")).collect();
                if branches.len() == 2 && nulls[0] != nulls[1] {
                    let other = if nulls[0] { 1 } else { 0 };
                    let inner = self.node(&branches[other])?;
                    self.nodes[id] = Node::Nullable { inner, null_first: nulls[0] };
                } else {
                    // Still compiled: named types defined inside must be known to later uses.
                    let mut ids = Vec::with_capacity(branches.len());
                    for b in branches {
                        ids.push(self.node(b)?);
                    }
                    if !self.iso && !branches.is_empty() && branches.iter().all(plain_primitive) {
                        self.nodes[id] = Node::Union(ids);
                    }
                }
                Ok(id)
            }
            Json::Object(map) => {
                let t = map.get("type").ok_or_else(|| Unsupported("a type without 'type'".into()))?;
                let t = match t {
                    Json::Object(_) | Json::Array(_) => return self.node(t),
                    Json::String(s) => s.as_str(),
                    _ => return Err(Unsupported("a 'type' that is not a string".into())),
                };
                let logical = map.get("logicalType").and_then(Json::as_str);
                match t {
                    "record" | "error" | "request" => {
                        let name = full_name(map)?;
                        let id = self.push(Node::Refused);
                        self.named.insert(name.clone(), id);
                        let list = match map.get("fields") {
                            Some(Json::Array(list)) => list,
                            _ => return Err(Unsupported(format!("record {name} has no field list"))),
                        };
                        let mut fields = Vec::with_capacity(list.len());
                        for f in list {
                            let fname = f
                                .get("name")
                                .and_then(Json::as_str)
                                .ok_or_else(|| Unsupported(format!("a field of {name} has no name")))?;
                            let ft = f.get("type").ok_or_else(|| Unsupported(format!("field {fname} has no type")))?;
                            // fastavro's writer refuses a missing field without a default unless
                            // `"null" in field["type"]` (a string or list type), even where
                            // validation let the missing value pass as None ({"type": "null"}).
                            let null_in_type = match ft {
                                Json::String(s) => s.contains("null"),
                                Json::Array(items) => items.iter().any(|b| b.as_str() == Some("null")),
                                _ => false,
                            };
                            let default = match f.get("default") {
                                None if !null_in_type => Default_::Other,
                                None => Default_::Absent,
                                Some(Json::Null) => Default_::Null,
                                Some(_) => Default_::Other,
                            };
                            let default_json = f.get("default").filter(|d| !d.is_null()).map(Json::to_string);
                            fields.push(Field {
                                name: fname.as_bytes().to_vec(),
                                node: self.node(ft)?,
                                default,
                                default_json,
                            });
                        }
                        self.nodes[id] = Node::Record(fields);
                        Ok(id)
                    }
                    "enum" => {
                        let symbols = match map.get("symbols") {
                            Some(Json::Array(s)) => s
                                .iter()
                                .map(|s| s.as_str().map(|s| s.as_bytes().to_vec()))
                                .collect::<Option<Vec<_>>>()
                                .ok_or_else(|| Unsupported("an enum symbol that is not a string".into()))?,
                            _ => return Err(Unsupported("an enum without symbols".into())),
                        };
                        let id = self.push(Node::Enum(symbols));
                        self.named.insert(full_name(map)?, id);
                        Ok(id)
                    }
                    "fixed" => {
                        let id = self.push(Node::Opaque);
                        self.named.insert(full_name(map)?, id);
                        Ok(id)
                    }
                    "array" => {
                        let id = self.push(Node::Refused);
                        let items =
                            self.node(map.get("items").ok_or_else(|| Unsupported("an array without items".into()))?)?;
                        self.nodes[id] = Node::Array(items);
                        Ok(id)
                    }
                    "map" => {
                        let id = self.push(Node::Refused);
                        let values =
                            self.node(map.get("values").ok_or_else(|| Unsupported("a map without values".into()))?)?;
                        self.nodes[id] = Node::Map(values);
                        Ok(id)
                    }
                    other => Ok(self.named_or_primitive(other, logical)),
                }
            }
            _ => Err(Unsupported("a schema node that is not a string, list or object".into())),
        }
    }

    /// fastavro's logical writers leave every JSON value of a primitive as it is except a
    /// string for `int`/`date` (which it parses; such a string is refused below anyway) and
    /// `bytes`/`decimal` (refused with bytes): the base type is what is encoded.
    fn named_or_primitive(&mut self, name: &str, logical: Option<&str>) -> usize {
        let node = match (name, logical) {
            ("long", Some("timestamp-micros")) if self.iso => Node::IsoMicros,
            ("int", Some("date")) if self.iso => Node::IsoDate,
            _ => self.primitive(name),
        };
        match node {
            Node::Pending(name) => match self.named.get(&name) {
                Some(id) => *id,
                None => self.push(Node::Pending(name)),
            },
            node => self.push(node),
        }
    }

    fn primitive(&self, name: &str) -> Node {
        match name {
            "null" => Node::Null,
            "boolean" => Node::Boolean,
            "int" => Node::Int,
            "long" => Node::Long,
            "float" => Node::Float,
            "double" => Node::Double,
            "string" => Node::String,
            "bytes" => Node::Opaque,
            other => Node::Pending(other.to_string()),
        }
    }
}

/// A union branch that is a primitive type without a logical type (`"long"`, `{"type": "long"}`).
fn plain_primitive(branch: &Json) -> bool {
    const PRIMITIVES: &[&str] = &["null", "boolean", "int", "long", "float", "double", "string"];
    match branch {
        Json::String(name) => PRIMITIVES.contains(&name.as_str()),
        Json::Object(map) => {
            map.get("type").and_then(Json::as_str).is_some_and(|t| PRIMITIVES.contains(&t))
                && !map.contains_key("logicalType")
        }
        _ => false,
    }
}

fn full_name(map: &serde_json::Map<String, Json>) -> Result<String, Unsupported> {
    map.get("name")
        .and_then(Json::as_str)
        .map(str::to_string)
        .ok_or_else(|| Unsupported("a named type without a name".into()))
}

// --- parsing ---------------------------------------------------------------------------------

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    tape: &'a mut Vec<Tok>,
    unescaped: &'a mut Vec<u8>,
}

impl Parser<'_> {
    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.s.get(self.i) {
            self.i += 1;
        }
    }

    #[inline]
    fn peek(&self) -> R<u8> {
        self.s.get(self.i).copied().ok_or(Stop)
    }

    fn value(&mut self, depth: u32) -> R<()> {
        if depth > MAX_DEPTH {
            return Err(stop("depth"));
        }
        match self.peek()? {
            b'{' => {
                self.i += 1;
                let at = self.tape.len();
                self.tape.push(Tok::Null);
                let mut n = 0u32;
                self.ws();
                if self.peek()? == b'}' {
                    self.i += 1;
                } else {
                    loop {
                        if self.peek()? != b'"' {
                            return Err(Stop);
                        }
                        self.string()?;
                        self.ws();
                        if self.peek()? != b':' {
                            return Err(Stop);
                        }
                        self.i += 1;
                        self.ws();
                        self.value(depth + 1)?;
                        n += 1;
                        self.ws();
                        match self.peek()? {
                            b',' => {
                                self.i += 1;
                                self.ws();
                            }
                            b'}' => {
                                self.i += 1;
                                break;
                            }
                            _ => return Err(Stop),
                        }
                    }
                }
                self.tape[at] = Tok::Obj { n, end: self.tape.len() as u32 };
            }
            b'[' => {
                self.i += 1;
                let at = self.tape.len();
                self.tape.push(Tok::Null);
                let mut n = 0u32;
                self.ws();
                if self.peek()? == b']' {
                    self.i += 1;
                } else {
                    loop {
                        self.value(depth + 1)?;
                        n += 1;
                        self.ws();
                        match self.peek()? {
                            b',' => {
                                self.i += 1;
                                self.ws();
                            }
                            b']' => {
                                self.i += 1;
                                break;
                            }
                            _ => return Err(Stop),
                        }
                    }
                }
                self.tape[at] = Tok::Arr { n, end: self.tape.len() as u32 };
            }
            b'"' => self.string()?,
            b'n' => self.literal(b"null", Tok::Null)?,
            b't' => self.literal(b"true", Tok::Bool(true))?,
            b'f' => self.literal(b"false", Tok::Bool(false))?,
            b'-' | b'0'..=b'9' => self.number()?,
            _ => return Err(Stop),
        }
        Ok(())
    }

    fn literal(&mut self, word: &[u8], tok: Tok) -> R<()> {
        if self.s[self.i..].starts_with(word) {
            self.i += word.len();
            self.tape.push(tok);
            Ok(())
        } else {
            Err(Stop)
        }
    }

    /// `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?`, Python's number grammar (ASCII digits).
    fn number(&mut self) -> R<()> {
        let start = self.i;
        let s = self.s;
        let mut i = self.i;
        let negative = s[i] == b'-';
        if negative {
            i += 1;
        }
        let digits = |i: &mut usize| {
            let from = *i;
            while s.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            *i - from
        };
        let first = *s.get(i).ok_or(Stop)?;
        if first == b'0' {
            i += 1;
        } else if first.is_ascii_digit() {
            digits(&mut i);
        } else {
            return Err(Stop);
        }
        let int_end = i;
        let mut float = false;
        if s.get(i) == Some(&b'.') && s.get(i + 1).is_some_and(u8::is_ascii_digit) {
            i += 1;
            digits(&mut i);
            float = true;
        }
        if matches!(s.get(i), Some(b'e' | b'E')) {
            let mut j = i + 1;
            if matches!(s.get(j), Some(b'+' | b'-')) {
                j += 1;
            }
            if digits(&mut j) > 0 {
                i = j;
                float = true;
            }
            // else Python stops the number before the `e`: what follows is then an error.
        }
        self.i = i;
        let text = &s[start..i];
        if float {
            // Safety of the unwrap: the text is ASCII digits, signs, '.', 'e' in JSON's grammar,
            // which Rust's float grammar contains; parse is correctly rounded like Python's.
            let v: f64 = std::str::from_utf8(text).map_err(|_| Stop)?.parse().map_err(|_| Stop)?;
            self.tape.push(Tok::Float(v));
        } else {
            let mut v: i64 = 0;
            let mut big = false;
            for &d in &s[start + negative as usize..int_end] {
                let d = (d - b'0') as i64;
                match v.checked_mul(10).and_then(|v| if negative { v.checked_sub(d) } else { v.checked_add(d) }) {
                    Some(next) => v = next,
                    None => {
                        big = true;
                        break;
                    }
                }
            }
            self.tape.push(if big { Tok::Big } else { Tok::Int(v) });
        }
        Ok(())
    }

    fn string(&mut self) -> R<()> {
        let s = self.s;
        self.i += 1; // the opening quote
        let start = self.i;
        let mut i = start;
        loop {
            match *s.get(i).ok_or(Stop)? {
                b'"' => {
                    self.tape.push(Tok::Str { s: start as u32, e: i as u32, escaped: false });
                    self.i = i + 1;
                    return Ok(());
                }
                b'\\' => break,
                0..=0x1f => return Err(stop("control_char")), // Python's strict mode refuses them
                _ => i += 1,
            }
        }
        // Escapes: the unescaped text goes to the scratch buffer.
        let from = self.unescaped.len();
        self.unescaped.extend_from_slice(&s[start..i]);
        loop {
            match *s.get(i).ok_or(Stop)? {
                b'"' => {
                    let to = self.unescaped.len();
                    self.tape.push(Tok::Str { s: from as u32, e: to as u32, escaped: true });
                    self.i = i + 1;
                    return Ok(());
                }
                b'\\' => {
                    let e = *s.get(i + 1).ok_or(Stop)?;
                    i += 2;
                    let byte = match e {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => 0x08,
                        b'f' => 0x0c,
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'u' => {
                            let mut c = hex4(s, i)?;
                            i += 4;
                            if (0xD800..0xDC00).contains(&c) {
                                // A pair must follow; a lone surrogate is Python's (it keeps it).
                                if s.get(i) != Some(&b'\\') || s.get(i + 1) != Some(&b'u') {
                                    return Err(stop("lone_surrogate"));
                                }
                                let low = hex4(s, i + 2)?;
                                if !(0xDC00..0xE000).contains(&low) {
                                    return Err(stop("lone_surrogate"));
                                }
                                i += 6;
                                c = 0x10000 + ((c - 0xD800) << 10) + (low - 0xDC00);
                            } else if (0xDC00..0xE000).contains(&c) {
                                return Err(stop("lone_surrogate"));
                            }
                            let ch = char::from_u32(c).ok_or(Stop)?;
                            let mut buf = [0u8; 4];
                            self.unescaped.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
                            continue;
                        }
                        _ => return Err(Stop),
                    };
                    self.unescaped.push(byte);
                }
                0..=0x1f => return Err(stop("control_char")),
                b => {
                    self.unescaped.push(b);
                    i += 1;
                }
            }
        }
    }
}

fn hex4(s: &[u8], at: usize) -> R<u32> {
    let part = s.get(at..at + 4).ok_or(Stop)?;
    let mut v = 0u32;
    for &b in part {
        let d = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return Err(Stop),
        };
        v = v * 16 + d as u32;
    }
    Ok(v)
}

// --- encoding --------------------------------------------------------------------------------

/// A hand-back's detail (`StageKernel.stop_detail`) for a value the schema node does not take.
#[cold]
fn mismatch(node: &Node, tok: Option<Tok>) -> &'static str {
    match (node, tok) {
        (Node::Refused | Node::Opaque, _) => "refused_type",
        (_, None) => "missing",
        (_, Some(Tok::Big)) => "big_int",
        (Node::Int, Some(Tok::Int(_))) => "int_range",
        (Node::Int | Node::Long, Some(Tok::Float(_))) => "float_for_integer",
        (Node::Int | Node::Long | Node::IsoDate, Some(Tok::Str { .. })) => "string_for_integer",
        _ => "type_mismatch",
    }
}

struct Writer<'a> {
    nodes: &'a [Node],
    tape: &'a [Tok],
    input: &'a [u8],
    unescaped: &'a [u8],
    defaults: &'a [Vec<u8>],
    /// `format: json_schema`: [`Encoder::json_schema`].
    json_schema: bool,
    utc_rule: bool,
    /// [`Encoder::dropped`]: top-level fields encoded into `dropped_bytes`, not the body.
    dropped: &'a [bool],
    dropped_bytes: std::cell::RefCell<&'a mut Vec<u8>>,
    /// [`Encoder::digits`]: top-level fields rewritten as their decimal digits.
    digits: &'a [bool],
    /// [`Encoder::rewrites`]: top-level fields rewritten after encoding (rewrite.rs).
    rewrites: &'a [Option<FieldRewrite>],
}

impl Writer<'_> {
    #[inline]
    fn text(&self, s: u32, e: u32, escaped: bool) -> &[u8] {
        let (s, e) = (s as usize, e as usize);
        if escaped {
            &self.unescaped[s..e]
        } else {
            &self.input[s..e]
        }
    }

    #[inline]
    fn skip(&self, at: usize) -> usize {
        match self.tape[at] {
            Tok::Arr { end, .. } | Tok::Obj { end, .. } => end as usize,
            _ => at + 1,
        }
    }

    fn key(&self, at: usize) -> &[u8] {
        match self.tape[at] {
            Tok::Str { s, e, escaped } => self.text(s, e, escaped),
            _ => unreachable!("an object member's key is a string token"),
        }
    }

    /// Encode the value at tape index `at` (None: absent, which fastavro reads as `None`)
    /// under schema node `id`; `want`: what routing and event time want below it.
    fn encode(
        &self,
        id: usize,
        at: Option<usize>,
        want: Option<&Want>,
        out: &mut Vec<u8>,
        values: &mut [Value],
        depth: u32,
    ) -> R<()> {
        if depth > MAX_DEPTH {
            return Err(stop("depth"));
        }
        let tok = at.map(|a| self.tape[a]);
        match (&self.nodes[id], tok) {
            (Node::Null, None | Some(Tok::Null)) => {}
            (Node::Boolean, Some(Tok::Bool(b))) => out.push(b as u8),
            (Node::Int, Some(Tok::Int(v))) if i32::try_from(v).is_ok() => put_long(out, v),
            (Node::Long, Some(Tok::Int(v))) => put_long(out, v),
            // json_schema: an integral float is an integer from draft 6 on (the validator
            // decides), converted by `int()`; outside 64 bits Python refuses it.
            (Node::Long, Some(Tok::Float(x)))
                if self.json_schema && x.fract() == 0.0 && (i64::MIN as f64..-(i64::MIN as f64)).contains(&x) =>
            {
                put_long(out, x as i64)
            }
            (Node::Float, Some(Tok::Int(_) | Tok::Float(_))) => {
                let x = match tok {
                    Some(Tok::Int(v)) => v as f64,
                    Some(Tok::Float(f)) => f,
                    _ => unreachable!(),
                };
                // fastavro's writer casts the double to a C float: one beyond 32 bits is
                // written as an infinity (rounded to nearest, as Rust's `as` rounds).
                if !x.is_finite() {
                    return Err(stop("non_finite"));
                }
                out.extend_from_slice(&(x as f32).to_le_bytes());
            }
            (Node::Double, Some(Tok::Int(_) | Tok::Float(_))) => {
                let x = match tok {
                    Some(Tok::Int(v)) => v as f64,
                    Some(Tok::Float(f)) => f,
                    _ => unreachable!(),
                };
                if !x.is_finite() {
                    return Err(stop("non_finite"));
                }
                out.extend_from_slice(&x.to_le_bytes());
            }
            (Node::String, Some(Tok::Str { s, e, escaped })) => {
                let text = self.text(s, e, escaped);
                put_long(out, text.len() as i64);
                out.extend_from_slice(text);
            }
            (Node::IsoMicros, Some(Tok::Str { s, e, escaped })) => {
                let (micros, _) =
                    crate::event_time::date_time_micros(self.text(s, e, escaped)).ok_or_else(|| stop("date_time"))?;
                put_long(out, micros);
            }
            (Node::IsoDate, Some(Tok::Str { s, e, escaped })) => {
                put_long(out, crate::event_time::date_days(self.text(s, e, escaped)).ok_or_else(|| stop("date"))?);
            }
            (Node::Enum(symbols), Some(Tok::Str { s, e, escaped })) => {
                let text = self.text(s, e, escaped);
                let index = symbols.iter().position(|sym| sym.as_slice() == text).ok_or_else(|| stop("enum_symbol"))?;
                put_long(out, index as i64);
            }
            (Node::Nullable { inner, null_first }, _) => {
                let null = matches!(tok, None | Some(Tok::Null));
                let branch = if null == *null_first { 0 } else { 1 };
                put_long(out, branch);
                if !null {
                    self.encode(*inner, at, want, out, values, depth + 1)?;
                }
            }
            (Node::Union(branches), _) => {
                let index = self.union_branch(branches, tok).ok_or_else(|| stop("union_branch"))?;
                put_long(out, index as i64);
                self.encode(branches[index], at, want, out, values, depth + 1)?;
            }
            (Node::Array(items), Some(Tok::Arr { n, .. })) => {
                if n > 0 {
                    put_long(out, n as i64);
                    let mut item = at.unwrap() + 1;
                    for _ in 0..n {
                        self.encode(*items, Some(item), None, out, values, depth + 1)?;
                        item = self.skip(item);
                    }
                }
                out.push(0);
            }
            (Node::Map(vtype), Some(Tok::Obj { n, .. })) => {
                // Python's dict: one entry per key, at its first key's place, with its last
                // value; fastavro writes one block of len(dict) entries, then the end marker.
                // Keys are compared pairwise: a map of more than MAX_MAP_KEYS goes to Python.
                if n > MAX_MAP_KEYS {
                    return Err(stop("map_keys"));
                }
                let (mut members_buf, mut members_vec) = ([0usize; 64], Vec::new());
                let members: &mut [usize] = if n <= 64 {
                    &mut members_buf[..n as usize]
                } else {
                    members_vec.resize(n as usize, 0);
                    &mut members_vec
                };
                let mut member = at.unwrap() + 1;
                for slot in members.iter_mut() {
                    *slot = member;
                    member = self.skip(member + 1);
                }
                let members = &*members;
                let is_first = |k: usize| !members[..k].iter().any(|&o| self.key(o) == self.key(members[k]));
                let distinct = (0..members.len()).filter(|&k| is_first(k)).count();
                if distinct > 0 {
                    put_long(out, distinct as i64);
                    for k in (0..members.len()).filter(|&k| is_first(k)) {
                        let key = self.key(members[k]);
                        let last =
                            members[k..].iter().rev().find(|&&o| self.key(o) == key).copied().unwrap_or(members[k]);
                        put_long(out, key.len() as i64);
                        out.extend_from_slice(key);
                        self.encode(*vtype, Some(last + 1), None, out, values, depth + 1)?;
                    }
                }
                out.push(0);
            }
            (Node::Record(fields), Some(Tok::Obj { n, .. })) => {
                let nf = fields.len();
                let (mut found_buf, mut found_vec) = ([usize::MAX; 32], Vec::new());
                let found: &mut [usize] = if nf <= 32 {
                    &mut found_buf[..nf]
                } else {
                    found_vec.resize(nf, usize::MAX);
                    &mut found_vec
                };
                let (mut members_buf, mut members_vec) = ([0usize; 64], Vec::new());
                let members: &mut [usize] = if n <= 64 {
                    &mut members_buf[..n as usize]
                } else {
                    members_vec.resize(n as usize, 0);
                    &mut members_vec
                };
                let mut member = at.unwrap() + 1;
                for slot in members.iter_mut() {
                    *slot = member;
                    member = self.skip(member + 1);
                }
                // From the last member back: a field's first match is its last occurrence, the
                // value Python's dict keeps. Producers mostly write the schema's order, so the
                // field before the last one matched is tried first.
                let mut hint = nf.wrapping_sub(1);
                for &m in members.iter().rev() {
                    let key = self.key(m);
                    let f = if hint < nf && fields[hint].name == key {
                        Some(hint)
                    } else {
                        fields.iter().position(|f| f.name == key)
                    };
                    match f {
                        Some(f) => {
                            if found[f] == usize::MAX {
                                found[f] = m + 1;
                            }
                            hint = f.wrapping_sub(1);
                        }
                        // fastavro's union hint: a `-type` key naming another record is a
                        // mismatch (no Avro field name has a '-'). json_schema's converter
                        // gives fastavro the declared properties only.
                        None if key == b"-type" && !self.json_schema => return Err(stop("dash_type")),
                        None => {}
                    }
                }
                for (index, field) in fields.iter().enumerate() {
                    let found = (found[index] != usize::MAX).then_some(found[index]);
                    if depth == 0 && self.dropped.get(index) == Some(&true) {
                        // Checked as declared (Python checks before its transforms), then
                        // dropped: never wanted (drop_fields), so no value to read.
                        if found.is_none() {
                            if matches!(field.default, Default_::Other) {
                                return Err(stop("missing_without_default"));
                            }
                            continue;
                        }
                        let mut scratch = self.dropped_bytes.borrow_mut();
                        scratch.clear();
                        self.encode(field.node, found, None, &mut scratch, values, depth + 1)?;
                        continue;
                    }
                    match (found, field.default) {
                        (None, Default_::Other) => return Err(stop("missing_without_default")),
                        (None, Default_::Encoded(at)) => {
                            // Written as the default, read by routing and event time as absent
                            // (Python's field_values reads the JSON object: None).
                            let mark = out.len();
                            out.extend_from_slice(&self.defaults[at]);
                            if let Some(Some(rewrite)) = self.rewrites.get(index).filter(|_| depth == 0) {
                                // (a null mask: Python refuses the others' non-null defaults)
                                rewrite.apply(out, mark)?;
                            }
                            continue;
                        }
                        _ => {}
                    }
                    let below = want.and_then(|w| w.children.iter().find(|(i, _)| *i == index)).map(|(_, w)| w);
                    let mark = out.len();
                    self.encode(field.node, found, below.filter(|w| !w.children.is_empty()), out, values, depth + 1)?;
                    if let Some(slot) = below.and_then(|w| w.slot) {
                        values[slot] = self.wanted_value(field.node, found, mark, out);
                    }
                    if depth == 0 && self.digits.get(index) == Some(&true) {
                        // (never wanted: cast_to_digits; an absent one is its null default)
                        let nullable = !matches!(self.nodes[field.node], Node::Int | Node::Long);
                        crate::rewrite::FieldRewrite::digits(nullable).apply(out, mark)?;
                    }
                    if let Some(Some(rewrite)) = self.rewrites.get(index).filter(|_| depth == 0) {
                        rewrite.apply(out, mark)?; // (never wanted: rewrite_field)
                    }
                }
            }
            (node, tok) => return Err(stop(mismatch(node, tok))),
        }
        Ok(())
    }

    /// The branch of a [`Node::Union`] fastavro's `write_union` writes a value (None: absent)
    /// under: the first whose validator takes the value, except that a `float` is passed
    /// over for a later `double`. None when no branch takes it (Python's mismatch) or for an
    /// integer beyond 64 bits (which only a float branch takes, converted by Python).
    fn union_branch(&self, branches: &[usize], tok: Option<Tok>) -> Option<usize> {
        let mut float = None;
        for (index, &branch) in branches.iter().enumerate() {
            let node = &self.nodes[branch];
            if float.is_some() {
                if matches!(node, Node::Double) {
                    return Some(index);
                }
                continue;
            }
            let takes = match (node, tok) {
                (Node::Null, None | Some(Tok::Null)) => true,
                (Node::Boolean, Some(Tok::Bool(_))) => true,
                (Node::Int, Some(Tok::Int(v))) => i32::try_from(v).is_ok(),
                (Node::Long, Some(Tok::Int(_))) => true,
                (Node::Float | Node::Double, Some(Tok::Int(_) | Tok::Float(_))) => true,
                (Node::String, Some(Tok::Str { .. })) => true,
                _ => false,
            };
            if takes {
                if matches!(node, Node::Float) {
                    float = Some(index);
                    continue;
                }
                return Some(index);
            }
        }
        float
    }

    /// What Python's `field_values` reads for a wanted field (the JSON value itself, not its
    /// Avro form): an int, a float, a string (its bytes, now at the end of `out`), null.
    fn wanted_value(&self, id: usize, at: Option<usize>, mark: usize, out: &[u8]) -> Value {
        let Some(at) = at else { return Value::Null };
        match self.tape[at] {
            Tok::Null => Value::Null,
            Tok::Int(v) => Value::Int(v),
            Tok::Float(f) => Value::Float(f),
            Tok::Str { s, e, escaped } => {
                let node = match &self.nodes[id] {
                    Node::Nullable { inner, .. } => *inner,
                    // A string is written under the union's first string branch.
                    Node::Union(branches) => {
                        branches.iter().copied().find(|&b| matches!(self.nodes[b], Node::String)).unwrap_or(id)
                    }
                    _ => id,
                };
                // json_schema's `date-time` and `date` strings (encoded: the text is not in
                // `out`): the event day Python's event time reads from the text, here from
                // the same parse (under `local` the date as written, under `utc` the
                // instant's UTC date).
                let text = self.text(s, e, escaped);
                match self.nodes[node] {
                    Node::IsoMicros => {
                        return match crate::event_time::date_time_micros(text) {
                            Some((micros, _)) if self.utc_rule => Value::Micros(micros),
                            Some((micros, written)) => Value::Written { day: written, micros },
                            None => Value::Other,
                        };
                    }
                    Node::IsoDate => return crate::event_time::date_days(text).map_or(Value::Other, Value::Date),
                    _ => {}
                }
                if matches!(self.nodes[node], Node::String) && out.len() >= mark + (e - s) as usize {
                    Value::Str(out.len() - (e - s) as usize, out.len())
                } else {
                    Value::Other
                }
            }
            _ => Value::Other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = r#"{"type": "record", "name": "R", "fields": [
        {"name": "id", "type": "long"},
        {"name": "s", "type": "string"},
        {"name": "n", "type": ["null", "long"], "default": null}]}"#;

    /// The Avro body of `json` under [`SCHEMA`] (fastavro's bytes), or the rule it stopped at.
    fn encode(json: &str) -> Result<Vec<u8>, &'static str> {
        let mut encoder = Encoder::compile(SCHEMA, &["s".to_string()]).unwrap();
        let mut values = vec![Value::Null];
        match encoder.encode(json.as_bytes(), &mut values) {
            Ok(()) => Ok(encoder.body().to_vec()),
            Err(_) => Err(forget_why()),
        }
    }

    #[test]
    fn an_object_is_encoded_as_fastavro_writes_it_with_a_missing_nullable_field_null() {
        assert_eq!(encode(r#"{"id": 3, "s": "hi"}"#), Ok(b"\x06\x04hi\x00".to_vec()));
        assert_eq!(encode(r#"{"s": "hi", "n": 1, "id": 3}"#), Ok(b"\x06\x04hi\x02\x02".to_vec()));
    }

    #[test]
    fn a_duplicate_key_takes_the_last_value_at_the_first_place_as_a_python_dict() {
        assert_eq!(encode(r#"{"id": 1, "s": "a", "id": 2}"#), Ok(b"\x04\x02a\x00".to_vec()));
    }

    #[test]
    fn what_python_reads_otherwise_or_refuses_is_handed_back() {
        for json in [
            r#"{"id": 1.0, "s": "a"}"#,                  // a float for a long
            r#"{"id": 18446744073709551616, "s": "a"}"#, // beyond 64 bits
            r#"{"id": NaN, "s": "a"}"#,
            r#"{"id": 1, "s": "\ud800"}"#, // a lone surrogate
            r#"[{"id": 1, "s": "a"}]"#,    // not an object
            r#"{"id": 1}"#,                // a required field missing
            r#"{"id": 1, "s": 2}"#,
            r#"{"id": 1, "s": "a""#, // not JSON
        ] {
            assert!(encode(json).is_err(), "{json}");
        }
    }

    #[test]
    fn a_hand_back_names_its_rule() {
        assert_eq!(encode(r#"{"id": 1, "s": "\ud800"}"#), Err("lone_surrogate"));
    }
}
