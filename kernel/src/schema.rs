//! Writer schemas compiled once per schema id into an arena of nodes the body walker follows.
//!
//! The input is the schema as fastavro's `parse_schema` leaves it (names fully qualified,
//! later uses of a named type written as its full name), serialized to JSON by the Python side.
//! The rules mirror the Python probe (`staging/probe/codegen.py`): the same kinds, the same
//! logical types checked, the same minimum sizes (which decide the zero-width-items rule).
//! Whatever this module does not implement is `Unsupported`: the schema then stays on the
//! Python path, which is always correct.

use serde_json::Value as Json;
use std::collections::HashMap;

pub type NodeId = usize;

/// Logical types whose values the Python probe checks (fastavro's converters would refuse
/// what is outside these rules); the kernel checks them the same way.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Logical {
    None,
    Date,
    TimestampMillis,
    TimestampMicros,
    /// `time-millis` (int) and `time-micros` (long): fastavro builds a `datetime.time`, whose
    /// hour must be 0..23 (body.rs checks the range).
    TimeMillis,
    TimeMicros,
    Uuid,
}

#[derive(Clone, Debug)]
pub enum Kind {
    Null,
    Boolean,
    Int(Logical),
    Long(Logical),
    Float,
    Double,
    Bytes,
    String(Logical),
    Fixed(usize),
    Enum(u64),
    Array(NodeId),
    Map(NodeId),
    Union(Vec<NodeId>),
    Record {
        #[allow(dead_code)] // shown by Debug
        name: String,
        fields: Vec<(String, NodeId)>,
    },
    /// A named record used before its definition ended (recursion): resolved after compiling.
    Pending(String),
}

#[derive(Debug)]
pub struct Unsupported(pub String);

pub struct Schema {
    pub nodes: Vec<Kind>,
    pub top: NodeId,
    min_sizes: Vec<usize>,
    /// The `decimal` nodes (bytes or fixed) and their precision: fastavro reads one as a
    /// `Decimal` rounded to that precision and writes it back by its own rules, which a
    /// transformed schema's canonical walk checks (body.rs, `canonical_decimal`).
    pub decimals: HashMap<NodeId, u64>,
    /// Per union with more than one non-null branch: whether a value read under each branch
    /// is one fastavro's writer certainly puts under that branch again ([`union_certainty`]).
    /// A transformed schema's canonical walk hands back a value under any other branch.
    pub unions: HashMap<NodeId, Vec<bool>>,
}

impl Schema {
    /// `logical_readers`: fastavro's converter keys (`int-date`, ...): a key fastavro converts
    /// that the kernel does not check makes the schema unsupported.
    pub fn compile(text: &str, logical_readers: &[String]) -> Result<Schema, Unsupported> {
        let json: Json = serde_json::from_str(text).map_err(|e| Unsupported(format!("schema JSON: {e}")))?;
        let mut c = Compiler { nodes: Vec::new(), named: HashMap::new(), logical_readers, decimals: HashMap::new() };
        let top = c.node(&json)?;
        let Compiler { mut nodes, named, decimals, .. } = c;
        // Uses of a name met before its definition point at the named node itself.
        let mut target = Vec::with_capacity(nodes.len());
        for (i, node) in nodes.iter().enumerate() {
            target.push(match node {
                Kind::Pending(name) => *named.get(name).ok_or_else(|| Unsupported(format!("unknown type {name}")))?,
                _ => i,
            });
        }
        for node in nodes.iter_mut() {
            match node {
                Kind::Array(id) | Kind::Map(id) => *id = target[*id],
                Kind::Union(ids) => ids.iter_mut().for_each(|id| *id = target[*id]),
                Kind::Record { fields, .. } => fields.iter_mut().for_each(|(_, id)| *id = target[*id]),
                _ => {}
            }
        }
        let top = target[top];
        if !matches!(nodes[top], Kind::Record { .. }) {
            return Err(Unsupported("the writer schema is not a record".into()));
        }
        let unions = nodes
            .iter()
            .enumerate()
            .filter_map(|(id, node)| match node {
                Kind::Union(branches) => union_certainty(&nodes, branches).map(|certain| (id, certain)),
                _ => None,
            })
            .collect();
        let mut schema = Schema { nodes, top, min_sizes: Vec::new(), decimals, unions };
        schema.min_sizes = (0..schema.nodes.len()).map(|i| schema.min_size(i, &mut Vec::new())).collect();
        Ok(schema)
    }

