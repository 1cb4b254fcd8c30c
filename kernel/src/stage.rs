//! The append path's stage kernel ([`StageKernel`]). It does, for a batch of consumed Kafka messages, the per-message work of the append stage
//! path (`kbqe_dagster/staging/task.py`, the reference implementation): Confluent frame →
//! compiled schema → validated body and wanted values → route → event day → enrichment prefix
//! → the record appended to its file's buffer. It stops at the first message it is not certain
//! about (a Kafka event, a message past the range, a null, oversized or unframed value, a
//! schema it has not been given, a body it does not accept, an event time or route it does not
//! know) and returns its index: the Python path stages that message exactly as it would
//! without the kernel, teaches the kernel what it learned (a schema, a route), and resumes it
//! after that message. Dead letters, reasons and counts are therefore always the Python path's.
//!
//! Records leave the kernel per file slot as one byte chunk plus the records' end offsets, and
//! the Python container writer blocks and compresses them exactly as it does its own records.

// The per-message lookups (a frame header, a pair of routing values) hash a few bytes each:
// FxHash does that in a multiply where std's SipHash (DoS-resistant, not needed for keys a
// message's own producer chose among a handful) took ~2 % of a stage task's CPU.
use rustc_hash::FxHashMap as HashMap;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::batch::{self, Progress, Stages};
use crate::body::{self, Cursor, Plan, Value, Walker};
use crate::consumer::NativeBatch;
use crate::event_time::{count, EventTime, Unit};
use crate::incoming::Incoming;
use crate::prefix::{put_long, Prefix};
use crate::route::Route;
use crate::schema::{self, Schema};
use crate::{avro_transform, changes, destinations, json, json_schema, protobuf, rewrite, table};

struct Entry {
    schema: Schema,
    plan: Plan,
    route: Route,
    /// A keyed change topic's schema (changes.rs): the record is the change columns plus a
    /// slice of the body, not the body.
    change: Option<changes::Layout>,
    /// A transformed schema's (avro_transform.rs): walked in canonical mode, its record is
    /// the body's bytes as the transforms reshape them.
    transform: Option<avro_transform::Transform>,
    /// A schema of a topic with `destinations` (destinations.rs): one record per output, each
    /// into its own file slot (`route` is then unused); empty for every other schema.
    outputs: Vec<destinations::Output>,
}

#[derive(Default)]
struct SlotBuffer {
    data: Vec<u8>,
    ends: Vec<u64>,
    days: Vec<(i64, u64)>,
    /// An HOUR table's file (`hourly_slot`): its records carry the event hour column after
    /// the enrichment prefix, and `hours` counts them per event hour.
    hourly: bool,
    hours: Vec<(i64, u64)>,
}

/// The kernel of one range's stage task (one topic-partition).
///
/// Not `unsendable`: its fields are plain owned data (Send + Sync), and a stage task's objects
/// may be collected on another thread than the one that made them (a Spark task's or the
/// runner's thread pool). An `unsendable` class dropped there raised a RuntimeError at every
/// such collection and leaked the kernel.
#[pyclass(module = "kbqe_dagster_kernel")]
pub struct StageKernel {
    prefix: Prefix,
    max_message_size: usize,
    wanted: Vec<String>,
    route_slots: Option<(usize, usize)>,
    event: EventTime,
    logical_readers: Vec<String>,
    /// The format of every message, and what the kernel was taught of it.
    format: Format,
    slots: Vec<SlotBuffer>,
    /// Slots with records since the last drain, in the order of their first record: files
    /// are then created in the order the Python path would create them.
    touched: Vec<usize>,
    progress: Progress,
    /// For a "json_uncertain" stop: which rule of the JSON kernels (json.rs, json_schema.rs)
    /// the kernel was not certain under ("" otherwise), for counting hand-backs by rule.
    #[pyo3(get)]
    stop_detail: &'static str,
    /// For a "route_unknown" stop: the dataset and table field values (UTF-8 bytes).
    #[pyo3(get)]
    unknown_route: Option<(Vec<u8>, Vec<u8>)>,
    /// Keyed topics (`count_tombstones`): a null value is counted here and skipped, as
    /// `KeyedRangeStager.add` does, instead of handed back.
    count_tombstones: bool,
    /// Tombstones counted (a keyed topic's; also among `messages`), or staged as deletes (a
    /// table topic's).
    #[pyo3(get)]
    tombstones: u64,
    /// A topic keyed by its Kafka key (`stage_table`, table.rs): every message, a tombstone
    /// included, is a changelog record of its key; the Avro format's entries are unused.
    table: Option<Box<table::Table>>,
    /// A table topic's tombstones are dated by their Kafka timestamp alone.
    tombstone_time: Option<EventTime>,
    /// `add` transforms of message parts and constants (`append_message_parts`), after every
    /// body.
    appended: Vec<rewrite::Appended>,
    scratch: Scratch,
}

/// The format of a kernel's messages (one per kernel, chosen by the first method that names
/// one; Confluent Avro until then), and what the kernel was taught of it.
enum Format {
    /// Confluent-framed Avro: the writer schemas given (`add_schema` and its kin), by header.
    Avro { entries: Vec<Entry>, by_header: HashMap<[u8; 5], usize> },
    /// `format: json` (json.rs): every value is JSON under one declared schema.
    Json(Box<JsonFormat>),
    /// `format: protobuf` (protobuf.rs): Confluent-framed Protobuf, one decoder per frame prefix.
    Protobuf(ProtobufTypes),
    /// `format: json_schema` (json_schema.rs): framed JSON, one compiled entry per header.
    JsonSchema(HashMap<[u8; 5], json_schema::Entry>),
}

impl Format {
    fn name(&self) -> &'static str {
        match self {
            Format::Avro { .. } => "avro",
            Format::Json(_) => "json",
            Format::Protobuf(_) => "protobuf",
            Format::JsonSchema(_) => "json_schema",
        }
    }

    /// A kernel that stages another format refuses what this one is taught.
    fn refused(&self, wanted: &str) -> PyErr {
        PyValueError::new_err(format!("this kernel stages {}, not {wanted}", self.name()))
    }
}

/// `format: json`: the declared schema's encoder and route.
struct JsonFormat {
    encoder: json::Encoder,
    route: Route,
    /// With `destinations` (`add_json_destinations`): the encoded body is walked as the
    /// declared schema's (the identity transform's walk, reading nothing) for its top-level
    /// field spans, then built into every output as an Avro body is.
    outputs: Option<JsonOutputs>,
    /// The encoded body event time reads, held apart from the encoder while appending.
    body: Vec<u8>,
}

/// Per-message work space, kept across messages for its allocations.
#[derive(Default)]
struct Scratch {
    /// The wanted values of the message (routing's, then event time's).
    values: Vec<Value>,
    route_key: Vec<u8>,
    /// A change message's top-level field starts (changes.rs) and its changelog record; a
    /// transformed Avro record's field starts and its record (avro_transform.rs).
    field_starts: Vec<usize>,
    change_record: Vec<u8>,
    /// A destinations schema's records, one per output (`Entry::outputs`), their file slots,
    /// scratch space for a projection's kept fields, and per output where its bytes start in
    /// its slot and its event day and hour while the message is appended.
    records: Vec<Vec<u8>>,
    record_slots: Vec<usize>,
    kept: destinations::Scratch,
    marks: Vec<(usize, i64, Option<i64>)>,
    /// The key and headers columns the appended parts read, and the parts.
    part_key: Vec<u8>,
    part_headers: Vec<u8>,
    parts: Vec<u8>,
}

/// `format: json` with destinations: the declared schema, a plan reading nothing, the walk, the
/// outputs (destinations.rs).
struct JsonOutputs {
    schema: Schema,
    plan: Plan,
    walk: avro_transform::Transform,
    outputs: Vec<destinations::Output>,
}

/// The Protobuf message types the kernel was given, by frame prefix: the 5-byte header and
/// the message indexes' bytes as the producer wrote them (`[0]` is one byte, `0`).
#[derive(Default)]
struct ProtobufTypes {
    by_prefix: HashMap<Vec<u8>, usize>,
    decoders: Vec<(protobuf::Decoder, Route)>,
}

#[pymethods]
impl StageKernel {
    /// `add_transformed_schema` takes `rewrites` (masks, timestamps, exact casts) and Avro
    /// entries take `append_message_parts`: a kernel built before leaves such topics on the
    /// Python path (formats/avro_transform_kernel.py).
    #[classattr]
    const AVRO_REWRITES: bool = true;

    /// Destinations pieces (`destinations::PieceSpec`) carry rewrites (masks, timestamps,
    /// exact casts): a kernel built before takes five-item pieces and no rewrites
    /// (formats/avro_destination_kernel.py).
    #[classattr]
    const DESTINATION_REWRITES: bool = true;

