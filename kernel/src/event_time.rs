//! The event day of a record, and for an HOUR table's record its event hour too, for the
//! values the kernel reads (`core/record/event_time.py` is the reference: its rules, in its
//! order; the hour is the instant's UTC hour whatever the date rule). Anything the kernel does
//! not implement — a string that is not one of the common ISO-8601 spellings below, a zone id
//! needed to place a naive time — returns `None`, and the message is handed back to the
//! Python path.

use crate::body::Value;

const MIN_EPOCH_DAY: i64 = -719_162; // 0001-01-01
const MAX_EPOCH_DAY: i64 = 2_932_896; // 9999-12-31
const MS_PER_DAY: i64 = 86_400_000;
const MS_PER_HOUR: i64 = 3_600_000;

#[derive(Clone, Copy, PartialEq)]
pub enum Unit {
    Auto,
    Seconds,
    Millis,
    Micros,
    Nanos,
}

impl Unit {
    pub fn parse(text: &str) -> Option<Unit> {
        Some(match text {
            "auto" => Unit::Auto,
            "s" => Unit::Seconds,
            "ms" => Unit::Millis,
            "us" => Unit::Micros,
            "ns" => Unit::Nanos,
            _ => return None,
        })
    }

    fn per_day(self) -> i64 {
        match self {
            Unit::Seconds => 86_400,
            Unit::Millis => 86_400_000,
            Unit::Micros => 86_400_000_000,
            Unit::Nanos => 86_400_000_000_000,
            Unit::Auto => unreachable!("resolved before use"),
        }
    }

    /// `auto`: below 1e11 seconds, below 1e14 milliseconds, below 1e17 microseconds, else
    /// nanoseconds (the magnitude rule of `core/record/event_time.py`).
    fn inferred(magnitude: f64) -> Unit {
        if magnitude < 1e11 {
            Unit::Seconds
        } else if magnitude < 1e14 {
            Unit::Millis
        } else if magnitude < 1e17 {
            Unit::Micros
        } else {
            Unit::Nanos
        }
    }
}

pub struct EventTime {
    /// Slots of the candidate fields, in order.
    pub candidates: Vec<usize>,
    pub unit: Unit,
    pub utc_rule: bool,
    pub kafka_timestamp_fallback: bool,
    pub min_day: i64,
    pub max_day: i64,
}

impl EventTime {
    /// The event day, or `None`: hand the message back (missing, invalid or not implemented).
    pub fn day(&self, values: &[Value], body: &[u8], kafka_timestamp_ms: Option<i64>) -> Option<i64> {
        for &slot in &self.candidates {
            match values[slot] {
                Value::Null => continue,
                value => return self.in_range(self.value_day(value, body)?),
            }
        }
        if self.kafka_timestamp_fallback {
            if let Some(ms) = kafka_timestamp_ms {
                if ms >= 0 {
                    return self.in_range(ms.div_euclid(MS_PER_DAY));
                }
            }
        }
        None
    }

    /// `(event day, event hour)` of an HOUR table's record (hours since 1970-01-01T00 UTC),
    /// from the same candidate and the same read as [`EventTime::day`]
    /// (`event_date_and_hour`), or `None`: hand the message back.
    pub fn day_hour(&self, values: &[Value], body: &[u8], kafka_timestamp_ms: Option<i64>) -> Option<(i64, i64)> {
        for &slot in &self.candidates {
            match values[slot] {
                Value::Null => continue,
                value => {
                    let (day, hour) = self.value_day_hour(value, body)?;
                    return Some((self.in_range(day)?, hour_in_range(hour)?));
                }
            }
        }
        if self.kafka_timestamp_fallback {
            if let Some(ms) = kafka_timestamp_ms {
                if ms >= 0 {
                    return Some((
                        self.in_range(ms.div_euclid(MS_PER_DAY))?,
                        hour_in_range(ms.div_euclid(MS_PER_HOUR))?,
                    ));
                }
            }
        }
        None
    }