    /// Fewest bytes a value encodes to, as the probe's `min_size` counts them: a record met
    /// again inside itself counts 0.
    fn min_size(&self, id: NodeId, seen: &mut Vec<NodeId>) -> usize {
        match &self.nodes[id] {
            Kind::Null => 0,
            Kind::Float => 4,
            Kind::Double => 8,
            Kind::Fixed(n) => *n,
            Kind::Record { fields, .. } => {
                if seen.contains(&id) {
                    return 0;
                }
                seen.push(id);
                let total = fields.iter().map(|(_, t)| self.min_size(*t, seen)).sum();
                seen.pop();
                total
            }
            Kind::Pending(_) => 0,
            _ => 1,
        }
    }

    pub fn min_size_of(&self, id: NodeId) -> usize {
        self.min_sizes[id]
    }

    /// This schema with a top record of only the top-level fields named `keep`, in that
    /// order (the other nodes shared, a recursive use of the record still the whole one): a
    /// destination's projection (avro_transform.rs, `Output`). Err for a name that is not a
    /// top-level field, or named twice.
    pub fn projected(&self, keep: &[String]) -> Result<Schema, Unsupported> {
        let Kind::Record { name, fields } = &self.nodes[self.top] else {
            return Err(Unsupported("not a record".into()));
        };
        let mut kept = Vec::with_capacity(keep.len());
        for wanted in keep {
            let field = fields
                .iter()
                .find(|(n, _)| n == wanted)
                .ok_or_else(|| Unsupported(format!("no top-level field {wanted:?} to keep")))?;
            if kept.iter().any(|(n, _): &(String, NodeId)| n == wanted) {
                return Err(Unsupported(format!("field {wanted:?} kept twice")));
            }
            kept.push(field.clone());
        }
        let mut nodes = self.nodes.clone();
        nodes.push(Kind::Record { name: name.clone(), fields: kept });
        let top = nodes.len() - 1;
        let mut schema = Schema {
            nodes,
            top,
            min_sizes: self.min_sizes.clone(),
            decimals: self.decimals.clone(),
            unions: self.unions.clone(),
        };
        let size = schema.min_size(top, &mut Vec::new());
        schema.min_sizes.push(size);
        Ok(schema)
    }
}

struct Compiler<'a> {
    nodes: Vec<Kind>,
    named: HashMap<String, NodeId>,
    logical_readers: &'a [String],
    decimals: HashMap<NodeId, u64>,
}

const PRIMITIVES: [&str; 8] = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"];

impl<'a> Compiler<'a> {
    fn push(&mut self, kind: Kind) -> NodeId {
        self.nodes.push(kind);
        self.nodes.len() - 1
    }