    /// `wanted`: the field paths the probe decodes (routing's, then event time's);
    /// `event_slots`: the event-time candidates as indexes into `wanted`; `route_slots`: the
    /// dataset and table fields' indexes for field routing.
    #[new]
    #[pyo3(signature = (topic, partition, max_message_size, wanted, event_slots, route_slots,
                        epoch_unit, utc_rule, kafka_timestamp_fallback, min_day, max_day,
                        with_timestamp, with_key, with_headers, logical_readers))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        topic: &str,
        partition: i32,
        max_message_size: usize,
        wanted: Vec<String>,
        event_slots: Vec<usize>,
        route_slots: Option<(usize, usize)>,
        epoch_unit: &str,
        utc_rule: bool,
        kafka_timestamp_fallback: bool,
        min_day: i64,
        max_day: i64,
        with_timestamp: bool,
        with_key: bool,
        with_headers: bool,
        logical_readers: Vec<String>,
    ) -> PyResult<Self> {
        let unit =
            Unit::parse(epoch_unit).ok_or_else(|| PyValueError::new_err(format!("epoch unit {epoch_unit:?}")))?;
        let slot_ok = |s: usize| s < wanted.len();
        if !event_slots.iter().all(|s| slot_ok(*s)) || !route_slots.is_none_or(|(d, t)| slot_ok(d) && slot_ok(t)) {
            return Err(PyValueError::new_err("a slot index outside the wanted paths"));
        }
        Ok(StageKernel {
            prefix: Prefix::new(topic, partition, with_timestamp, with_key, with_headers),
            max_message_size,
            scratch: Scratch { values: vec![Value::Null; wanted.len()], ..Scratch::default() },
            wanted,
            route_slots,
            event: EventTime { candidates: event_slots, unit, utc_rule, kafka_timestamp_fallback, min_day, max_day },
            logical_readers,
            format: Format::Avro { entries: Vec::new(), by_header: HashMap::default() },
            slots: Vec::new(),
            touched: Vec::new(),
            progress: Progress::default(),
            stop_detail: "",
            unknown_route: None,
            appended: Vec::new(),
            count_tombstones: false,
            tombstones: 0,
            table: None,
            tombstone_time: None,
        })
    }

    /// Take on the writer schema framed by `header` (magic byte + schema id): its JSON as
    /// fastavro's `parse_schema` normalizes it. `constant_slot`: the file slot of every record
    /// when the route does not depend on the record. Raises ValueError for a schema the kernel
    /// does not implement (its messages then stay on the Python path).
    #[pyo3(signature = (header, schema_json, constant_slot=None))]
    fn add_schema(&mut self, header: &[u8], schema_json: &str, constant_slot: Option<usize>) -> PyResult<()> {
        let header: [u8; 5] = header.try_into().map_err(|_| PyValueError::new_err("a header is 5 bytes"))?;
        let schema = Schema::compile(schema_json, &self.logical_readers).map_err(|e| PyValueError::new_err(e.0))?;
        let plan = body::plan(&schema, &self.wanted, false).map_err(|e| PyValueError::new_err(e.0))?;
        let route = self.route_for(constant_slot)?;
        self.push_avro(header, Entry { schema, plan, route, change: None, transform: None, outputs: Vec::new() })
    }

    /// Take on the writer schema of a keyed change topic framed by `header` (as `add_schema`),
    /// whose records go to file slot `constant_slot` (the changelog table) cut as `layout`
    /// says (keyed/changes.py's `ChangeLayout.cut`: "envelope", "flat" or "plain", the
    /// top-level field indexes it cuts at, and the wanted slots of the values it reads, in
    /// changes.rs's order), re-encoding the row fields `rewrites` names (index among the row's
    /// fields, kind: keyed/changes.py's `ChangeLayout.kernel_rewrites`). Raises ValueError for
    /// what the kernel does not implement.
    #[pyo3(signature = (header, schema_json, constant_slot, layout, fields, slots, rewrites=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn add_change_schema(
        &mut self,
        header: &[u8],
        schema_json: &str,
        constant_slot: usize,
        layout: &str,
        fields: Vec<usize>,
        slots: Vec<Option<usize>>,
        rewrites: Vec<(usize, String)>,
    ) -> PyResult<()> {
        let (no_drops, no_rewrites) = (Vec::new(), Vec::new());
        self.add_transformed_change_schema(
            header,
            schema_json,
            constant_slot,
            layout,
            fields,
            slots,
            rewrites,
            no_drops,
            no_rewrites,
            &[],
            "",
        )
    }

    /// A keyed topic's writer schema with transforms (after `add_change_schema`'s arguments):
    /// its row fields `drops` (indexes among the row's fields) are left out, the fields
    /// `rewrites` names (`(index, FieldRewrite.spec(), hmac key)`: a mask, a timestamp, an exact
    /// cast; rewrite.rs) re-encoded, `constants` (the added constants' encoding) appended after
    /// the row (changes.rs `Layout::with_transforms`); a rewritten field holding `placeholder`
    /// (Debezium's unavailable value; empty: none) is handed back. Raises ValueError for what
    /// the kernel does not implement. Taken whole or not at all.
    #[pyo3(signature = (header, schema_json, constant_slot, layout, fields, slots, semantic, drops, rewrites, constants, placeholder))]
    #[allow(clippy::too_many_arguments)]
    fn add_transformed_change_schema(
        &mut self,
        header: &[u8],
        schema_json: &str,
        constant_slot: usize,
        layout: &str,
        fields: Vec<usize>,
        slots: Vec<Option<usize>>,
        semantic: Vec<(usize, String)>,
        drops: Vec<usize>,
        rewrites: Vec<(usize, String, Vec<u8>)>,
        constants: &[u8],
        placeholder: &str,
    ) -> PyResult<()> {
        let header: [u8; 5] = header.try_into().map_err(|_| PyValueError::new_err("a header is 5 bytes"))?;
        if slots.iter().flatten().any(|s| *s >= self.wanted.len()) {
            return Err(PyValueError::new_err("a slot index outside the wanted paths"));
        }
        let error = |e: schema::Unsupported| PyValueError::new_err(e.0);
        let schema = Schema::compile(schema_json, &self.logical_readers).map_err(error)?;
        let plan = body::plan(&schema, &self.wanted, true).map_err(error)?;
        let mut parsed = Vec::with_capacity(rewrites.len());
        for (at, spec, key) in rewrites {
            parsed.push((at, rewrite::FieldRewrite::parse(&spec, &key).map_err(error)?));
        }
        let change = changes::Layout::compile(&schema, &plan, layout, &fields, &slots, &semantic)
            .and_then(|change| change.with_transforms(&plan, &drops, parsed, constants, placeholder))
            .map_err(error)?;
        self.push_avro(
            header,
            Entry {
                schema,
                plan,
                route: Route::Constant(constant_slot),
                change: Some(change),
                transform: None,
                outputs: Vec::new(),
            },
        )
    }

    /// Take on the writer schema framed by `header` (as `add_schema`) of a topic whose
    /// transforms the kernel does (avro_transform.rs): its records leave out the top-level
    /// fields `drops`, write the int or long fields `digits` as strings of their digits,
    /// rewrite the top-level fields `rewrites` names (`(name, FieldRewrite.spec(), hmac key)`:
    /// a mask, a timestamp, an exact cast; rewrite.rs), and get `constants` (the added
    /// constants' Avro encoding) after them; the body is walked in canonical mode, so every
    /// message whose re-encoding by fastavro could differ from its bytes is handed back.
    /// Raises ValueError for what the kernel does not implement (a name that is not such a
    /// top-level field or that routing or event time reads, a wanted field of a type it does
    /// not read, a spec it does not know). Taken whole or not at all.
    #[pyo3(signature = (header, schema_json, constant_slot, drops, digits, constants, rewrites=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn add_transformed_schema(
        &mut self,
        header: &[u8],
        schema_json: &str,
        constant_slot: Option<usize>,
        drops: Vec<String>,
        digits: Vec<String>,
        constants: &[u8],
        rewrites: Vec<(String, String, Vec<u8>)>,
    ) -> PyResult<()> {
        let header: [u8; 5] = header.try_into().map_err(|_| PyValueError::new_err("a header is 5 bytes"))?;
        let schema = Schema::compile(schema_json, &self.logical_readers).map_err(|e| PyValueError::new_err(e.0))?;
        let plan = body::plan(&schema, &self.wanted, false).map_err(|e| PyValueError::new_err(e.0))?;
        let mut parsed = Vec::with_capacity(rewrites.len());
        for (name, spec, key) in rewrites {
            parsed.push((name, rewrite::FieldRewrite::parse(&spec, &key).map_err(|e| PyValueError::new_err(e.0))?));
        }
        let transform = avro_transform::Transform::compile(&schema, &plan, &drops, &digits, parsed, constants)
            .map_err(|e| PyValueError::new_err(e.0))?;
        let route = self.route_for(constant_slot)?;
        self.push_avro(
            header,
            Entry { schema, plan, route, change: None, transform: Some(transform), outputs: Vec::new() },
        )
    }

    /// Take on the writer schema framed by `header` (as `add_schema`) of a topic with
    /// `destinations` (destinations.rs): each of `outputs`, `(file slot, pieces)`, is one
    /// destination's record: the whole record transformed as `add_transformed_schema`'s, or
    /// a projection's runs of kept top-level fields in their order and constants between
    /// them (`destinations::PieceSpec`).
    /// Walked in canonical mode; a message is staged into every output or handed back whole.
    /// Raises ValueError as `add_transformed_schema` does, for no outputs, or for two outputs
    /// into one slot (Python's verdict: a row would be doubled).
    #[pyo3(signature = (header, schema_json, outputs))]
    #[allow(clippy::type_complexity)]
    fn add_destination_schema(
        &mut self,
        header: &[u8],
        schema_json: &str,
        outputs: Vec<(usize, Vec<destinations::PieceSpec>)>,
    ) -> PyResult<()> {
        let header: [u8; 5] = header.try_into().map_err(|_| PyValueError::new_err("a header is 5 bytes"))?;
        let schema = Schema::compile(schema_json, &self.logical_readers).map_err(|e| PyValueError::new_err(e.0))?;
        let plan = body::plan(&schema, &self.wanted, false).map_err(|e| PyValueError::new_err(e.0))?;
        let Some(first) = outputs.first().map(|o| o.0) else { return Err(PyValueError::new_err("no outputs")) };
        let mut compiled = Vec::with_capacity(outputs.len());
        for (slot, pieces) in outputs {
            if compiled.iter().any(|o: &destinations::Output| o.slot == slot) {
                return Err(PyValueError::new_err(format!("two outputs into file slot {slot}")));
            }
            compiled.push(
                destinations::Output::compile(&schema, &plan, slot, pieces).map_err(|e| PyValueError::new_err(e.0))?,
            );
        }
        // The walk (canonical mode, field starts) is the identity transform's.
        let walk = avro_transform::Transform::compile(&schema, &plan, &[], &[], Vec::new(), &[])
            .map_err(|e| PyValueError::new_err(e.0))?;
        self.push_avro(
            header,
            Entry {
                schema,
                plan,
                route: Route::Constant(first),
                change: None,
                transform: Some(walk),
                outputs: compiled,
            },
        )
    }

    /// Stage `format: json` values (json.rs) under the declared schema `schema_json` (as
    /// `add_schema` takes it) instead of Confluent Avro; `constant_slot` as for `add_schema`.
    /// Raises ValueError for a schema or wanted paths the kernel does not implement.
    #[pyo3(signature = (schema_json, constant_slot=None))]
    fn add_json_schema(&mut self, schema_json: &str, constant_slot: Option<usize>) -> PyResult<()> {
        let encoder = json::Encoder::compile(schema_json, &self.wanted).map_err(|e| PyValueError::new_err(e.0))?;
        let route = self.route_for(constant_slot)?;
        match &mut self.format {
            Format::Json(json) => {
                json.encoder = encoder;
                json.route = route;
            }
            Format::Avro { .. } => {
                self.format = Format::Json(Box::new(JsonFormat { encoder, route, outputs: None, body: Vec::new() }))
            }
            other => return Err(other.refused("json")),
        }
        Ok(())
    }

    /// `format: json` with `destinations` (after `add_json_schema`, whose values it encodes
    /// as declared, without transforms): each of `outputs` as for `add_destination_schema`,
    /// built from the encoded body's top-level field spans. Raises ValueError as
    /// `add_destination_schema` does.
    #[pyo3(signature = (schema_json, outputs))]
    fn add_json_destinations(
        &mut self,
        schema_json: &str,
        outputs: Vec<(usize, Vec<destinations::PieceSpec>)>,
    ) -> PyResult<()> {
        if !matches!(self.format, Format::Json(_)) {
            return Err(PyValueError::new_err("add_json_schema first"));
        }
        let schema = Schema::compile(schema_json, &self.logical_readers).map_err(|e| PyValueError::new_err(e.0))?;
        let schema::Kind::Record { fields, .. } = &schema.nodes[schema.top] else {
            return Err(PyValueError::new_err("not a record"));
        };
        // Routing and event time read the encoder's values: the walk reads nothing.
        let plan = Plan::Record(fields.iter().map(|_| Plan::Skip).collect());
        let mut compiled: Vec<destinations::Output> = Vec::with_capacity(outputs.len());
        for (slot, pieces) in outputs {
            if compiled.iter().any(|o| o.slot == slot) {
                return Err(PyValueError::new_err(format!("two outputs into file slot {slot}")));
            }
            compiled.push(
                destinations::Output::compile(&schema, &plan, slot, pieces).map_err(|e| PyValueError::new_err(e.0))?,
            );
        }
        if compiled.is_empty() {
            return Err(PyValueError::new_err("no outputs"));
        }
        let walk = avro_transform::Transform::compile(&schema, &plan, &[], &[], Vec::new(), &[])
            .map_err(|e| PyValueError::new_err(e.0))?;
        if let Format::Json(json) = &mut self.format {
            json.outputs = Some(JsonOutputs { schema, plan, walk, outputs: compiled });
        }
        Ok(())
    }

    /// File slot `slot` is an HOUR table's (core/record/partitioning.py): its records get the
    /// event hour column (`event_hour_suffix`) after the enrichment prefix, and `drain` counts
    /// them per hour. A record whose hour the kernel cannot read exactly is handed back.
    fn hourly_slot(&mut self, slot: usize) {
        if self.slots.len() <= slot {
            self.slots.resize_with(slot + 1, SlotBuffer::default);
        }
        self.slots[slot].hourly = true;
    }

    /// `format: json` with `add` transforms of constants: `encoded` (their Avro encoding, in
    /// order) follows every body, as the derived schema's last fields. Raises ValueError
    /// without a JSON schema.
    fn append_json_constants(&mut self, encoded: &[u8]) -> PyResult<()> {
        let encoder = self.json_encoder()?;
        encoder.append_constants(encoded);
        Ok(())
    }

    /// `format: json` with `cast` transforms of ints or longs to strings: write the top-level
    /// fields `names` (`["null", T]` too) as the strings of their decimal digits (after
    /// checking them as declared). Raises ValueError without a JSON schema, or for a name that
    /// is not such a field or that routing or event time reads.
    fn cast_json_fields_to_digits(&mut self, names: Vec<String>) -> PyResult<()> {
        let encoder = self.json_encoder()?;
        encoder.cast_to_digits(&names).map_err(|e| PyValueError::new_err(e.0))
    }

    /// `format: json` with a `mask` or a `timestamp` transform of the top-level field `name`:
    /// rewrite its encoding after checking it as declared (rewrite.rs; `spec` is
    /// formats/json_stage.py `FieldRewrite.spec()`, `key` the hmac key, never logged). Raises
    /// ValueError without a JSON schema, for a spec it does not know, or for a field that is
    /// not laid out as the spec says or that routing or event time reads.
    fn rewrite_json_field(&mut self, name: &str, spec: &str, key: &[u8]) -> PyResult<()> {
        let encoder = self.json_encoder()?;
        let rewrite = rewrite::FieldRewrite::parse(spec, key).map_err(|e| PyValueError::new_err(e.0))?;
        encoder.rewrite_field(name, rewrite).map_err(|e| PyValueError::new_err(e.0))
    }

    /// `add` transforms that copy a part of the message (and the constants among them, in
    /// transform order): `parts` as `rewrite::Appended::parse` reads them, appended after every
    /// body (then the bodies' own constants must be empty). A message whose part the kernel is
    /// not certain of (a key or header that is not UTF-8 for a string) is handed back
    /// ("part_uncertain"). Raises ValueError for a part it does not know.
    fn append_message_parts(&mut self, parts: Vec<(String, Vec<u8>)>) -> PyResult<()> {
        let mut appended = Vec::with_capacity(parts.len());
        for (kind, argument) in parts {
            appended.push(rewrite::Appended::parse(&kind, &argument).map_err(|e| PyValueError::new_err(e.0))?);
        }
        self.appended = appended;
        Ok(())
    }

    /// `format: json` with `drop` transforms: leave the top-level fields `names` out of every
    /// body (after checking them as declared). Raises ValueError without a JSON schema, or for a
    /// name that is not a top-level field or that routing or event time reads.
    fn drop_json_fields(&mut self, names: Vec<String>) -> PyResult<()> {
        let encoder = self.json_encoder()?;
        encoder.drop_fields(&names).map_err(|e| PyValueError::new_err(e.0))
    }

    /// Stage a topic keyed by its Kafka key (table.rs, keyed/table_stage.py): `key_format`
    /// ("string", "json" or "avro"), a JSON key's fields and their kinds (`key_types`). Every
    /// message then takes the layout `add_table_layout` gave its key and value headers; a
    /// message whose layout was not given stops as "table_unknown". Raises ValueError for a
    /// kernel that was given schemas or another format, or a kind it does not know.
    fn stage_table(&mut self, key_format: &str, json_fields: Vec<(String, String)>) -> PyResult<()> {
        let empty = matches!(&self.format, Format::Avro { entries, .. } if entries.is_empty());
        if !empty || self.count_tombstones {
            return Err(PyValueError::new_err("a table topic's kernel stages nothing else"));
        }
        let format = match key_format {
            "string" => table::KeyFormat::String,
            "avro" => table::KeyFormat::Avro,
            "json" => {
                let mut fields = Vec::with_capacity(json_fields.len());
                for (name, kind) in json_fields {
                    fields.push((name, table::JsonKind::parse(&kind).map_err(|e| PyValueError::new_err(e.0))?));
                }
                table::KeyFormat::Json(fields)
            }
            other => return Err(PyValueError::new_err(format!("a key format {other:?}"))),
        };
        self.table = Some(Box::new(table::Table::new(format)));
        // `replace(event_time, fields=(), kafka_timestamp_fallback=True)`: the topic's date
        // bounds, its Kafka timestamp.
        self.tombstone_time = Some(EventTime {
            candidates: Vec::new(),
            unit: self.event.unit,
            utc_rule: self.event.utc_rule,
            kafka_timestamp_fallback: true,
            min_day: self.event.min_day,
            max_day: self.event.max_day,
        });
        Ok(())
    }

    /// A table topic's changelog layout (after `stage_table`): of the key layout framed by
    /// `key_header` (an Avro key's 5 bytes, whose registry schema is `key_schema_json`, given
    /// the first time; empty for a string or JSON key) and the values framed by `value_header`
    /// (None: its tombstones), whose writer schema is `value_schema_json` and whose top-level
    /// fields take `actions` (table_changes.py `TableLayout.actions`), with the wanted slots
    /// of the version and delete fields, re-encoding the fields `rewrites` names (index among
    /// the value's fields, kind: table_changes.py `TableLayout.kernel_rewrites`). Records go
    /// to file slot `slot`. Raises ValueError for what the kernel does not implement: those
    /// messages stay on the Python path.
    #[pyo3(signature = (key_header, key_schema_json, value_header, value_schema_json, slot, actions,
                        version_slot, delete_slot, rewrites=Vec::new()))]
    #[allow(clippy::too_many_arguments)]
    fn add_table_layout(
        &mut self,
        key_header: &[u8],
        key_schema_json: Option<&str>,
        value_header: Option<&[u8]>,
        value_schema_json: Option<&str>,
        slot: usize,
        actions: Vec<u8>,
        version_slot: Option<usize>,
        delete_slot: Option<usize>,
        rewrites: Vec<(usize, String)>,
    ) -> PyResult<()> {
        let error = |e: crate::schema::Unsupported| PyValueError::new_err(e.0);
        if [version_slot, delete_slot].iter().flatten().any(|s| *s >= self.wanted.len()) {
            return Err(PyValueError::new_err("a slot index outside the wanted paths"));
        }
        let key_schema =
            key_schema_json.map(|text| Schema::compile(text, &self.logical_readers)).transpose().map_err(error)?;
        let value = match (value_header, value_schema_json) {
            (Some(header), Some(text)) => {
                let schema = Schema::compile(text, &self.logical_readers).map_err(error)?;
                let plan = body::plan(&schema, &self.wanted, true).map_err(error)?;
                Some((header, schema, plan))
            }
            (None, None) => None,
            _ => return Err(PyValueError::new_err("a value header without its schema")),
        };
        let table = self.table.as_mut().ok_or_else(|| PyValueError::new_err("stage_table first"))?;
        let key = table.key_layout(key_header, key_schema).map_err(error)?;
        match value {
            None => table.add_tombstones(key, slot),
            Some((header, schema, plan)) => table
                .add_values(key, header, schema, plan, slot, &actions, version_slot, delete_slot, &rewrites)
                .map_err(error)?,
        }
        Ok(())
    }

    /// A table topic's values are `format: json` (after `stage_table`): each is encoded under the
    /// declared schema `schema_json` (json.rs, as `add_json_schema`), then cut by the layout
    /// `add_table_layout` gave its key layout and the value header `b"json:"`. Raises ValueError
    /// for a schema or wanted paths the JSON kernel does not implement.
    fn table_json_values(&mut self, schema_json: &str) -> PyResult<()> {
        let encoder = json::Encoder::compile(schema_json, &self.wanted).map_err(|e| PyValueError::new_err(e.0))?;
        let table = self.table.as_mut().ok_or_else(|| PyValueError::new_err("stage_table first"))?;
        table.json_values(encoder);
        Ok(())
    }

    /// A table topic's values are `format: json_schema` (after `stage_table`): those framed by
    /// `header` are validated against the registry JSON Schema `json_schema` and encoded as the
    /// Avro record `avro_json` derived from it (json_schema.rs, as `add_json_schema_id`), then
    /// cut by the layout `add_table_layout` gave their key layout and `header`. The layout
    /// reads every wanted field from that body, so the entry reads none. Raises ValueError for
    /// a schema the kernel does not validate or encode.
    fn table_json_schema_id(&mut self, header: &[u8], json_schema: &str, avro_json: &str) -> PyResult<()> {
        let header: [u8; 5] = header.try_into().map_err(|_| PyValueError::new_err("a header is 5 bytes"))?;
        let entry = json_schema::Entry::compile(json_schema, avro_json, &[], self.event.utc_rule, Route::Constant(0))
            .map_err(|e| PyValueError::new_err(e.0))?;
        let table = self.table.as_mut().ok_or_else(|| PyValueError::new_err("stage_table first"))?;
        table.json_schema_values(header, entry);
        Ok(())
    }

    /// A table topic's values are `format: protobuf` (after `stage_table`): those framed by
    /// `prefix` (the header and message indexes) are decoded with the message type's decoding
    /// program `program` (protobuf.rs, as `add_protobuf_schema`), then cut by the layout
    /// `add_table_layout` gave their key layout and the header this returns (one per message
    /// type). The layout reads every wanted field from the body, so the decoder reads none.
    /// Raises ValueError for a program the kernel does not decode.
    fn table_protobuf_schema<'py>(
        &mut self,
        py: Python<'py>,
        prefix: &[u8],
        program: &str,
    ) -> PyResult<Bound<'py, PyBytes>> {
        if protobuf::frame_prefix(prefix) != Some(prefix.len()) {
            return Err(PyValueError::new_err("not a Protobuf frame prefix"));
        }
        let decoder = protobuf::Decoder::compile(program, &[]).map_err(|e| PyValueError::new_err(e.0))?;
        let table = self.table.as_mut().ok_or_else(|| PyValueError::new_err("stage_table first"))?;
        Ok(PyBytes::new(py, &table.protobuf_values(prefix, decoder)))
    }

    /// From now on count null values (tombstones) and skip them, as a keyed topic's stager does.
    fn count_tombstones(&mut self) {
        self.count_tombstones = true;
    }

    /// Stage `format: protobuf` values (protobuf.rs) instead of Confluent Avro: message types
    /// are then given by `add_protobuf_schema`, per frame prefix.
    fn stage_protobuf(&mut self) -> PyResult<()> {
        self.protobuf_types().map(|_| ())
    }

    /// Take on the message type framed by `prefix` (the header and the message indexes' bytes):
    /// `program` is its decoding program (core/formats/protobuf_program.py); `constant_slot` as
    /// for `add_schema`. Raises ValueError for a program or wanted paths the kernel does not
    /// implement (that type's messages then stay on the Python path).
    #[pyo3(signature = (prefix, program, constant_slot=None))]
    fn add_protobuf_schema(&mut self, prefix: &[u8], program: &str, constant_slot: Option<usize>) -> PyResult<()> {
        if protobuf::frame_prefix(prefix) != Some(prefix.len()) {
            return Err(PyValueError::new_err("not a Protobuf frame prefix"));
        }
        let decoder = protobuf::Decoder::compile(program, &self.wanted).map_err(|e| PyValueError::new_err(e.0))?;
        self.push_protobuf(prefix, decoder, constant_slot)
    }

    /// `format: protobuf` with `rename`, `drop` and constant `add` transforms: as
    /// `add_protobuf_schema`, and the type's records leave the top-level fields `drops` out of
    /// every body (after decoding them as declared) and get `constants` (the added constants'
    /// Avro encoding) after it; renames change no bytes. The type is taken whole or not at
    /// all: raises ValueError, and the prefix stays unknown, for a program
    /// `add_protobuf_schema` refuses, or a dropped name that is not a top-level field or that
    /// routing or event time reads.
    #[pyo3(signature = (prefix, program, drops, constants, constant_slot=None))]
    fn add_transformed_protobuf_schema(
        &mut self,
        prefix: &[u8],
        program: &str,
        drops: Vec<String>,
        constants: &[u8],
        constant_slot: Option<usize>,
    ) -> PyResult<()> {
        if protobuf::frame_prefix(prefix) != Some(prefix.len()) {
            return Err(PyValueError::new_err("not a Protobuf frame prefix"));
        }
        let mut decoder = protobuf::Decoder::compile(program, &self.wanted).map_err(|e| PyValueError::new_err(e.0))?;
        decoder.transform(&drops, constants).map_err(|e| PyValueError::new_err(e.0))?;
        self.push_protobuf(prefix, decoder, constant_slot)
    }

    /// `format: json_schema`: take on the registry JSON Schema `json_schema` framed by
    /// `header` and the Avro record `avro_json` derived from it (as `add_schema` takes a
    /// schema); `constant_slot` as for `add_schema`. From the first call on, every message is
    /// framed JSON. Raises ValueError for a schema the kernel does not validate or encode.
    #[pyo3(signature = (header, json_schema, avro_json, constant_slot=None))]
    fn add_json_schema_id(
        &mut self,
        header: &[u8],
        json_schema: &str,
        avro_json: &str,
        constant_slot: Option<usize>,
    ) -> PyResult<()> {
        let (header, entry) = self.json_schema_entry(header, json_schema, avro_json, constant_slot)?;
        self.json_schema_entries()?.insert(header, entry);
        Ok(())
    }

    /// `format: json_schema` with `rename`, `drop` and constant `add` transforms: as
    /// `add_json_schema_id`, and the schema's records leave the top-level fields whose JSON
    /// keys are `drops` out of every body (after checking them as declared) and get
    /// `constants` (the added constants' Avro encoding) after it; renames change no bytes.
    /// The schema is taken whole or not at all: raises ValueError, and the header stays
    /// unknown, for a schema `add_json_schema_id` refuses, or a dropped name that is not a
    /// top-level field or that routing or event time reads.
    #[pyo3(signature = (header, json_schema, avro_json, drops, constants, constant_slot=None))]
    fn add_transformed_json_schema_id(
        &mut self,
        header: &[u8],
        json_schema: &str,
        avro_json: &str,
        drops: Vec<String>,
        constants: &[u8],
        constant_slot: Option<usize>,
    ) -> PyResult<()> {
        let (header, mut entry) = self.json_schema_entry(header, json_schema, avro_json, constant_slot)?;
        entry.transform(&drops, constants).map_err(|e| PyValueError::new_err(e.0))?;
        self.json_schema_entries()?.insert(header, entry);
        Ok(())
    }

    /// `format: json_schema` with `mask` or numeric `timestamp` transforms among the others:
    /// as `add_transformed_json_schema_id`, and the fields `rewrites` names (`(JSON key,
    /// FieldRewrite.spec(), hmac key)`) are rewritten after checking them as declared
    /// (rewrite.rs). Taken whole or not at all.
    #[pyo3(signature = (header, json_schema, avro_json, drops, constants, rewrites, constant_slot=None))]
    #[allow(clippy::too_many_arguments)]
    fn add_rewritten_json_schema_id(
        &mut self,
        header: &[u8],
        json_schema: &str,
        avro_json: &str,
        drops: Vec<String>,
        constants: &[u8],
        rewrites: Vec<(String, String, Vec<u8>)>,
        constant_slot: Option<usize>,
    ) -> PyResult<()> {
        let (header, mut entry) = self.json_schema_entry(header, json_schema, avro_json, constant_slot)?;
        entry.transform(&drops, constants).map_err(|e| PyValueError::new_err(e.0))?;
        for (name, spec, key) in rewrites {
            let rewrite = rewrite::FieldRewrite::parse(&spec, &key).map_err(|e| PyValueError::new_err(e.0))?;
            entry.rewrite_field(&name, rewrite).map_err(|e| PyValueError::new_err(e.0))?;
        }
        self.json_schema_entries()?.insert(header, entry);
        Ok(())
    }

    /// `format: protobuf` with `mask` or numeric `timestamp` transforms among the others: as
    /// `add_transformed_protobuf_schema`, and the top-level fields `rewrites` names (`(name,
    /// FieldRewrite.spec(), hmac key)`) are rewritten after writing them as declared
    /// (rewrite.rs). Taken whole or not at all.
    #[pyo3(signature = (prefix, program, drops, constants, rewrites, constant_slot=None))]
    fn add_rewritten_protobuf_schema(
        &mut self,
        prefix: &[u8],
        program: &str,
        drops: Vec<String>,
        constants: &[u8],
        rewrites: Vec<(String, String, Vec<u8>)>,
        constant_slot: Option<usize>,
    ) -> PyResult<()> {
        if protobuf::frame_prefix(prefix) != Some(prefix.len()) {
            return Err(PyValueError::new_err("not a Protobuf frame prefix"));
        }
        let mut decoder = protobuf::Decoder::compile(program, &self.wanted).map_err(|e| PyValueError::new_err(e.0))?;
        decoder.transform(&drops, constants).map_err(|e| PyValueError::new_err(e.0))?;
        for (name, spec, key) in rewrites {
            let rewrite = rewrite::FieldRewrite::parse(&spec, &key).map_err(|e| PyValueError::new_err(e.0))?;
            decoder.rewrite_field(&name, rewrite).map_err(|e| PyValueError::new_err(e.0))?;
        }
        self.push_protobuf(prefix, decoder, constant_slot)
    }

    /// Remember that the Python router sent (`dataset`, `table`) of the schema framed by
    /// `header` to file slot `slot`.
    fn learn_route(&mut self, header: &[u8], dataset: &[u8], table: &[u8], slot: usize) -> PyResult<()> {
        if let Format::Protobuf(types) = &mut self.format {
            // Protobuf: `header` is the frame prefix the message type was given under.
            if let Some(&at) = types.by_prefix.get(header) {
                types.decoders[at].1.learn(dataset, table, slot);
            }
            return Ok(());
        }
        let header: [u8; 5] = header.try_into().map_err(|_| PyValueError::new_err("a header is 5 bytes"))?;
        let route = match &mut self.format {
            Format::Json(json) => Some(&mut json.route), // JSON: one schema, whatever the header
            Format::JsonSchema(entries) => entries.get_mut(&header).map(|entry| &mut entry.route),
            Format::Avro { entries, by_header } => by_header.get(&header).map(|&at| &mut entries[at].route),
            Format::Protobuf(_) => None,
        };
        if let Some(route) = route {
            route.learn(dataset, table, slot);
        }
        Ok(())
    }

    /// Stage `messages[start..]` until the end of the list or the first message to hand back;
    /// returns the index of the first message not staged (`len(messages)` when all were).
    /// Messages at or past `end_exclusive` are never staged.
    fn run(
        &mut self,
        py: Python<'_>,
        messages: &Bound<'_, PyList>,
        start: usize,
        end_exclusive: i64,
    ) -> PyResult<usize> {
        batch::run(self, py, messages, start, end_exclusive)
    }

    /// `run` over a batch of the native consumer (consumer.rs): the same work, reading
    /// librdkafka's messages directly instead of confluent-kafka's Python objects.
    fn run_native(&mut self, batch: &NativeBatch, start: usize, end_exclusive: i64) -> PyResult<usize> {
        batch::run_native(self, batch, start, end_exclusive)
    }

    /// Messages staged by the kernel.
    #[getter]
    fn messages(&self) -> u64 {
        self.progress.messages
    }

    /// Why the last `run` stopped: "end" (the batch is done) or the hand-back's reason.
    #[getter]
    fn stopped(&self) -> &'static str {
        self.progress.stopped
    }

    /// The records staged since the last drain, per file slot: `(slot, records, ends, days,
    /// hours)` where `ends` holds each record's end offset in `records` (native-endian u64),
    /// `days` is `[(event day, records)]` and `hours` `[(event hour, records)]` (an HOUR
    /// table's slot; empty for the others).
    #[allow(clippy::type_complexity)]
    fn drain<'py>(
        &mut self,
        py: Python<'py>,
    ) -> PyResult<Vec<(usize, Bound<'py, PyBytes>, Bound<'py, PyBytes>, Vec<(i64, u64)>, Vec<(i64, u64)>)>> {
        let mut out = Vec::with_capacity(self.touched.len());
        for slot in self.touched.drain(..) {
            let buffer = &mut self.slots[slot];
            let ends: Vec<u8> = buffer.ends.iter().flat_map(|e| e.to_ne_bytes()).collect();
            out.push((
                slot,
                PyBytes::new(py, &buffer.data),
                PyBytes::new(py, &ends),
                std::mem::take(&mut buffer.days),
                std::mem::take(&mut buffer.hours),
            ));
            buffer.data.clear();
            buffer.ends.clear();
        }
        Ok(out)
    }
}

