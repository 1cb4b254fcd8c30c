//! `format: json_schema` topics: a Confluent-framed JSON value validated against the registry
//! JSON Schema of its id, then converted and encoded as the Avro record derived from it —
//! exactly as the Python path (`kbqe_dagster/formats/json_schema_stage.py`: `json.loads`,
//! `jsonschema`'s validator, `core/formats/json_schema_avro.py`'s converter, fastavro's
//! `schemaless_writer`) would encode it, or `Err(Stop)`: the message goes back to the Python
//! path, which stays the reference and gives every bad message its reason and JSON pointer.
//!
//! The kernel only ever says "valid": every message that does not validate, and every one it
//! is not certain about, is handed back. Parsing and encoding are the JSON kernel's
//! (json.rs), with two more nodes: a `date-time` string becomes its `timestamp-micros` long,
//! a `date` string its `date` int (event_time.rs: [`date_time_micros`], [`date_days`]).
//!
//! Validation is a subset of JSON Schema, compiled once per schema id ([`Validator`]); a
//! schema using anything else is refused, and its messages all stay on the Python path
//! (docs/architecture.md, "The JSON Schema kernel"). Implemented, with `jsonschema`'s
//! meaning in every draft it is given (4, 6, 7, 2019-09, 2020-12; none named: 7):
//! `type`, `enum` and `const` of strings, integers, booleans and null, `properties`,
//! `required`, `additionalProperties`, `items` (one schema), `minItems`/`maxItems`,
//! `minLength`/`maxLength` (code points, as Python's `len`), `minimum`/`maximum`/
//! `exclusiveMinimum`/`exclusiveMaximum` of integers and of floats (compared with the value
//! exactly as Python compares an int with a float), `allOf`, `anyOf`, `oneOf`, local `$ref`,
//! `uniqueItems` (certain for arrays of strings, integers and nulls: others are handed back),
//! a `pattern` that is a literal, optionally anchored ([`Literal`]), and the annotations
//! (`title`, `description`, `format` — which `jsonschema` does not assert without a format
//! checker —, `default`, `examples`, any keyword no draft defines). Where drafts differ the
//! kernel is the stricter: `const` in draft 4 and a `$ref`'s siblings before 2019-09 (which
//! `jsonschema` ignores there) are checked, so a value they reject is handed back and Python
//! stages it. `oneOf` is valid only when exactly one branch validates and every other one
//! certainly rejects the value (by its `type`, `enum`, `const` — not in draft 4 —, or its
//! `allOf`/`anyOf` branches), and `not` only when its schema does. `multipleOf` an integer is
//! checked on integers (a float's is Python's float arithmetic: handed back);
//! `propertyNames` checks each key as a string.
//!
//! Refused (the Python path validates those schemas): any other `pattern` and
//! `patternProperties` (Python's `re` dialect), `format` assertions, a float `multipleOf`,
//! `contains`, `min/maxProperties`, conditionals, `dependencies`, unevaluated keywords, every
//! other keyword some draft asserts ([`REFUSED`]), bounds beyond 2^63 (serde_json reads an
//! integer literal beyond 64 bits as a float, Python as an exact `int`), draft-4 boolean
//! exclusive bounds, nested `$id`, remote or recursive `$ref`, an unknown `$schema`, and every
//! keyword the kernel does not know.

use crate::body::{renote, Stop, Value, R};
#[cfg(doc)]
use crate::event_time::{date_days, date_time_micros};
use crate::json::{Encoder, Tok};
use crate::route::Route;
use crate::schema::Unsupported;
use serde_json::Value as Json;
use std::collections::HashMap;

/// A schema id's JSON Schema and derived Avro record, compiled.
pub struct Entry {
    encoder: Encoder,
    validator: Validator,
    pub route: Route,
}

impl Entry {
    /// `json_schema`: the registry's JSON Schema text; `avro_json`: the Avro record derived
    /// from it (fastavro's `parse_schema` form); `wanted` and `utc_rule` as for the JSON kernel.
    pub fn compile(
        json_schema: &str,
        avro_json: &str,
        wanted: &[String],
        utc_rule: bool,
        route: Route,
    ) -> Result<Entry, Unsupported> {
        let validator = Validator::compile(json_schema)?;
        let encoder = Encoder::compile_json_schema(avro_json, wanted, utc_rule)?;
        Ok(Entry { encoder, validator, route })
    }