    fn node(&mut self, json: &Json) -> Result<NodeId, Unsupported> {
        match json {
            Json::String(name) => self.named_or_primitive(name, Logical::None),
            Json::Array(branches) => {
                let id = self.push(Kind::Null);
                let mut ids = Vec::with_capacity(branches.len());
                for b in branches {
                    ids.push(self.node(b)?);
                }
                self.nodes[id] = Kind::Union(ids);
                Ok(id)
            }
            Json::Object(map) => {
                let t = map.get("type").ok_or_else(|| Unsupported("a type without 'type'".into()))?;
                let t = match t {
                    // {"type": {...}} and {"type": [...]}: the wrapper is the inner type.
                    Json::Object(_) | Json::Array(_) => return self.node(t),
                    Json::String(s) => s.as_str(),
                    _ => return Err(Unsupported("a 'type' that is not a string".into())),
                };
                let logical = match map.get("logicalType") {
                    Some(Json::String(l)) => self.logical(t, l)?,
                    _ => Logical::None,
                };
                let decimal = matches!(map.get("logicalType"), Some(Json::String(l)) if l == "decimal")
                    && (t == "bytes" || t == "fixed");
                match t {
                    "record" | "error" | "request" => {
                        let name = full_name(map)?;
                        let id = self.push(Kind::Null);
                        self.named.insert(name.clone(), id);
                        let mut fields = Vec::new();
                        let list = match map.get("fields") {
                            Some(Json::Array(list)) => list,
                            _ => return Err(Unsupported(format!("record {name} has no field list"))),
                        };
                        for f in list {
                            let fname = f
                                .get("name")
                                .and_then(Json::as_str)
                                .ok_or_else(|| Unsupported(format!("a field of {name} has no name")))?;
                            let ft = f.get("type").ok_or_else(|| Unsupported(format!("field {fname} has no type")))?;
                            fields.push((fname.to_string(), self.node(ft)?));
                        }
                        self.nodes[id] = Kind::Record { name, fields };
                        Ok(id)
                    }
                    "enum" => {
                        let count = match map.get("symbols") {
                            Some(Json::Array(s)) => s.len() as u64,
                            _ => return Err(Unsupported("an enum without symbols".into())),
                        };
                        let id = self.push(Kind::Enum(count));
                        self.named.insert(full_name(map)?, id);
                        Ok(id)
                    }
                    "fixed" => {
                        let size = map
                            .get("size")
                            .and_then(Json::as_u64)
                            .ok_or_else(|| Unsupported("a fixed without a size".into()))?
                            as usize;
                        let id = self.push(Kind::Fixed(size));
                        self.named.insert(full_name(map)?, id);
                        if decimal {
                            self.decimal(id, map)?;
                        }
                        Ok(id)
                    }
                    "array" => {
                        let id = self.push(Kind::Null);
                        let items =
                            self.node(map.get("items").ok_or_else(|| Unsupported("an array without items".into()))?)?;
                        self.nodes[id] = Kind::Array(items);
                        Ok(id)
                    }
                    "map" => {
                        let id = self.push(Kind::Null);
                        let values =
                            self.node(map.get("values").ok_or_else(|| Unsupported("a map without values".into()))?)?;
                        self.nodes[id] = Kind::Map(values);
                        Ok(id)
                    }
                    other => {
                        let id = self.named_or_primitive(other, logical)?;
                        if decimal {
                            self.decimal(id, map)?;
                        }
                        Ok(id)
                    }
                }
            }
            _ => Err(Unsupported("a schema node that is not a string, list or object".into())),
        }
    }

    fn named_or_primitive(&mut self, name: &str, logical: Logical) -> Result<NodeId, Unsupported> {
        let kind = match name {
            "null" => Kind::Null,
            "boolean" => Kind::Boolean,
            "int" => Kind::Int(logical),
            "long" => Kind::Long(logical),
            "float" => Kind::Float,
            "double" => Kind::Double,
            "bytes" => Kind::Bytes,
            "string" => Kind::String(logical),
            other => {
                debug_assert!(!PRIMITIVES.contains(&other));
                // A named type: the same node (recursion to a record being defined included).
                return match self.named.get(other) {
                    Some(id) => Ok(*id),
                    None => Ok(self.push(Kind::Pending(other.to_string()))),
                };
            }
        };
        Ok(self.push(kind))
    }

    /// Node `id` is a decimal of the precision `map` declares.
    fn decimal(&mut self, id: NodeId, map: &serde_json::Map<String, Json>) -> Result<(), Unsupported> {
        let precision = map
            .get("precision")
            .and_then(Json::as_u64)
            .ok_or_else(|| Unsupported("a decimal without a precision".into()))?;
        self.decimals.insert(id, precision);
        Ok(())
    }

