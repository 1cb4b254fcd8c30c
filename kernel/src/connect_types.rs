//! Kafka Connect / Debezium semantic values whose bytes change in the changelog
//! (`kbqe_dagster/core/formats/connect_types.py` `NEW_BYTES` is the reference): the value as
//! the converter's Python function gives it, or `None` where the kernel is not certain it
//! would give the same — the message is then handed back and the Python path converts it or
//! dead-letters it (`unconvertible_value`). rewrite.rs applies them to a row field's span.
//!
//! - `io.debezium.time.ZonedTimestamp` (`_zoned_timestamp`): Python 3.11's
//!   `datetime.fromisoformat`, then epoch microseconds within BigQuery's range. The kernel
//!   reads the spellings event_time.rs's `parse_iso` reads with fromisoformat's meaning (the
//!   event-time reader's, proven by its fuzz; Debezium writes `YYYY-MM-DDTHH:MM:SS[.ffffff]Z`)
//!   that have a time and an offset and no `[zone]` annotation: the fraction after `.` or
//!   `,`, digits past the sixth dropped (truncated, as 3.11), `Z`, `±HH:MM[:SS]`,
//!   `±HHMM[SS]` or `±HH`. Everything else (lowercase `z`, no offset, a fraction of the
//!   offset's second, week dates) is handed back; so are fields out of range (second 60, hour
//!   24, day 30 of February, year 0, offset hours past 23), which `datetime` refuses too: the
//!   Python path dead-letters them.
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
    let micros = crate::event_time::iso_instant_micros(s)?;
    (MIN_MICROS..=MAX_MICROS).contains(&(micros as i128)).then_some(micros)
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
        // Other spellings fromisoformat reads (values from Python 3.11.7).
        assert_eq!(z("2024-09-13T12:36:45.123456789012Z"), Some(1_726_231_005_123_456));
        assert_eq!(z("2024-09-13 12:36:45+00"), Some(1_726_231_005_000_000));
        assert_eq!(z("2024-09-13x12:36:45.5+0200"), Some(1_726_223_805_500_000));
        assert_eq!(z("2024-09-13T12:36:45.Z"), Some(1_726_231_005_000_000));
        assert_eq!(z("2024-09-13T12:36:45,5+02:00:30"), Some(1_726_223_775_500_000));
        assert_eq!(z("2024-09-13T12:36Z"), Some(1_726_230_960_000_000));
        assert_eq!(z("2024-09-13T12:36:45.5-0130"), Some(1_726_236_405_500_000));
        for refused in [
            "0001-01-01T00:00:00+00:01",
            "9999-12-31T23:59:59-00:01",
            "2023-02-29T00:00:00Z",
            "2024-09-13T12:36:60Z",
            "2024-09-13T24:00:00Z",
            "0000-01-01T00:00:00Z",
            "2024-09-13T12:36:45z",
            "2024-09-13T12:36:45+24:00",
            "2024-09-13T12:36:45",
            "2024-09-13",
            "2024-09-13T12:36:45Z[UTC]",
            "2024-09-13T12:36.5Z",
            "+2024-09-13T12:36:45Z",
            "2024-09-13T12:36:45+02:60",
        ] {
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
        assert_eq!(
            vsd(-28, 9),
            Some({
                let v = 9 * 10i128.pow(37);
                let mut out = vec![2 * 16];
                out.extend_from_slice(&v.to_be_bytes());
                out
            })
        );
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