impl StageKernel {
    /// Where a schema's records go: file slot `constant_slot`, else the routes learned from
    /// the Python router (field routing).
    fn route_for(&self, constant_slot: Option<usize>) -> PyResult<Route> {
        match (constant_slot, self.route_slots) {
            (Some(slot), _) => Ok(Route::Constant(slot)),
            (None, Some(_)) => Ok(Route::Fields(HashMap::default())),
            (None, None) => Err(PyValueError::new_err("neither a constant slot nor field routing")),
        }
    }

    /// Take on a Protobuf message type's compiled `decoder` under its frame `prefix`.
    fn push_protobuf(
        &mut self,
        prefix: &[u8],
        decoder: protobuf::Decoder,
        constant_slot: Option<usize>,
    ) -> PyResult<()> {
        let route = self.route_for(constant_slot)?;
        let types = self.protobuf_types()?;
        types.decoders.push((decoder, route));
        types.by_prefix.insert(prefix.to_vec(), types.decoders.len() - 1);
        Ok(())
    }

    /// A registry JSON Schema's compiled entry, with the 5-byte frame `header` it is under.
    fn json_schema_entry(
        &self,
        header: &[u8],
        json_schema: &str,
        avro_json: &str,
        constant_slot: Option<usize>,
    ) -> PyResult<([u8; 5], json_schema::Entry)> {
        let header: [u8; 5] = header.try_into().map_err(|_| PyValueError::new_err("a header is 5 bytes"))?;
        let route = self.route_for(constant_slot)?;
        let entry = json_schema::Entry::compile(json_schema, avro_json, &self.wanted, self.event.utc_rule, route)
            .map_err(|e| PyValueError::new_err(e.0))?;
        Ok((header, entry))
    }

