//! Per-field rewrites of a top-level field's Avro encoding, shared by the formats whose kernel
//! encodes the record as declared (`format: json`, `json_schema`, `protobuf`) and by Confluent
//! Avro (avro_transform.rs: the field's span in the canonical body, copied): the field is
//! encoded and checked as declared, then its bytes at `out[mark..]` (the field's, the last
//! written) are read back and replaced by what the transform's step would have given fastavro
//! under the derived type (core/transforms/kinds.py `_mask`, `_timestamp`). The Python side
//! (formats/json_stage.py `kernel_transforms`, `FieldRewrite`) decides which transforms come
//! here and describes the declared layout; anything the rewrite is not certain about
//! (a layout it did not expect, an instant out of range) is `Err(Stop)`: the message goes back
//! to the Python path, which stays the reference and decides (a dead letter, a failed range).
//!
//! - `mask` `method: null`: the field becomes null under the derived type (`_nullable`: the
//!   declared union keeps its layout, a plain type becomes `["null", T]`), whatever the value.
//! - `mask` hmac: the lowercase hex HMAC-SHA256 of the value (a string's or bytes' bytes as
//!   they are, an int's decimal digits: Python's `str(value).encode()`), under `string` or
//!   `["null", "string"]` (`_wrap`: null first, whichever order the declared union had); a null
//!   stays null.
//! - `timestamp` between numbers: the value (timestamp-millis/micros, or an int/long epoch) in
//!   microseconds, exactly (i128: Python's ints do not overflow), then an epoch long by floor
//!   division (Python's `//`) or a timestamp-millis/micros of `datetime` range (fastavro's
//!   writer floors a datetime to milliseconds); a result beyond 64 bits, or an instant outside
//!   years 1-9999 (`from_micros` raises), is handed back.

use crate::body::{stop, R};
use crate::prefix::put_long;
use crate::schema::Unsupported;
use hmac::{Hmac, Mac};
use serde_json::Value as Json;
use sha2::Sha256;

/// `datetime(1, 1, 1, tzinfo=UTC)` and `datetime(9999, 12, 31, 23, 59, 59, 999999, UTC)` in
/// microseconds since the epoch: `from_micros` of anything outside raises OverflowError.
const MIN_MICROS: i128 = -62_135_596_800_000_000;
const MAX_MICROS: i128 = 253_402_300_799_999_999;

/// The declared field's value, as the format's encoder wrote it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Base {
    Int,
    Long,
    /// A string or bytes: a length, then the bytes (what hmac reads as they are).
    Text,
    /// One byte, 0 or 1.
    Boolean,
    /// Not read (a null mask replaces any value).
    Any,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum TimeOut {
    /// An epoch long: floor division of the microseconds by this many.
    Epoch(i128),
    TimestampMillis,
    TimestampMicros,
}

#[derive(Clone)]
enum Op {
    /// The derived type's null: its union branch index.
    Null { out_null: i64 },
    /// The keyed MAC, its key already absorbed (cloned per value).
    Hmac(Box<Hmac<Sha256>>),
    /// Microseconds per input unit, and the output.
    Time { per_in: i128, to: TimeOut },
    /// A `cast` whose result is exact from the encoded value (values.py `converter`): a
    /// boolean to `"true"`/`"false"`, to 1/0 or to 1.0/0.0; an int or long to its digits or
    /// to a double (`float(value)`: round to nearest even, as Rust's `as`).
    Cast(CastTo),
    /// A Kafka Connect semantic value re-encoded (connect_types.rs), a keyed row's field
    /// (changes.rs): unlike the transforms' rewrites, the type stays where it was, so a
    /// `[null, T]` union keeps its branch indexes (connect_types.py maps only the branch).
    Semantic(Semantic),
}

/// The Kafka Connect semantic types whose bytes change (connect_types.py `NEW_BYTES`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Semantic {
    /// A string, ISO 8601 with an offset → a long of epoch microseconds.
    ZonedTimestamp,
    /// A record `{scale: int, value: bytes}` → the bytes of a decimal(38, 9).
    VariableScaleDecimal,
    /// A long of nanoseconds → a long of microseconds (floor).
    NanosToMicros,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum CastTo {
    /// A boolean's `"true"`/`"false"`.
    String,
    /// An int's or long's decimal digits (`str(value)`).
    Digits,
    Long,
    Double,
}

