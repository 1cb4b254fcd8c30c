//! Topics keyed by their Kafka key (`keyed.key_from: kafka_key`: compacted topics, KTables) with
//! Confluent Avro, `format: json` or `format: json_schema` values: every message, a tombstone
//! included, is one changelog record.
//! `kbqe_dagster/keyed/table_changes.py` is the reference (`KafkaKeys`, `TableLayout`):
//!
//! - **the key columns** are the Kafka key's Avro encoding: a string key's UTF-8 text as one
//!   `string`, a JSON key's named fields each as its `key_types` says, an Avro key's body (its
//!   record's fields) as it is, after validating it with the key schema the Python driver gave;
//! - **a value's record** is the change columns (`u`, or `d` when the delete field is true; the
//!   version field's value, else the Kafka timestamp, else 0), the key columns, then the value's
//!   top-level fields, each as the layout's action says: kept (already nullable), wrapped
//!   (branch 1 of `["null", T]` before it), shifted (a union without null: its branch index
//!   plus one) or dropped (named like a key column);
//! - **a tombstone's record** is `d`, its Kafka timestamp (0 without), `true`, and the key
//!   columns alone, dated by its Kafka timestamp.
//!
//! A topic whose values are `format: json` (`Table::json_values`) has one value layout per key
//! layout, under the header [`JSON_HEADER`]: each value is first encoded as its declared schema
//! says (json.rs, the append kernel's encoder, handing back what it is not certain of), then
//! that body is cut as an Avro value's is. A topic whose values are `format: json_schema`
//! (`Table::json_schema_values`) is taught one entry per frame header (json_schema.rs: the
//! registry JSON Schema's validator and the encoder of the Avro record derived from it), and
//! its layouts under that header: each value is validated and encoded by its header's entry
//! (handing back what it is not certain of), then cut in the same way.
//!
//! Which layout a message takes is the Python driver's to compute (keyed/table_native.py) and
//! teach, per key layout and value header; the kernel copies bytes. What it is not certain
//! of — a null or unreadable key, a key or value it was not taught, a JSON key of a spelling
//! Python might read otherwise, a null version, a body whose slice the Python skippers might
//! cut elsewhere (a sized array/map block) — is handed back: the Python path's verdict.

use rustc_hash::FxHashMap as HashMap;

use crate::body::{Cursor, Plan, Stop, Value, Walker, R};
use crate::changes::{columns, nullable, semantic_type};
use crate::prefix::put_long;
use crate::rewrite::FieldRewrite;
use crate::schema::{Kind, Schema, Unsupported};
use crate::{json_schema, protobuf};

/// The value header a `format: json` table topic's layouts are taught under: its values carry
/// none, and the declared schema is one for all of them.
pub const JSON_HEADER: [u8; 5] = *b"json:";

/// How a Kafka key becomes key columns (`keyed.key_format`).
pub enum KeyFormat {
    /// One `string` column: the key's UTF-8 text.
    String,
    /// The named fields of a JSON object, each of its kind.
    Json(Vec<(String, JsonKind)>),
    /// A Confluent-framed Avro record: its body, validated with the key schema of its header.
    Avro,
}

/// A JSON key field's `key_types` (table_changes.py `_encode_json_field`).
#[derive(Clone, Copy)]
pub enum JsonKind {
    String,
    Long,
    Double,
    Boolean,
}

impl JsonKind {
    pub fn parse(kind: &str) -> Result<JsonKind, Unsupported> {
        Ok(match kind {
            "string" => JsonKind::String,
            "long" => JsonKind::Long,
            "double" => JsonKind::Double,
            "boolean" => JsonKind::Boolean,
            _ => return Err(Unsupported(format!("a JSON key field of type {kind:?}"))),
        })
    }
}

/// A value field's action (table_changes.py `_KEEP`, `_WRAP`, `_SHIFT`, `_DROP`).
#[derive(Clone, Copy, PartialEq)]
enum Action {
    Keep,
    Wrap,
    Shift,
    Drop,
}

