//! Durations as text, both ways: parsed from config and definitions ("250ms", "10s", "2m", "1h",
//! "1m30s") and written for people in messages (`readable`).
//! Hand-written on purpose: humantime accepts more (`"2 hours"`, `"1min"`) and prints `1m 30s`,
//! so config files and error texts would change.

pub mod optional;

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// A text that is not a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a duration such as \"250ms\", \"10s\", \"2m\" or \"1h\"")]
pub struct DurationError(pub String);

/// Parses `<number><unit>` pieces (units ms, s, m, h) and adds them up.
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    let bad = || DurationError(text.to_owned());
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let number: u64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let piece = match &rest[..unit_len] {
            "ms" => Duration::from_millis(number),
            "s" => Duration::from_secs(number),
            "m" => Duration::from_secs(number.saturating_mul(60)),
            "h" => Duration::from_secs(number.saturating_mul(3600)),
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total = total.saturating_add(piece);
    }
    Ok(total)
}

pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse(&text).map_err(serde::de::Error::custom)
}

/// A duration for people: `250ms`, `1.5s`, `2m`, `1m30s`.
pub fn readable(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    if ms < 60_000 {
        let text = format!("{:.3}", d.as_secs_f64());
        let text = text.trim_end_matches('0').trim_end_matches('.');
        return format!("{text}s");
    }
    let (m, s) = (d.as_secs() / 60, d.as_secs() % 60);
    if s == 0 {
        format!("{m}m")
    } else {
        format!("{m}m{s}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_combinations() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["", "10", "s", "1.5s", "10 s", "-1s", "3d"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_read_well_below_a_second_too() {
        assert_eq!(readable(Duration::from_millis(250)), "250ms");
        assert_eq!(readable(Duration::from_millis(1500)), "1.5s");
        assert_eq!(readable(Duration::from_secs(1)), "1s");
        assert_eq!(readable(Duration::from_secs(60)), "1m");
        assert_eq!(readable(Duration::from_secs(90)), "1m30s");
        assert_eq!(readable(Duration::from_micros(1)), "0ms");
    }
}
