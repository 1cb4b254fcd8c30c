//! Walking a Confluent body under its compiled schema: validate every byte, read the wanted
//! values. The acceptance rules are the Python probe's (`staging/probe/codegen.py`); where the
//! kernel is unsure it stops (`Err(Stop)`) and the message is handed back to the Python path,
//! which then decides with its own reasons. So the kernel may be stricter than the probe,
//! never more lenient: a body it accepts is one the probe accepts, with the same values.

use crate::schema::{Kind, Logical, NodeId, Schema, Unsupported};

/// The kernel is not certain: hand the message back.
#[derive(Debug)]
pub struct Stop;
pub type R<T> = Result<T, Stop>;

thread_local! {
    /// Why the last hand-back of the JSON kernels stopped, finer than its reason
    /// (`StageKernel.stop_detail`): which of their rules the kernel was not certain under, so
    /// the hand-backs the Python path then stages as records can be counted by rule.
    static WHY: std::cell::Cell<&'static str> = const { std::cell::Cell::new("") };
}

/// A hand-back, noting `why` (the first one noted since [`forget_why`] stays: it is the
/// innermost rule, the one that decided).
#[cold]
#[inline(never)]
pub fn stop(why: &'static str) -> Stop {
    note(why);
    Stop
}

/// Note `why` unless a reason is already noted (see [`stop`]).
#[cold]
#[inline(never)]
pub fn note(why: &'static str) {
    WHY.with(|w| {
        if w.get().is_empty() {
            w.set(why)
        }
    });
}

/// Replace the noted reason (where a rule's failure is not final, as an `anyOf` branch's).
pub fn renote(why: &'static str) {
    WHY.with(|w| w.set(why));
}

/// The noted reason, forgotten.
pub fn forget_why() -> &'static str {
    WHY.with(|w| w.replace(""))
}

/// A wanted value, as far as routing and event time need it.
#[derive(Clone, Copy, Debug)]
pub enum Value {
    Null,
    Int(i64),
    Float(f64),
    /// Avro `date`: days since 1970-01-01.
    Date(i64),
    Millis(i64),
    Micros(i64),
    /// A string's byte range in the body (validated UTF-8).
    Str(usize, usize),
    /// A date-time whose event day is the date as written, not the instant's UTC date
    /// (json_schema's `date-time` text under `date_rule: local`): that day and the instant
    /// in microseconds, whose UTC hour an HOUR table's event hour column is.
    Written {
        day: i64,
        micros: i64,
    },
    /// A boolean: read only for a plan made with `booleans` (a keyed topic's `__deleted`
    /// and delete flag, changes.rs); routing and event time hand such a message back.
    Bool(bool),
    /// Any other value: routing and event time hand such a message back.
    Other,
}

/// Ranges the probe checks (`probe_runtime.RANGE_CHECKED`): what fastavro's converters accept.
pub(crate) const DATE_RANGE: (i64, i64) = (-719_162, 2_932_896);
pub(crate) const MILLIS_RANGE: (i64, i64) = (-62_135_596_800_000, 253_402_300_799_999);
pub(crate) const MICROS_RANGE: (i64, i64) = (-62_135_596_800_000_000, 253_402_300_799_999_999);
/// fastavro's time readers take the hour as `int(value / per_hour)` (truncated toward zero), so
/// a value just below midnight is accepted too: exactly these (checked against fastavro 1.13's
/// readers at every hour boundary and on random values of the whole range).
const TIME_MILLIS_RANGE: (i64, i64) = (-3_599_999, 86_399_999);
const TIME_MICROS_RANGE: (i64, i64) = (-3_599_999_999, 86_399_999_999);
/// Arrays of zero-width items claiming more than this are invalid (`MAX_ZERO_WIDTH_ITEMS`).
const MAX_ZERO_WIDTH_ITEMS: u64 = 1_000_000;
/// Deeper nesting (recursive records) goes to the Python path rather than the native stack.
pub(crate) const MAX_DEPTH: u32 = 96;

/// What to do at one schema position for the wanted paths.
#[derive(Debug)]
pub enum Plan {
    Skip,
    Read(usize),
    Record(Vec<Plan>),
    Union(Vec<Plan>),
}

/// The wanted paths as a tree: a slot for a whole value, children by field name.
#[derive(Default)]
struct Want {
    slot: Option<usize>,
    children: Vec<(String, Want)>,
}

