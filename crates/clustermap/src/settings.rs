//! The config keys that daemons read from the map (`carmine config set KEY VALUE`,
//! replicated with the OsdMap), with their types and ranges.
//!
//! Unknown keys are free-form (as Ceph's `config-key`); a known key must parse, which
//! the monitor checks before it accepts `config set` ([`validate`]). A daemon reading a
//! value that does not parse anyway (set by an older monitor) keeps its default and
//! warns once ([`SettingsReader`]).
//!
//! ```
//! use carmine_clustermap::settings::{validate, SettingsReader, OSD_HEARTBEAT_GRACE};
//! use std::collections::BTreeMap;
//! use std::time::Duration;
//!
//! assert!(validate(OSD_HEARTBEAT_GRACE, "2.5").is_ok());
//! assert!(validate(OSD_HEARTBEAT_GRACE, "soon").is_err());
//! let config = BTreeMap::from([(OSD_HEARTBEAT_GRACE.to_string(), "2.5".to_string())]);
//! let mut reader = SettingsReader::default();
//! let grace = reader.seconds(&config, OSD_HEARTBEAT_GRACE, Duration::from_secs(3));
//! assert_eq!(grace, Duration::from_millis(2500));
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Seconds between an OSD's heartbeat pings to each peer (Ceph: 6; Carmine: 1).
pub const OSD_HEARTBEAT_INTERVAL: &str = "osd_heartbeat_interval";
/// Seconds without a heartbeat reply before an OSD reports a peer failed; the monitor
/// also counts a report only while it is younger than this.
pub const OSD_HEARTBEAT_GRACE: &str = "osd_heartbeat_grace";
/// Distinct OSDs that must report a peer before the monitor marks it down.
pub const MON_OSD_MIN_DOWN_REPORTERS: &str = "mon_osd_min_down_reporters";
/// Seconds a down OSD stays in before the monitor marks it out; 0 never does.
pub const MON_OSD_DOWN_OUT_INTERVAL: &str = "mon_osd_down_out_interval";

/// Seconds between an OSD shard's deep-scrub steps (each verifies the data of a few
/// objects against their checksums and repairs corrupt copies); 0 disables scrubbing.
pub const OSD_SCRUB_INTERVAL: &str = "osd_scrub_interval";

/// Seconds a PG primary's read lease lasts (renewed four times per length): how long
/// a primary cut off from its peers may still serve reads, and how long a new primary
/// may wait before serving. Keep it well under `osd_heartbeat_grace`.
pub const OSD_READ_LEASE_INTERVAL: &str = "osd_read_lease_interval";

/// Recovery/backfill reservation slots per OSD shard, local and remote (Ceph's
/// `osd_max_backfills`): how many PGs may push from, and into, one shard at a time.
pub const OSD_MAX_BACKFILLS: &str = "osd_max_backfills";

/// Recovery pushes an OSD shard keeps in flight over all its PGs (Ceph's
/// `osd_recovery_max_active`).
pub const OSD_RECOVERY_MAX_ACTIVE: &str = "osd_recovery_max_active";

/// Fullness thresholds, fractions of an OSD's capacity (Ceph's names and defaults:
/// 0.95, 0.90, 0.85, 0.97); `carmine osd set-full-ratio` and friends set them.
pub const MON_OSD_FULL_RATIO: &str = "mon_osd_full_ratio";
pub const MON_OSD_BACKFILLFULL_RATIO: &str = "mon_osd_backfillfull_ratio";
pub const MON_OSD_NEARFULL_RATIO: &str = "mon_osd_nearfull_ratio";
pub const OSD_FAILSAFE_FULL_RATIO: &str = "osd_failsafe_full_ratio";