    /// Parse, validate, convert and encode one message's JSON (after the frame); the wanted
    /// values go to `values`. `Err(Stop)`: hand the message back.
    pub fn encode(&mut self, json: &[u8], values: &mut [Value]) -> R<()> {
        // Python decodes the body as UTF-8 and parses the text: a BOM is then a character
        // JSON does not allow (json_decode_error), unlike `json.loads` of bytes.
        if json.starts_with(b"\xef\xbb\xbf") {
            renote("bom");
            return Err(Stop);
        }
        let validator = &self.validator;
        self.encoder.encode_checked(json, values, |tape, input, unescaped| {
            Check { v: validator, tape, input, unescaped }.valid(validator.root, 0)
        })
    }

    pub fn body(&self) -> &[u8] {
        self.encoder.body()
    }

    /// `drop` and `add` (constant) transforms of the converted record, as the JSON kernel
    /// does them ([`Encoder::drop_fields`], [`Encoder::append_constants`]): `names` are the
    /// dropped top-level fields' JSON keys (the encoder finds members by key), `constants`
    /// the added constants' encoding.
    pub fn transform(&mut self, names: &[String], constants: &[u8]) -> Result<(), Unsupported> {
        self.encoder.drop_fields(names)?;
        self.encoder.append_constants(constants);
        Ok(())
    }

    /// A `mask` or `timestamp` transform of the top-level field whose JSON key is `name`, as
    /// the JSON kernel does it ([`Encoder::rewrite_field`]: the converted value is the JSON
    /// value, or for a `date-time` its microseconds, which the encoder writes).
    pub fn rewrite_field(&mut self, name: &str, rewrite: crate::rewrite::FieldRewrite) -> Result<(), Unsupported> {
        self.encoder.rewrite_field(name, rewrite)
    }
}

// --- validation ------------------------------------------------------------------------------

const NULL: u8 = 1;
const BOOLEAN: u8 = 2;
const INTEGER: u8 = 4;
const NUMBER: u8 = 8;
const STRING: u8 = 16;
const ARRAY: u8 = 32;
const OBJECT: u8 = 64;

/// What `enum` and `const` compare with: `jsonschema`'s `equal` of two values of one JSON
/// type is plain equality (booleans are not numbers to it, and the kernel compares no floats).
#[derive(Debug, PartialEq)]
enum Lit {
    Null,
    Bool(bool),
    Int(i64),
    Str(Vec<u8>),
}

#[derive(Default, Debug)]
struct Node {
    /// A boolean schema (`true`/`false`, draft 6 on).
    always: Option<bool>,
    types: Option<u8>,
    enums: Option<Vec<Lit>>,
    konst: Option<Lit>,
    properties: Vec<(Vec<u8>, usize)>,
    required: Vec<Vec<u8>>,
    additional: Option<usize>,
    items: Option<usize>,
    min_items: Option<u64>,
    max_items: Option<u64>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    minimum: Option<Bound>,
    maximum: Option<Bound>,
    exclusive_minimum: Option<Bound>,
    exclusive_maximum: Option<Bound>,
    all_of: Vec<usize>,
    any_of: Vec<usize>,
    one_of: Vec<usize>,
    reference: Option<usize>,
    /// `multipleOf` an integer (of integers only: a float's is Python's float arithmetic).
    multiple_of: Option<i64>,
    /// `not`: valid when the subschema certainly rejects the value by its type.
    not: Option<usize>,
    /// `propertyNames`: every key of an object, as a string.
    property_names: Option<usize>,
    /// `uniqueItems: true`: checked on arrays of strings, integers and nulls (whose equality
    /// is plain to `jsonschema`'s `uniq`); an array with anything else is not certain.
    unique: bool,
    /// `pattern`, when it is a literal (see [`Literal`]).
    pattern: Option<Literal>,
}

/// A `pattern` that is a literal, optionally anchored: `re.search` of it is then a plain
/// substring test. `^` anchors at the start; `$` (without `re.MULTILINE`) at the end or
/// before a newline that ends the text, as Python's `$` does.
#[derive(Debug)]
struct Literal {
    text: Vec<u8>,
    start: bool,
    end: bool,
}

impl Literal {
    /// The literal of `pattern`, or None when it has anything `re` reads as other than
    /// itself (every metacharacter, escapes, and inline flags with them).
    fn of(pattern: &str) -> Option<Literal> {
        let start = pattern.starts_with('^');
        let body = if start { &pattern[1..] } else { pattern };
        let end = body.ends_with('$');
        let body = if end { &body[..body.len() - 1] } else { body };
        let plain = |c: char| c.is_ascii_alphanumeric() || !c.is_ascii() || " _-:/@=,%&~!;<>'\"`".contains(c);
        body.chars().all(plain).then(|| Literal { text: body.as_bytes().to_vec(), start, end })
    }