/// The plan of `paths` (dotted) over the schema; slot i is `paths[i]`. `leaf_ok`
/// says whether the kernel handles a value of that kind; `booleans`: booleans too (keyed
/// change topics read their delete flags, changes.rs; the append path reads none).
pub fn plan(schema: &Schema, paths: &[String], booleans: bool) -> Result<Plan, Unsupported> {
    let mut tree = Want::default();
    for (slot, path) in paths.iter().enumerate() {
        let mut node = &mut tree;
        for part in path.split('.') {
            let at = match node.children.iter().position(|(n, _)| n == part) {
                Some(at) => at,
                None => {
                    node.children.push((part.to_string(), Want::default()));
                    node.children.len() - 1
                }
            };
            node = &mut node.children[at].1;
        }
        node.slot = Some(slot);
    }
    plan_at(schema, schema.top, &tree, booleans)
}

fn plan_at(schema: &Schema, id: NodeId, want: &Want, booleans: bool) -> Result<Plan, Unsupported> {
    if let Some(slot) = want.slot {
        if !want.children.is_empty() {
            return Err(Unsupported("a path wanted whole and in parts".into()));
        }
        if !leaf_ok(schema, id, 0, booleans) {
            return Err(Unsupported("a wanted field of a type the kernel does not read".into()));
        }
        return Ok(Plan::Read(slot));
    }
    match &schema.nodes[id] {
        Kind::Union(branches) => {
            let mut plans = Vec::with_capacity(branches.len());
            for b in branches {
                plans.push(match schema.nodes[*b] {
                    Kind::Record { .. } => plan_at(schema, *b, want, booleans)?,
                    _ => Plan::Skip,
                });
            }
            Ok(Plan::Union(plans))
        }
        Kind::Record { fields, .. } => {
            let mut plans = Vec::with_capacity(fields.len());
            for (name, t) in fields {
                plans.push(match want.children.iter().find(|(n, _)| n == name) {
                    Some((_, child)) => plan_at(schema, *t, child, booleans)?,
                    None => Plan::Skip,
                });
            }
            Ok(Plan::Record(plans))
        }
        _ => Ok(Plan::Skip),
    }
}

/// Values routing and event time read natively: null, numbers, dates and timestamps, plain
/// strings, and unions of those.
fn leaf_ok(schema: &Schema, id: NodeId, depth: u32, booleans: bool) -> bool {
    match &schema.nodes[id] {
        Kind::Null | Kind::Int(_) | Kind::Long(_) | Kind::Float | Kind::Double => true,
        Kind::Boolean => booleans,
        Kind::String(logical) => *logical == Logical::None,
        Kind::Union(bs) => depth < 4 && bs.iter().all(|b| leaf_ok(schema, *b, depth + 1, booleans)),
        _ => false,
    }
}

pub struct Cursor<'a> {
    pub buf: &'a [u8],
    pub pos: usize,
    /// An array or map block carried its byte size (a negative count). The walk checks the
    /// items, not the size; the keyed path's skippers (keyed/avro_skip.py) jump by the size,
    /// so a slice after such a block is the Python path's to cut (changes.rs).
    pub sized_blocks: bool,
    /// Canonical mode (a transformed schema's walk, avro_transform.rs): also stop at every
    /// encoding fastavro's decode → encode round trip would not give back byte for byte
    /// (the Python path re-encodes those records, the kernel copies their bytes). See
    /// [`Cursor::canonical`]'s uses: over-long varints, sized or split array/map blocks,
    /// duplicate map keys, upper-case uuids, signalling float NaNs, negative times, decimals
    /// fastavro rounds or writes in another width, and a branch of a union fastavro's writer
    /// might not pick again from the Python value (`Schema::unions`).
    pub canonical: bool,
}