/// The recovery scheduler of each OSD shard (mClock-style; see the OSD's
/// `recovery_sched.rs`), in bytes of cost per second (a number, or with a K, M or G
/// suffix for KiB, MiB, GiB): recovery's floor under full client load, 0 for none.
pub const OSD_MCLOCK_RECOVERY_RES: &str = "osd_mclock_recovery_res";
/// Recovery's ceiling, bytes of cost per second; 0 for none.
pub const OSD_MCLOCK_RECOVERY_LIM: &str = "osd_mclock_recovery_lim";
/// Weights of recovery and of client IO between floor and ceiling (1 to 1000).
pub const OSD_MCLOCK_RECOVERY_WGT: &str = "osd_mclock_recovery_wgt";
pub const OSD_MCLOCK_CLIENT_WGT: &str = "osd_mclock_client_wgt";
/// Client IO spending less than this (bytes of cost per second) counts as idle, and
/// recovery may run up to its ceiling; 0: client IO always counts as busy.
pub const OSD_MCLOCK_CLIENT_IDLE_BELOW: &str = "osd_mclock_client_idle_below";
/// The fixed cost of one op or pushed object, in bytes, added to the bytes it moves.
pub const OSD_MCLOCK_COST_PER_IO: &str = "osd_mclock_cost_per_io";

/// The largest byte count or rate accepted: 1 TiB (larger is surely a typo).
pub const BYTES_MAX: u64 = 1 << 40;

/// The longest interval or grace accepted: a day (longer is surely a typo).
pub const SECONDS_MAX: f64 = 86_400.0;
/// The most down reporters a monitor can be asked to wait for.
pub const DOWN_REPORTERS_MAX: u32 = 1_000;

/// How a known key's value is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Decimal seconds above 0 (`0.5`, `3`).
    PositiveSeconds,
    /// Decimal seconds, 0 allowed (0 disables).
    Seconds,
    /// A whole number from 1.
    Count,
    /// A fraction above 0 and at most 1.
    Ratio,
    /// A whole number of bytes (or bytes per second), 0 allowed, with an optional K,
    /// M or G suffix (KiB, MiB, GiB).
    Bytes,
}

fn kind(key: &str) -> Option<Kind> {
    match key {
        OSD_HEARTBEAT_INTERVAL | OSD_HEARTBEAT_GRACE | OSD_READ_LEASE_INTERVAL => {
            Some(Kind::PositiveSeconds)
        }
        MON_OSD_DOWN_OUT_INTERVAL | OSD_SCRUB_INTERVAL => Some(Kind::Seconds),
        MON_OSD_MIN_DOWN_REPORTERS
        | OSD_MAX_BACKFILLS
        | OSD_RECOVERY_MAX_ACTIVE
        | OSD_MCLOCK_RECOVERY_WGT
        | OSD_MCLOCK_CLIENT_WGT => Some(Kind::Count),
        MON_OSD_FULL_RATIO
        | MON_OSD_BACKFILLFULL_RATIO
        | MON_OSD_NEARFULL_RATIO
        | OSD_FAILSAFE_FULL_RATIO => Some(Kind::Ratio),
        OSD_MCLOCK_RECOVERY_RES
        | OSD_MCLOCK_RECOVERY_LIM
        | OSD_MCLOCK_CLIENT_IDLE_BELOW
        | OSD_MCLOCK_COST_PER_IO => Some(Kind::Bytes),
        _ => None,
    }
}

/// Checks a value for `key`: any value of an unknown key, a well-formed one of a known
/// key. The error is one sentence for the operator.
pub fn validate(key: &str, value: &str) -> Result<(), String> {
    match kind(key) {
        None => Ok(()),
        Some(Kind::Count) => parse_count(key, value).map(|_| ()),
        Some(Kind::PositiveSeconds) => parse_seconds(key, value, false).map(|_| ()),
        Some(Kind::Seconds) => parse_seconds(key, value, true).map(|_| ()),
        Some(Kind::Ratio) => parse_ratio(key, value).map(|_| ()),
        Some(Kind::Bytes) => parse_bytes(key, value).map(|_| ()),
    }
}

/// A fraction above 0 and at most 1 (`0.95`).
pub fn parse_ratio(key: &str, value: &str) -> Result<f64, String> {
    let error =
        || format!("{key} must be a ratio above 0 and at most 1 (e.g. 0.95), not {value:?}");
    let ratio: f64 = value.trim().parse().map_err(|_| error())?;
    if !(ratio.is_finite() && ratio > 0.0 && ratio <= 1.0) {
        return Err(error());
    }
    Ok(ratio)
}

