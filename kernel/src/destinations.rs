//! Confluent Avro topics with `destinations` (formats/avro_destination_kernel.py): one message,
//! one record per destination, each into its own file slot. The Python path
//! (formats/destination_stage.py, `DestinationFanOut`) is the reference: fastavro decodes the
//! body, per destination the topic's then the destination's transforms apply, the record is
//! projected to the destination's `fields` and encoded under its derived schema.
//!
//! The kernel walks the body once in canonical mode (avro_transform.rs, `Transform::walk`) and
//! builds each destination's record from the body's top-level field spans: an [`Output`] holds
//! one [`Transform`] (the composed transforms' drops, digits and constants) and the projection,
//! the kept fields' spans in the listed order, which its transform then reshapes as it does a
//! whole body. The message is staged into every output or handed back whole (lib.rs).

use crate::avro_transform::Transform;
use crate::body::{Plan, R};
use crate::schema::{Kind, Schema, Unsupported};

/// One destination of a writer schema (see the module docstring).
pub struct Output {
    /// The file slot of every record (a static or schema-name route, decided per schema).
    pub slot: usize,
    /// The top-level field indexes the projection keeps, in its order; None: every field, in
    /// the body's order.
    keep: Option<Vec<usize>>,
    /// Over the projected record (the kept fields in order) when `keep` is set.
    transform: Transform,
}

impl Output {
    /// The output of `schema` (walked with `plan`) into file slot `slot` that keeps the
    /// top-level fields `keep` in that order (None: all), and transforms them as
    /// `Transform::compile` does with `drops`, `digits`, `constants`. With a projection, the
    /// fields it leaves out are the drops: a drop among the kept fields is an error.
    pub fn compile(schema: &Schema, plan: &Plan, slot: usize, keep: Option<Vec<String>>, drops: &[String],
                   digits: &[String], constants: &[u8]) -> Result<Output, Unsupported> {
        let Some(names) = keep else {
            let transform = Transform::compile(schema, plan, drops, digits, constants)?;
            return Ok(Output { slot, keep: None, transform });
        };
        if let Some(name) = drops.iter().find(|d| names.contains(d)) {
            return Err(Unsupported(format!("field {name:?} is dropped and kept")));
        }
        let Kind::Record { fields, .. } = &schema.nodes[schema.top] else {
            return Err(Unsupported("not a record".into()));
        };
        let projected = schema.projected(&names)?;
        let indexes = names.iter().map(|n| fields.iter().position(|(f, _)| f == n).expect("projected checks it")).collect();
        // Routing and event time read the whole body's values (the kernel's walk), never the
        // projected record's: for the transform, nothing of it is read.
        let skip = Plan::Record(names.iter().map(|_| Plan::Skip).collect());
        let transform = Transform::compile(&projected, &skip, &[], digits, constants)?;
        Ok(Output { slot, keep: Some(indexes), transform })
    }

    /// This destination's record of `body`, whose top-level fields start at `starts` (and the
    /// last ends at its last item: `Transform::walk`'s), into `out`; `kept` is scratch space.
    pub fn record(&self, body: &[u8], starts: &[usize], kept: &mut (Vec<u8>, Vec<usize>), out: &mut Vec<u8>) -> R<()> {
        let Some(keep) = &self.keep else {
            return self.transform.record(body, starts, out);
        };
        let (bytes, spans) = kept;
        bytes.clear();
        spans.clear();
        for &i in keep {
            spans.push(bytes.len());
            bytes.extend_from_slice(&body[starts[i]..starts[i + 1]]);
        }
        spans.push(bytes.len());
        self.transform.record(bytes, spans, out)
    }
}