impl<'a> Cursor<'a> {
    pub fn new(buf: &'a [u8]) -> Cursor<'a> {
        Cursor { buf, pos: 0, sized_blocks: false, canonical: false }
    }

    #[inline]
    pub(crate) fn byte(&mut self) -> R<u8> {
        let b = *self.buf.get(self.pos).ok_or(Stop)?;
        self.pos += 1;
        Ok(b)
    }

    /// A zigzag long: at most 10 bytes, the unzigzagged value within 64 bits.
    #[inline]
    pub(crate) fn long(&mut self) -> R<i64> {
        let mut b = self.byte()?;
        if b < 0x80 {
            return Ok(((b >> 1) as i64) ^ -((b & 1) as i64));
        }
        let mut n: u128 = (b & 0x7F) as u128;
        let mut shift = 7u32;
        while b & 0x80 != 0 {
            if shift == 70 {
                return Err(Stop);
            }
            b = self.byte()?;
            n |= ((b & 0x7F) as u128) << shift;
            shift += 7;
        }
        if n >> 64 != 0 {
            return Err(Stop);
        }
        if b == 0 && self.canonical {
            // An over-long varint (a last byte of 0): fastavro writes the minimal form.
            return Err(Stop);
        }
        let n = n as u64;
        Ok(((n >> 1) as i64) ^ -((n & 1) as i64))
    }

    #[inline]
    pub(crate) fn int(&mut self) -> R<i64> {
        let v = self.long()?;
        if v < i32::MIN as i64 || v > i32::MAX as i64 {
            return Err(Stop);
        }
        Ok(v)
    }

    /// A length or index: a long that must not be negative.
    #[inline]
    pub(crate) fn length(&mut self) -> R<u64> {
        let v = self.long()?;
        if v < 0 {
            return Err(Stop);
        }
        Ok(v as u64)
    }

    #[inline]
    pub(crate) fn take(&mut self, n: u64) -> R<(usize, usize)> {
        let start = self.pos;
        let end = (start as u64).checked_add(n).ok_or(Stop)?;
        if end > self.buf.len() as u64 {
            return Err(Stop);
        }
        self.pos = end as usize;
        Ok((start, self.pos))
    }

    #[inline]
    pub(crate) fn string(&mut self) -> R<(usize, usize)> {
        let n = self.length()?;
        let (s, e) = self.take(n)?;
        if !self.buf[s..e].is_ascii() {
            std::str::from_utf8(&self.buf[s..e]).map_err(|_| Stop)?;
        }
        Ok((s, e))
    }

    /// An array or map block count: a negative count is followed by the block's byte size.
    #[inline]
    pub(crate) fn block_count(&mut self) -> R<u64> {
        let count = self.long()?;
        if count < 0 {
            if self.canonical {
                return Err(Stop); // fastavro writes unsized blocks
            }
            self.sized_blocks = true;
            if self.long()? < 0 {
                return Err(Stop);
            }
            return Ok(count.unsigned_abs());
        }
        Ok(count as u64)
    }

    pub fn at_end(&self) -> bool {
        self.pos == self.buf.len()
    }
}

pub struct Walker<'s> {
    pub schema: &'s Schema,
}

impl<'s> Walker<'s> {
    pub fn walk(&self, id: NodeId, plan: &Plan, c: &mut Cursor, values: &mut [Value], depth: u32) -> R<()> {
        match plan {
            Plan::Skip => self.skip(id, c, depth),
            Plan::Read(slot) => {
                values[*slot] = self.read(id, c, depth)?;
                Ok(())
            }
            Plan::Record(plans) => {
                let Kind::Record { fields, .. } = &self.schema.nodes[id] else { return Err(Stop) };
                for ((_, t), p) in fields.iter().zip(plans) {
                    self.walk(*t, p, c, values, depth + 1)?;
                }
                Ok(())
            }
            Plan::Union(plans) => {
                let Kind::Union(branches) = &self.schema.nodes[id] else { return Err(Stop) };
                let i = c.length()? as usize;
                let b = self.branch(id, branches, i, c)?;
                self.walk(b, &plans[i], c, values, depth + 1)
            }
        }
    }

    /// Walk a record body under `plan` (validating it, reading the wanted values) and note
    /// where each top-level field starts, and where the last one ends, in `starts`: what a
    /// keyed change's cut (changes.rs) and a transformed record (avro_transform.rs) slice.
    pub fn walk_fields(&self, plan: &Plan, c: &mut Cursor, values: &mut [Value], starts: &mut Vec<usize>) -> R<()> {
        let (Kind::Record { fields, .. }, Plan::Record(plans)) = (&self.schema.nodes[self.schema.top], plan) else {
            return Err(Stop);
        };
        starts.clear();
        for ((_, t), p) in fields.iter().zip(plans) {
            starts.push(c.pos);
            self.walk(*t, p, c, values, 1)?;
        }
        starts.push(c.pos);
        Ok(())
    }

