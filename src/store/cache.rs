//! The engine's `SharedCache` on Redis: entries under one hash tag, indexed by the path they
//! read, and the invalidation epoch.

use std::time::Duration;

use toolgate_core::middleware::{CacheKey, Cached, Lookup, SharedCache};
use toolgate_core::session::StoreError;
use toolgate_core::tools::{BoxFuture, ContentPart, ToolOutput};

use super::{RedisStore, millis};

/// The cache's keys share one tag, so an invalidation reaches every entry of a path in one
/// script (on a cluster, the cache is one shard's).
const CACHE_TAG: &str = "toolgate:{cache}";

/// A key about `path` (its index `p`, its `epoch`), under the cache's tag.
fn path_key(kind: &str, path: &str) -> String {
    format!("{CACHE_TAG}:{kind}:{path}")
}

/// An entry's key: a digest of its identity (the entry holds the identity itself, compared
/// exactly on every hit).
fn cache_entry_key(key: &CacheKey<'_>) -> String {
    let mut digest = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [key.scope, key.tool, key.input] {
        digest.update(&(part.len() as u64).to_le_bytes());
        digest.update(part.as_bytes());
    }
    let mut name = format!("{CACHE_TAG}:e:");
    for byte in digest.finish().as_ref() {
        name.push_str(&format!("{byte:02x}"));
    }
    name
}

/// A cached entry as the store keeps it: its identity, turn, path and output, as JSON.
fn encode_cached(key: &CacheKey<'_>, entry: &Cached) -> String {
    let output = match &entry.output {
        ToolOutput::Text(text) => serde_json::json!({"text": text}),
        ToolOutput::Json(value) => serde_json::json!({"json": value}),
        ToolOutput::Parts(parts) => {
            let parts: Vec<serde_json::Value> = parts
                .iter()
                .map(|part| match part {
                    ContentPart::Text(text) => serde_json::json!({"text": text}),
                    ContentPart::Image { mime_type, data } => {
                        serde_json::json!({"image": {"mime_type": mime_type, "data": data}})
                    }
                })
                .collect();
            serde_json::json!({"parts": parts})
        }
    };
    serde_json::json!({
        "scope": key.scope, "tool": key.tool, "input": key.input,
        "turn": entry.turn, "path": entry.path, "output": output,
    })
    .to_string()
}

/// The entry stored as `text`, if it is for exactly `key` (anything else is a miss).
fn decode_cached(key: &CacheKey<'_>, text: &str) -> Option<Cached> {
    let doc: serde_json::Value = serde_json::from_str(text).ok()?;
    let same = doc["scope"] == key.scope && doc["tool"] == key.tool && doc["input"] == key.input;
    if !same {
        return None;
    }
    let output = &doc["output"];
    let output = if let Some(text) = output["text"].as_str() {
        ToolOutput::Text(text.to_owned())
    } else if let Some(parts) = output["parts"].as_array() {
        let parts = parts
            .iter()
            .map(|part| match part["text"].as_str() {
                Some(text) => Some(ContentPart::Text(text.to_owned())),
                None => Some(ContentPart::Image {
                    mime_type: part["image"]["mime_type"].as_str()?.to_owned(),
                    data: part["image"]["data"].as_str()?.to_owned(),
                }),
            })
            .collect::<Option<Vec<_>>>()?;
        ToolOutput::Parts(parts)
    } else {
        ToolOutput::Json(output.get("json")?.clone())
    };
    Some(Cached {
        output,
        turn: u32::try_from(doc["turn"].as_u64()?).ok()?,
        path: doc["path"].as_str().map(str::to_owned),
    })
}

impl SharedCache for RedisStore {
    fn get<'a>(
        &'a self,
        key: &'a CacheKey<'a>,
        path: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Lookup, StoreError>> {
        Box::pin(async move {
            let mut call = self.cache_get.prepare_invoke();
            call.key(cache_entry_key(key));
            if let Some(path) = path {
                call.key(path_key("epoch", path));
            }
            let (text, epoch): (String, String) =
                self.within(async |c| call.invoke_async(c).await).await?;
            Ok(Lookup {
                entry: decode_cached(key, &text),
                epoch: epoch.parse().unwrap_or(0),
            })
        })
    }

    fn put<'a>(
        &'a self,
        key: &'a CacheKey<'a>,
        entry: Cached,
        epoch: u64,
        ttl: Option<Duration>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut call = self.cache_put.prepare_invoke();
            call.key(cache_entry_key(key));
            if let Some(path) = &entry.path {
                call.key(path_key("p", path)).key(path_key("epoch", path));
            }
            // Without a TTL of its own an entry lives as long as an idle session would.
            call.arg(encode_cached(key, &entry))
                .arg(epoch.to_string())
                .arg(millis(ttl.unwrap_or(self.settings.idle_ttl)));
            let _stored: i64 = self.within(async |c| call.invoke_async(c).await).await?;
            Ok(())
        })
    }

    fn invalidate<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut call = self.cache_invalidate.prepare_invoke();
            call.key(path_key("p", path))
                .key(path_key("epoch", path))
                // Longer than any entry that looked the path up before it can live.
                .arg(millis(
                    self.settings.idle_ttl.max(Duration::from_secs(3600)),
                ));
            let _dropped: i64 = self.within(async |c| call.invoke_async(c).await).await?;
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_entry_survives_the_store_and_answers_only_its_own_key() {
        let key = CacheKey {
            scope: "acme/s",
            tool: "read",
            input: "{\"p\":1}",
        };
        for output in [
            ToolOutput::Text("t".into()),
            ToolOutput::Json(serde_json::json!({"a": [1, 2]})),
            ToolOutput::Parts(vec![
                ContentPart::Text("x".into()),
                ContentPart::Image {
                    mime_type: "image/png".into(),
                    data: "AA==".into(),
                },
            ]),
        ] {
            let entry = Cached {
                output,
                turn: 3,
                path: Some("/a".into()),
            };
            let text = encode_cached(&key, &entry);
            assert_eq!(decode_cached(&key, &text), Some(entry));
            let other = CacheKey {
                scope: "globex/s",
                ..key
            };
            assert_eq!(decode_cached(&other, &text), None, "another tenant misses");
        }
        assert_ne!(
            cache_entry_key(&key),
            cache_entry_key(&CacheKey {
                input: "{\"p\":2}",
                ..key
            })
        );
    }
}
