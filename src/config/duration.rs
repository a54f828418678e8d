//! Durations in config files as text: "250ms", "10s", "2m", "1h", or combinations like "1m30s".

use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// Parses `<number><unit>` pieces (units ms, s, m, h) and adds them up.
pub fn parse(text: &str) -> Result<Duration, String> {
    let bad = || format!("'{text}' is not a duration such as \"250ms\", \"10s\", \"2m\" or \"1h\"");
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
}
