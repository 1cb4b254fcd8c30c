//! The batch loop both kernels share (stage.rs's [`StageKernel`], raw.rs's `RawKernel`):
//! stage a batch's messages one by one until the end or the first to hand back, over
//! confluent-kafka's Python messages (`run`) or a native consumer's (`run_native`).
//!
//! [`StageKernel`]: crate::stage::StageKernel

use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::consumer::NativeBatch;
use crate::incoming::{PyIncoming, RawIncoming};

/// What a kernel says of its batches: messages staged, and why the last `run` stopped.
pub struct Progress {
    /// Messages staged by the kernel.
    pub messages: u64,
    /// Why the last `run` stopped: "end" (the batch is done) or the hand-back's reason.
    pub stopped: &'static str,
}

impl Default for Progress {
    fn default() -> Self {
        Progress { messages: 0, stopped: "end" }
    }
}

/// A kernel that stages messages read as `M` (incoming.rs).
pub trait Stages<M> {
    /// Stage one message; `Some(reason)` hands it back untouched.
    fn stage_one(&mut self, msg: &M, end_exclusive: i64) -> PyResult<Option<&'static str>>;

    fn progress(&mut self) -> &mut Progress;

    /// Before a batch: forget what the last stop said.
    fn begin_batch(&mut self) {}
}

/// Stage messages `start..n` (`message(i)` gives each) until the end or the first to hand
/// back; returns the index of the first message not staged (`n` when all were).
fn stage_batch<M, K: Stages<M>>(
    kernel: &mut K,
    n: usize,
    start: usize,
    end_exclusive: i64,
    message: impl Fn(usize) -> PyResult<M>,
) -> PyResult<usize> {
    kernel.begin_batch();
    for i in start..n {
        if let Some(reason) = kernel.stage_one(&message(i)?, end_exclusive)? {
            kernel.progress().stopped = reason;
            return Ok(i);
        }
        kernel.progress().messages += 1;
    }
    kernel.progress().stopped = "end";
    Ok(n)
}

/// A kernel's `run`: stage `messages[start..]` (confluent-kafka `Message`s) until the end of
/// the list or the first message to hand back; returns the index of the first message not
/// staged. Messages at or past `end_exclusive` are never staged.
pub fn run<'py, K: Stages<PyIncoming<'py>>>(
    kernel: &mut K,
    py: Python<'py>,
    messages: &Bound<'py, PyList>,
    start: usize,
    end_exclusive: i64,
) -> PyResult<usize> {
    stage_batch(kernel, messages.len(), start, end_exclusive, |i| Ok(PyIncoming { py, msg: messages.get_item(i)? }))
}

/// A kernel's `run_native`: `run` over a batch of the native consumer (consumer.rs), reading
/// librdkafka's messages directly instead of confluent-kafka's Python objects.
pub fn run_native<K: for<'a> Stages<RawIncoming<'a>>>(
    kernel: &mut K,
    batch: &NativeBatch,
    start: usize,
    end_exclusive: i64,
) -> PyResult<usize> {
    let messages = batch.messages.lock().unwrap();
    stage_batch(kernel, messages.len(), start, end_exclusive, |i| {
        Ok(RawIncoming { api: &batch.api, msg: messages[i].0 })
    })
}