    fn read(&self, id: NodeId, c: &mut Cursor, depth: u32) -> R<Value> {
        Ok(match &self.schema.nodes[id] {
            Kind::Null => Value::Null,
            Kind::Int(logical) => {
                let v = c.int()?;
                check(*logical, v)?;
                check_canonical(*logical, v, c)?;
                match logical {
                    Logical::Date => Value::Date(v),
                    Logical::TimeMillis => Value::Other, // a time of day: no event time, no route
                    _ => Value::Int(v),
                }
            }
            Kind::Long(logical) => {
                let v = c.long()?;
                check(*logical, v)?;
                check_canonical(*logical, v, c)?;
                match logical {
                    Logical::TimestampMillis => Value::Millis(v),
                    Logical::TimestampMicros => Value::Micros(v),
                    Logical::TimeMicros => Value::Other,
                    _ => Value::Int(v),
                }
            }
            Kind::Float => {
                let (s, _) = c.take(4)?;
                let bits = u32::from_le_bytes(c.buf[s..s + 4].try_into().unwrap());
                if c.canonical && signalling_nan(bits) {
                    return Err(Stop);
                }
                Value::Float(f32::from_bits(bits) as f64)
            }
            Kind::Double => {
                let (s, _) = c.take(8)?;
                Value::Float(f64::from_le_bytes(c.buf[s..s + 8].try_into().unwrap()))
            }
            Kind::Boolean => match c.byte()? {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                _ => return Err(Stop),
            },
            Kind::String(Logical::None) => {
                let (s, e) = c.string()?;
                Value::Str(s, e)
            }
            Kind::Union(branches) => {
                let i = c.length()? as usize;
                let b = self.branch(id, branches, i, c)?;
                return self.read(b, c, depth + 1);
            }
            _ => {
                self.skip(id, c, depth)?;
                Value::Other
            }
        })
    }

    /// Advance past a value, validating it.
    pub fn skip(&self, id: NodeId, c: &mut Cursor, depth: u32) -> R<()> {
        if depth > MAX_DEPTH {
            return Err(Stop);
        }
        match &self.schema.nodes[id] {
            Kind::Null => Ok(()),
            Kind::Boolean => {
                if c.byte()? > 1 {
                    return Err(Stop);
                }
                Ok(())
            }
            Kind::Int(logical) => {
                let v = c.int()?;
                check(*logical, v)?;
                check_canonical(*logical, v, c)
            }
            Kind::Long(logical) => {
                let v = c.long()?;
                check(*logical, v)?;
                check_canonical(*logical, v, c)
            }
            Kind::Float => {
                let (s, e) = c.take(4)?;
                if c.canonical && signalling_nan(u32::from_le_bytes(c.buf[s..e].try_into().unwrap())) {
                    return Err(Stop);
                }
                Ok(())
            }
            Kind::Double => c.take(8).map(drop),
            Kind::Fixed(n) => {
                let (s, e) = c.take(*n as u64)?;
                if c.canonical {
                    if let Some(precision) = self.schema.decimals.get(&id) {
                        canonical_decimal(&c.buf[s..e], *precision, false)?;
                    }
                }
                Ok(())
            }
            Kind::Bytes => {
                let n = c.length()?;
                let (s, e) = c.take(n)?;
                if c.canonical {
                    if let Some(precision) = self.schema.decimals.get(&id) {
                        canonical_decimal(&c.buf[s..e], *precision, true)?;
                    }
                }
                Ok(())
            }
            Kind::String(logical) => {
                let (s, e) = c.string()?;
                if *logical == Logical::Uuid && !canonical_uuid(&c.buf[s..e]) {
                    return Err(Stop); // fastavro may still accept another spelling: Python decides
                }
                if *logical == Logical::Uuid && c.canonical && c.buf[s..e].iter().any(u8::is_ascii_uppercase) {
                    return Err(Stop); // read as a UUID, written back as its lower-case `str`
                }
                Ok(())
            }
            Kind::Enum(symbols) => {
                if c.length()? >= *symbols {
                    return Err(Stop);
                }
                Ok(())
            }
            Kind::Union(branches) => {
                let i = c.length()? as usize;
                let b = self.branch(id, branches, i, c)?;
                self.skip(b, c, depth + 1)
            }
            Kind::Array(items) => {
                let items = *items;
                let min = self.schema.min_size_of(items) as u64;
                self.blocks(c, min, |c| self.skip(items, c, depth + 1))
            }
            Kind::Map(values) => {
                let values = *values;
                let min = 1 + self.schema.min_size_of(values) as u64;
                if c.canonical {
                    // Decoded into a dict, a map keeps one entry per key: duplicates re-encode
                    // differently.
                    let mut keys: Vec<(usize, usize)> = Vec::new();
                    self.blocks(c, min, |c| {
                        keys.push(c.string()?);
                        self.skip(values, c, depth + 1)
                    })?;
                    let buf = c.buf;
                    let mut texts: Vec<&[u8]> = keys.iter().map(|&(s, e)| &buf[s..e]).collect();
                    texts.sort_unstable();
                    if texts.windows(2).any(|w| w[0] == w[1]) {
                        return Err(Stop);
                    }
                    return Ok(());
                }
                self.blocks(c, min, |c| {
                    c.string()?;
                    self.skip(values, c, depth + 1)
                })
            }
            Kind::Record { fields, .. } => {
                for (_, t) in fields {
                    self.skip(*t, c, depth + 1)?;
                }
                Ok(())
            }
            Kind::Pending(_) => Err(Stop),
        }
    }

