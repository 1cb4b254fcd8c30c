//! The raw archive's stage routine (`kbqe_dagster/formats/raw_stage.py` is the reference):
//! every message becomes one row, never decoded — the enrichment prefix (the Kafka timestamp's
//! UTC day, topic, partition, offset, timestamp, key, headers), the event hour for an HOUR
//! table, then the value as Avro `["null", "bytes"]`.
//!
//! There is nothing to decode, so there is nothing to teach: one file slot (the topic's static
//! destination), no schema, no route. It hands back, untouched, what the Python path must judge:
//! a Kafka event, a message past the range, an oversized value, a message without a usable
//! Kafka timestamp or dated outside the event-time range, a key, header or value that is not
//! what confluent-kafka gives (bytes or None, `(str, bytes | None)` pairs).

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::batch::{self, Progress, Stages};
use crate::consumer::NativeBatch;
use crate::event_time::count;
use crate::incoming::{HeldBytes, Incoming, PyIncoming, RawIncoming};
use crate::prefix::{put_long, Prefix};

/// 9999-12-31T23:59:59.999Z: a later timestamp has no date BigQuery can hold; the Python path
/// judges it.
const MAX_TIMESTAMP_MS: i64 = 253_402_300_799_999;
const MS_PER_DAY: i64 = 86_400_000;
const MS_PER_HOUR: i64 = 3_600_000;

/// A consumed message's value as a raw row needs it: null and empty are different values.
trait RawValue: Incoming {
    /// `Some(None)`: a null value (a tombstone); `Some(Some(bytes))`; `None`: neither, which
    /// hands the message back.
    fn raw_value(&self) -> PyResult<Option<Option<Self::Bytes<'_>>>>;
}

impl<'py> RawValue for PyIncoming<'py> {
    fn raw_value(&self) -> PyResult<Option<Option<HeldBytes<'py>>>> {
        let value = self.msg.call_method0(intern!(self.py, "value"))?;
        if value.is_none() {
            return Ok(Some(None));
        }
        Ok(value.cast_into::<PyBytes>().ok().map(|b| Some(HeldBytes(b))))
    }
}

impl RawValue for RawIncoming<'_> {
    fn raw_value(&self) -> PyResult<Option<Option<&[u8]>>> {
        // A null payload pointer is a null value: what confluent-kafka reads as None too.
        Ok(Some(self.value()?))
    }
}

/// The raw kernel of one range's stage task (one topic-partition, one destination table).
#[pyclass(module = "kbqe_dagster_kernel")]
pub struct RawKernel {
    prefix: Prefix,
    max_message_size: usize,
    min_day: i64,
    max_day: i64,
    hourly: bool,
    data: Vec<u8>,
    ends: Vec<u64>,
    days: Vec<(i64, u64)>,
    hours: Vec<(i64, u64)>,
    progress: Progress,
}

#[pymethods]
impl RawKernel {
    /// `min_day`/`max_day`: the event-time range (days since 1970); `hourly`: the destination
    /// is an HOUR table, whose rows carry the event hour column after the enrichment prefix.
    #[new]
    #[pyo3(signature = (topic, partition, max_message_size, min_day, max_day, with_timestamp,
                        with_key, with_headers, hourly))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        topic: &str,
        partition: i32,
        max_message_size: usize,
        min_day: i64,
        max_day: i64,
        with_timestamp: bool,
        with_key: bool,
        with_headers: bool,
        hourly: bool,
    ) -> Self {
        RawKernel {
            prefix: Prefix::new(topic, partition, with_timestamp, with_key, with_headers),
            max_message_size,
            min_day,
            max_day,
            hourly,
            data: Vec::new(),
            ends: Vec::new(),
            days: Vec::new(),
            hours: Vec::new(),
            progress: Progress::default(),
        }
    }

    /// Stage `messages[start..]` until the end of the list or the first message to hand back;
    /// returns the index of the first message not staged. Messages at or past
    /// `end_exclusive` are never staged.
    fn run(
        &mut self,
        py: Python<'_>,
        messages: &Bound<'_, PyList>,
        start: usize,
        end_exclusive: i64,
    ) -> PyResult<usize> {
        batch::run(self, py, messages, start, end_exclusive)
    }

    /// `run` over a batch of the native consumer (consumer.rs).
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

    /// Never a route to learn (the append kernel's driver loop reads it after each stop).
    #[getter]
    fn unknown_route(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        None
    }

    /// The rows staged since the last drain: `(records, ends, days, hours)` as the append
    /// kernel's `drain` gives one slot's (`hours`: `[(event hour, records)]`, empty for a DAY
    /// table), or None when there are none.
    #[allow(clippy::type_complexity)]
    fn drain<'py>(
        &mut self,
        py: Python<'py>,
    ) -> Option<(Bound<'py, PyBytes>, Bound<'py, PyBytes>, Vec<(i64, u64)>, Vec<(i64, u64)>)> {
        if self.ends.is_empty() {
            return None;
        }
        let ends: Vec<u8> = self.ends.iter().flat_map(|e| e.to_ne_bytes()).collect();
        let out = (
            PyBytes::new(py, &self.data),
            PyBytes::new(py, &ends),
            std::mem::take(&mut self.days),
            std::mem::take(&mut self.hours),
        );
        self.data.clear();
        self.ends.clear();
        Some(out)
    }
}