fn parse_bytes(key: &str, value: &str) -> Result<u64, String> {
    let error = || {
        format!(
            "{key} must be a whole number of bytes from 0 to {BYTES_MAX}, optionally with \
             a K, M or G suffix (e.g. 8M), not {value:?}"
        )
    };
    let trimmed = value.trim();
    let (digits, unit) = match trimmed.char_indices().last() {
        Some((at, 'K' | 'k')) => (&trimmed[..at], 1u64 << 10),
        Some((at, 'M' | 'm')) => (&trimmed[..at], 1 << 20),
        Some((at, 'G' | 'g')) => (&trimmed[..at], 1 << 30),
        _ => (trimmed, 1),
    };
    let count: u64 = digits.trim().parse().map_err(|_| error())?;
    let bytes = count.checked_mul(unit).ok_or_else(error)?;
    if bytes > BYTES_MAX {
        return Err(error());
    }
    Ok(bytes)
}

fn parse_seconds(key: &str, value: &str, zero_ok: bool) -> Result<Duration, String> {
    let least = if zero_ok { "at least 0" } else { "above 0" };
    let error = || {
        format!(
            "{key} must be a number of seconds {least} and at most {SECONDS_MAX} \
             (e.g. 3 or 0.5), not {value:?}"
        )
    };
    let seconds: f64 = value.trim().parse().map_err(|_| error())?;
    let in_range = seconds.is_finite()
        && seconds <= SECONDS_MAX
        && (seconds > 0.0 || (zero_ok && seconds == 0.0));
    if !in_range {
        return Err(error());
    }
    Ok(Duration::from_secs_f64(seconds))
}

fn parse_count(key: &str, value: &str) -> Result<u32, String> {
    let error =
        || format!("{key} must be a whole number from 1 to {DOWN_REPORTERS_MAX}, not {value:?}");
    let count: u32 = value.trim().parse().map_err(|_| error())?;
    if !(1..=DOWN_REPORTERS_MAX).contains(&count) {
        return Err(error());
    }
    Ok(count)
}

/// Reads known keys from a map's config, falling back to the daemon's defaults (its
/// command-line flags). It remembers the bad values it has reported, so a daemon that
/// re-reads the config on every map warns once per bad value, not once per epoch.
#[derive(Debug, Default, Clone)]
pub struct SettingsReader {
    warned: BTreeSet<(String, String)>,
    /// Warnings not yet taken by the caller (the pure crates do not log).
    pending: Vec<String>,
}

impl SettingsReader {
    /// `key` as seconds, else `default` (absent or bad; a bad value is noted once).
    pub fn seconds(
        &mut self,
        config: &BTreeMap<String, String>,
        key: &str,
        default: Duration,
    ) -> Duration {
        let zero_ok = kind(key) == Some(Kind::Seconds);
        self.read(config, key, default, |value| {
            parse_seconds(key, value, zero_ok)
        })
    }

    /// `key` as a count, else `default`.
    pub fn count(&mut self, config: &BTreeMap<String, String>, key: &str, default: u32) -> u32 {
        self.read(config, key, default, |value| parse_count(key, value))
    }

    /// `key` as bytes (or bytes per second), else `default`.
    pub fn bytes(&mut self, config: &BTreeMap<String, String>, key: &str, default: u64) -> u64 {
        self.read(config, key, default, |value| parse_bytes(key, value))
    }

