//! kbqe_dagster's native stage kernel.
//!
//! It does, for a batch of consumed Kafka messages, the per-message work of the append stage
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
//!
//! Modules: stage.rs is the append path's kernel, raw.rs the raw archive's; incoming.rs reads a
//! message, route.rs routes it, event_time.rs dates it; body.rs (Avro), json.rs, json_schema.rs
//! and protobuf.rs are the formats' walkers; changes.rs cuts keyed change topics' records and
//! table.rs those of topics keyed by their Kafka key. No module imports one that imports it
//! (kbqe_dagster_tests/test_layers.py checks `use crate::`).

mod avro_transform;
mod batch;
mod body;
mod changes;
mod connect_types;
mod consumer;
mod destinations;
mod event_time;
mod incoming;
mod json;
mod json_schema;
mod prefix;
mod proto_rows;
mod protobuf;
mod raw;
mod rewrite;
mod route;
mod schema;
mod stage;
mod table;

use pyo3::prelude::*;

/// Panics: the test suite's proof that a panic reaches Python as an exception (pyo3's
/// PanicException), which fails the range uncommitted, instead of aborting the interpreter.
#[pyfunction]
fn _panic_for_tests() {
    panic!("a deliberate panic for the test suite");
}

#[pymodule]
fn kbqe_dagster_kernel(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<stage::StageKernel>()?;
    m.add_class::<raw::RawKernel>()?;
    m.add_class::<proto_rows::RowEncoder>()?;
    m.add_class::<consumer::NativeConsumer>()?;
    m.add_class::<consumer::NativeBatch>()?;
    m.add_function(wrap_pyfunction!(consumer::take_kafka_log_lines, m)?)?;
    m.add_function(wrap_pyfunction!(_panic_for_tests, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
