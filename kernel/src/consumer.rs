//! A native range consumer: librdkafka's consumer driven from Rust, so a stage task's messages
//! never become Python objects unless the kernel hands one back.
//!
//! The Python path reads with confluent-kafka, whose `consume()` builds a Python `Message` per
//! message (about 1.5 µs each on the benchmark's machine, more than the kernel's own work). This
//! consumer calls the *same* librdkafka the confluent-kafka wheel ships and has already loaded
//! (its path comes from Python), through its public C API: the same client, the same settings,
//! the same fetch behaviour, with batches kept as librdkafka's own message structs. The rules of
//! a range (events, the end, the position reached) stay in Python (`RangeReader`); this module
//! only moves bytes.

use std::collections::VecDeque;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::{Arc, Mutex, OnceLock};

use libloading::Library;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PyTuple};

/// librdkafka's `rd_kafka_message_t` (rdkafka.h; a public, stable struct).
#[repr(C)]
pub struct RdMessage {
    pub err: c_int,
    rkt: *mut c_void,
    pub partition: i32,
    pub payload: *const u8,
    pub len: usize,
    pub key: *const u8,
    pub key_len: usize,
    pub offset: i64,
    _private: *mut c_void,
}

/// `rd_kafka_topic_partition_t` and its list (rdkafka.h).
#[repr(C)]
struct RdTopicPartition {
    topic: *mut c_char,
    partition: i32,
    offset: i64,
    metadata: *mut c_void,
    metadata_size: usize,
    opaque: *mut c_void,
    err: c_int,
    _private: *mut c_void,
}

#[repr(C)]
struct RdTopicPartitionList {
    cnt: c_int,
    size: c_int,
    elems: *mut RdTopicPartition,
}

type LogCb = extern "C" fn(*const c_void, c_int, *const c_char, *const c_char);

/// A message header as librdkafka gives it: the name, and the value (None for a null value).
pub type Header<'m> = (&'m [u8], Option<&'m [u8]>);

/// The C functions used, resolved once per library path.
pub struct Api {
    _lib: Library,
    conf_new: unsafe extern "C" fn() -> *mut c_void,
    conf_set: unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char, *mut c_char, usize) -> c_int,
    conf_set_log_cb: unsafe extern "C" fn(*mut c_void, LogCb),
    conf_destroy: unsafe extern "C" fn(*mut c_void),
    new: unsafe extern "C" fn(c_int, *mut c_void, *mut c_char, usize) -> *mut c_void,
    poll_set_consumer: unsafe extern "C" fn(*mut c_void) -> c_int,
    list_new: unsafe extern "C" fn(c_int) -> *mut RdTopicPartitionList,
    list_add: unsafe extern "C" fn(*mut RdTopicPartitionList, *const c_char, i32) -> *mut RdTopicPartition,
    list_destroy: unsafe extern "C" fn(*mut RdTopicPartitionList),
    assign: unsafe extern "C" fn(*mut c_void, *const RdTopicPartitionList) -> c_int,
    queue_get_consumer: unsafe extern "C" fn(*mut c_void) -> *mut c_void,
    queue_destroy: unsafe extern "C" fn(*mut c_void),
    consume_batch_queue: unsafe extern "C" fn(*mut c_void, c_int, *mut *mut RdMessage, usize) -> isize,
    message_destroy: unsafe extern "C" fn(*mut RdMessage),
    message_timestamp: unsafe extern "C" fn(*const RdMessage, *mut c_int) -> i64,
    message_headers: unsafe extern "C" fn(*const RdMessage, *mut *mut c_void) -> c_int,
    header_get_all:
        unsafe extern "C" fn(*const c_void, usize, *mut *const c_char, *mut *const c_void, *mut usize) -> c_int,
    position: unsafe extern "C" fn(*mut c_void, *mut RdTopicPartitionList) -> c_int,
    err2str: unsafe extern "C" fn(c_int) -> *const c_char,
    consumer_close: unsafe extern "C" fn(*mut c_void) -> c_int,
    destroy: unsafe extern "C" fn(*mut c_void),
}

macro_rules! sym {
    ($lib:expr, $name:literal) => {
        *unsafe { $lib.get($name) }.map_err(|e| format!("{}: {e}", String::from_utf8_lossy($name)))?
    };
}