    /// The branch `i` of union `id`; in canonical mode only one fastavro's writer is certain
    /// to pick again for the decoded value: null (a union has at most one null branch), the
    /// union's only non-null branch, or one `Schema::unions` says is certain.
    #[inline]
    fn branch(&self, id: NodeId, branches: &[NodeId], i: usize, c: &Cursor) -> R<NodeId> {
        let b = *branches.get(i).ok_or(Stop)?;
        if c.canonical && !matches!(self.schema.nodes[b], Kind::Null) {
            if let Some(certain) = self.schema.unions.get(&id) {
                if !certain[i] {
                    return Err(Stop);
                }
            }
        }
        Ok(b)
    }

    fn blocks(&self, c: &mut Cursor, entry_min: u64, mut each: impl FnMut(&mut Cursor) -> R<()>) -> R<()> {
        let mut items = false;
        loop {
            let count = c.block_count()?;
            if count == 0 {
                return Ok(());
            }
            if items && c.canonical {
                return Err(Stop); // fastavro writes one block of every item
            }
            items = true;
            if entry_min > 0 {
                let need = (c.pos as u128) + (count as u128) * (entry_min as u128);
                if need > c.buf.len() as u128 {
                    return Err(Stop);
                }
            } else if count > MAX_ZERO_WIDTH_ITEMS {
                return Err(Stop);
            }
            for _ in 0..count {
                each(c)?;
            }
        }
    }
}

#[inline]
fn check(logical: Logical, v: i64) -> R<()> {
    let (low, high) = match logical {
        Logical::Date => DATE_RANGE,
        Logical::TimestampMillis => MILLIS_RANGE,
        Logical::TimestampMicros => MICROS_RANGE,
        Logical::TimeMillis => TIME_MILLIS_RANGE,
        Logical::TimeMicros => TIME_MICROS_RANGE,
        _ => return Ok(()),
    };
    if v < low || v > high {
        return Err(Stop);
    }
    Ok(())
}

/// What canonical mode adds to [`check`]: fastavro reads a negative `time-millis` or
/// `time-micros` (which [`check`] lets through, as fastavro's reader does) as a time of day
/// that it writes back as another, non-negative number.
#[inline]
fn check_canonical(logical: Logical, v: i64, c: &Cursor) -> R<()> {
    if c.canonical && v < 0 && matches!(logical, Logical::TimeMillis | Logical::TimeMicros) {
        return Err(Stop);
    }
    Ok(())
}

/// A decimal's unscaled two's complement `raw` that fastavro writes back as it is: it reads
/// the value rounded to `precision` significant digits (the same value when its digits
/// without trailing zeros are that many) and writes a `bytes` decimal in
/// `(bit_length(|n|) + 8) / 8` bytes (not always the shortest: -128 takes two), a `fixed` one
/// sign-extended to its size (every value of the size). Checked against fastavro 1.13 for every
/// value of up to two bytes and several precisions and scales. Longer than 16 bytes: not
/// certain, handed back.
fn canonical_decimal(raw: &[u8], precision: u64, bytes: bool) -> R<()> {
    if raw.len() > 16 {
        return Err(Stop);
    }
    let mut v: i128 = if raw.first().is_some_and(|b| b & 0x80 != 0) { -1 } else { 0 };
    for b in raw {
        v = (v << 8) | *b as i128;
    }
    let mut m = v.unsigned_abs();
    if bytes && raw.len() as u32 != (128 - m.leading_zeros() + 8) / 8 {
        return Err(Stop);
    }
    if m != 0 {
        while m.is_multiple_of(10) {
            m /= 10;
        }
    }
    let mut digits = 1u64;
    while m >= 10 {
        m /= 10;
        digits += 1;
    }
    if digits > precision {
        return Err(Stop);
    }
    Ok(())
}