    fn search(&self, text: &[u8]) -> bool {
        let lit = self.text.as_slice();
        let at_end = |t: &[u8]| t.ends_with(lit) || (t.ends_with(b"\n") && t[..t.len() - 1].ends_with(lit));
        match (self.start, self.end) {
            (true, true) => {
                text == lit || (text.len() == lit.len() + 1 && text.starts_with(lit) && text.ends_with(b"\n"))
            }
            (true, false) => text.starts_with(lit),
            (false, true) => at_end(text),
            (false, false) => lit.is_empty() || text.windows(lit.len()).any(|w| w == lit),
        }
    }
}

/// A JSON Schema compiled for the kernel's subset (module docs).
pub struct Validator {
    nodes: Vec<Node>,
    root: usize,
    /// Whether a float with an integral value is an `integer` (draft 6 on; not in draft 4).
    integral_floats: bool,
    /// Draft 4, which has no `const` (the kernel checks it anyway, being the stricter, but
    /// never counts on it to reject a value: see `Check::rejects`).
    draft4: bool,
}

/// What `jsonschema` 4 asserts in some draft (the union of its validators' keywords) and the
/// kernel does not, and what changes how a `$ref` resolves: a schema using one is refused.
/// Every other keyword (`title`, `description`, `default`, `x-...`) is an annotation to
/// `jsonschema`, and to the kernel; `format` too, which it asserts only with a format checker.
const REFUSED: &[&str] = &[
    "$dynamicRef",
    "$recursiveRef",
    "additionalItems",
    "contains",
    "dependencies",
    "dependentRequired",
    "dependentSchemas",
    "disallow",
    "divisibleBy",
    "extends",
    "if",
    "then",
    "else",
    "maxProperties",
    "minProperties",
    "patternProperties",
    "prefixItems",
    "unevaluatedItems",
    "unevaluatedProperties",
    "$id",
    "id",
    "$anchor",
    "$dynamicAnchor",
    "$recursiveAnchor",
    "$vocabulary",
    "$schema",
];
const DRAFTS: &[&str] = &[
    "http://json-schema.org/draft-04/schema#",
    "http://json-schema.org/draft-04/schema",
    "http://json-schema.org/draft-06/schema#",
    "http://json-schema.org/draft-06/schema",
    "http://json-schema.org/draft-07/schema#",
    "http://json-schema.org/draft-07/schema",
    "https://json-schema.org/draft/2019-09/schema",
    "https://json-schema.org/draft/2020-12/schema",
];
/// Schemas nested deeper go to the Python path.
const MAX_SCHEMA_DEPTH: u32 = 64;

struct Compiler<'a> {
    root: &'a Json,
    nodes: Vec<Node>,
    /// `$ref` targets compiled (JSON pointer → node), and those being compiled (a cycle).
    refs: HashMap<String, usize>,
    resolving: Vec<String>,
}

fn refuse<T>(why: impl Into<String>) -> Result<T, Unsupported> {
    Err(Unsupported(why.into()))
}

impl Validator {
    pub fn compile(text: &str) -> Result<Validator, Unsupported> {
        let root: Json = serde_json::from_str(text).map_err(|e| Unsupported(format!("JSON Schema: {e}")))?;
        let mut integral_floats = true;
        if let Some(draft) = root.get("$schema") {
            if !draft.as_str().is_some_and(|d| DRAFTS.contains(&d)) {
                return refuse(format!("a $schema the kernel does not validate: {draft}"));
            }
            integral_floats = !draft.as_str().is_some_and(|d| d.contains("draft-04"));
        }
        let mut c = Compiler { root: &root, nodes: Vec::new(), refs: HashMap::new(), resolving: Vec::new() };
        let top = c.node(&root, true, 0)?;
        Ok(Validator { nodes: c.nodes, root: top, integral_floats, draft4: !integral_floats })
    }
}