/// The changelog record of one key layout and one value writer schema.
pub struct ValueLayout {
    pub schema: Schema,
    pub plan: Plan,
    pub slot: usize,
    actions: Vec<Action>,
    version: Option<usize>,
    delete: Option<usize>,
    /// The top-level fields whose Kafka Connect semantic values are re-encoded (the Python
    /// path's `TableLayout._converted`), by index, in order: the body is then walked in
    /// canonical mode, as fastavro re-encodes all of it (changes.rs does the same).
    rewrites: Vec<(usize, FieldRewrite)>,
}

/// Why a message goes back: its layout was not taught yet (the driver teaches it), or the
/// kernel is not certain of its key.
pub enum KeyStop {
    Unknown,
    Uncertain,
}

/// What a table topic's kernel was taught: the key format, the Avro key schemas by header, and
/// the changelog layouts by (key layout, value header) and, for tombstones, by key layout.
pub struct Table {
    format: KeyFormat,
    key_schemas: Vec<(Schema, Plan)>,
    key_by_header: HashMap<[u8; 5], usize>,
    values: HashMap<(usize, [u8; 5]), ValueLayout>,
    tombstones: HashMap<usize, usize>,
    values_format: Values,
}

/// How a table topic's values become the Avro bodies its layouts cut.
enum Values {
    /// Confluent Avro: the body after the frame, as it is.
    Avro,
    /// `format: json`: encoded under the declared schema; layouts under [`JSON_HEADER`].
    Json(Box<crate::json::Encoder>),
    /// `format: json_schema`: validated and encoded by the entry of the frame's header (`last`:
    /// the header of the value encoded last); layouts under that header.
    JsonSchema { entries: HashMap<[u8; 5], json_schema::Entry>, last: [u8; 5] },
    /// `format: protobuf`: decoded and encoded by the decoder of the frame's prefix (the header
    /// and message indexes, `by_prefix`: an index into `decoders`); layouts under the
    /// [`protobuf_header`] of that index (`last`: the decoder of the value encoded last).
    Protobuf { by_prefix: HashMap<Vec<u8>, usize>, decoders: Vec<protobuf::Decoder>, last: usize },
}

/// The header a `format: protobuf` table topic's layouts of its `index`th message type are
/// taught under: one 5-byte header may frame several message types (by their indexes), so
/// each type's layouts take a header of their own, one no Confluent frame starts with.
pub fn protobuf_header(index: usize) -> [u8; 5] {
    let [a, b, c, d] = (index as u32).to_be_bytes();
    [b'p', a, b, c, d]
}

/// Why a value the table encodes goes back to the Python path.
pub enum ValueStop {
    /// Shorter than a frame header.
    Unframed,
    /// A frame header the driver has not taught (it may: `table_unknown`).
    Unknown,
    /// A value the encoders hand back (json.rs, json_schema.rs, protobuf.rs): the reason.
    Uncertain(&'static str),
}

impl Table {
    pub fn new(format: KeyFormat) -> Table {
        Table {
            format,
            key_schemas: Vec::new(),
            key_by_header: HashMap::default(),
            values: HashMap::default(),
            tombstones: HashMap::default(),
            values_format: Values::Avro,
        }
    }

    /// From now on values are `format: json` under the declared schema `encoder` encodes: their
    /// layouts are taught under [`JSON_HEADER`].
    pub fn json_values(&mut self, encoder: crate::json::Encoder) {
        self.values_format = Values::Json(Box::new(encoder));
    }

    /// From now on values are `format: json_schema`; those framed by `header` are validated
    /// and encoded by `entry`, and their layouts are taught under `header`.
    pub fn json_schema_values(&mut self, header: [u8; 5], entry: json_schema::Entry) {
        if !matches!(self.values_format, Values::JsonSchema { .. }) {
            self.values_format = Values::JsonSchema { entries: HashMap::default(), last: header };
        }
        if let Values::JsonSchema { entries, .. } = &mut self.values_format {
            entries.insert(header, entry);
        }
    }