/// One top-level field's rewrite (`FieldRewrite.spec()` on the Python side).
#[derive(Clone)]
pub struct FieldRewrite {
    /// The declared union's null branch (0 or 1), None for a type that is not a union.
    pub declared_null: Option<i64>,
    pub base: Base,
    op: Op,
}

impl std::fmt::Debug for FieldRewrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("FieldRewrite").field("declared_null", &self.declared_null).field("base", &self.base).finish()
    }
}

impl FieldRewrite {
    /// `spec`: `{"op": "null"|"hmac"|"time", "declared_null": null|0|1, "base": "int"|"long"|
    /// "string"|"bytes"|"any", "out_null": 0|1 (null), "per_in": microseconds per input unit,
    /// "to": "s"|"ms"|"us"|"timestamp_millis"|"timestamp_micros" (time)}`; `key`: hmac's.
    pub fn parse(spec: &str, key: &[u8]) -> Result<FieldRewrite, Unsupported> {
        let bad = |what: &str| Unsupported(format!("field rewrite: {what}"));
        let json: Json = serde_json::from_str(spec).map_err(|e| bad(&e.to_string()))?;
        let text = |k: &str| json.get(k).and_then(Json::as_str).ok_or_else(|| bad(&format!("no {k}")));
        let declared_null = match json.get("declared_null") {
            None | Some(Json::Null) => None,
            Some(v) => Some(v.as_i64().filter(|n| *n == 0 || *n == 1).ok_or_else(|| bad("declared_null"))?),
        };
        let base = match text("base")? {
            "int" => Base::Int,
            "long" => Base::Long,
            "string" | "bytes" => Base::Text,
            "boolean" => Base::Boolean,
            "any" => Base::Any,
            other => return Err(bad(&format!("base {other}"))),
        };
        let op = match text("op")? {
            "null" => {
                let out_null = json
                    .get("out_null")
                    .and_then(Json::as_i64)
                    .filter(|n| *n == 0 || *n == 1)
                    .ok_or_else(|| bad("out_null"))?;
                Op::Null { out_null }
            }
            "hmac" => {
                if base == Base::Any {
                    return Err(bad("hmac of an unknown type"));
                }
                let mac = Hmac::<Sha256>::new_from_slice(key).map_err(|_| bad("hmac key"))?;
                Op::Hmac(Box::new(mac))
            }
            "time" => {
                if !matches!(base, Base::Int | Base::Long) {
                    return Err(bad("timestamp of a value that is not a number"));
                }
                let per_in = json
                    .get("per_in")
                    .and_then(Json::as_i64)
                    .filter(|p| [1, 1_000, 1_000_000].contains(p))
                    .ok_or_else(|| bad("per_in"))? as i128;
                let to = match text("to")? {
                    "s" => TimeOut::Epoch(1_000_000),
                    "ms" => TimeOut::Epoch(1_000),
                    "us" => TimeOut::Epoch(1),
                    "timestamp_millis" => TimeOut::TimestampMillis,
                    "timestamp_micros" => TimeOut::TimestampMicros,
                    other => return Err(bad(&format!("to {other}"))),
                };
                Op::Time { per_in, to }
            }
            "cast" => {
                let to = match (base, text("to")?) {
                    (Base::Boolean, "string") => CastTo::String,
                    (Base::Int | Base::Long, "string") => CastTo::Digits,
                    (Base::Boolean, "long") => CastTo::Long,
                    (Base::Boolean | Base::Int | Base::Long, "double") => CastTo::Double,
                    (_, other) => return Err(bad(&format!("a cast to {other} of {base:?}"))),
                };
                Op::Cast(to)
            }
            other => return Err(bad(&format!("op {other}"))),
        };
        Ok(FieldRewrite { declared_null, base, op })
    }

    /// A `cast` of an int or long to string (`["null", T]` when `nullable`): the Avro string
    /// of its decimal digits, Python's `str` of it; a null stays null. The one digits rule of
    /// every kernel (json.rs's plain-JSON casts, avro_transform.rs).
    pub fn digits(nullable: bool) -> FieldRewrite {
        FieldRewrite { declared_null: nullable.then_some(0), base: Base::Long, op: Op::Cast(CastTo::Digits) }
    }