impl Api {
    fn load(path: &str) -> Result<Api, String> {
        // Safety: librdkafka's initialisers are safe to run again (it is already loaded by
        // confluent-kafka in this process, so this only takes another reference to it).
        let lib = unsafe { Library::new(path) }.map_err(|e| format!("{path}: {e}"))?;
        Ok(Api {
            conf_new: sym!(lib, b"rd_kafka_conf_new\0"),
            conf_set: sym!(lib, b"rd_kafka_conf_set\0"),
            conf_set_log_cb: sym!(lib, b"rd_kafka_conf_set_log_cb\0"),
            conf_destroy: sym!(lib, b"rd_kafka_conf_destroy\0"),
            new: sym!(lib, b"rd_kafka_new\0"),
            poll_set_consumer: sym!(lib, b"rd_kafka_poll_set_consumer\0"),
            list_new: sym!(lib, b"rd_kafka_topic_partition_list_new\0"),
            list_add: sym!(lib, b"rd_kafka_topic_partition_list_add\0"),
            list_destroy: sym!(lib, b"rd_kafka_topic_partition_list_destroy\0"),
            assign: sym!(lib, b"rd_kafka_assign\0"),
            queue_get_consumer: sym!(lib, b"rd_kafka_queue_get_consumer\0"),
            queue_destroy: sym!(lib, b"rd_kafka_queue_destroy\0"),
            consume_batch_queue: sym!(lib, b"rd_kafka_consume_batch_queue\0"),
            message_destroy: sym!(lib, b"rd_kafka_message_destroy\0"),
            message_timestamp: sym!(lib, b"rd_kafka_message_timestamp\0"),
            message_headers: sym!(lib, b"rd_kafka_message_headers\0"),
            header_get_all: sym!(lib, b"rd_kafka_header_get_all\0"),
            position: sym!(lib, b"rd_kafka_position\0"),
            err2str: sym!(lib, b"rd_kafka_err2str\0"),
            consumer_close: sym!(lib, b"rd_kafka_consumer_close\0"),
            destroy: sym!(lib, b"rd_kafka_destroy\0"),
            _lib: lib,
        })
    }

    fn err_str(&self, err: c_int) -> String {
        // Safety: err2str returns a static string for every code.
        unsafe { CStr::from_ptr((self.err2str)(err)) }.to_string_lossy().into_owned()
    }

    /// The message's `(timestamp type, timestamp)`, as confluent-kafka's `timestamp()`.
    pub fn timestamp(&self, msg: *const RdMessage) -> (i64, i64) {
        let mut kind: c_int = 0;
        let ts = unsafe { (self.message_timestamp)(msg, &mut kind) };
        (kind as i64, ts)
    }

    /// The message's headers as `(name, value)` slices; None when it has none.
    pub fn headers<'m>(&self, msg: *const RdMessage) -> Option<Vec<Header<'m>>> {
        let mut hdrs: *mut c_void = std::ptr::null_mut();
        if unsafe { (self.message_headers)(msg, &mut hdrs) } != 0 || hdrs.is_null() {
            return None;
        }
        let mut out = Vec::new();
        let mut idx = 0;
        loop {
            let (mut name, mut value, mut size) = (std::ptr::null(), std::ptr::null(), 0usize);
            if unsafe { (self.header_get_all)(hdrs, idx, &mut name, &mut value, &mut size) } != 0 {
                break;
            }
            // Safety: the header list lives as long as the message (which outlives 'm).
            let name = unsafe { CStr::from_ptr(name) }.to_bytes();
            let value = if value.is_null() {
                None
            } else {
                Some(unsafe { std::slice::from_raw_parts(value as *const u8, size) })
            };
            out.push((name, value));
            idx += 1;
        }
        Some(out)
    }
}

/// A librdkafka the process loaded, by its path.
type Loaded = (String, Arc<Api>);

fn api(path: &str) -> Result<Arc<Api>, String> {
    static APIS: OnceLock<Mutex<Vec<Loaded>>> = OnceLock::new();
    let apis = APIS.get_or_init(|| Mutex::new(Vec::new()));
    let mut apis = apis.lock().unwrap();
    if let Some((_, api)) = apis.iter().find(|(p, _)| p == path) {
        return Ok(api.clone());
    }
    let api = Arc::new(Api::load(path)?);
    apis.push((path.to_string(), api.clone()));
    Ok(api)
}

/// librdkafka's log lines of every native consumer (warnings and worse), for Python to hand to
/// the `kbqe_dagster.kafka` logger: librdkafka must not print to stderr, and its threads must
/// not call into Python.
fn log_lines() -> &'static Mutex<VecDeque<(i32, String)>> {
    static LINES: OnceLock<Mutex<VecDeque<(i32, String)>>> = OnceLock::new();
    LINES.get_or_init(|| Mutex::new(VecDeque::new()))
}

