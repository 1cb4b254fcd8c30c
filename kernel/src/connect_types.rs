//! Kafka Connect / Debezium semantic values whose bytes change in the changelog
//! (`kbqe_dagster/core/formats/connect_types.py` `NEW_BYTES` is the reference): the value as
//! the converter's Python function gives it, or `None` where the kernel is not certain it
//! would give the same — the message is then handed back and the Python path converts it or
//! dead-letters it (`unconvertible_value`). rewrite.rs applies them to a row field's span.
//!
//! - `io.debezium.time.ZonedTimestamp` (`_zoned_timestamp`): Python 3.11's
//!   `datetime.fromisoformat`, then epoch microseconds within BigQuery's range. The kernel
//!   reads only one spelling, the one Debezium writes: `YYYY-MM-DDTHH:MM:SS`, an optional
//!   `.` and 1 to 9 fraction digits (3.11 keeps the first 6 and drops the rest: truncated,
//!   not rounded), then `Z` or `±HH:MM`. Every other spelling fromisoformat may or may not
//!   read (a space or other separator, `,`, `+00`, `+0000`, seconds in the offset, a bare
//!   `.`, lowercase `z`, omitted seconds, week dates) is handed back. Out-of-range fields
//!   (second 60, hour 24, day 30 of February, year 0, offset hours past 23) are refused by
//!   `datetime` too: handed back, Python dead-letters them.
//! - `io.debezium.data.VariableScaleDecimal` (`_variable_scale_decimal`): `{scale, value}` as
//!   the unscaled two's complement bytes of a NUMERIC (scale 9), exactly, in Python's
//!   `max(1, (bit_length + 8) // 8)` bytes. Computed in i128: an input of more than 16 bytes,
//!   or a step that would not fit, is handed back (Python then says exactly or refuses).
//! - `io.debezium.time.NanoTimestamp` / `NanoTime` (`_nanos_to_micros`): `value // 1000`,
//!   floored as Python's `//` (fastavro writes any long under timestamp-/time-micros).

/// BigQuery's TIMESTAMP range in microseconds (`_MIN_MICROS`, `_MAX_MICROS`).
const MIN_MICROS: i128 = -62_135_596_800_000_000;
const MAX_MICROS: i128 = 253_402_300_799_999_999;

/// NUMERIC: 38 digits, 9 of them decimal places.
const NUMERIC_PRECISION: i64 = 38;
const NUMERIC_SCALE: i64 = 9;

/// Epoch microseconds of a ZonedTimestamp's text, or None (see the module docstring).
pub fn zoned_timestamp(s: &[u8]) -> Option<i64> {
    if s.len() < 20 || s[4] != b'-' || s[7] != b'-' || s[10] != b'T' || s[13] != b':' || s[16] != b':' {
        return None;
    }
    let year = digits(&s[0..4])?;
    let month = digits(&s[5..7])?;
    let day = digits(&s[8..10])?;
    let hour = digits(&s[11..13])?;
    let minute = digits(&s[14..16])?;
    let second = digits(&s[17..19])?;
    if year < 1 || !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month)
        || hour > 23 || minute > 59 || second > 59
    {
        return None;
    }
    let mut pos = 19;
    let mut micros = 0i64;
    if s[pos] == b'.' {
        let start = pos + 1;
        let mut end = start;
        while end < s.len() && s[end].is_ascii_digit() {
            end += 1;
        }
        let n = end - start;
        if !(1..=9).contains(&n) {
            return None;
        }
        for i in 0..6 {
            micros = micros * 10 + if i < n { (s[start + i] - b'0') as i64 } else { 0 };
        }
        pos = end;
    }
    let offset_minutes = match &s[pos..] {
        b"Z" => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let (h, m) = (digits(&[*h1, *h2])?, digits(&[*m1, *m2])?);
            if h > 23 || m > 59 {
                return None;
            }
            let minutes = h * 60 + m;
            if *sign == b'-' { -minutes } else { minutes }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_minutes * 60;
    let total = seconds as i128 * 1_000_000 + micros as i128;
    if !(MIN_MICROS..=MAX_MICROS).contains(&total) {
        return None;
    }
    Some(total as i64)
}