    /// A keyed row field of semantic type `kind` ("zoned_timestamp", "variable_scale_decimal",
    /// "nanos_to_micros"), in a union whose null branch is `declared_null` (None: not a union).
    pub fn semantic(kind: &str, declared_null: Option<i64>) -> Result<FieldRewrite, Unsupported> {
        let (kind, base) = match kind {
            "zoned_timestamp" => (Semantic::ZonedTimestamp, Base::Text),
            "variable_scale_decimal" => (Semantic::VariableScaleDecimal, Base::Any),
            "nanos_to_micros" => (Semantic::NanosToMicros, Base::Long),
            other => return Err(Unsupported(format!("a semantic rewrite {other:?}"))),
        };
        Ok(FieldRewrite { declared_null, base, op: Op::Semantic(kind) })
    }

    /// Rewrite the field written at `out[mark..]` (its whole encoding, the last bytes of
    /// `out`) as the transform's step would have it encoded under the derived type.
    pub fn apply(&self, out: &mut Vec<u8>, mark: usize) -> R<()> {
        if let Op::Null { out_null } = self.op {
            out.truncate(mark);
            put_long(out, out_null);
            return Ok(());
        }
        if let Op::Semantic(kind) = self.op {
            return self.semantic_value(kind, out, mark);
        }
        let mut pos = mark;
        if let Some(null) = self.declared_null {
            let branch = read_long(out, &mut pos)?;
            if branch == null {
                // `_replace_value`: a null stays null where the field may be null, and the
                // derived type is then `["null", T]` (null first).
                if pos != out.len() {
                    return Err(stop("rewrite_layout"));
                }
                out.truncate(mark);
                out.push(0);
                return Ok(());
            }
            if branch != 1 - null {
                return Err(stop("rewrite_layout"));
            }
        }
        let nullable = self.declared_null.is_some();
        match (&self.op, self.base) {
            (Op::Hmac(mac), Base::Text) => {
                let len = read_long(out, &mut pos)?;
                if len < 0 || pos.checked_add(len as usize) != Some(out.len()) {
                    return Err(stop("rewrite_layout"));
                }
                let mut mac = (**mac).clone();
                mac.update(&out[pos..]);
                let digest = mac.finalize().into_bytes();
                write_hex(out, mark, nullable, &digest);
            }
            (Op::Hmac(mac), Base::Int | Base::Long) => {
                let value = read_long(out, &mut pos)?;
                if pos != out.len() {
                    return Err(stop("rewrite_layout"));
                }
                let mut mac = (**mac).clone();
                mac.update(value.to_string().as_bytes());
                let digest = mac.finalize().into_bytes();
                write_hex(out, mark, nullable, &digest);
            }
            (Op::Time { per_in, to }, Base::Int | Base::Long) => {
                let value = read_long(out, &mut pos)?;
                if pos != out.len() {
                    return Err(stop("rewrite_layout"));
                }
                let micros = value as i128 * per_in;
                let result = match to {
                    TimeOut::Epoch(per) => micros.div_euclid(*per),
                    _ if !(MIN_MICROS..=MAX_MICROS).contains(&micros) => return Err(stop("timestamp_range")),
                    TimeOut::TimestampMillis => micros.div_euclid(1_000),
                    TimeOut::TimestampMicros => micros,
                };
                let result = i64::try_from(result).map_err(|_| stop("timestamp_range"))?;
                out.truncate(mark);
                if nullable {
                    out.push(2); // branch 1 of ["null", T]
                }
                put_long(out, result);
            }
            (Op::Cast(to), Base::Boolean | Base::Int | Base::Long) => {
                let number = if self.base == Base::Boolean {
                    let b = *out.get(pos).ok_or_else(|| stop("rewrite_layout"))?;
                    pos += 1;
                    match b {
                        0 | 1 => b as i64,
                        _ => return Err(stop("rewrite_layout")),
                    }
                } else {
                    read_long(out, &mut pos)?
                };
                if pos != out.len() {
                    return Err(stop("rewrite_layout"));
                }
                out.truncate(mark);
                if nullable {
                    out.push(2);
                }
                match to {
                    CastTo::String => {
                        let text: &[u8] = if number == 1 { b"true" } else { b"false" };
                        put_long(out, text.len() as i64);
                        out.extend_from_slice(text);
                    }
                    CastTo::Digits => {
                        let text = number.to_string();
                        put_long(out, text.len() as i64);
                        out.extend_from_slice(text.as_bytes());
                    }
                    CastTo::Long => put_long(out, number),
                    CastTo::Double => out.extend_from_slice(&(number as f64).to_le_bytes()),
                }
            }
            _ => return Err(stop("rewrite_layout")),
        }
        Ok(())
    }
}

