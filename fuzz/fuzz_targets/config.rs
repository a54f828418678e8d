//! Config parsing: any TOML text, and any `TOOLGATE_*` variables (one `KEY=value` per line after
//! a NUL), read on top of the embedded default: never panics; a config that loads validates.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolgate::config::Config;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (toml, env) = text.split_once('\0').unwrap_or((text, ""));
    if let Ok(config) = Config::from_toml(toml) {
        assert!(config.validate().is_ok());
        // What start-up does with a valid config next: its warnings and the dispatch policy.
        let _ = config.warnings();
        let _ = config.policy();
    }
    let vars: Vec<(String, String)> = env
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (format!("TOOLGATE_{k}"), v.to_owned()))
        .collect();
    let _ = Config::load(None, vars);
});