    /// From now on values are `format: protobuf`; those framed by `prefix` (the header and
    /// message indexes) are decoded and encoded by `decoder`. The header its layouts are
    /// taught under ([`protobuf_header`]).
    pub fn protobuf_values(&mut self, prefix: &[u8], decoder: protobuf::Decoder) -> [u8; 5] {
        if !matches!(self.values_format, Values::Protobuf { .. }) {
            self.values_format = Values::Protobuf { by_prefix: HashMap::default(), decoders: Vec::new(), last: 0 };
        }
        let Values::Protobuf { by_prefix, decoders, .. } = &mut self.values_format else { unreachable!() };
        let index = *by_prefix.entry(prefix.to_vec()).or_insert(decoders.len());
        if index == decoders.len() {
            decoders.push(decoder);
        } else {
            decoders[index] = decoder;
        }
        protobuf_header(index)
    }

    /// Whether values are encoded (`encode_value`) before a layout cuts them.
    pub fn encodes_values(&self) -> bool {
        !matches!(self.values_format, Values::Avro)
    }

    /// Encode the value `value` (JSON; or framed JSON or Protobuf, with its frame) as its
    /// schema says (its wanted fields into `values`); a `ValueStop` hands it back.
    pub fn encode_value(&mut self, value: &[u8], values: &mut [Value]) -> Result<(), ValueStop> {
        match &mut self.values_format {
            Values::Avro => Err(ValueStop::Uncertain("body_uncertain")),
            Values::Json(encoder) => {
                encoder.encode(value, values).map_err(|Stop| ValueStop::Uncertain("json_uncertain"))
            }
            Values::JsonSchema { entries, last } => {
                let Some(header) = value.get(..5) else { return Err(ValueStop::Unframed) };
                let header: [u8; 5] = header.try_into().unwrap();
                let entry = entries.get_mut(&header).ok_or(ValueStop::Unknown)?;
                *last = header;
                entry.encode(&value[5..], values).map_err(|Stop| ValueStop::Uncertain("json_uncertain"))
            }
            Values::Protobuf { by_prefix, decoders, last } => {
                if value.len() < 5 {
                    return Err(ValueStop::Unframed);
                }
                // Indexes not well formed: the driver's to judge (the Python path's verdict).
                let split = protobuf::frame_prefix(value).ok_or(ValueStop::Unknown)?;
                let &index = by_prefix.get(&value[..split]).ok_or(ValueStop::Unknown)?;
                *last = index;
                decoders[index]
                    .encode(&value[split..], values)
                    .map_err(|Stop| ValueStop::Uncertain("protobuf_uncertain"))
            }
        }
    }

    /// The value header and body `encode_value` wrote last (empty for Avro values).
    pub fn encoded(&self) -> ([u8; 5], &[u8]) {
        match &self.values_format {
            Values::Avro => ([0; 5], &[]),
            Values::Json(encoder) => (JSON_HEADER, encoder.body()),
            Values::JsonSchema { entries, last } => (*last, entries.get(last).map_or(&[], |e| e.body())),
            Values::Protobuf { decoders, last, .. } => {
                (protobuf_header(*last), decoders.get(*last).map_or(&[], |d| d.body()))
            }
        }
    }

    /// The key layout of an Avro key framed by `header` (compiling `schema` the first time),
    /// or the one key layout of a string or JSON key (`header` empty).
    pub fn key_layout(&mut self, header: &[u8], schema: Option<Schema>) -> Result<usize, Unsupported> {
        match self.format {
            KeyFormat::Avro => {
                let header: [u8; 5] =
                    header.try_into().map_err(|_| Unsupported("an Avro key's header is 5 bytes".into()))?;
                if let Some(&at) = self.key_by_header.get(&header) {
                    return Ok(at);
                }
                let schema = schema.ok_or_else(|| Unsupported("an Avro key layout without its schema".into()))?;
                if !matches!(schema.nodes[schema.top], Kind::Record { .. }) {
                    return Err(Unsupported("an Avro key that is not a record".into()));
                }
                let plan = crate::body::plan(&schema, &[], false)?;
                self.key_schemas.push((schema, plan));
                self.key_by_header.insert(header, self.key_schemas.len() - 1);
                Ok(self.key_schemas.len() - 1)
            }
            _ if header.is_empty() && schema.is_none() => Ok(0),
            _ => Err(Unsupported("a string or JSON key has no header nor schema".into())),
        }
    }