impl FieldRewrite {
    /// [`Op::Semantic`]: the value at `out[mark..]` (after its union index, kept) converted as
    /// connect_types.rs says; a null stays the same null.
    fn semantic_value(&self, kind: Semantic, out: &mut Vec<u8>, mark: usize) -> R<()> {
        let mut pos = mark;
        if let Some(null) = self.declared_null {
            let branch = read_long(out, &mut pos)?;
            if branch == null {
                return if pos == out.len() { Ok(()) } else { Err(stop("rewrite_layout")) };
            }
            if branch != 1 - null {
                return Err(stop("rewrite_layout"));
            }
        }
        // The value's start: the union index before it stays. The new value is written after
        // the old one, which is then drained (no allocation per value).
        let (at, end) = (pos, out.len());
        match kind {
            Semantic::ZonedTimestamp => {
                let len = read_long(out, &mut pos)?;
                if len < 0 || pos.checked_add(len as usize) != Some(end) {
                    return Err(stop("rewrite_layout"));
                }
                let micros =
                    crate::connect_types::zoned_timestamp(&out[pos..]).ok_or_else(|| stop("semantic_value"))?;
                put_long(out, micros);
            }
            Semantic::VariableScaleDecimal => {
                let scale = read_long(out, &mut pos)?;
                let len = read_long(out, &mut pos)?;
                if !(0..=16).contains(&len) || pos + len as usize != end {
                    return Err(stop(if len > 16 { "semantic_value" } else { "rewrite_layout" }));
                }
                let mut raw = [0u8; 16];
                raw[..len as usize].copy_from_slice(&out[pos..end]);
                crate::connect_types::variable_scale_decimal(scale, &raw[..len as usize], out)
                    .ok_or_else(|| stop("semantic_value"))?;
            }
            Semantic::NanosToMicros => {
                let nanos = read_long(out, &mut pos)?;
                if pos != end {
                    return Err(stop("rewrite_layout"));
                }
                put_long(out, crate::connect_types::nanos_to_micros(nanos));
            }
        }
        out.drain(at..end);
        Ok(())
    }
}

/// The 64 lowercase hex digits of `digest` as an Avro string at `mark` (after branch 1 of
/// `["null", "string"]` when `nullable`).
fn write_hex(out: &mut Vec<u8>, mark: usize, nullable: bool, digest: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.truncate(mark);
    if nullable {
        out.push(2);
    }
    put_long(out, (digest.len() * 2) as i64);
    for &b in digest {
        out.push(HEX[(b >> 4) as usize]);
        out.push(HEX[(b & 15) as usize]);
    }
}

/// A zig-zag varint at `out[*pos..]`, as the encoders write them (at most 10 bytes).
fn read_long(out: &[u8], pos: &mut usize) -> R<i64> {
    let (mut z, mut shift) = (0u64, 0u32);
    loop {
        let b = *out.get(*pos).ok_or_else(|| stop("rewrite_layout"))?;
        if shift > 63 {
            return Err(stop("rewrite_layout"));
        }
        z |= u64::from(b & 0x7f) << shift;
        shift += 7;
        *pos += 1;
        if b & 0x80 == 0 {
            return Ok(((z >> 1) as i64) ^ -((z & 1) as i64));
        }
    }
}

/// What `add` transforms append after the body when one of them copies a part of the message
/// (core/transforms/kinds.py `_add_meta`, `_add_raw`): the derived schema's last fields, in
/// transform order, constants among them (`StageKernel.append_message_parts`).
#[derive(Clone, Debug)]
pub enum Appended {
    /// A constant's encoding (the range's topic and partition are constants too).
    Bytes(Vec<u8>),
    /// The offset, a `long`.
    Offset,
    /// The Kafka timestamp, `["null", timestamp-millis]`: null when Kafka has none or past
    /// year 9999 (`MAX_TIMESTAMP_MS`), as the enrichment column.
    Timestamp,
    /// The key (`None`) or the last header of a name, `["null", "bytes"]` or, `text`,
    /// `["null", "string"]` of UTF-8 (other bytes: handed back, where Python fails the step).
    Raw { header: Option<String>, text: bool },
}