impl Compiler<'_> {
    fn node(&mut self, json: &Json, root: bool, depth: u32) -> Result<usize, Unsupported> {
        if depth > MAX_SCHEMA_DEPTH {
            return refuse("a schema nested too deep");
        }
        let mut node = Node::default();
        let map = match json {
            Json::Bool(b) => {
                node.always = Some(*b);
                return Ok(self.push(node));
            }
            Json::Object(map) => map,
            _ => return refuse("a schema that is not an object"),
        };
        for (key, value) in map {
            match key.as_str() {
                "$schema" | "$id" if root => {}
                "definitions" | "$defs" => {} // compiled where a $ref uses them
                "type" => node.types = Some(types(value)?),
                "enum" => match value {
                    Json::Array(values) => node.enums = Some(values.iter().map(lit).collect::<Result<_, _>>()?),
                    _ => return refuse("an enum that is not a list"),
                },
                "const" => node.konst = Some(lit(value)?),
                "properties" => {
                    let Json::Object(properties) = value else { return refuse("properties that are not an object") };
                    for (name, child) in properties {
                        let id = self.node(child, false, depth + 1)?;
                        node.properties.push((name.as_bytes().to_vec(), id));
                    }
                }
                "required" => {
                    let Json::Array(names) = value else { return refuse("required that is not a list") };
                    for name in names {
                        let Some(name) = name.as_str() else { return refuse("a required name that is not a string") };
                        node.required.push(name.as_bytes().to_vec());
                    }
                }
                "additionalProperties" => node.additional = Some(self.node(value, false, depth + 1)?),
                "items" => {
                    if value.is_array() {
                        return refuse("a tuple array (items as a list)");
                    }
                    node.items = Some(self.node(value, false, depth + 1)?);
                }
                "minItems" => node.min_items = Some(count(value)?),
                "maxItems" => node.max_items = Some(count(value)?),
                "minLength" => node.min_length = Some(count(value)?),
                "maxLength" => node.max_length = Some(count(value)?),
                "minimum" => node.minimum = Some(bound(value)?),
                "maximum" => node.maximum = Some(bound(value)?),
                "exclusiveMinimum" => node.exclusive_minimum = Some(bound(value)?),
                "exclusiveMaximum" => node.exclusive_maximum = Some(bound(value)?),
                "allOf" | "anyOf" | "oneOf" => {
                    let Json::Array(branches) = value else { return refuse(format!("{key} that is not a list")) };
                    if branches.is_empty() {
                        return refuse(format!("an empty {key}"));
                    }
                    let mut ids = Vec::with_capacity(branches.len());
                    for branch in branches {
                        ids.push(self.node(branch, false, depth + 1)?);
                    }
                    match key.as_str() {
                        "allOf" => node.all_of = ids,
                        "anyOf" => node.any_of = ids,
                        _ => node.one_of = ids,
                    }
                }
                "$ref" => node.reference = Some(self.reference(value, depth)?),
                "multipleOf" => match integer(value)? {
                    m if m > 0 => node.multiple_of = Some(m),
                    _ => return refuse("a multipleOf that is not positive"),
                },
                "not" => node.not = Some(self.node(value, false, depth + 1)?),
                "propertyNames" => node.property_names = Some(self.node(value, false, depth + 1)?),
                "uniqueItems" => match value {
                    Json::Bool(unique) => node.unique = *unique,
                    _ => return refuse("a uniqueItems that is not a boolean"),
                },
                "pattern" => match value.as_str().and_then(Literal::of) {
                    Some(literal) => node.pattern = Some(literal),
                    None => return refuse(format!("a pattern the kernel does not match: {value}")),
                },
                other if REFUSED.contains(&other) => {
                    return refuse(format!("keyword {other:?} is not validated by the kernel"))
                }
                _ => {} // an annotation
            }
        }
        Ok(self.push(node))
    }

    fn reference(&mut self, value: &Json, depth: u32) -> Result<usize, Unsupported> {
        let Some(pointer) = value.as_str().and_then(|r| r.strip_prefix('#')) else {
            return refuse(format!("a $ref that is not a local JSON pointer: {value}"));
        };
        // `jsonschema` percent-decodes the fragment; the mapping (json_schema_avro.py) does not.
        if !pointer.starts_with('/') || pointer.contains('%') {
            return refuse(format!("a $ref the kernel does not resolve: #{pointer}"));
        }
        if let Some(&id) = self.refs.get(pointer) {
            return Ok(id);
        }
        if self.resolving.iter().any(|p| p == pointer) {
            return refuse(format!("a recursive $ref: #{pointer}"));
        }
        let mut target = self.root;
        for part in pointer.split('/').skip(1) {
            let part = part.replace("~1", "/").replace("~0", "~");
            target = match target {
                Json::Object(map) => map.get(&part),
                Json::Array(list) => part.parse::<usize>().ok().and_then(|i| list.get(i)),
                _ => None,
            }
            .ok_or_else(|| Unsupported(format!("a $ref to nothing: #{pointer}")))?;
        }
        self.resolving.push(pointer.to_string());
        let id = self.node(target, false, depth + 1)?;
        self.resolving.pop();
        self.refs.insert(pointer.to_string(), id);
        Ok(id)
    }

    fn push(&mut self, node: Node) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }
}