    /// Take on the tombstones of key layout `key`: their records go to file slot `slot`.
    pub fn add_tombstones(&mut self, key: usize, slot: usize) {
        self.tombstones.insert(key, slot);
    }

    /// Take on the values framed by `header` under key layout `key`: `schema` (its `plan`
    /// reading the wanted slots), whose top-level fields take `actions` (0 keep, 1 wrap, 2
    /// shift, 3 drop), its version and delete fields' wanted slots, into file slot `slot`;
    /// `rewrites`: the fields re-encoded before their action (index, kind of rewrite.rs
    /// `FieldRewrite::semantic`), each of the kind's Avro type or a union of null and it.
    #[allow(clippy::too_many_arguments)]
    pub fn add_values(
        &mut self,
        key: usize,
        header: &[u8],
        schema: Schema,
        plan: Plan,
        slot: usize,
        actions: &[u8],
        version: Option<usize>,
        delete: Option<usize>,
        rewrites: &[(usize, String)],
    ) -> Result<(), Unsupported> {
        let header: [u8; 5] = header.try_into().map_err(|_| Unsupported("a value's header is 5 bytes".into()))?;
        let Kind::Record { fields, .. } = &schema.nodes[schema.top] else {
            return Err(Unsupported("a value that is not a record".into()));
        };
        if fields.len() != actions.len() {
            return Err(Unsupported(format!("{} actions for {} fields", actions.len(), fields.len())));
        }
        let mut parsed = Vec::with_capacity(actions.len());
        for (action, (_, t)) in actions.iter().zip(fields) {
            parsed.push(match action {
                0 => Action::Keep,
                1 => Action::Wrap,
                2 if matches!(schema.nodes[*t], Kind::Union(_)) => Action::Shift,
                3 => Action::Drop,
                _ => return Err(Unsupported(format!("a field action {action}"))),
            });
        }
        let mut compiled: Vec<(usize, FieldRewrite)> = Vec::with_capacity(rewrites.len());
        for (at, kind) in rewrites {
            let refuse = |why: &str| Unsupported(format!("field {at} re-encoded as {kind}: {why}"));
            if compiled.last().is_some_and(|(last, _)| last >= at) {
                return Err(refuse("not after the previous one"));
            }
            let (_, t) = fields.get(*at).ok_or_else(|| refuse("no such field"))?;
            let (null, value) = nullable(&schema, *t);
            if !semantic_type(&schema, value, kind) {
                return Err(refuse("not of the kind's Avro type"));
            }
            compiled.push((*at, FieldRewrite::semantic(kind, null)?));
        }
        let layout = ValueLayout { schema, plan, slot, actions: parsed, version, delete, rewrites: compiled };
        self.values.insert((key, header), layout);
        Ok(())
    }

