//! Optional text durations in config files (`timeout = "10s"`, or absent).

use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub fn deserialize<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    let text = Option::<String>::deserialize(deserializer)?;
    text.map(|t| super::parse(&t).map_err(serde::de::Error::custom))
        .transpose()
}