/// A float32 signalling NaN: read as a Python float (a double) and packed back, it comes out
/// quiet (another bit pattern). Quiet NaNs, and every double, round-trip exactly.
#[inline]
fn signalling_nan(bits: u32) -> bool {
    bits & 0x7fc0_0000 == 0x7f80_0000 && bits & 0x003f_ffff != 0
}

/// `8-4-4-4-12` hex digits: the spelling the probe accepts without asking `uuid.UUID`.
/// A table lookup per byte and no branch per position: this runs for every uuid field of
/// every message (perf showed the match-per-position form at 8 % of a stage task's time).
pub(crate) fn canonical_uuid(s: &[u8]) -> bool {
    if s.len() != 36 || s[8] != b'-' || s[13] != b'-' || s[18] != b'-' || s[23] != b'-' {
        return false;
    }
    let hex = |part: &[u8]| part.iter().fold(true, |ok, b| ok & HEX_DIGIT[*b as usize]);
    hex(&s[0..8]) & hex(&s[9..13]) & hex(&s[14..18]) & hex(&s[19..23]) & hex(&s[24..36])
}

static HEX_DIGIT: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] = (b as u8).is_ascii_hexdigit();
        b += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMA: &str = r#"{"type": "record", "name": "R", "fields": [
        {"name": "id", "type": "long"},
        {"name": "s", "type": "string"},
        {"name": "u", "type": ["null", "string"]},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}"#;

    /// Walk `body` under [`SCHEMA`] reading `s` and `at`: the values, or None for a stop;
    /// and whether the walk ended at the body's end.
    fn walk(body: &[u8]) -> Option<(Vec<Value>, bool)> {
        let schema = Schema::compile(SCHEMA, &[]).unwrap();
        let plan = plan(&schema, &["s".to_string(), "at".to_string()], false).unwrap();
        let mut values = vec![Value::Null; 2];
        let mut cursor = Cursor::new(body);
        let walked = Walker { schema: &schema }.walk(schema.top, &plan, &mut cursor, &mut values, 0);
        walked.ok().map(|_| (values, cursor.at_end()))
    }

    /// id 3, s "hi", u "x", at 1000 ms.
    const BODY: &[u8] = b"\x06\x04hi\x02\x02x\xd0\x0f";

    #[test]
    fn a_body_is_walked_to_its_end_and_the_wanted_values_read() {
        let (values, at_end) = walk(BODY).unwrap();
        assert!(at_end);
        assert!(matches!(values[0], Value::Str(2, 4)), "{values:?}");
        assert!(matches!(values[1], Value::Millis(1000)), "{values:?}");
    }

    #[test]
    fn bytes_after_the_record_are_left_for_the_caller_to_refuse() {
        let mut longer = BODY.to_vec();
        longer.push(0);
        assert!(!walk(&longer).unwrap().1);
    }

    #[test]
    fn a_truncated_body_stops() {
        for end in 0..BODY.len() {
            assert!(walk(&BODY[..end]).is_none(), "{end} bytes");
        }
    }

    #[test]
    fn a_union_branch_out_of_range_stops() {
        assert!(walk(b"\x06\x04hi\x04\x02x\xd0\x0f").is_none()); // branch 2 of 2
        assert!(walk(b"\x06\x04hi\x01\x02x\xd0\x0f").is_none()); // branch -1
    }

    #[test]
    fn a_string_that_is_not_utf8_or_of_negative_length_stops() {
        assert!(walk(b"\x06\x04h\xff\x00\xd0\x0f").is_none());
        assert!(walk(b"\x06\x01\x00\xd0\x0f").is_none());
    }

    #[test]
    fn a_varint_longer_than_ten_bytes_stops() {
        let mut body = vec![0x80; 10];
        body.push(0x00);
        body.extend_from_slice(b"\x04hi\x00\xd0\x0f");
        assert!(walk(&body).is_none());
    }
}