/// The last year-9999 millisecond (core/record/dead_letter_record.py `MAX_TIMESTAMP_MS`).
const MAX_TIMESTAMP_MS: i64 = 253_402_300_799_999;

impl Appended {
    /// `(kind, argument)` from Python: `("bytes", encoded)`, `("offset", b"")`,
    /// `("timestamp", b"")`, `("key", b"bytes" | b"string")`, `("header:bytes" |
    /// "header:string", name)`.
    pub fn parse(kind: &str, argument: &[u8]) -> Result<Appended, Unsupported> {
        let text = |a: &[u8]| match a {
            b"bytes" => Ok(false),
            b"string" => Ok(true),
            _ => Err(Unsupported("a key's type is bytes or string".into())),
        };
        Ok(match kind {
            "bytes" => Appended::Bytes(argument.to_vec()),
            "offset" => Appended::Offset,
            "timestamp" => Appended::Timestamp,
            "key" => Appended::Raw { header: None, text: text(argument)? },
            "header:bytes" | "header:string" => {
                let name =
                    std::str::from_utf8(argument).map_err(|_| Unsupported("a header name that is not UTF-8".into()))?;
                Appended::Raw { header: Some(name.to_string()), text: kind == "header:string" }
            }
            other => return Err(Unsupported(format!("an appended part {other}"))),
        })
    }
}

/// Append `parts` to `out` for the message at `offset` with Kafka timestamp `timestamp_ms`
/// (None: Kafka has none); `key` is the key column's encoding (`["null", "bytes"]`, as
/// prefix.rs `put_key` writes it) and `headers` the headers column's (prefix.rs
/// `put_header`s), each only read when a part needs it. Err: hand the message back.
pub fn append_parts(
    parts: &[Appended],
    out: &mut Vec<u8>,
    offset: i64,
    timestamp_ms: Option<i64>,
    key: &[u8],
    headers: &[u8],
) -> R<()> {
    for part in parts {
        match part {
            Appended::Bytes(bytes) => out.extend_from_slice(bytes),
            Appended::Offset => put_long(out, offset),
            Appended::Timestamp => match timestamp_ms.filter(|ts| (0..=MAX_TIMESTAMP_MS).contains(ts)) {
                Some(ts) => {
                    out.push(2);
                    put_long(out, ts);
                }
                None => out.push(0),
            },
            Appended::Raw { header, text } => {
                let value = match header {
                    None => nullable_bytes(key, &mut 0)?,
                    Some(name) => last_header(headers, name.as_bytes())?,
                };
                match value {
                    None => out.push(0),
                    Some(bytes) => {
                        if *text && std::str::from_utf8(bytes).is_err() {
                            return Err(stop("part_not_utf8"));
                        }
                        out.push(2);
                        put_long(out, bytes.len() as i64);
                        out.extend_from_slice(bytes);
                    }
                }
            }
        }
    }
    Ok(())
}

/// A `["null", "bytes"]` at `column[*pos..]`.
fn nullable_bytes<'c>(column: &'c [u8], pos: &mut usize) -> R<Option<&'c [u8]>> {
    match read_long(column, pos)? {
        0 => Ok(None),
        1 => {
            let len = usize::try_from(read_long(column, pos)?).map_err(|_| stop("part_layout"))?;
            let bytes = column.get(*pos..*pos + len).ok_or_else(|| stop("part_layout"))?;
            *pos += len;
            Ok(Some(bytes))
        }
        _ => Err(stop("part_layout")),
    }
}