    /// Python's `_value_date_hour`: the day as [`EventTime::day`] reads it and the UTC hour of
    /// the instant (`value_hour`: integers divided exactly, floats as `math.floor(v / per_hour)`).
    fn value_day_hour(&self, value: Value, body: &[u8]) -> Option<(i64, i64)> {
        match value {
            Value::Date(day) => Some((day, day * 24)),
            Value::Millis(ms) => Some((ms.div_euclid(MS_PER_DAY), ms.div_euclid(MS_PER_HOUR))),
            Value::Micros(us) => Some((us.div_euclid(MS_PER_DAY * 1000), us.div_euclid(MS_PER_HOUR * 1000))),
            Value::Written { day, micros } => Some((day, micros.div_euclid(MS_PER_HOUR * 1000))),
            Value::Int(v) => {
                let unit = match self.unit {
                    Unit::Auto => Unit::inferred_int(v),
                    unit => unit,
                };
                let day = self.value_day(value, body)?;
                Some((day, v.div_euclid(unit.per_day() / 24)))
            }
            Value::Float(v) => {
                let day = self.value_day(value, body)?; // finite and in range
                let unit = match self.unit {
                    Unit::Auto => Unit::inferred(v.abs()),
                    unit => unit,
                };
                Some((day, (v / (unit.per_day() / 24) as f64).floor() as i64))
            }
            Value::Str(s, e) => iso_day_hour(&body[s..e], self.utc_rule),
            Value::Null | Value::Bool(_) | Value::Other => None,
        }
    }

    fn in_range(&self, day: i64) -> Option<i64> {
        (self.min_day..=self.max_day).contains(&day).then_some(day)
    }

    fn value_day(&self, value: Value, body: &[u8]) -> Option<i64> {
        match value {
            Value::Date(day) => Some(day),
            Value::Millis(ms) => Some(ms.div_euclid(MS_PER_DAY)),
            Value::Micros(us) => Some(us.div_euclid(MS_PER_DAY * 1000)),
            Value::Written { day, .. } => Some(day),
            Value::Int(v) => {
                let unit = match self.unit {
                    Unit::Auto => Unit::inferred_int(v),
                    unit => unit,
                };
                let day = v.div_euclid(unit.per_day());
                (MIN_EPOCH_DAY..=MAX_EPOCH_DAY).contains(&day).then_some(day)
            }
            Value::Float(v) => {
                if !v.is_finite() {
                    return None;
                }
                let unit = match self.unit {
                    Unit::Auto => Unit::inferred(v.abs()),
                    unit => unit,
                };
                let day = (v / unit.per_day() as f64).floor();
                if day < MIN_EPOCH_DAY as f64 || day > MAX_EPOCH_DAY as f64 {
                    return None;
                }
                Some(day as i64)
            }
            Value::Str(s, e) => iso_day(&body[s..e], self.utc_rule),
            Value::Null | Value::Bool(_) | Value::Other => None,
        }
    }
}

/// An hour of the years 0001..9999 in UTC (`_hour_in_range`): a date in range may have its
/// UTC hour outside (`9999-12-31T23:30-05:00` under `local`), the Python path's bad input.
fn hour_in_range(hour: i64) -> Option<i64> {
    (MIN_EPOCH_DAY * 24..=MAX_EPOCH_DAY * 24 + 23).contains(&hour).then_some(hour)
}

impl Unit {
    /// The magnitude rule on an integer, compared exactly (as Python compares int and float).
    fn inferred_int(v: i64) -> Unit {
        let magnitude = v.unsigned_abs();
        if magnitude < 100_000_000_000 {
            Unit::Seconds
        } else if magnitude < 100_000_000_000_000 {
            Unit::Millis
        } else if magnitude < 100_000_000_000_000_000 {
            Unit::Micros
        } else {
            Unit::Nanos
        }
    }
}

/// An ISO-8601 text the kernel reads (see [`parse_iso`]).
struct Iso {
    /// The date as written, days since 1970-01-01.
    date: i64,
    /// The time of day as written, in whole seconds (the fraction never crosses an hour).
    second_of_day: i64,
    /// The fraction of the second in microseconds (digits past the sixth dropped, as 3.11).
    micros: i64,
    /// Whether a time follows the date.
    has_time: bool,
    /// The offset east of UTC in seconds, when the text has one.
    offset: Option<i64>,
    /// Whether bracketed annotations (`[Europe/Paris]`) follow.
    annotated: bool,
}

/// The day of the ISO-8601 spellings producers write most (a subset of what Python's
/// `datetime.fromisoformat` reads, with the same meaning): see [`parse_iso`].
pub fn iso_day(text: &[u8], utc_rule: bool) -> Option<i64> {
    day_of(&parse_iso(text)?, utc_rule)
}

