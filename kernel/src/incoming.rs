//! A consumed message as the kernels read it (stage.rs, raw.rs): a confluent-kafka `Message`
//! (Python objects, [`PyIncoming`]) or a native consumer's librdkafka message
//! ([`RawIncoming`], consumer.rs), behind one trait, [`Incoming`].

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyString, PyTuple};

use crate::consumer::{Api, RdMessage};
use crate::prefix::{put_header, put_key, put_long};

/// A consumed message as the kernel reads it: a confluent-kafka `Message` (Python objects) or
/// a native consumer's librdkafka message. Every accessor may say "not certain" (None/false),
/// which hands the message back.
pub trait Incoming {
    type Bytes<'s>: AsRef<[u8]>
    where
        Self: 's;
    /// A Kafka event (partition EOF, an error) rather than a message.
    fn is_event(&self) -> PyResult<bool>;
    fn offset(&self) -> PyResult<i64>;
    /// The value's bytes; None for a null value (or one that is not bytes).
    fn value(&self) -> PyResult<Option<Self::Bytes<'_>>>;
    /// Whether the value is null (a tombstone), not merely something other than bytes.
    fn value_is_null(&self) -> PyResult<bool>;
    /// `(timestamp type, timestamp)`, as confluent-kafka's `timestamp()`.
    fn timestamp(&self) -> PyResult<(i64, i64)>;
    /// The key's bytes; None for a null key (or one that is not bytes).
    fn key(&self) -> PyResult<Option<Self::Bytes<'_>>>;
    /// Append the key column; false when the key is not bytes or null.
    fn put_key(&self, out: &mut Vec<u8>) -> PyResult<bool>;
    /// Append the headers column; false when a header is not `(str, bytes | None)`.
    fn put_headers(&self, out: &mut Vec<u8>) -> PyResult<bool>;
}

pub struct PyIncoming<'py> {
    pub py: Python<'py>,
    pub msg: Bound<'py, PyAny>,
}

pub struct HeldBytes<'py>(pub Bound<'py, PyBytes>);

impl AsRef<[u8]> for HeldBytes<'_> {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl<'py> Incoming for PyIncoming<'py> {
    type Bytes<'s>
        = HeldBytes<'py>
    where
        Self: 's;

    fn is_event(&self) -> PyResult<bool> {
        Ok(!self.msg.call_method0(intern!(self.py, "error"))?.is_none())
    }

    fn offset(&self) -> PyResult<i64> {
        self.msg.call_method0(intern!(self.py, "offset"))?.extract()
    }

    fn value(&self) -> PyResult<Option<HeldBytes<'py>>> {
        let value = self.msg.call_method0(intern!(self.py, "value"))?;
        Ok(value.cast_into::<PyBytes>().ok().map(HeldBytes))
    }

    fn value_is_null(&self) -> PyResult<bool> {
        Ok(self.msg.call_method0(intern!(self.py, "value"))?.is_none())
    }

    fn timestamp(&self) -> PyResult<(i64, i64)> {
        self.msg.call_method0(intern!(self.py, "timestamp"))?.extract()
    }

    fn key(&self) -> PyResult<Option<HeldBytes<'py>>> {
        let key = self.msg.call_method0(intern!(self.py, "key"))?;
        Ok(key.cast_into::<PyBytes>().ok().map(HeldBytes))
    }

    fn put_key(&self, out: &mut Vec<u8>) -> PyResult<bool> {
        let key = self.msg.call_method0(intern!(self.py, "key"))?;
        if key.is_none() {
            put_key(out, None);
        } else if let Ok(key) = key.cast::<PyBytes>() {
            put_key(out, Some(key.as_bytes()));
        } else {
            return Ok(false);
        }
        Ok(true)
    }

    fn put_headers(&self, out: &mut Vec<u8>) -> PyResult<bool> {
        let headers = self.msg.call_method0(intern!(self.py, "headers"))?;
        if headers.is_none() {
            out.push(0);
            return Ok(true);
        }
        let Ok(list) = headers.cast::<PyList>() else { return Ok(false) };
        if list.is_empty() {
            out.push(0);
            return Ok(true);
        }
        put_long(out, list.len() as i64);
        for item in list.iter() {
            let Ok(pair) = item.cast::<PyTuple>() else { return Ok(false) };
            if pair.len() != 2 {
                return Ok(false);
            }
            let key = pair.get_item(0)?;
            let Ok(key) = key.cast::<PyString>() else { return Ok(false) };
            let Ok(key) = key.to_str() else { return Ok(false) };
            let value = pair.get_item(1)?;
            if value.is_none() {
                put_header(out, key, None);
            } else if let Ok(value) = value.cast::<PyBytes>() {
                put_header(out, key, Some(value.as_bytes()));
            } else {
                return Ok(false);
            }
        }
        out.push(0);
        Ok(true)
    }
}