extern "C" fn keep_log_line(_rk: *const c_void, level: c_int, fac: *const c_char, buf: *const c_char) {
    if level > 4 {
        return; // notices and debug: dropped, as the Python clients' logger shows only errors
    }
    let text = |p: *const c_char| {
        if p.is_null() {
            String::new()
        } else {
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };
    if let Ok(mut lines) = log_lines().lock() {
        if lines.len() >= 100 {
            lines.pop_front();
        }
        lines.push_back((level, format!("{}: {}", text(fac), text(buf))));
    }
}

/// Take the librdkafka log lines kept since the last call: `[(syslog level, line)]`.
#[pyfunction]
pub fn take_kafka_log_lines() -> Vec<(i32, String)> {
    log_lines().lock().map(|mut l| l.drain(..).collect()).unwrap_or_default()
}

struct Handle(*mut c_void);
// Safety: librdkafka handles and queues are thread-safe (rdkafka.h).
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}

/// One partition's consumer from an explicit start offset (assign, no group membership).
///
/// A batch's messages are valid until the next `consume` or `close`, which destroy them
/// (whether or not Python still holds the batch): librdkafka's `rd_kafka_destroy` waits for
/// every message of the handle to be destroyed first, so a batch left alive would hang it.
#[pyclass(module = "kbqe_dagster_kernel")]
pub struct NativeConsumer {
    api: Arc<Api>,
    rk: Handle,
    queue: Handle,
    topic: CString,
    partition: i32,
    current: Option<Arc<Mutex<Vec<MessagePtr>>>>,
}

#[pymethods]
impl NativeConsumer {
    /// `library`: librdkafka's path (the one confluent-kafka loaded); `config`: the consumer's
    /// librdkafka settings as strings, exactly what the Python reader's `Consumer` gets.
    #[new]
    fn new(library: &str, config: Vec<(String, String)>, topic: &str, partition: i32, start: i64) -> PyResult<Self> {
        let api = api(library).map_err(PyRuntimeError::new_err)?;
        let mut errstr = vec![0 as c_char; 512];
        let errmsg = |e: &Vec<c_char>| unsafe { CStr::from_ptr(e.as_ptr()) }.to_string_lossy().into_owned();
        unsafe {
            let conf = (api.conf_new)();
            for (name, value) in &config {
                let (n, v) = (cstring(name)?, cstring(value)?);
                if (api.conf_set)(conf, n.as_ptr(), v.as_ptr(), errstr.as_mut_ptr(), errstr.len()) != 0 {
                    (api.conf_destroy)(conf);
                    // The value is not shown: it may be a secret.
                    return Err(PyValueError::new_err(format!("librdkafka setting {name}: {}", errmsg(&errstr))));
                }
            }
            (api.conf_set_log_cb)(conf, keep_log_line);
            let rk = (api.new)(1, conf, errstr.as_mut_ptr(), errstr.len()); // RD_KAFKA_CONSUMER
            if rk.is_null() {
                (api.conf_destroy)(conf);
                return Err(PyRuntimeError::new_err(format!("librdkafka consumer: {}", errmsg(&errstr))));
            }
            let mut consumer = NativeConsumer {
                api: api.clone(),
                rk: Handle(rk),
                queue: Handle(std::ptr::null_mut()),
                topic: cstring(topic)?,
                partition,
                current: None,
            };
            (api.poll_set_consumer)(rk);
            let list = (api.list_new)(1);
            let tp = (api.list_add)(list, consumer.topic.as_ptr(), partition);
            (*tp).offset = start;
            let err = (api.assign)(rk, list);
            (api.list_destroy)(list);
            if err != 0 {
                return Err(PyRuntimeError::new_err(format!(
                    "assign {topic}[{partition}] at {start}: {}",
                    api.err_str(err)
                )));
            }
            consumer.queue = Handle((api.queue_get_consumer)(rk));
            Ok(consumer)
        }
    }

    /// Up to `count` messages or events within `timeout_ms` (librdkafka's consume batch).
    fn consume(&mut self, py: Python<'_>, count: usize, timeout_ms: i32) -> PyResult<NativeBatch> {
        self.release_current();
        let mut ptrs: Vec<*mut RdMessage> = vec![std::ptr::null_mut(); count.max(1)];
        let queue = self.queue.0 as usize;
        let api = self.api.clone();
        let (out, size) = (ptrs.as_mut_ptr() as usize, ptrs.len());
        let n = py.detach(|| unsafe {
            (api.consume_batch_queue)(queue as *mut c_void, timeout_ms, out as *mut *mut RdMessage, size)
        });
        if n < 0 {
            return Err(PyRuntimeError::new_err(format!(
                "consume from {}[{}] failed",
                self.topic.to_string_lossy(),
                self.partition
            )));
        }
        ptrs.truncate(n as usize);
        let messages = Arc::new(Mutex::new(ptrs.into_iter().map(MessagePtr).collect()));
        self.current = Some(messages.clone());
        Ok(NativeBatch { api: self.api.clone(), messages, topic: self.topic.to_string_lossy().into_owned() })
    }