/// `(day, UTC hour)` of such a text: the day as [`iso_day`] reads it, and the hour of the
/// instant (Python's `_value_date_hour`): a naive time is UTC, one placed by a zone id is
/// the Python path's (it needs the zone, under both date rules).
pub fn iso_day_hour(text: &[u8], utc_rule: bool) -> Option<(i64, i64)> {
    let iso = parse_iso(text)?;
    let day = day_of(&iso, utc_rule)?;
    let offset = match iso.offset {
        Some(offset) => offset,
        None if iso.annotated => return None,
        None => 0,
    };
    Some((day, (iso.date * 86_400 + iso.second_of_day - offset).div_euclid(3600)))
}

/// The instant of such a text in epoch microseconds, when it has a time and a UTC offset and
/// no annotation (what `datetime.fromisoformat` reads as an aware datetime: Debezium's
/// ZonedTimestamp, connect_types.rs); not range-checked.
pub fn iso_instant_micros(text: &[u8]) -> Option<i64> {
    let iso = parse_iso(text)?;
    let offset = iso.offset.filter(|_| iso.has_time && !iso.annotated)?;
    Some((iso.date * 86_400 + iso.second_of_day - offset) * 1_000_000 + iso.micros)
}

fn day_of(iso: &Iso, utc_rule: bool) -> Option<i64> {
    if !iso.has_time {
        // A date alone is naive: its own date under both rules, unless a zone must place it.
        return (!(utc_rule && iso.annotated)).then_some(iso.date);
    }
    if !utc_rule {
        return Some(iso.date); // `local`: the date as written
    }
    match iso.offset {
        None if iso.annotated => None, // a naive time placed by a zone id: the Python path
        None => Some(iso.date),
        Some(offset) => {
            // Whole seconds on both sides: the time's fraction cannot cross a day boundary.
            let shifted = iso.date + (iso.second_of_day - offset).div_euclid(86_400);
            (MIN_EPOCH_DAY..=MAX_EPOCH_DAY).contains(&shifted).then_some(shifted)
        }
    }
}

/// `YYYY-MM-DD`, optionally any printable ASCII separator and `HH:MM[:SS[.fraction]]` (the
/// fraction after `.` or `,`, any number of digits), optionally `Z`, `±HH:MM[:SS]`,
/// `±HHMM[SS]` or `±HH`, optionally bracketed annotations (`[Europe/Paris]`). Anything else
/// is `None`.
fn parse_iso(text: &[u8]) -> Option<Iso> {
    let (iso, annotated) = split_annotations(text)?;
    let year = digits(iso, 0, 4)?;
    if iso.get(4) != Some(&b'-') || iso.get(7) != Some(&b'-') {
        return None;
    }
    let month = digits(iso, 5, 2)?;
    let day = digits(iso, 8, 2)?;
    if year < 1 || !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    let date = days_from_civil(year, month, day);
    if iso.len() == 10 {
        return Some(Iso { date, second_of_day: 0, micros: 0, has_time: false, offset: None, annotated });
    }
    // Python 3.11 takes any character between an extended date and its time; the kernel
    // reads the printable ASCII ones (a multi-byte one would move the time's byte offsets).
    if !(0x20..=0x7E).contains(&iso[10]) {
        return None;
    }
    let hour = digits(iso, 11, 2)?;
    if iso.get(13) != Some(&b':') {
        return None;
    }
    let minute = digits(iso, 14, 2)?;
    if hour > 23 || minute > 59 {
        return None;
    }
    let mut at = 16;
    let mut second = 0;
    let mut micros = 0;
    if iso.get(at) == Some(&b':') {
        second = digits(iso, at + 1, 2)?;
        if second > 59 {
            return None;
        }
        at += 3;
        // Python reads a fraction after `.` or `,` alike (ISO 8601 allows both), of any
        // number of digits (those past microseconds dropped); with no digit only before an
        // offset (`12:00:00.Z` is noon UTC to it, `12:00:00.` an error).
        if matches!(iso.get(at), Some(b'.' | b',')) {
            let mut n = 0;
            while iso.get(at + 1 + n).is_some_and(u8::is_ascii_digit) {
                n += 1;
            }
            if n == 0 && !matches!(iso.get(at + 1), Some(b'Z' | b'+' | b'-')) {
                return None;
            }
            for i in 0..6 {
                micros = micros * 10 + if i < n { (iso[at + 1 + i] - b'0') as i64 } else { 0 };
            }
            at += 1 + n;
        }
    }
    let rest = &iso[at..];
    // The offsets Python reads in whole seconds: `±HH:MM[:SS]`, `±HHMM[SS]` (ISO basic
    // format) and `±HH`. Python also reads fractions of an offset's second and minutes or
    // seconds past 59 (`+00:60` is one hour); those stay the Python path's.
    let (sign, h1, h2, m1, m2, s1, s2) = match *rest {
        [] | [b'Z'] => (b'+', b'0', b'0', b'0', b'0', b'0', b'0'),
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2, b':', s1, s2] | [sign @ (b'+' | b'-'), h1, h2, m1, m2, s1, s2] => {
            (sign, h1, h2, m1, m2, s1, s2)
        }
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] | [sign @ (b'+' | b'-'), h1, h2, m1, m2] => {
            (sign, h1, h2, m1, m2, b'0', b'0')
        }
        [sign @ (b'+' | b'-'), h1, h2] => (sign, h1, h2, b'0', b'0', b'0', b'0'),
        _ => return None,
    };
    let offset = if rest.is_empty() {
        None
    } else {
        let (h, m, sec) = (two(h1, h2)?, two(m1, m2)?, two(s1, s2)?);
        if h > 23 || m > 59 || sec > 59 {
            return None;
        }
        let total = h * 3600 + m * 60 + sec;
        Some(if sign == b'-' { -total } else { total })
    };
    Some(Iso { date, second_of_day: hour * 3600 + minute * 60 + second, micros, has_time: true, offset, annotated })
}