    /// The logical type of a primitive or fixed node, as fastavro keys it (`int-date`).
    fn logical(&self, base: &str, logical: &str) -> Result<Logical, Unsupported> {
        let key = format!("{base}-{logical}");
        let known = match key.as_str() {
            "int-date" => Logical::Date,
            "long-timestamp-millis" | "long-local-timestamp-millis" => Logical::TimestampMillis,
            "long-timestamp-micros" | "long-local-timestamp-micros" => Logical::TimestampMicros,
            "string-uuid" => Logical::Uuid,
            "int-time-millis" => Logical::TimeMillis,
            "long-time-micros" => Logical::TimeMicros,
            // Converted by fastavro but accepting every value of the base type.
            "bytes-decimal" | "fixed-decimal" => Logical::None, // (its precision: `decimal`)
            _ if self.logical_readers.contains(&key) => {
                return Err(Unsupported(format!("logical type {key}")));
            }
            _ => Logical::None, // not a logical type fastavro knows: the base type
        };
        Ok(known)
    }
}

fn full_name(map: &serde_json::Map<String, Json>) -> Result<String, Unsupported> {
    map.get("name")
        .and_then(Json::as_str)
        .map(str::to_string)
        .ok_or_else(|| Unsupported("a named type without a name".into()))
}

/// fastavro's writer (`write_union`) picks a union's branch from the Python value: the first
/// branch whose validator takes it, except that a value a `float` branch takes goes under the
/// first `double` after it, if any (and records by most matching fields). For a union of plain
/// primitives that pick is known per branch from the class of value the reader makes of it
/// (bool, int, float, str, bytes; an int is taken by `int` (within its range), `long`, `float`
/// and `double`, a float by `float` and `double`, the others by their own type only): `true`
/// where it is the branch itself. Any other branch (logical types, named and complex types)
/// makes every branch uncertain. None for a union with at most one non-null branch: null, and
/// its only other branch, are always certain.
fn union_certainty(nodes: &[Kind], branches: &[NodeId]) -> Option<Vec<bool>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Class {
        Bool,
        Int,
        Float,
        Str,
        Bytes,
    }
    let class = |id: NodeId| match nodes[id] {
        Kind::Boolean => Some(Class::Bool),
        Kind::Int(Logical::None) | Kind::Long(Logical::None) => Some(Class::Int),
        Kind::Float | Kind::Double => Some(Class::Float),
        Kind::String(Logical::None) => Some(Class::Str),
        Kind::Bytes => Some(Class::Bytes),
        _ => None,
    };
    let null = |id: NodeId| matches!(nodes[id], Kind::Null);
    if branches.iter().filter(|b| !null(**b)).count() <= 1 {
        return None;
    }
    if branches.iter().any(|b| !null(*b) && class(*b).is_none()) {
        return Some(vec![false; branches.len()]);
    }
    let takes = |id: NodeId, value: Class| match (&nodes[id], value) {
        (Kind::Boolean, Class::Bool) | (Kind::String(_), Class::Str) | (Kind::Bytes, Class::Bytes) => true,
        // (an int branch takes only ints within its range: a long's value may be one)
        (Kind::Int(_) | Kind::Long(_), Class::Int) => true,
        (Kind::Float | Kind::Double, Class::Int | Class::Float) => true,
        _ => false,
    };
    Some(
        branches
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let Some(value) = class(*b) else { return false }; // null: certain, never asked
                let Some(mut pick) = branches.iter().position(|o| takes(*o, value)) else { return false };
                if matches!(nodes[branches[pick]], Kind::Float) {
                    if let Some(d) = branches[pick + 1..].iter().position(|o| matches!(nodes[*o], Kind::Double)) {
                        pick += 1 + d;
                    }
                }
                pick == i
            })
            .collect(),
    )
}