    /// The consumer's position (the next offset it would read), or None when it has none.
    fn position(&self) -> Option<i64> {
        unsafe {
            let list = (self.api.list_new)(1);
            (self.api.list_add)(list, self.topic.as_ptr(), self.partition);
            let err = (self.api.position)(self.rk.0, list);
            let offset = (*(*list).elems).offset;
            (self.api.list_destroy)(list);
            (err == 0 && offset >= 0).then_some(offset)
        }
    }

    fn close(&mut self, py: Python<'_>) {
        self.release_current();
        let api = self.api.clone();
        let (rk, queue) = (self.rk.0 as usize, self.queue.0 as usize);
        self.rk.0 = std::ptr::null_mut();
        self.queue.0 = std::ptr::null_mut();
        if rk != 0 {
            py.detach(|| unsafe { close_handles(&api, rk as *mut c_void, queue as *mut c_void) });
        }
    }
}

impl NativeConsumer {
    fn release_current(&mut self) {
        if let Some(current) = self.current.take() {
            destroy_messages(&self.api, &mut current.lock().unwrap());
        }
    }
}

fn destroy_messages(api: &Api, messages: &mut Vec<MessagePtr>) {
    for ptr in messages.drain(..) {
        unsafe { (api.message_destroy)(ptr.0) };
    }
}

impl Drop for NativeConsumer {
    fn drop(&mut self) {
        self.release_current();
        if !self.rk.0.is_null() {
            unsafe { close_handles(&self.api, self.rk.0, self.queue.0) };
        }
    }
}

unsafe fn close_handles(api: &Api, rk: *mut c_void, queue: *mut c_void) {
    if !queue.is_null() {
        (api.queue_destroy)(queue);
    }
    (api.consumer_close)(rk);
    (api.destroy)(rk);
}

fn cstring(s: &str) -> PyResult<CString> {
    CString::new(s).map_err(|_| PyValueError::new_err(format!("{s:?} contains a NUL byte")))
}

pub struct MessagePtr(pub *mut RdMessage);
// Safety: a consumed message is owned by its batch until destroyed; librdkafka allows that on
// any thread.
unsafe impl Send for MessagePtr {}
unsafe impl Sync for MessagePtr {}

/// One consumed batch, kept as librdkafka's messages; the kernel stages from it directly, and
/// Python materialises only the messages the kernel hands back (`message(i)`).
#[pyclass(module = "kbqe_dagster_kernel")]
pub struct NativeBatch {
    pub api: Arc<Api>,
    /// Emptied when the consumer moves on (see NativeConsumer).
    pub messages: Arc<Mutex<Vec<MessagePtr>>>,
    topic: String,
}

#[pymethods]
impl NativeBatch {
    fn __len__(&self) -> usize {
        self.messages.lock().unwrap().len()
    }

    /// Message `i` as confluent-kafka would give it: `(error code or None, error text, topic,
    /// partition, offset, value, key, (timestamp type, timestamp), headers)`.
    fn message<'py>(&self, py: Python<'py>, i: usize) -> PyResult<Bound<'py, PyTuple>> {
        let messages = self.messages.lock().unwrap();
        let Some(ptr) = messages.get(i) else {
            return Err(PyValueError::new_err("no such message (or the consumer moved on)"));
        };
        let m = unsafe { &*ptr.0 };
        let bytes = |p: *const u8, n: usize| -> Option<Bound<'py, PyBytes>> {
            (!p.is_null()).then(|| PyBytes::new(py, unsafe { std::slice::from_raw_parts(p, n) }))
        };
        let (error, text) = if m.err != 0 {
            let detail = bytes(m.payload, m.len).map(|b| String::from_utf8_lossy(b.as_bytes()).into_owned());
            (Some(m.err), detail.unwrap_or_else(|| self.api.err_str(m.err)))
        } else {
            (None, String::new())
        };
        let (value, key) = if m.err != 0 { (None, None) } else { (bytes(m.payload, m.len), bytes(m.key, m.key_len)) };
        let headers = match self.api.headers(ptr.0) {
            None => py.None().into_bound(py),
            Some(list) => {
                let items = PyList::empty(py);
                for (name, value) in list {
                    let value = value.map(|v| PyBytes::new(py, v));
                    items.append((String::from_utf8_lossy(name).into_owned(), value))?;
                }
                items.into_any()
            }
        };
        (error, text, self.topic.as_str(), m.partition, m.offset, value, key, self.api.timestamp(ptr.0), headers)
            .into_pyobject(py)
    }

    /// The offset of message `i` (events included).
    fn offset(&self, i: usize) -> PyResult<i64> {
        self.messages
            .lock()
            .unwrap()
            .get(i)
            .map(|p| unsafe { (*p.0).offset })
            .ok_or_else(|| PyValueError::new_err("no such message"))
    }
}

impl Drop for NativeBatch {
    fn drop(&mut self) {
        destroy_messages(&self.api, &mut self.messages.lock().unwrap());
    }
}