    /// Take on an Avro schema's compiled `entry` under its frame `header`.
    fn push_avro(&mut self, header: [u8; 5], entry: Entry) -> PyResult<()> {
        let Format::Avro { entries, by_header } = &mut self.format else { return Err(self.format.refused("avro")) };
        entries.push(entry);
        by_header.insert(header, entries.len() - 1);
        Ok(())
    }

    /// The `format: json` encoder, for the methods that shape its records.
    fn json_encoder(&mut self) -> PyResult<&mut json::Encoder> {
        match &mut self.format {
            Format::Json(json) => Ok(&mut json.encoder),
            _ => Err(PyValueError::new_err("no JSON schema")),
        }
    }

    /// The Protobuf message types given, from now on the kernel's format.
    fn protobuf_types(&mut self) -> PyResult<&mut ProtobufTypes> {
        if matches!(self.format, Format::Avro { .. }) {
            self.format = Format::Protobuf(ProtobufTypes::default());
        }
        match &mut self.format {
            Format::Protobuf(types) => Ok(types),
            other => Err(other.refused("protobuf")),
        }
    }

    /// The registry JSON Schemas given, by header, from now on the kernel's format.
    fn json_schema_entries(&mut self) -> PyResult<&mut HashMap<[u8; 5], json_schema::Entry>> {
        if matches!(self.format, Format::Avro { .. }) {
            self.format = Format::JsonSchema(HashMap::default());
        }
        match &mut self.format {
            Format::JsonSchema(entries) => Ok(entries),
            other => Err(other.refused("json_schema")),
        }
    }
}

