//! The enrichment prefix written before every staged body (`core/record/enrichment.py` is the
//! reference): event day, topic, partition, offset, then the optional timestamp, key and
//! headers columns, each in Avro's binary encoding.

/// 9999-12-31T23:59:59.999Z: later Kafka timestamps are written as null.
const MAX_TIMESTAMP_MS: i64 = 253_402_300_799_999;

pub struct Prefix {
    /// Topic (string) and partition (int): the same for every record of a range.
    constant: Vec<u8>,
    pub with_timestamp: bool,
    pub with_key: bool,
    pub with_headers: bool,
}

impl Prefix {
    pub fn new(topic: &str, partition: i32, with_timestamp: bool, with_key: bool, with_headers: bool) -> Prefix {
        let mut constant = Vec::with_capacity(topic.len() + 8);
        put_long(&mut constant, topic.len() as i64);
        constant.extend_from_slice(topic.as_bytes());
        put_long(&mut constant, partition as i64);
        Prefix { constant, with_timestamp, with_key, with_headers }
    }

    /// Day, topic, partition, offset and (when enabled) the timestamp column; the key and
    /// headers follow through [`put_key`] and [`put_header`].
    #[inline]
    pub fn put_head(&self, out: &mut Vec<u8>, day: i64, offset: i64, timestamp_ms: Option<i64>) {
        put_long(out, day);
        out.extend_from_slice(&self.constant);
        put_long(out, offset);
        if self.with_timestamp {
            match timestamp_ms {
                Some(ms) if (0..=MAX_TIMESTAMP_MS).contains(&ms) => {
                    out.push(2);
                    put_long(out, ms);
                }
                _ => out.push(0),
            }
        }
    }
}

/// The key column: `["null", "bytes"]`.
#[inline]
pub fn put_key(out: &mut Vec<u8>, key: Option<&[u8]>) {
    match key {
        None => out.push(0),
        Some(k) => {
            out.push(2);
            put_long(out, k.len() as i64);
            out.extend_from_slice(k);
        }
    }
}

/// One header of the headers array (`{key: string, value: ["null", "bytes"]}`).
#[inline]
pub fn put_header(out: &mut Vec<u8>, key: &str, value: Option<&[u8]>) {
    put_long(out, key.len() as i64);
    out.extend_from_slice(key.as_bytes());
    put_key(out, value);
}

/// An Avro long: zigzag, then base-128 varint.
#[inline]
pub fn put_long(out: &mut Vec<u8>, value: i64) {
    let mut n = ((value << 1) ^ (value >> 63)) as u64;
    while n > 0x7F {
        out.push((n as u8 & 0x7F) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}