    /// Warnings about bad values seen since the last call, each reported once.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.pending)
    }

    fn read<T: std::fmt::Debug>(
        &mut self,
        config: &BTreeMap<String, String>,
        key: &str,
        default: T,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> T {
        let Some(value) = config.get(key) else {
            return default;
        };
        match parse(value) {
            Ok(parsed) => parsed,
            Err(error) => {
                if self.warned.insert((key.to_string(), value.clone())) {
                    self.pending
                        .push(format!("{error}; keeping the default {default:?}"));
                }
                default
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn known_keys_must_parse_and_unknown_keys_are_free_form() {
        assert!(validate("site/rack", "anything at all").is_ok());
        assert!(validate(OSD_HEARTBEAT_INTERVAL, "0.25").is_ok());
        assert!(validate(OSD_HEARTBEAT_INTERVAL, "0").is_err());
        assert!(validate(OSD_HEARTBEAT_GRACE, "-1").is_err());
        assert!(validate(OSD_HEARTBEAT_GRACE, "NaN").is_err());
        assert!(validate(OSD_HEARTBEAT_GRACE, "1e9").is_err());
        assert!(validate(MON_OSD_DOWN_OUT_INTERVAL, "0").is_ok());
        assert!(validate(MON_OSD_MIN_DOWN_REPORTERS, "2").is_ok());
        assert!(validate(MON_OSD_MIN_DOWN_REPORTERS, "0").is_err());
        assert!(validate(MON_OSD_MIN_DOWN_REPORTERS, "1.5").is_err());
        assert!(validate(MON_OSD_FULL_RATIO, "0.9").is_ok());
        assert!(validate(MON_OSD_FULL_RATIO, "1").is_ok());
        assert!(validate(MON_OSD_NEARFULL_RATIO, "0").is_err());
        assert!(validate(MON_OSD_NEARFULL_RATIO, "95").is_err());
        assert!(validate(OSD_MCLOCK_RECOVERY_LIM, "0").is_ok());
        assert!(validate(OSD_MCLOCK_RECOVERY_LIM, "64M").is_ok());
        assert!(validate(OSD_MCLOCK_RECOVERY_RES, "-1").is_err());
        assert!(validate(OSD_MCLOCK_RECOVERY_RES, "2T").is_err());
        assert!(validate(OSD_MCLOCK_RECOVERY_WGT, "0").is_err());
        assert_eq!(parse_bytes("k", " 8M "), Ok(8 << 20));
        assert_eq!(parse_bytes("k", "64k"), Ok(64 << 10));
        assert_eq!(parse_bytes("k", "1G"), Ok(1 << 30));
        assert_eq!(parse_bytes("k", "12345"), Ok(12345));
        assert!(parse_bytes("k", "M").is_err());
        assert!(parse_bytes("k", "2000G").is_err());
        let error = validate(OSD_HEARTBEAT_GRACE, "soon").unwrap_err();
        assert!(error.contains("osd_heartbeat_grace"), "{error}");
        assert!(error.contains("\"soon\""), "{error}");
    }

    #[test]
    fn the_reader_falls_back_to_the_default_and_warns_once_per_bad_value() {
        let mut reader = SettingsReader::default();
        let default = Duration::from_secs(3);
        let empty = config(&[]);
        assert_eq!(
            reader.seconds(&empty, OSD_HEARTBEAT_GRACE, default),
            default
        );
        let good = config(&[
            (OSD_HEARTBEAT_GRACE, "1.5"),
            (MON_OSD_MIN_DOWN_REPORTERS, "2"),
        ]);
        assert_eq!(
            reader.seconds(&good, OSD_HEARTBEAT_GRACE, default),
            Duration::from_millis(1500)
        );
        assert_eq!(reader.count(&good, MON_OSD_MIN_DOWN_REPORTERS, 1), 2);
        assert!(reader.take_warnings().is_empty());

        let bad = config(&[(OSD_HEARTBEAT_GRACE, "later")]);
        for _ in 0..3 {
            assert_eq!(reader.seconds(&bad, OSD_HEARTBEAT_GRACE, default), default);
        }
        let warnings = reader.take_warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("later"), "{warnings:?}");
        let other_bad = config(&[(OSD_HEARTBEAT_GRACE, "never")]);
        reader.seconds(&other_bad, OSD_HEARTBEAT_GRACE, default);
        assert_eq!(
            reader.take_warnings().len(),
            1,
            "a new bad value warns again"
        );
    }
}