impl<M: Incoming> Stages<M> for StageKernel {
    fn progress(&mut self) -> &mut Progress {
        &mut self.progress
    }

    fn begin_batch(&mut self) {
        self.unknown_route = None;
        self.stop_detail = "";
    }

    #[inline]
    fn stage_one(&mut self, msg: &M, end_exclusive: i64) -> PyResult<Option<&'static str>> {
        if msg.is_event()? {
            return Ok(Some("kafka_event"));
        }
        let offset: i64 = msg.offset()?;
        if offset >= end_exclusive || offset < 0 {
            return Ok(Some("past_range"));
        }
        if self.table.is_some() {
            return self.stage_table_message(msg, offset);
        }
        let Some(holder) = msg.value()? else {
            if self.count_tombstones && msg.value_is_null()? {
                self.tombstones += 1;
                return Ok(None);
            }
            return Ok(Some("not_bytes"));
        };
        let value = holder.as_ref();
        if value.len() > self.max_message_size {
            return Ok(Some("oversized"));
        }
        self.scratch.values.fill(Value::Null);
        let (body, route, changed): (&[u8], &Route, bool) = match &mut self.format {
            Format::Json(json) => {
                let JsonFormat { encoder, route, outputs, body: held_body } = &mut **json;
                if encoder.encode(value, &mut self.scratch.values).is_err() {
                    self.stop_detail = crate::body::forget_why();
                    return Ok(Some("json_uncertain"));
                }
                if let Some(json) = outputs {
                    let body = encoder.body();
                    let mut cursor = Cursor::new(body);
                    let walker = Walker { schema: &json.schema };
                    // (The walk reads nothing: the values stay the encoder's.)
                    if json
                        .walk
                        .walk(
                            &walker,
                            &json.plan,
                            &mut cursor,
                            &mut self.scratch.values,
                            &mut self.scratch.field_starts,
                        )
                        .is_err()
                        || !cursor.at_end()
                    {
                        return Ok(Some("transform_uncertain"));
                    }
                    if !put_part_columns(
                        msg,
                        &json.outputs,
                        &mut self.scratch.part_key,
                        &mut self.scratch.part_headers,
                    )? {
                        return Ok(Some("part_uncertain"));
                    }
                    let (kind, ts) = msg.timestamp()?;
                    let message = destinations::MessageParts {
                        offset,
                        timestamp_ms: (kind != 0).then_some(ts),
                        key: &self.scratch.part_key,
                        headers: &self.scratch.part_headers,
                    };
                    self.scratch.records.resize_with(self.scratch.records.len().max(json.outputs.len()), Vec::new);
                    self.scratch.record_slots.clear();
                    for (output, out) in json.outputs.iter().zip(&mut self.scratch.records) {
                        if output
                            .record(body, &self.scratch.field_starts, &message, &mut self.scratch.kept, out)
                            .is_err()
                        {
                            self.stop_detail = crate::body::forget_why(); // a rewrite's or part's rule
                            return Ok(Some("transform_uncertain"));
                        }
                        self.scratch.record_slots.push(output.slot);
                    }
                    // The body event time reads, held apart from the encoder while appending.
                    let mut held = std::mem::take(held_body);
                    held.clear();
                    held.extend_from_slice(body);
                    let staged = self.append_outputs(msg, offset, &held);
                    if let Format::Json(json) = &mut self.format {
                        json.body = held;
                    }
                    return staged;
                }
                (encoder.body(), &*route, false)
            }
            Format::Protobuf(types) => {
                let Some(split) = protobuf::frame_prefix(value) else { return Ok(Some("schema_unknown")) };
                let Some(&at) = types.by_prefix.get(&value[..split]) else { return Ok(Some("schema_unknown")) };
                let (decoder, route) = &mut types.decoders[at];
                if decoder.encode(&value[split..], &mut self.scratch.values).is_err() {
                    return Ok(Some("protobuf_uncertain"));
                }
                (decoder.body(), &*route, false)
            }
            Format::JsonSchema(entries) => {
                if value.len() < 5 {
                    return Ok(Some("unframed"));
                }
                let header: [u8; 5] = value[..5].try_into().unwrap();
                let Some(entry) = entries.get_mut(&header) else { return Ok(Some("schema_unknown")) };
                if entry.encode(&value[5..], &mut self.scratch.values).is_err() {
                    self.stop_detail = crate::body::forget_why();
                    return Ok(Some("json_uncertain"));
                }
                (entry.body(), &entry.route, false)
            }
            Format::Avro { entries, by_header } => {
                if value.len() < 5 {
                    return Ok(Some("unframed"));
                }
                let header: [u8; 5] = value[..5].try_into().unwrap();
                let Some(&at) = by_header.get(&header) else { return Ok(Some("schema_unknown")) };
                let body = &value[5..];
                let entry = &entries[at];
                let mut cursor = Cursor::new(body);
                let walker = Walker { schema: &entry.schema };
                let walked = match (&entry.change, &entry.transform) {
                    (Some(layout), _) => layout.walk(
                        &walker,
                        &entry.plan,
                        &mut cursor,
                        &mut self.scratch.values,
                        &mut self.scratch.field_starts,
                    ),
                    (None, Some(transform)) => transform.walk(
                        &walker,
                        &entry.plan,
                        &mut cursor,
                        &mut self.scratch.values,
                        &mut self.scratch.field_starts,
                    ),
                    (None, None) => {
                        walker.walk(entry.schema.top, &entry.plan, &mut cursor, &mut self.scratch.values, 0)
                    }
                };
                if walked.is_err() || !cursor.at_end() {
                    return Ok(Some(if entry.transform.is_some() { "transform_uncertain" } else { "body_uncertain" }));
                }
                if !entry.outputs.is_empty() {
                    // Every destination's record before any is appended: all or nothing.
                    if !put_part_columns(
                        msg,
                        &entry.outputs,
                        &mut self.scratch.part_key,
                        &mut self.scratch.part_headers,
                    )? {
                        return Ok(Some("part_uncertain"));
                    }
                    let (kind, ts) = msg.timestamp()?;
                    let message = destinations::MessageParts {
                        offset,
                        timestamp_ms: (kind != 0).then_some(ts),
                        key: &self.scratch.part_key,
                        headers: &self.scratch.part_headers,
                    };
                    self.scratch.records.resize_with(self.scratch.records.len().max(entry.outputs.len()), Vec::new);
                    self.scratch.record_slots.clear();
                    for (output, out) in entry.outputs.iter().zip(&mut self.scratch.records) {
                        if output
                            .record(body, &self.scratch.field_starts, &message, &mut self.scratch.kept, out)
                            .is_err()
                        {
                            self.stop_detail = crate::body::forget_why(); // a rewrite's or part's rule
                            return Ok(Some("transform_uncertain"));
                        }
                        self.scratch.record_slots.push(output.slot);
                    }
                } else if let Some(transform) = &entry.transform {
                    if transform.record(body, &self.scratch.field_starts, &mut self.scratch.change_record).is_err() {
                        self.stop_detail = crate::body::forget_why(); // a rewrite's rule (rewrite.rs)
                        return Ok(Some("transform_uncertain"));
                    }
                }
                if let Some(layout) = &entry.change {
                    if cursor.sized_blocks
                        || layout
                            .record(
                                body,
                                &self.scratch.values,
                                &self.scratch.field_starts,
                                &mut self.scratch.change_record,
                            )
                            .is_err()
                    {
                        return Ok(Some("change_uncertain"));
                    }
                }
                if !entry.outputs.is_empty() {
                    return self.append_outputs(msg, offset, body);
                }
                (body, &entry.route, entry.change.is_some() || entry.transform.is_some())
            }
        };
        let slot = match route {
            Route::Constant(slot) => *slot,
            Route::Fields(learned) => {
                let (d, t) = self.route_slots.expect("field routing has slots");
                let (Value::Str(ds, de), Value::Str(ts, te)) = (self.scratch.values[d], self.scratch.values[t]) else {
                    return Ok(Some("route_uncertain"));
                };
                self.scratch.route_key.clear();
                self.scratch.route_key.extend_from_slice(&body[ds..de]);
                self.scratch.route_key.push(0xFF);
                self.scratch.route_key.extend_from_slice(&body[ts..te]);
                match learned.get(self.scratch.route_key.as_slice()) {
                    Some(slot) => *slot,
                    None => {
                        self.unknown_route = Some((body[ds..de].to_vec(), body[ts..te].to_vec()));
                        return Ok(Some("route_unknown"));
                    }
                }
            }
        };
        let (kind, ts) = msg.timestamp()?;
        let timestamp_ms = if kind != 0 { Some(ts) } else { None };
        if self.slots.len() <= slot {
            self.slots.resize_with(slot + 1, SlotBuffer::default);
        }
        let buffer = &mut self.slots[slot];
        let (day, hour) = if buffer.hourly {
            let Some((day, hour)) = self.event.day_hour(&self.scratch.values, body, timestamp_ms) else {
                return Ok(Some("event_time_uncertain"));
            };
            (day, Some(hour))
        } else {
            let Some(day) = self.event.day(&self.scratch.values, body, timestamp_ms) else {
                return Ok(Some("event_time_uncertain"));
            };
            (day, None)
        };
        if !self.appended.is_empty() {
            // The appended fields first: a message handed back leaves no trace.
            use rewrite::Appended;
            self.scratch.part_key.clear();
            self.scratch.part_headers.clear();
            self.scratch.parts.clear();
            let key = self.appended.iter().any(|a| matches!(a, Appended::Raw { header: None, .. }));
            let headers = self.appended.iter().any(|a| matches!(a, Appended::Raw { header: Some(_), .. }));
            if (key && !msg.put_key(&mut self.scratch.part_key)?)
                || (headers && !msg.put_headers(&mut self.scratch.part_headers)?)
            {
                return Ok(Some("part_uncertain"));
            }
            if rewrite::append_parts(
                &self.appended,
                &mut self.scratch.parts,
                offset,
                timestamp_ms,
                &self.scratch.part_key,
                &self.scratch.part_headers,
            )
            .is_err()
            {
                self.stop_detail = crate::body::forget_why();
                return Ok(Some("part_uncertain"));
            }
        }
        let first = buffer.ends.is_empty();
        let mark = buffer.data.len();
        self.prefix.put_head(&mut buffer.data, day, offset, timestamp_ms);
        if self.prefix.with_key && !msg.put_key(&mut buffer.data)? {
            buffer.data.truncate(mark);
            return Ok(Some("key_uncertain"));
        }
        if self.prefix.with_headers && !msg.put_headers(&mut buffer.data)? {
            buffer.data.truncate(mark);
            return Ok(Some("headers_uncertain"));
        }
        if let Some(hour) = hour {
            // The event hour column comes last among the enrichment columns: its first
            // millisecond, `timestamp-millis` (core/record/enrichment.py, `event_hour_suffix`).
            put_long(&mut buffer.data, hour * 3_600_000);
            count(&mut buffer.hours, hour);
        }
        buffer.data.extend_from_slice(if changed { &self.scratch.change_record } else { body });
        buffer.data.extend_from_slice(&self.scratch.parts); // (empty without appended parts)
        buffer.ends.push(buffer.data.len() as u64);
        count(&mut buffer.days, day);
        if first {
            self.touched.push(slot);
        }
        Ok(None)
    }
}