/// A native consumer's message: librdkafka's struct, alive as long as its batch.
pub struct RawIncoming<'a> {
    pub api: &'a Api,
    pub msg: *mut RdMessage,
}

impl RawIncoming<'_> {
    fn raw(&self) -> &RdMessage {
        // Safety: the batch owns the message and outlives this view.
        unsafe { &*self.msg }
    }
}

fn raw_slice<'s>(ptr: *const u8, len: usize) -> Option<&'s [u8]> {
    // Safety: librdkafka's payload and key pointers are valid for their lengths (or null).
    (!ptr.is_null()).then(|| unsafe { std::slice::from_raw_parts(ptr, len) })
}

impl Incoming for RawIncoming<'_> {
    type Bytes<'s>
        = &'s [u8]
    where
        Self: 's;

    fn is_event(&self) -> PyResult<bool> {
        Ok(self.raw().err != 0)
    }

    fn offset(&self) -> PyResult<i64> {
        Ok(self.raw().offset)
    }

    fn value(&self) -> PyResult<Option<&[u8]>> {
        let m = self.raw();
        Ok(raw_slice(m.payload, m.len))
    }

    fn value_is_null(&self) -> PyResult<bool> {
        Ok(self.raw().payload.is_null()) // what confluent-kafka reads as None
    }

    fn timestamp(&self) -> PyResult<(i64, i64)> {
        Ok(self.api.timestamp(self.msg))
    }

    fn key(&self) -> PyResult<Option<&[u8]>> {
        let m = self.raw();
        Ok(raw_slice(m.key, m.key_len))
    }

    fn put_key(&self, out: &mut Vec<u8>) -> PyResult<bool> {
        let m = self.raw();
        put_key(out, raw_slice(m.key, m.key_len));
        Ok(true)
    }

    fn put_headers(&self, out: &mut Vec<u8>) -> PyResult<bool> {
        let Some(headers) = self.api.headers(self.msg) else {
            out.push(0);
            return Ok(true);
        };
        if headers.is_empty() {
            out.push(0);
            return Ok(true);
        }
        put_long(out, headers.len() as i64);
        for (name, value) in headers {
            // confluent-kafka gives header names as str: a name that is not UTF-8 is the
            // Python path's to judge.
            let Ok(name) = std::str::from_utf8(name) else { return Ok(false) };
            put_header(out, name, value);
        }
        out.push(0);
        Ok(true)
    }
}

/// A message made in a test: what a consumed message holds, without Python or librdkafka.
#[cfg(test)]
pub struct TestMessage {
    pub offset: i64,
    pub value: Option<Vec<u8>>,
    /// `(timestamp type, timestamp)`: type 0 is "no timestamp".
    pub timestamp: (i64, i64),
    pub key: Option<Vec<u8>>,
}

#[cfg(test)]
impl TestMessage {
    /// A message at `offset` with `value`, a create-time timestamp of `timestamp_ms`, no key.
    pub fn new(offset: i64, value: Option<&[u8]>, timestamp_ms: i64) -> TestMessage {
        TestMessage { offset, value: value.map(<[u8]>::to_vec), timestamp: (1, timestamp_ms), key: None }
    }
}

#[cfg(test)]
impl Incoming for TestMessage {
    type Bytes<'s> = &'s [u8];

    fn is_event(&self) -> PyResult<bool> {
        Ok(false)
    }

    fn offset(&self) -> PyResult<i64> {
        Ok(self.offset)
    }

    fn value(&self) -> PyResult<Option<&[u8]>> {
        Ok(self.value.as_deref())
    }

    fn value_is_null(&self) -> PyResult<bool> {
        Ok(self.value.is_none())
    }

    fn timestamp(&self) -> PyResult<(i64, i64)> {
        Ok(self.timestamp)
    }

    fn key(&self) -> PyResult<Option<&[u8]>> {
        Ok(self.key.as_deref())
    }

    fn put_key(&self, out: &mut Vec<u8>) -> PyResult<bool> {
        put_key(out, self.key.as_deref());
        Ok(true)
    }

    fn put_headers(&self, out: &mut Vec<u8>) -> PyResult<bool> {
        out.push(0);
        Ok(true)
    }
}