/// `text` without its trailing `[...]` annotations, and whether it had any (the rules of
/// `_split_annotations`: the first `[` must not start the text).
fn split_annotations(text: &[u8]) -> Option<(&[u8], bool)> {
    if text.last() != Some(&b']') {
        return Some((text, false));
    }
    let start = text.iter().position(|b| *b == b'[')?;
    if start == 0 {
        return None;
    }
    Some((&text[..start], true))
}

fn digits(s: &[u8], at: usize, n: usize) -> Option<i64> {
    let part = s.get(at..at + n)?;
    let mut v = 0i64;
    for b in part {
        if !b.is_ascii_digit() {
            return None;
        }
        v = v * 10 + (b - b'0') as i64;
    }
    Some(v)
}

fn two(a: u8, b: u8) -> Option<i64> {
    digits(&[a, b], 0, 2)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// One more record on `key` (an event day or hour) of `counts`: records cluster, so the last
/// key is tried first.
pub fn count(counts: &mut Vec<(i64, u64)>, key: i64) {
    if let Some(last) = counts.last_mut() {
        if last.0 == key {
            last.1 += 1;
            return;
        }
    }
    match counts.iter_mut().find(|(k, _)| *k == key) {
        Some(entry) => entry.1 += 1,
        None => counts.push((key, 1)),
    }
}

// --- JSON Schema's date-time and date strings (json.rs, json_schema.rs) ----------------------------------------------------------------------------------

/// `datetime.fromisoformat(text)` of a date-time with a UTC offset, as
/// `json_values.timestamp_micros` converts it: (microseconds since the epoch, the date as
/// written in days since the epoch). The spellings read are the event-time reader's
/// (`event_time::iso_day`, a subset of what Python 3.11 reads, with its meaning):
/// `YYYY-MM-DD`, any printable ASCII separator, `HH:MM[:SS[(.|,)F*]]` (digits past
/// microseconds dropped, as Python does; no digit only before an offset), then `Z`,
/// `±HH:MM[:SS]`, `±HHMM[SS]` or `±HH`. Anything else (also what Python reads but converts
/// to an error, such as a naive time) is `None`: handed back.
pub fn date_time_micros(text: &[u8]) -> Option<(i64, i64)> {
    let date = date_days(text.get(..10)?)?;
    // Python 3.11 takes any character between an extended date and its time; the kernel
    // reads the printable ASCII ones (a multi-byte one would move the time's byte offsets).
    if !text.get(10).is_some_and(|b| (0x20..=0x7E).contains(b)) {
        return None;
    }
    let hour = num(text, 11, 2)?;
    if text.get(13) != Some(&b':') {
        return None;
    }
    let minute = num(text, 14, 2)?;
    if hour > 23 || minute > 59 {
        return None;
    }
    let (mut second, mut micros, mut at) = (0, 0, 16);
    if text.get(at) == Some(&b':') {
        second = num(text, at + 1, 2)?;
        if second > 59 {
            return None;
        }
        at += 3;
        if matches!(text.get(at), Some(b'.' | b',')) {
            let mut n = 0;
            while text.get(at + 1 + n).is_some_and(u8::is_ascii_digit) {
                if n < 6 {
                    micros = micros * 10 + (text[at + 1 + n] - b'0') as i64;
                }
                n += 1;
            }
            if n == 0 && !matches!(text.get(at + 1), Some(b'Z' | b'+' | b'-')) {
                return None;
            }
            for _ in n..6 {
                micros *= 10;
            }
            at += 1 + n;
        }
    }
    let (sign, h, m, sec) = match text[at..] {
        [b'Z'] => (b'+', 0, 0, 0),
        [s @ (b'+' | b'-'), h1, h2, b':', m1, m2, b':', s1, s2] | [s @ (b'+' | b'-'), h1, h2, m1, m2, s1, s2] => {
            (s, num(&[h1, h2], 0, 2)?, num(&[m1, m2], 0, 2)?, num(&[s1, s2], 0, 2)?)
        }
        [s @ (b'+' | b'-'), h1, h2, b':', m1, m2] | [s @ (b'+' | b'-'), h1, h2, m1, m2] => {
            (s, num(&[h1, h2], 0, 2)?, num(&[m1, m2], 0, 2)?, 0)
        }
        [s @ (b'+' | b'-'), h1, h2] => (s, num(&[h1, h2], 0, 2)?, 0, 0),
        _ => return None, // no offset (RFC 3339 requires one: a mismatch) or one not read here
    };
    let sign = if sign == b'-' { -1 } else { 1 };
    // Python also reads minutes or seconds past 59 (`+00:60` is an hour): the Python path's.
    if h > 23 || m > 59 || sec > 59 {
        return None;
    }
    let seconds = date * 86_400 + hour * 3600 + minute * 60 + second - sign * (h * 3600 + m * 60 + sec);
    Some((seconds * 1_000_000 + micros, date))
}

/// `json_values.days`: an ISO date `YYYY-MM-DD` (ASCII digits; Python's `\d` also matches
/// other digits, which are handed back) as days since the epoch.
pub fn date_days(text: &[u8]) -> Option<i64> {
    if text.len() != 10 || text[4] != b'-' || text[7] != b'-' {
        return None;
    }
    let (year, month, day) = (num(text, 0, 4)?, num(text, 5, 2)?, num(text, 8, 2)?);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let last = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if year < 1 || !(1..=12).contains(&month) || day < 1 || day > last {
        return None;
    }
    Some(days_from_civil(year, month, day))
}

fn num(s: &[u8], at: usize, n: usize) -> Option<i64> {
    let part = s.get(at..at + n)?;
    part.iter().try_fold(0i64, |v, b| b.is_ascii_digit().then(|| v * 10 + (b - b'0') as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_date_is_a_day_of_the_proleptic_gregorian_calendar_or_none() {
        assert_eq!(date_days(b"1970-01-01"), Some(0));
        assert_eq!(date_days(b"2024-02-29"), Some(19782));
        assert_eq!(date_days(b"2000-02-29"), Some(11016)); // every 400 years a leap year
        assert_eq!(date_days(b"1900-02-29"), None); // every 100 not
        assert_eq!(date_days(b"2023-02-29"), None);
        assert_eq!(date_days(b"0000-01-01"), None);
        assert_eq!(date_days(b"2024-2-29"), None);
    }

    #[test]
    fn a_date_time_is_its_instant_and_the_date_as_written() {
        assert_eq!(date_time_micros(b"1970-01-01T00:00:00Z"), Some((0, 0)));
        // an offset moves the instant, not the written date
        assert_eq!(date_time_micros(b"1970-01-02T00:30+01:00"), Some((86_400_000_000 - 1_800_000_000, 1)));
        assert_eq!(date_time_micros(b"1970-01-01 00:00:01,5-0000"), Some((1_500_000, 0)));
        assert_eq!(date_time_micros(b"1970-01-01T00:00:00"), None); // naive
        assert_eq!(date_time_micros(b"1970-01-01T24:00:00Z"), None);
        assert_eq!(date_time_micros(b"1970-01-01T00:00:00+00:60"), None); // Python's, not read here
    }

    #[test]
    fn records_are_counted_per_key_the_last_one_first() {
        let mut counts = Vec::new();
        for key in [3, 3, 4, 3] {
            count(&mut counts, key);
        }
        assert_eq!(counts, vec![(3, 3), (4, 1)]);
    }
}