impl StageKernel {
    /// One message of a table topic (`stage_table`): its key columns, then the changelog
    /// record of its value or of its tombstone (table.rs), dated and prefixed as `stage_one`
    /// does; `Some(reason)` hands it back untouched.
    fn stage_table_message<M: Incoming>(&mut self, msg: &M, offset: i64) -> PyResult<Option<&'static str>> {
        let holder = msg.value()?;
        let table = self.table.as_deref_mut().expect("a table topic's kernel");
        let encoded = table.encodes_values();
        if let (true, Some(value)) = (encoded, &holder) {
            // Encoded first (as the Python path decodes the value before it reads the key).
            let value = value.as_ref();
            if value.len() > self.max_message_size {
                return Ok(Some("oversized"));
            }
            self.scratch.values.fill(Value::Null);
            match table.encode_value(value, &mut self.scratch.values) {
                Ok(()) => {}
                Err(table::ValueStop::Unframed) => return Ok(Some("unframed")),
                Err(table::ValueStop::Unknown) => return Ok(Some("table_unknown")),
                Err(table::ValueStop::Uncertain(reason)) => {
                    self.stop_detail = crate::body::forget_why();
                    return Ok(Some(reason));
                }
            }
        }
        let table = self.table.as_deref().expect("a table topic's kernel");
        let Some(key) = msg.key()? else { return Ok(Some("table_key_uncertain")) };
        let key_layout = match table.read_key(key.as_ref(), &mut self.scratch.part_key) {
            Ok(at) => at,
            Err(table::KeyStop::Unknown) => return Ok(Some("table_unknown")),
            Err(table::KeyStop::Uncertain) => return Ok(Some("table_key_uncertain")),
        };
        let (kind, ts) = msg.timestamp()?;
        let timestamp_ms = if kind != 0 { Some(ts) } else { None };
        let (slot, day) = match &holder {
            None => {
                if !msg.value_is_null()? {
                    return Ok(Some("not_bytes"));
                }
                let Some(slot) = table.tombstone_slot(key_layout) else { return Ok(Some("table_unknown")) };
                let dated = self.tombstone_time.as_ref().and_then(|time| time.day(&[], &[], timestamp_ms));
                let Some(day) = dated else { return Ok(Some("event_time_uncertain")) };
                table::tombstone(&self.scratch.part_key, timestamp_ms, &mut self.scratch.change_record);
                (slot, day)
            }
            Some(holder) => {
                let value = holder.as_ref();
                if value.len() > self.max_message_size {
                    return Ok(Some("oversized"));
                }
                let (header, body) = if encoded {
                    table.encoded()
                } else if value.len() < 5 {
                    return Ok(Some("unframed"));
                } else {
                    (value[..5].try_into().unwrap(), &value[5..])
                };
                let Some(layout) = table.value_layout(key_layout, &header) else { return Ok(Some("table_unknown")) };
                self.scratch.values.fill(Value::Null);
                let mut cursor = Cursor::new(body);
                cursor.canonical = layout.canonical();
                let walker = Walker { schema: &layout.schema };
                if walker
                    .walk_fields(&layout.plan, &mut cursor, &mut self.scratch.values, &mut self.scratch.field_starts)
                    .is_err()
                    || !cursor.at_end()
                {
                    return Ok(Some("body_uncertain"));
                }
                if cursor.sized_blocks
                    || layout
                        .record(
                            body,
                            &self.scratch.values,
                            &self.scratch.field_starts,
                            &self.scratch.part_key,
                            timestamp_ms,
                            &mut self.scratch.change_record,
                        )
                        .is_err()
                {
                    return Ok(Some("change_uncertain"));
                }
                let Some(day) = self.event.day(&self.scratch.values, body, timestamp_ms) else {
                    return Ok(Some("event_time_uncertain"));
                };
                (layout.slot, day)
            }
        };
        if self.slots.len() <= slot {
            self.slots.resize_with(slot + 1, SlotBuffer::default);
        }
        let buffer = &mut self.slots[slot];
        if buffer.hourly {
            return Ok(Some("event_time_uncertain")); // keyed tables are DAY tables (the config's)
        }
        let first = buffer.ends.is_empty();
        let mark = buffer.data.len();
        self.prefix.put_head(&mut buffer.data, day, offset, timestamp_ms);
        if self.prefix.with_key && !msg.put_key(&mut buffer.data)? {
            buffer.data.truncate(mark);
            return Ok(Some("key_uncertain"));
        }
        if self.prefix.with_headers && !msg.put_headers(&mut buffer.data)? {
            buffer.data.truncate(mark);
            return Ok(Some("headers_uncertain"));
        }
        buffer.data.extend_from_slice(&self.scratch.change_record);
        buffer.ends.push(buffer.data.len() as u64);
        count(&mut buffer.days, day);
        if first {
            self.touched.push(slot);
        }
        if holder.is_none() {
            self.tombstones += 1;
        }
        Ok(None)
    }

    /// Append a destinations message's records (`records`, into `record_slots`; `body` is
    /// what routing and event time read) as `stage_one` appends one, each with its own slot's
    /// event day (and hour): every one, or none and a hand-back (what was written is cut off).
    fn append_outputs<M: Incoming>(&mut self, msg: &M, offset: i64, body: &[u8]) -> PyResult<Option<&'static str>> {
        let (kind, ts) = msg.timestamp()?;
        let timestamp_ms = if kind != 0 { Some(ts) } else { None };
        self.scratch.marks.clear();
        for &slot in &self.scratch.record_slots {
            if self.slots.len() <= slot {
                self.slots.resize_with(slot + 1, SlotBuffer::default);
            }
            let dated = if self.slots[slot].hourly {
                self.event.day_hour(&self.scratch.values, body, timestamp_ms).map(|(d, h)| (d, Some(h)))
            } else {
                self.event.day(&self.scratch.values, body, timestamp_ms).map(|d| (d, None))
            };
            let Some((day, hour)) = dated else { return Ok(Some("event_time_uncertain")) };
            self.scratch.marks.push((self.slots[slot].data.len(), day, hour));
        }
        // (Parts of the message are in the records: destinations.rs `Piece::Part`.)
        for k in 0..self.scratch.record_slots.len() {
            let (_, day, hour) = self.scratch.marks[k];
            let buffer = &mut self.slots[self.scratch.record_slots[k]];
            self.prefix.put_head(&mut buffer.data, day, offset, timestamp_ms);
            let uncertain = if self.prefix.with_key && !msg.put_key(&mut buffer.data)? {
                Some("key_uncertain")
            } else if self.prefix.with_headers && !msg.put_headers(&mut buffer.data)? {
                Some("headers_uncertain")
            } else {
                None
            };
            if let Some(reason) = uncertain {
                for j in 0..=k {
                    self.slots[self.scratch.record_slots[j]].data.truncate(self.scratch.marks[j].0);
                }
                return Ok(Some(reason));
            }
            if let Some(hour) = hour {
                put_long(&mut buffer.data, hour * 3_600_000);
            }
            buffer.data.extend_from_slice(&self.scratch.records[k]);
        }
        for k in 0..self.scratch.record_slots.len() {
            let (_, day, hour) = self.scratch.marks[k];
            let slot = self.scratch.record_slots[k];
            let buffer = &mut self.slots[slot];
            if buffer.ends.is_empty() {
                self.touched.push(slot);
            }
            buffer.ends.push(buffer.data.len() as u64);
            count(&mut buffer.days, day);
            if let Some(hour) = hour {
                count(&mut buffer.hours, hour);
            }
        }
        Ok(None)
    }
}