fn types(value: &Json) -> Result<u8, Unsupported> {
    let one = |name: &Json| -> Result<u8, Unsupported> {
        Ok(match name.as_str() {
            Some("null") => NULL,
            Some("boolean") => BOOLEAN,
            Some("integer") => INTEGER,
            Some("number") => NUMBER,
            Some("string") => STRING,
            Some("array") => ARRAY,
            Some("object") => OBJECT,
            _ => return refuse(format!("type {name}")),
        })
    };
    match value {
        Json::Array(names) => names.iter().try_fold(0, |mask, name| Ok(mask | one(name)?)),
        name => one(name),
    }
}

fn lit(value: &Json) -> Result<Lit, Unsupported> {
    Ok(match value {
        Json::Null => Lit::Null,
        Json::Bool(b) => Lit::Bool(*b),
        Json::String(s) => Lit::Str(s.as_bytes().to_vec()),
        Json::Number(n) if n.is_i64() => Lit::Int(n.as_i64().unwrap()),
        other => return refuse(format!("an enum or const value the kernel does not compare: {other}")),
    })
}

fn count(value: &Json) -> Result<u64, Unsupported> {
    value.as_u64().ok_or_else(|| Unsupported(format!("a length that is not a non-negative integer: {value}")))
}

/// A numeric bound as Python's `json.loads` reads it: an `int` or a `float`.
#[derive(Clone, Copy, Debug)]
enum Bound {
    Int(i64),
    Float(f64),
}

/// A bound exactly as Python reads it: an integer literal within 64 bits, or a float literal
/// (serde_json's `float_roundtrip` parses it correctly rounded, as Python's `float` does)
/// below 2^63 in magnitude — serde_json reads an integer literal beyond 64 bits as a float
/// too, which Python keeps an exact `int`: those are refused. A draft-4 boolean exclusive
/// bound (which means something else) is refused too.
fn bound(value: &Json) -> Result<Bound, Unsupported> {
    match value {
        Json::Number(n) if n.is_i64() => Ok(Bound::Int(n.as_i64().unwrap())),
        Json::Number(n) if n.is_f64() && n.as_f64().is_some_and(|b| b.abs() < TWO_63) => {
            Ok(Bound::Float(n.as_f64().unwrap()))
        }
        _ => refuse(format!("a bound the kernel does not compare: {value}")),
    }
}

/// An integer keyword value (`multipleOf`: of a float, Python's float arithmetic decides).
fn integer(value: &Json) -> Result<i64, Unsupported> {
    match value {
        Json::Number(n) if n.is_i64() => Ok(n.as_i64().unwrap()),
        _ => refuse(format!("a multipleOf the kernel does not compare: {value}")),
    }
}

const TWO_63: f64 = 9_223_372_036_854_775_808.0;

/// A value the validator is not certain of, noting which rule (`StageKernel.stop_detail`:
/// the last rule that failed; a later branch that validates makes it moot).
#[cold]
fn fail(why: &'static str) -> bool {
    renote(why);
    false
}

/// One message's tape checked against the validator.
struct Check<'a> {
    v: &'a Validator,
    tape: &'a [Tok],
    input: &'a [u8],
    unescaped: &'a [u8],
}

/// The float `x` compared with the integer `b` exactly, as Python compares a float with an
/// int (not through a rounded conversion of either); None for NaN.
fn cmp_float(x: f64, b: i64) -> Option<std::cmp::Ordering> {
    use std::cmp::Ordering::*;
    if x.is_nan() {
        return None;
    }
    if x >= TWO_63 {
        return Some(Greater);
    }
    if x < -TWO_63 {
        return Some(Less);
    }
    // |x| < 2^63 (or x = -2^63): its integral part is exactly an i64.
    let whole = x.trunc();
    Some(match (whole as i64).cmp(&b) {
        Equal => (x - whole).partial_cmp(&0.0)?,
        order => order,
    })
}