impl<M: RawValue> Stages<M> for RawKernel {
    fn progress(&mut self) -> &mut Progress {
        &mut self.progress
    }

    #[inline]
    fn stage_one(&mut self, msg: &M, end_exclusive: i64) -> PyResult<Option<&'static str>> {
        if msg.is_event()? {
            return Ok(Some("kafka_event"));
        }
        let offset = msg.offset()?;
        if offset >= end_exclusive || offset < 0 {
            return Ok(Some("past_range"));
        }
        let Some(value) = msg.raw_value()? else { return Ok(Some("not_bytes")) };
        let value = value.as_ref().map(|v| v.as_ref());
        if value.is_some_and(|v| v.len() > self.max_message_size) {
            return Ok(Some("oversized"));
        }
        let (kind, ts) = msg.timestamp()?;
        if kind == 0 || !(0..=MAX_TIMESTAMP_MS).contains(&ts) {
            return Ok(Some("event_time_uncertain"));
        }
        let day = ts / MS_PER_DAY;
        if day < self.min_day || day > self.max_day {
            return Ok(Some("event_time_uncertain"));
        }
        let mark = self.data.len();
        self.prefix.put_head(&mut self.data, day, offset, Some(ts));
        if self.prefix.with_key && !msg.put_key(&mut self.data)? {
            self.data.truncate(mark);
            return Ok(Some("key_uncertain"));
        }
        if self.prefix.with_headers && !msg.put_headers(&mut self.data)? {
            self.data.truncate(mark);
            return Ok(Some("headers_uncertain"));
        }
        if self.hourly {
            let hour = ts / MS_PER_HOUR;
            put_long(&mut self.data, hour * MS_PER_HOUR);
            count(&mut self.hours, hour);
        }
        match value {
            None => self.data.push(0),
            Some(v) => {
                self.data.push(2);
                put_long(&mut self.data, v.len() as i64);
                self.data.extend_from_slice(v);
            }
        }
        self.ends.push(self.data.len() as u64);
        count(&mut self.days, day);
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::incoming::TestMessage;

    impl RawValue for TestMessage {
        fn raw_value(&self) -> PyResult<Option<Option<&[u8]>>> {
            Ok(Some(self.value()?))
        }
    }

    const DAY_MS: i64 = 86_400_000;

    fn kernel(hourly: bool) -> RawKernel {
        // days 1..=2 only; no timestamp, key or headers columns in the prefix
        RawKernel::new("t", 0, 10, 1, 2, false, false, false, hourly)
    }

    fn stage(kernel: &mut RawKernel, msg: &TestMessage) -> Option<&'static str> {
        kernel.stage_one(msg, 100).unwrap()
    }

    #[test]
    fn a_value_null_or_not_is_a_row_dated_by_its_kafka_timestamp() {
        let mut k = kernel(false);
        assert_eq!(stage(&mut k, &TestMessage::new(0, Some(b"ab"), DAY_MS)), None);
        assert_eq!(stage(&mut k, &TestMessage::new(1, None, 2 * DAY_MS + 5)), None);
        assert_eq!(k.ends.len(), 2);
        assert_eq!(k.days, vec![(1, 1), (2, 1)]);
        let (first, second) = k.data.split_at(k.ends[0] as usize);
        assert!(first.ends_with(b"\x02\x04ab"), "{first:?}"); // ["null", "bytes"] branch 1
        assert!(second.ends_with(b"\x00"), "{second:?}");
    }

    #[test]
    fn an_hour_table_row_carries_its_hour_and_is_counted_per_hour() {
        let mut k = kernel(true);
        assert_eq!(stage(&mut k, &TestMessage::new(0, Some(b""), DAY_MS + 3_600_000 + 1)), None);
        assert_eq!(k.hours, vec![(25, 1)]);
    }

    #[test]
    fn what_the_python_path_must_judge_is_handed_back_untouched() {
        let mut k = kernel(false);
        let mut no_timestamp = TestMessage::new(0, Some(b"a"), DAY_MS);
        no_timestamp.timestamp = (0, DAY_MS);
        for (msg, reason) in [
            (TestMessage::new(100, Some(b"a"), DAY_MS), "past_range"),
            (TestMessage::new(-1, Some(b"a"), DAY_MS), "past_range"),
            (TestMessage::new(0, Some(&[0; 11]), DAY_MS), "oversized"),
            (TestMessage::new(0, Some(b"a"), 0), "event_time_uncertain"), // day 0: out of range
            (TestMessage::new(0, Some(b"a"), 3 * DAY_MS), "event_time_uncertain"),
            (TestMessage::new(0, Some(b"a"), -1), "event_time_uncertain"),
            (no_timestamp, "event_time_uncertain"),
        ] {
            assert_eq!(stage(&mut k, &msg), Some(reason));
        }
        assert!(k.data.is_empty() && k.ends.is_empty());
    }
}