/// The key and headers columns (prefix.rs encodings) into `key` and `headers` when one of
/// `outputs` appends them as parts of the message (cleared otherwise); false when the kernel
/// cannot write them (the message goes back: "part_uncertain").
fn put_part_columns<M: Incoming>(
    msg: &M,
    outputs: &[destinations::Output],
    key: &mut Vec<u8>,
    headers: &mut Vec<u8>,
) -> PyResult<bool> {
    key.clear();
    headers.clear();
    if outputs.iter().any(|o| o.key) && !msg.put_key(key)? {
        return Ok(false);
    }
    Ok(!outputs.iter().any(|o| o.headers) || msg.put_headers(headers)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incoming::TestMessage;

    const DAY_MS: i64 = 86_400_000;
    const HEADER: &[u8] = b"\x00\x00\x00\x00\x07";

    /// A kernel reading `wanted`, routing by its first two when `by_fields`, dated by the
    /// Kafka timestamp.
    fn kernel(wanted: &[&str], by_fields: bool) -> StageKernel {
        let wanted = wanted.iter().map(|w| w.to_string()).collect();
        let route = by_fields.then_some((0, 1));
        StageKernel::new(
            "t",
            0,
            1000,
            wanted,
            vec![],
            route,
            "auto",
            true,
            true,
            0,
            100_000,
            false,
            false,
            false,
            vec![],
        )
        .unwrap()
    }

    fn stage(kernel: &mut StageKernel, value: &[u8]) -> Option<&'static str> {
        <StageKernel as Stages<TestMessage>>::stage_one(kernel, &TestMessage::new(0, Some(value), DAY_MS), 10).unwrap()
    }

    #[test]
    fn an_avro_kernel_stages_a_framed_body_of_a_schema_it_was_given() {
        let mut k = kernel(&[], false);
        k.add_schema(HEADER, r#"{"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]}"#, Some(2))
            .unwrap();
        assert_eq!(stage(&mut k, b"\x00\x00\x00\x00\x07\x06"), None);
        assert_eq!(k.touched, vec![2]);
        assert_eq!(k.slots[2].days, vec![(1, 1)]);
        assert!(k.slots[2].data.ends_with(b"\x06"));
        assert_eq!(stage(&mut k, b"\x00\x00\x00\x00\x08\x06"), Some("schema_unknown"));
        assert_eq!(stage(&mut k, b"\x00\x00\x00\x00"), Some("unframed"));
        assert_eq!(stage(&mut k, b"\x00\x00\x00\x00\x07\x06\x00"), Some("body_uncertain"));
    }

    #[test]
    fn a_kernel_stages_one_format_and_refuses_another_formats_schemas() {
        let avro = r#"{"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]}"#;
        let mut k = kernel(&[], false);
        k.stage_protobuf().unwrap();
        assert!(k.add_schema(HEADER, avro, Some(0)).is_err());
        assert!(k.add_json_schema(avro, Some(0)).is_err());
        let mut k = kernel(&[], false);
        assert!(k.add_json_destinations(avro, vec![]).is_err()); // add_json_schema first
        assert!(k.drop_json_fields(vec!["a".to_string()]).is_err()); // no JSON schema
        k.add_json_schema(avro, Some(0)).unwrap();
        assert!(k.stage_protobuf().is_err());
        assert!(k.add_schema(HEADER, avro, Some(0)).is_err());
    }

    #[test]
    fn a_route_the_kernel_does_not_know_is_handed_back_then_learned() {
        let schema = r#"{"type": "record", "name": "R", "fields": [
            {"name": "ds", "type": "string"}, {"name": "tb", "type": "string"}]}"#;
        let mut k = kernel(&["ds", "tb"], true);
        k.add_json_schema(schema, None).unwrap();
        let value = br#"{"ds": "web", "tb": "clicks"}"#;
        assert_eq!(stage(&mut k, value), Some("route_unknown"));
        assert_eq!(k.unknown_route, Some((b"web".to_vec(), b"clicks".to_vec())));
        assert!(k.learn_route(b"\x00", b"web", b"clicks", 3).is_err()); // a header is 5 bytes
        k.learn_route(HEADER, b"web", b"clicks", 3).unwrap();
        assert_eq!(stage(&mut k, value), None);
        assert_eq!(k.touched, vec![3]);
    }
}