/// A number token compared with a bound exactly as Python compares them; None when not
/// certain (NaN, an integer beyond 64 bits).
fn cmp_bound(tok: Tok, bound: Bound) -> Option<std::cmp::Ordering> {
    match (tok, bound) {
        (Tok::Int(v), Bound::Int(b)) => Some(v.cmp(&b)),
        (Tok::Float(x), Bound::Int(b)) => cmp_float(x, b),
        (Tok::Int(v), Bound::Float(b)) => cmp_float(b, v).map(std::cmp::Ordering::reverse),
        (Tok::Float(x), Bound::Float(b)) => x.partial_cmp(&b),
        _ => None,
    }
}

impl Check<'_> {
    fn text(&self, s: u32, e: u32, escaped: bool) -> &[u8] {
        let (s, e) = (s as usize, e as usize);
        if escaped {
            &self.unescaped[s..e]
        } else {
            &self.input[s..e]
        }
    }

    fn skip(&self, at: usize) -> usize {
        match self.tape[at] {
            Tok::Arr { end, .. } | Tok::Obj { end, .. } => end as usize,
            _ => at + 1,
        }
    }

    /// The tape index after the object or array at `at`.
    fn end(&self, at: usize) -> usize {
        self.skip(at)
    }

    fn key(&self, at: usize) -> &[u8] {
        match self.tape[at] {
            Tok::Str { s, e, escaped } => self.text(s, e, escaped),
            _ => unreachable!("an object member's key is a string token"),
        }
    }

    fn equal(&self, lit: &Lit, tok: Tok) -> bool {
        match (lit, tok) {
            (Lit::Null, Tok::Null) => true,
            (Lit::Bool(a), Tok::Bool(b)) => *a == b,
            (Lit::Int(a), Tok::Int(b)) => *a == b,
            (Lit::Str(a), Tok::Str { s, e, escaped }) => a.as_slice() == self.text(s, e, escaped),
            _ => false, // another type, or a float (1.0 equals 1 to Python): not certain
        }
    }

    /// Whether node `id` certainly rejects the value at `at` by its `type`, `enum` or `const`,
    /// or through its `allOf` or `anyOf` branches (following a `$ref`, whose target applies in
    /// every draft).
    fn rejects(&self, id: usize, at: usize) -> bool {
        let node = &self.v.nodes[id];
        if node.always == Some(false) {
            return true;
        }
        if let Some(target) = node.reference {
            return self.rejects(target, at);
        }
        let tok = self.tape[at];
        if let Some(mask) = node.types {
            let admits = match tok {
                Tok::Null => NULL,
                Tok::Bool(_) => BOOLEAN,
                Tok::Int(_) | Tok::Big => INTEGER | NUMBER,
                Tok::Float(_) => INTEGER | NUMBER, // 1.0 is an integer from draft 6 on
                Tok::Str { .. } => STRING,
                Tok::Arr { .. } => ARRAY,
                Tok::Obj { .. } => OBJECT,
            };
            if mask & admits == 0 {
                return true;
            }
        }
        // `enum` and `const` (`jsonschema`'s `equal`): a value equal to none of the literals,
        // certainly — a float might equal an integer literal (1.0 == 1 to Python): not certain.
        let unequal = |lit: &Lit| !matches!((lit, tok), (Lit::Int(_), Tok::Float(_))) && !self.equal(lit, tok);
        if node.enums.as_ref().is_some_and(|enums| enums.iter().all(unequal)) {
            return true;
        }
        // (Draft 4 has no `const`: `jsonschema` ignores it there.)
        if !self.v.draft4 && node.konst.as_ref().is_some_and(unequal) {
            return true;
        }
        node.all_of.iter().any(|&b| self.rejects(b, at))
            || (!node.any_of.is_empty() && node.any_of.iter().all(|&b| self.rejects(b, at)))
    }

    /// Whether the value at tape index `at` certainly validates against node `id`.
    fn valid(&self, id: usize, at: usize) -> bool {
        let node = &self.v.nodes[id];
        if let Some(always) = node.always {
            return always || fail("invalid_false_schema");
        }
        let tok = self.tape[at];
        if let Some(mask) = node.types {
            let ok = match tok {
                Tok::Null => mask & NULL != 0,
                Tok::Bool(_) => mask & BOOLEAN != 0,
                Tok::Int(_) => mask & (INTEGER | NUMBER) != 0,
                Tok::Float(x) => {
                    mask & NUMBER != 0 || (mask & INTEGER != 0 && self.v.integral_floats && x.fract() == 0.0)
                }
                Tok::Big => false, // the converter refuses it anyway
                Tok::Str { .. } => mask & STRING != 0,
                Tok::Arr { .. } => mask & ARRAY != 0,
                Tok::Obj { .. } => mask & OBJECT != 0,
            };
            if !ok {
                return fail(if matches!(tok, Tok::Big) { "invalid_big_int" } else { "invalid_type" });
            }
        }
        if let Some(enums) = &node.enums {
            if !enums.iter().any(|l| self.equal(l, tok)) {
                return fail("invalid_enum");
            }
        }
        if let Some(konst) = &node.konst {
            if !self.equal(konst, tok) {
                return fail("invalid_const");
            }
        }
        match tok {
            Tok::Int(_) | Tok::Float(_) | Tok::Big => {
                if !self.in_bounds(node, tok) {
                    return fail("invalid_bound");
                }
                if let Some(m) = node.multiple_of {
                    // Python's `instance % m` of two ints; of a float, float arithmetic.
                    if !matches!(tok, Tok::Int(v) if v.rem_euclid(m) == 0) {
                        return fail("invalid_multiple_of");
                    }
                }
            }
            Tok::Str { s, e, escaped } => {
                if node.min_length.is_some() || node.max_length.is_some() {
                    // Python's len: code points (UTF-8 bytes that do not continue one).
                    let n = self.text(s, e, escaped).iter().filter(|&&b| b & 0xC0 != 0x80).count() as u64;
                    if node.min_length.is_some_and(|m| n < m) || node.max_length.is_some_and(|m| n > m) {
                        return fail("invalid_length");
                    }
                }
                if node.pattern.as_ref().is_some_and(|p| !p.search(self.text(s, e, escaped))) {
                    return fail("invalid_pattern");
                }
            }
            Tok::Arr { n, .. } => {
                let n64 = n as u64;
                if node.min_items.is_some_and(|m| n64 < m) || node.max_items.is_some_and(|m| n64 > m) {
                    return fail("invalid_items");
                }
                if node.unique && !self.unique(at, n) {
                    return fail("unique_items"); // not unique, or not certain
                }
                if let Some(items) = node.items {
                    let mut item = at + 1;
                    for _ in 0..n {
                        if !self.valid(items, item) {
                            return false;
                        }
                        item = self.skip(item);
                    }
                }
            }
            Tok::Obj { n, .. } => {
                if !self.object_valid(node, at, n) {
                    return false;
                }
            }
            Tok::Null | Tok::Bool(_) => {}
        }
        if !node.all_of.iter().all(|&b| self.valid(b, at)) {
            return false;
        }
        if !node.any_of.is_empty() && !node.any_of.iter().any(|&b| self.valid(b, at)) {
            return false;
        }
        if !node.one_of.is_empty() {
            let mut matched = 0;
            for &b in &node.one_of {
                if self.valid(b, at) {
                    matched += 1;
                } else if !self.rejects(b, at) {
                    return fail("one_of_uncertain"); // a branch that might validate too
                }
            }
            if matched != 1 {
                return fail("invalid_one_of");
            }
        }
        if node.not.is_some_and(|not| !self.rejects(not, at)) {
            return fail("not_uncertain");
        }
        node.reference.is_none_or(|target| self.valid(target, at))
    }

    /// Whether the `n` items of the array at `at` are certainly unique: strings, integers and
    /// nulls only (`jsonschema`'s `uniq` tells `true` from 1 and `1.0` equals 1 to it: arrays
    /// with booleans, floats, arrays or objects are not certain here).
    fn unique(&self, at: usize, n: u32) -> bool {
        let items: Vec<Tok> = (0..n as usize).map(|k| self.tape[at + 1 + k]).collect();
        if !items.iter().all(|t| matches!(t, Tok::Str { .. } | Tok::Int(_) | Tok::Null)) {
            return false; // (scalars only: each item is one token, at at + 1 + k)
        }
        for (k, &a) in items.iter().enumerate() {
            for &b in &items[..k] {
                let same = match (a, b) {
                    (Tok::Null, Tok::Null) => true,
                    (Tok::Int(x), Tok::Int(y)) => x == y,
                    (Tok::Str { s, e, escaped }, Tok::Str { s: s2, e: e2, escaped: esc2 }) => {
                        self.text(s, e, escaped) == self.text(s2, e2, esc2)
                    }
                    _ => false,
                };
                if same {
                    return false;
                }
            }
        }
        true
    }

    fn in_bounds(&self, node: &Node, tok: Tok) -> bool {
        use std::cmp::Ordering::*;
        let check = |bound: Option<Bound>, ok: &[std::cmp::Ordering]| {
            bound.is_none_or(|b| cmp_bound(tok, b).is_some_and(|o| ok.contains(&o)))
        };
        check(node.minimum, &[Greater, Equal])
            && check(node.maximum, &[Less, Equal])
            && check(node.exclusive_minimum, &[Greater])
            && check(node.exclusive_maximum, &[Less])
    }

    fn object_valid(&self, node: &Node, at: usize, n: u32) -> bool {
        if let Some(names) = node.property_names {
            // Each key is a string token of the tape: validated as the string it is.
            let mut member = at + 1;
            for _ in 0..n {
                if !self.valid(names, member) {
                    return false;
                }
                member = self.skip(member + 1);
            }
        }
        for name in &node.required {
            let mut member = at + 1;
            let mut found = false;
            for _ in 0..n {
                if self.key(member) == name.as_slice() {
                    found = true;
                    break;
                }
                member = self.skip(member + 1);
            }
            if !found {
                return fail("invalid_required");
            }
        }
        if node.properties.is_empty() && node.additional.is_none() {
            return true;
        }
        // Every member's value; of a key given twice, the last one (Python's dict keeps it).
        let mut member = at + 1;
        for _ in 0..n {
            let key = self.key(member);
            let value = member + 1;
            let mut later = self.skip(value);
            let mut again = false;
            while later < self.end(at) {
                if self.key(later) == key {
                    again = true;
                    break;
                }
                later = self.skip(later + 1);
            }
            if again {
                member = self.skip(value);
                continue;
            }
            match node.properties.iter().find(|(name, _)| name.as_slice() == key) {
                Some(&(_, child)) => {
                    if !self.valid(child, value) {
                        return false;
                    }
                }
                None => {
                    if node.additional.is_some_and(|extra| !self.valid(extra, value)) {
                        return fail("invalid_additional");
                    }
                }
            }
            member = self.skip(value);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON_SCHEMA: &str = r#"{"type": "object", "required": ["n", "d", "t"], "properties": {
        "n": {"type": "integer", "minimum": 0},
        "d": {"type": "string", "format": "date"},
        "t": {"type": "string", "format": "date-time"}}}"#;
    /// `map_json_schema`'s record of [`JSON_SCHEMA`].
    const AVRO: &str = r#"{"type": "record", "name": "R", "fields": [{"name": "n", "type": "long"},
        {"name": "d", "type": {"logicalType": "date", "type": "int"}},
        {"name": "t", "type": {"logicalType": "timestamp-micros", "type": "long"}}]}"#;

    fn encode(json: &str) -> Option<Vec<u8>> {
        let mut entry = Entry::compile(JSON_SCHEMA, AVRO, &[], true, Route::Constant(0)).unwrap();
        entry.encode(json.as_bytes(), &mut []).ok().map(|_| entry.body().to_vec())
    }

    #[test]
    fn a_valid_value_is_converted_and_encoded_as_the_python_path_does() {
        // {'n': 5, 'd': 19782, 't': 1709197200123456}: digits past microseconds dropped
        let body = encode(r#"{"n": 5, "d": "2024-02-29", "t": "2024-02-29T10:00:00.1234567+01:00"}"#);
        assert_eq!(body, Some(b"\x0a\x8c\xb5\x02\x80\x99\xb7\xbf\xaf\xa0\x89\x06".to_vec()));
    }

    #[test]
    fn a_value_the_schema_rejects_or_the_converter_cannot_read_is_handed_back() {
        for json in [
            r#"{"n": -1, "d": "2024-02-29", "t": "2024-02-29T10:00:00Z"}"#, // minimum
            r#"{"d": "2024-02-29", "t": "2024-02-29T10:00:00Z"}"#,          // required
            r#"{"n": 1, "d": "2023-02-29", "t": "2024-02-29T10:00:00Z"}"#,  // no such day
            r#"{"n": 1, "d": "2024-02-29", "t": "2024-02-29T10:00:00"}"#,   // a naive time
        ] {
            assert!(encode(json).is_none(), "{json}");
        }
    }

    #[test]
    fn a_schema_with_what_the_kernel_does_not_validate_is_refused() {
        let pattern = r#"{"type": "object", "properties": {"s": {"type": "string", "pattern": "a+b"}}}"#;
        let avro = r#"{"type": "record", "name": "R", "fields": [{"name": "s", "type": ["null", "string"]}]}"#;
        assert!(Entry::compile(pattern, avro, &[], true, Route::Constant(0)).is_err());
    }
}