/// ASCII decimal digits as a number (None for anything else).
fn digits(s: &[u8]) -> Option<i64> {
    s.iter().try_fold(0i64, |n, b| b.is_ascii_digit().then(|| n * 10 + (b - b'0') as i64))
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The NUMERIC (scale 9) unscaled bytes of a VariableScaleDecimal of `scale` and unscaled
/// big-endian two's complement `raw`, appended to `out` as an Avro `bytes`; None: not certain.
pub fn variable_scale_decimal(scale: i64, raw: &[u8], out: &mut Vec<u8>) -> Option<()> {
    if raw.len() > 16 {
        return None;
    }
    let mut unscaled: i128 = if raw.first().is_some_and(|b| b & 0x80 != 0) { -1 } else { 0 };
    for b in raw {
        unscaled = (unscaled << 8) | *b as i128;
    }
    if unscaled == 0 {
        // Python returns b"\x00" before looking at the scale.
        crate::prefix::put_long(out, 1);
        out.push(0);
        return Some(());
    }
    let digits = unscaled.unsigned_abs().to_string().len() as i64;
    if scale < NUMERIC_SCALE - NUMERIC_PRECISION || scale - NUMERIC_SCALE > digits {
        return None; // no exact NUMERIC: Python's to refuse
    }
    if scale <= NUMERIC_SCALE {
        unscaled = unscaled.checked_mul(10i128.checked_pow((NUMERIC_SCALE - scale) as u32)?)?;
    } else {
        let divisor = 10i128.checked_pow((scale - NUMERIC_SCALE) as u32)?;
        if unscaled % divisor != 0 {
            return None;
        }
        unscaled /= divisor; // exact: floor and truncation agree
    }
    if unscaled.unsigned_abs() >= 10u128.pow(NUMERIC_PRECISION as u32) {
        return None;
    }
    // Python's int.bit_length is that of the magnitude; one more bit for the sign.
    let bits = 128 - unscaled.unsigned_abs().leading_zeros() as usize;
    let length = ((bits + 8) / 8).max(1);
    crate::prefix::put_long(out, length as i64);
    out.extend_from_slice(&unscaled.to_be_bytes()[16 - length..]);
    Some(())
}

/// `value // 1000`, Python's floor division.
pub fn nanos_to_micros(value: i64) -> i64 {
    value.div_euclid(1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zoned_timestamps_as_fromisoformat_reads_them() {
        let z = |s: &str| zoned_timestamp(s.as_bytes());
        assert_eq!(z("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(z("2024-09-13T12:36:45.123456Z"), Some(1_726_231_005_123_456));
        assert_eq!(z("2024-09-13T14:36:45.5+02:00"), Some(1_726_231_005_500_000));
        assert_eq!(z("2024-09-13T12:36:45.123456789Z"), Some(1_726_231_005_123_456)); // truncated
        assert_eq!(z("1969-12-31T23:59:59.9999999-00:00"), Some(-1));
        assert_eq!(z("0001-01-01T00:00:00Z"), Some(MIN_MICROS as i64));
        assert_eq!(z("9999-12-31T23:59:59.999999Z"), Some(MAX_MICROS as i64));
        assert_eq!(z("2024-02-29T00:00:00Z"), Some(1_709_164_800_000_000));
        for refused in ["0001-01-01T00:00:00+00:01", "9999-12-31T23:59:59-00:01", "2023-02-29T00:00:00Z",
                        "2024-09-13T12:36:60Z", "2024-09-13T24:00:00Z", "0000-01-01T00:00:00Z",
                        "2024-09-13T12:36:45z", "2024-09-13 12:36:45Z", "2024-09-13T12:36:45+00",
                        "2024-09-13T12:36:45+0000", "2024-09-13T12:36:45.Z", "2024-09-13T12:36:45,5Z",
                        "2024-09-13T12:36:45.1234567890Z", "2024-09-13T12:36:45+24:00", "2024-09-13T12:36:45",
                        "2024-09-13T12:36:45+02:00:30", "2024-09-13T12:36Z", "+2024-09-13T12:36:45Z"] {
            assert_eq!(z(refused), None, "{refused}");
        }
    }

    fn vsd(scale: i64, unscaled: i128) -> Option<Vec<u8>> {
        let bytes = unscaled.to_be_bytes();
        let mut out = Vec::new();
        variable_scale_decimal(scale, &bytes, &mut out).map(|_| out)
    }

    #[test]
    fn variable_scale_decimals_as_numeric_exactly_or_not_at_all() {
        assert_eq!(vsd(2, 0), Some(vec![2, 0]));
        assert_eq!(vsd(1000, 0), Some(vec![2, 0]));
        assert_eq!(vsd(9, 1), Some(vec![2, 1]));
        assert_eq!(vsd(9, 127), Some(vec![2, 127]));
        assert_eq!(vsd(9, 128), Some(vec![4, 0, 128]));
        assert_eq!(vsd(9, -128), Some(vec![4, 0xff, 0x80])); // Python's (bit_length + 8) // 8
        assert_eq!(vsd(9, -129), Some(vec![4, 0xff, 0x7f]));
        assert_eq!(vsd(0, 1), Some(vec![8, 0x3b, 0x9a, 0xca, 0x00])); // 10**9
        assert_eq!(vsd(12, 5000), Some(vec![2, 5])); // 5.000e-9: unscaled 5 at scale 9
        assert_eq!(vsd(12, 5001), None); // more than 9 places
        assert_eq!(vsd(-29, 1), None); // 10**38: too many digits
        assert_eq!(vsd(-28, 9), Some({
            let v = 9 * 10i128.pow(37);
            let mut out = vec![2 * 16];
            out.extend_from_slice(&v.to_be_bytes());
            out
        }));
        assert_eq!(vsd(-28, 10), None);
        assert_eq!(vsd(9 + 40, 7), None);
        assert_eq!(vsd(i32::MIN as i64, 7), None);
        let mut out = Vec::new();
        assert!(variable_scale_decimal(0, &[0u8; 17], &mut out).is_none());
        assert!(variable_scale_decimal(0, &[], &mut out).is_some()); // b"" is 0
        assert_eq!(out, vec![2, 0]);
    }

    #[test]
    fn nanos_floor_as_python() {
        assert_eq!(nanos_to_micros(-1), -1);
        assert_eq!(nanos_to_micros(1_999), 1);
        assert_eq!(nanos_to_micros(i64::MIN), i64::MIN / 1000 - 1);
    }
}