    /// The key columns of Kafka key `key` into `out`, and its key layout.
    pub fn read_key(&self, key: &[u8], out: &mut Vec<u8>) -> Result<usize, KeyStop> {
        out.clear();
        match &self.format {
            KeyFormat::String => {
                std::str::from_utf8(key).map_err(|_| KeyStop::Uncertain)?;
                put_long(out, key.len() as i64);
                out.extend_from_slice(key);
                Ok(0)
            }
            KeyFormat::Json(fields) => {
                json_key(key, fields, out).map_err(|_| KeyStop::Uncertain)?;
                Ok(0)
            }
            KeyFormat::Avro => {
                if key.len() < 5 || key[0] != 0 {
                    return Err(KeyStop::Uncertain);
                }
                let header: [u8; 5] = key[..5].try_into().unwrap();
                let Some(&at) = self.key_by_header.get(&header) else { return Err(KeyStop::Unknown) };
                let (schema, plan) = &self.key_schemas[at];
                let body = &key[5..];
                let mut c = Cursor::new(body);
                if (Walker { schema }).walk(schema.top, plan, &mut c, &mut [], 0).is_err() || !c.at_end() {
                    return Err(KeyStop::Uncertain);
                }
                out.extend_from_slice(body);
                Ok(at)
            }
        }
    }

    /// The tombstone file slot of key layout `key`, if taught.
    pub fn tombstone_slot(&self, key: usize) -> Option<usize> {
        self.tombstones.get(&key).copied()
    }

    /// The layout of values framed by `header` under key layout `key`, if taught.
    pub fn value_layout(&self, key: usize, header: &[u8; 5]) -> Option<&ValueLayout> {
        self.values.get(&(key, *header))
    }
}

impl ValueLayout {
    /// Whether values are walked in canonical mode (their semantic fields are re-encoded).
    pub fn canonical(&self) -> bool {
        !self.rewrites.is_empty()
    }

    /// The changelog record of a value (`body`, walked: `values` read, `starts` its top-level
    /// fields' starts and the end) with key columns `key` into `out`.
    pub fn record(
        &self,
        body: &[u8],
        values: &[Value],
        starts: &[usize],
        key: &[u8],
        kafka_timestamp_ms: Option<i64>,
        out: &mut Vec<u8>,
    ) -> R<()> {
        out.clear();
        // `int(value)`, or a timestamp as epoch milliseconds (floored); null: not a change.
        let version = match self.version.map(|slot| values[slot]) {
            None => kafka_timestamp_ms.unwrap_or(0),
            Some(Value::Int(v) | Value::Millis(v)) => v,
            Some(Value::Micros(us)) => us.div_euclid(1000),
            Some(_) => return Err(Stop),
        };
        let deleted = match self.delete.map(|slot| values[slot]) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => b,
            Some(_) => return Err(Stop),
        };
        columns(out, if deleted { b'd' } else { b'u' }, version, deleted);
        out.extend_from_slice(key);
        let mut rewrites = self.rewrites.iter().peekable();
        let mut converted = Vec::new();
        for (i, action) in self.actions.iter().enumerate() {
            let mut field = &body[starts[i]..starts[i + 1]];
            if let Some((_, rewrite)) = rewrites.next_if(|(at, _)| *at == i) {
                // Converted first (a dropped field too: Python converts the whole row).
                converted.clear();
                converted.extend_from_slice(field);
                rewrite.apply(&mut converted, 0)?;
                field = &converted;
            }
            match action {
                Action::Keep => out.extend_from_slice(field),
                Action::Wrap => {
                    out.push(2);
                    out.extend_from_slice(field);
                }
                Action::Shift => {
                    let mut c = Cursor::new(field);
                    let branch = c.long()?;
                    put_long(out, branch.checked_add(1).ok_or(Stop)?);
                    out.extend_from_slice(&field[c.pos..]);
                }
                Action::Drop => {}
            }
        }
        Ok(())
    }
}

/// A tombstone's changelog record: `d`, its version, deleted, and the key columns.
pub fn tombstone(key: &[u8], kafka_timestamp_ms: Option<i64>, out: &mut Vec<u8>) {
    out.clear();
    columns(out, b'd', kafka_timestamp_ms.unwrap_or(0), true);
    out.extend_from_slice(key);
}