/// The value of the last header named `name` in the headers column (`_last_header`: Kafka's
/// convention), None when there is none or its value is null.
fn last_header<'c>(column: &'c [u8], name: &[u8]) -> R<Option<&'c [u8]>> {
    let mut pos = 0;
    let mut found = None;
    loop {
        let count = read_long(column, &mut pos)?;
        if count == 0 {
            return Ok(found);
        }
        if count < 0 {
            return Err(stop("part_layout")); // (prefix.rs writes no sized blocks)
        }
        for _ in 0..count {
            let len = usize::try_from(read_long(column, &mut pos)?).map_err(|_| stop("part_layout"))?;
            let key = column.get(pos..pos + len).ok_or_else(|| stop("part_layout"))?;
            pos += len;
            let value = nullable_bytes(column, &mut pos)?;
            if key == name {
                found = value;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long(v: i64) -> Vec<u8> {
        let mut out = Vec::new();
        put_long(&mut out, v);
        out
    }

    #[test]
    fn the_last_header_of_a_name_wins_and_a_key_that_is_not_utf8_is_handed_back() {
        let mut headers = Vec::new();
        put_long(&mut headers, 3);
        for (name, value) in [("h", Some(&b"one"[..])), ("g", None), ("h", Some(&b"two"[..]))] {
            crate::prefix::put_header(&mut headers, name, value);
        }
        headers.push(0);
        let parts = [Appended::parse("header:string", b"h").unwrap(), Appended::parse("header:bytes", b"g").unwrap()];
        let mut out = Vec::new();
        append_parts(&parts, &mut out, 0, None, &[0], &headers).unwrap();
        assert_eq!(out, [&[2u8, 6][..], &b"two"[..], &[0][..]].concat());
        let mut key = Vec::new();
        crate::prefix::put_key(&mut key, Some(b"\xff"));
        let text = [Appended::parse("key", b"string").unwrap()];
        assert!(append_parts(&text, &mut Vec::new(), 0, None, &key, &[0]).is_err());
        let raw = [Appended::parse("key", b"bytes").unwrap(), Appended::Timestamp, Appended::Offset];
        let mut out = Vec::new();
        append_parts(&raw, &mut out, 5, Some(MAX_TIMESTAMP_MS + 1), &key, &[0]).unwrap();
        assert_eq!(out, vec![2, 2, 0xff, 0, 10]);
    }

    #[test]
    fn digits_are_pythons_str_and_a_null_stays_null() {
        let mut out = long(i64::MIN);
        FieldRewrite::digits(false).apply(&mut out, 0).unwrap();
        let text = b"-9223372036854775808";
        assert_eq!(out, [&long(text.len() as i64)[..], &text[..]].concat());
        let mut null = vec![0u8];
        FieldRewrite::digits(true).apply(&mut null, 0).unwrap();
        assert_eq!(null, vec![0]);
        let mut seven = vec![2u8];
        seven.extend(long(7));
        FieldRewrite::digits(true).apply(&mut seven, 0).unwrap();
        assert_eq!(seven, vec![2, 2, b'7']);
        let mut branch_two = vec![4u8, 14]; // not a ["null", T] layout
        assert!(FieldRewrite::digits(true).apply(&mut branch_two, 0).is_err());
    }

    #[test]
    fn a_timestamp_floors_negative_millis_as_python_does() {
        let r = FieldRewrite::parse(r#"{"op":"time","base":"long","per_in":1,"to":"ms"}"#, b"").unwrap();
        let mut out = long(-1_500);
        r.apply(&mut out, 0).unwrap();
        assert_eq!(out, long(-2)); // -1500 // 1000 == -2
    }

    #[test]
    fn an_instant_past_year_9999_is_handed_back() {
        let r = FieldRewrite::parse(r#"{"op":"time","base":"long","per_in":1000000,"to":"timestamp_millis"}"#, b"")
            .unwrap();
        let mut out = long(253_402_300_800);
        assert!(r.apply(&mut out, 0).is_err());
    }

    #[test]
    fn an_hmac_of_a_nullable_int_hashes_its_digits_and_keeps_nulls() {
        let r = FieldRewrite::parse(r#"{"op":"hmac","base":"int","declared_null":1}"#, b"key").unwrap();
        let mut null = vec![2u8]; // ["int", "null"]: null is branch 1
        r.apply(&mut null, 0).unwrap();
        assert_eq!(null, vec![0]);
        let mut out = vec![0u8];
        out.extend(long(-7));
        r.apply(&mut out, 0).unwrap();
        let mut mac = Hmac::<Sha256>::new_from_slice(b"key").unwrap();
        mac.update(b"-7");
        let mut want = vec![2u8];
        put_long(&mut want, 64);
        want.extend(mac.finalize().into_bytes().iter().flat_map(|b| format!("{b:02x}").into_bytes()));
        assert_eq!(out, want);
    }
}