/// A JSON key's named fields (table_changes.py `KafkaKeys._json`), each encoded as its kind.
/// Only what `json.loads` reads alike: serde_json refuses what Python might read otherwise
/// (NaN, a byte-order mark, a lone surrogate, other encodings than UTF-8) and both keep the
/// last of a repeated name; a number whose literal's form decides its value in Python (a
/// negative zero, an integer past 2^63 read as a float) is handed back.
fn json_key(key: &[u8], fields: &[(String, JsonKind)], out: &mut Vec<u8>) -> R<()> {
    let value: serde_json::Value = serde_json::from_slice(key).map_err(|_| Stop)?;
    let serde_json::Value::Object(object) = value else { return Err(Stop) };
    for (name, kind) in fields {
        match (kind, object.get(name).ok_or(Stop)?) {
            (JsonKind::String, serde_json::Value::String(s)) => {
                put_long(out, s.len() as i64);
                out.extend_from_slice(s.as_bytes());
            }
            (JsonKind::Long, serde_json::Value::Number(n)) => put_long(out, n.as_i64().ok_or(Stop)?),
            (JsonKind::Double, serde_json::Value::Number(n)) => {
                let v = if let Some(i) = n.as_i64() {
                    i as f64
                } else if let Some(u) = n.as_u64() {
                    u as f64
                } else {
                    let f = n.as_f64().ok_or(Stop)?;
                    // "-0" is Python's int 0 (0.0), serde's -0.0; a long integer literal is
                    // Python's exact int, serde's float: not told apart here.
                    if !f.is_finite() || (f == 0.0 && f.is_sign_negative()) || f.abs() >= 9.2e18 {
                        return Err(Stop);
                    }
                    f
                };
                out.extend_from_slice(&v.to_le_bytes());
            }
            (JsonKind::Boolean, serde_json::Value::Bool(b)) => out.push(*b as u8),
            _ => return Err(Stop),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(key: &str, fields: &[(&str, JsonKind)]) -> Option<Vec<u8>> {
        let fields: Vec<(String, JsonKind)> = fields.iter().map(|(n, k)| (n.to_string(), *k)).collect();
        let mut out = Vec::new();
        json_key(key.as_bytes(), &fields, &mut out).ok().map(|_| out)
    }

    #[test]
    fn a_json_key_s_named_fields_are_encoded_in_their_kinds_and_the_rest_ignored() {
        let fields = [("region", JsonKind::String), ("id", JsonKind::Long)];
        assert_eq!(json(r#"{"id": -1, "region": "eu", "x": [1, {"y": null}]}"#, &fields), Some(b"\x04eu\x01".to_vec()));
        assert_eq!(json(r#"{"id": 1, "id": 2, "region": ""}"#, &fields), Some(b"\x00\x04".to_vec())); // the last
        assert_eq!(json(r#"{"d": 2}"#, &[("d", JsonKind::Double)]), Some(2f64.to_le_bytes().to_vec()));
        assert_eq!(json(r#"{"d": 0.1}"#, &[("d", JsonKind::Double)]), Some(0.1f64.to_le_bytes().to_vec()));
        assert_eq!(json(r#"{"b": true}"#, &[("b", JsonKind::Boolean)]), Some(vec![1]));
    }

    #[test]
    fn a_json_key_python_might_read_otherwise_or_refuse_is_handed_back() {
        let id = [("id", JsonKind::Long)];
        for key in [
            "[1]",
            "{}",
            r#"{"id": null}"#,
            r#"{"id": "1"}"#,
            r#"{"id": 1.0}"#,
            r#"{"id": true}"#,
            r#"{"id": 9223372036854775808}"#,
            r#"{"id": NaN}"#,
            "\u{feff}{\"id\": 1}",
            r#"{"id": 1} x"#,
        ] {
            assert_eq!(json(key, &id), None, "{key}");
        }
        let d = [("d", JsonKind::Double)];
        for key in [r#"{"d": -0}"#, r#"{"d": -0.0}"#, r#"{"d": 1e400}"#, r#"{"d": 99999999999999999999}"#] {
            assert_eq!(json(key, &d), None, "{key}");
        }
        assert_eq!(json(r#"{"s": "\ud800"}"#, &[("s", JsonKind::String)]), None);
    }

    fn avro_table() -> Table {
        let mut table = Table::new(KeyFormat::Avro);
        let schema =
            Schema::compile(r#"{"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"}]}"#, &[])
                .unwrap();
        assert_eq!(table.key_layout(b"\x00\x00\x00\x00\x08", Some(schema)).unwrap(), 0);
        table
    }

    #[test]
    fn an_avro_key_is_its_validated_body_under_the_schema_of_its_header() {
        let table = avro_table();
        let mut out = Vec::new();
        assert!(matches!(table.read_key(b"\x00\x00\x00\x00\x08\x02", &mut out), Ok(0)));
        assert_eq!(out, b"\x02");
        assert!(matches!(table.read_key(b"\x00\x00\x00\x00\x09\x02", &mut out), Err(KeyStop::Unknown)));
        for bad in [&b"\x00\x00\x00\x00\x08\x02\x00"[..], b"\x00\x00\x00\x00\x08", b"\x01\x00\x00\x00\x08\x02", b"C-1"]
        {
            assert!(matches!(table.read_key(bad, &mut out), Err(KeyStop::Uncertain)));
        }
    }

    #[test]
    fn a_string_key_is_one_string_column_of_utf8_text() {
        let table = Table::new(KeyFormat::String);
        let mut out = Vec::new();
        assert!(matches!(table.read_key("zürich".as_bytes(), &mut out), Ok(0)));
        assert_eq!(out, b"\x0ez\xc3\xbcrich");
        assert!(matches!(table.read_key(b"\xff", &mut out), Err(KeyStop::Uncertain)));
        assert!(matches!(table.read_key(b"\xed\xa0\x80", &mut out), Err(KeyStop::Uncertain)));
        // a surrogate
    }

    #[test]
    fn a_value_s_fields_are_kept_wrapped_shifted_or_dropped_after_the_key_columns() {
        let mut table = avro_table();
        let schema = Schema::compile(
            r#"{"type": "record", "name": "V", "fields": [
                {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
                {"name": "tier", "type": ["null", "string"]}, {"name": "n", "type": ["int", "string"]},
                {"name": "ts", "type": "long"}]}"#,
            &[],
        )
        .unwrap();
        let plan = crate::body::plan(&schema, &["ts".to_string()], true).unwrap();
        let header = b"\x00\x00\x00\x00\x07";
        // An action per top-level field, or the layout is refused.
        let one_field = r#"{"type": "record", "name": "X", "fields": [{"name": "a", "type": "long"}]}"#;
        assert!(table
            .add_values(0, header, Schema::compile(one_field, &[]).unwrap(), Plan::Skip, 1, &[], None, None, &[])
            .is_err());
        table.add_values(0, header, schema, plan, 4, &[3, 1, 0, 2, 1], Some(0), None, &[]).unwrap();
        let layout = table.value_layout(0, header).unwrap();
        // id 1, "Ada", null, int 5 (branch 0), ts 100
        let body = b"\x02\x06Ada\x00\x00\x0a\xc8\x01";
        let walker = Walker { schema: &layout.schema };
        let (mut values, mut starts) = (vec![Value::Null], Vec::new());
        walker.walk_fields(&layout.plan, &mut Cursor::new(body), &mut values, &mut starts).unwrap();
        let mut out = Vec::new();
        layout.record(body, &values, &starts, b"\x02", Some(9), &mut out).unwrap();
        assert_eq!(out, b"\x02u\xc8\x01\x00\x02\x02\x06Ada\x00\x02\x0a\x02\xc8\x01");
        values[0] = Value::Null; // a null version is not a change: Python's verdict
        assert!(layout.record(body, &values, &starts, b"\x02", Some(9), &mut out).is_err());
        tombstone(b"\x02", None, &mut out);
        assert_eq!(out, b"\x02d\x00\x01\x02");
    }

    #[test]
    fn a_json_value_is_encoded_as_declared_then_cut_by_the_layout_of_the_json_header() {
        let declared = r#"{"type": "record", "name": "V", "fields": [
            {"name": "customer_key", "type": "string"}, {"name": "name", "type": "string"},
            {"name": "tier", "type": ["null", "string"], "default": null}]}"#;
        let mut table = Table::new(KeyFormat::String);
        assert!(!table.encodes_values());
        table.json_values(crate::json::Encoder::compile(declared, &[]).unwrap());
        let schema = Schema::compile(declared, &[]).unwrap();
        let plan = crate::body::plan(&schema, &[], true).unwrap();
        table.add_values(0, &JSON_HEADER, schema, plan, 2, &[3, 1, 0], None, None, &[]).unwrap();
        let mut key = Vec::new();
        assert!(matches!(table.read_key(b"C-1", &mut key), Ok(0)));
        assert!(table.encode_value(br#"{"name": "Ada", "customer_key": "x"}"#, &mut []).is_ok());
        assert_eq!(table.encoded(), (JSON_HEADER, &b"\x02x\x06Ada\x00"[..])); // the tier's default, null
        let layout = table.value_layout(0, &JSON_HEADER).unwrap();
        let body = table.encoded().1.to_vec();
        let mut starts = Vec::new();
        (Walker { schema: &layout.schema })
            .walk_fields(&layout.plan, &mut Cursor::new(&body), &mut [], &mut starts)
            .unwrap();
        let mut out = Vec::new();
        layout.record(&body, &[], &starts, &key, Some(1), &mut out).unwrap();
        // u, version 1 (its Kafka timestamp), not deleted, "C-1"; "Ada" wrapped; null kept
        assert_eq!(out, b"\x02u\x02\x00\x06C-1\x02\x06Ada\x00");
        assert!(table.encode_value(br#"{"name": 1}"#, &mut []).is_err()); // Python's verdict
    }
    #[test]
    fn a_json_schema_value_is_encoded_by_its_header_s_entry_then_cut_by_that_header_s_layout() {
        let json_schema = r#"{"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string"}, "n": {"type": "integer", "minimum": 0}}}"#;
        let avro = r#"{"type": "record", "name": "V", "fields": [{"name": "name", "type": "string"},
            {"name": "n", "type": ["null", "long"], "default": null}]}"#;
        let route = crate::route::Route::Constant(0);
        let mut table = Table::new(KeyFormat::String);
        table.json_schema_values(
            *b"\x00\x00\x00\x00\x1f",
            json_schema::Entry::compile(json_schema, avro, &[], true, route).unwrap(),
        );
        assert!(table.encodes_values());
        let schema = Schema::compile(avro, &[]).unwrap();
        let plan = crate::body::plan(&schema, &[], true).unwrap();
        table.add_values(0, b"\x00\x00\x00\x00\x1f", schema, plan, 2, &[1, 0], None, None, &[]).unwrap();
        assert!(table.encode_value(b"\x00\x00\x00\x00\x1f{\"name\": \"Ada\", \"n\": 3}", &mut []).is_ok());
        let (header, body) = table.encoded();
        assert_eq!((header, body), (*b"\x00\x00\x00\x00\x1f", &b"\x06Ada\x02\x06"[..]));
        assert!(table.value_layout(0, &header).is_some());
        // Another schema id is the driver's to teach; a short frame, a value its schema
        // rejects and one that is not JSON are the Python path's verdicts.
        assert!(matches!(table.encode_value(b"\x00\x00\x00\x00\x20{}", &mut []), Err(ValueStop::Unknown)));
        assert!(matches!(table.encode_value(b"\x00\x00", &mut []), Err(ValueStop::Unframed)));
        for rejected in [&b"{\"name\": \"A\", \"n\": -1}"[..], b"{\"n\": 1}", b"{\"name\": "] {
            let framed = [&b"\x00\x00\x00\x00\x1f"[..], rejected].concat();
            assert!(matches!(table.encode_value(&framed, &mut []), Err(ValueStop::Uncertain(_))));
        }
    }
}
