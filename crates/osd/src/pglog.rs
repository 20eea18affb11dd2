//! The PG log: the ordered record of recent writes to a PG, persisted in the PG's
//! metadata object together with each write. It orders replication, answers resent
//! requests (a request id found here was already applied), and — with the peering work
//! — tells a returning replica what it missed.

use bytes::Bytes;
use carmine_proto::{LogDup, LogEntry, OpError, PgInfo};
use carmine_store::{CollectionId, Transaction};
use carmine_types::encoding::{Decode, Encode};
use carmine_types::{EVersion, ObjectId, ReqId};
use std::collections::{HashMap, VecDeque};

/// Entries kept before the oldest are trimmed (Ceph's `osd_min_pg_log_entries`).
pub const LOG_ENTRIES_MAX: usize = 3000;
/// Most entries trimmed at once (Ceph's `osd_pg_log_trim_min`): a full log grows by up
/// to this many before its oldest go, so that the trimming — removing the log keys,
/// setting and forgetting dups, in the store and in the indexes — happens in one
/// batch of neighbouring keys every so many writes, not key by key on every write.
pub const LOG_TRIM_BATCH_MAX: usize = 100;
/// How many times `entries_max` a log may grow to while entries naming objects a copy
/// lacks hold its trimming back (Ceph's `osd_max_pg_log_entries` against
/// `osd_min_pg_log_entries`); past it the oldest go whatever they name.
pub const LOG_PINNED_GROWTH: usize = 4;
/// Request ids of trimmed entries remembered to answer resends (Ceph's
/// `osd_pg_log_dups_tracked`), whatever the log length.
pub const DUPS_MAX: usize = 3000;

/// Name of the per-PG metadata object (an empty name, which no client may use).
pub const PGMETA_NAME: &str = "";
/// Omap key of the PG info in the metadata object.
pub const INFO_KEY: &[u8] = b"info";
/// Prefix of the omap keys naming objects this copy lacks.
pub const MISSING_PREFIX: &[u8] = b"missing.";
/// A name in a missing set that stands for every object: this copy was wiped to be
/// backfilled and has not received all of it yet (no object can have the empty name).
/// Such a copy is never trusted as complete: it is not preferred as authoritative, a
/// primary holding it pulls everything again, and a replica holding it is backfilled.
pub const MISSING_ALL: &str = "";

/// The value of a missing key: the version the copy needs of the object (Ceph's
/// `pg_missing_item::need`), or empty where it is not known (keys written before
/// versions were kept, a copy wiped for a backfill).
pub fn encode_need(need: Option<EVersion>) -> Bytes {
    need.map_or_else(Bytes::new, |version| version.to_bytes())
}

/// Reads a missing key's value (see [`encode_need`]).
pub fn decode_need(value: Bytes) -> Result<Option<EVersion>, String> {
    if value.is_empty() {
        return Ok(None);
    }
    EVersion::from_shared(value)
        .map(Some)
        .map_err(|e| e.to_string())
}

pub fn missing_key(name: &str) -> Bytes {
    let mut key = MISSING_PREFIX.to_vec();
    key.extend_from_slice(name.as_bytes());
    Bytes::from(key)
}

pub fn pgmeta_oid() -> ObjectId {
    ObjectId::head(PGMETA_NAME)
}

/// The omap key of a log entry, `log.EEEEEEEEEE.VVVVVVVVVVVVVVVVVVVV` (zero-padded
/// decimal, so keys sort by version). Written digit by digit: it is built on every
/// write, and `format!` cost more than the rest of the key's life.
pub fn log_key(version: EVersion) -> Bytes {
    versioned_key(b"log.", version)
}

/// Omap key of a remembered request (a "dup") in the metadata object: `dup.` and the
/// version of its trimmed entry, padded like [`log_key`].
pub fn dup_key(version: EVersion) -> Bytes {
    versioned_key(DUP_PREFIX, version)
}

/// `prefix` (4 bytes) and `EEEEEEEEEE.VVVVVVVVVVVVVVVVVVVV`, in one allocation.
fn versioned_key(prefix: &[u8; 4], version: EVersion) -> Bytes {
    const EPOCH_DIGITS: usize = 10;
    const VERSION_DIGITS: usize = 20;
    let mut key = [b'0'; 4 + EPOCH_DIGITS + 1 + VERSION_DIGITS];
    key[..4].copy_from_slice(prefix);
    key[4 + EPOCH_DIGITS] = b'.';
    write_decimal(&mut key[4..4 + EPOCH_DIGITS], u64::from(version.epoch.0));
    write_decimal(&mut key[4 + EPOCH_DIGITS + 1..], version.version);
    Bytes::copy_from_slice(&key)
}

/// Prefix of the dup keys.
pub const DUP_PREFIX: &[u8; 4] = b"dup.";

/// Bytes of an encoded dup of a successful write: the version envelope (6), three
/// `u64`s and the error flag.
const DUP_VALUE_BYTES: usize = 6 + 3 * 8 + 1;

/// A dup's value: `versioned(2, 1) { u64 client | u64 tid | u64 user_version |
/// u8 failed | [failed: OpError] }` (version 1 had no error: a successful write).
pub fn encode_dup(reqid: ReqId, applied: &Applied) -> Bytes {
    // Exactly sized (when it succeeded), so the buffer becomes the `Bytes` with no
    // further allocation.
    let mut e = carmine_types::encoding::Encoder::with_capacity(DUP_VALUE_BYTES);
    e.versioned(2, 1, |e| {
        e.put_u64(reqid.client);
        e.put_u64(reqid.tid);
        e.put_u64(applied.user_version);
        match &applied.error {
            None => e.put_u8(0),
            Some(error) => {
                e.put_u8(1);
                error.encode(e);
            }
        }
    });
    debug_assert!(applied.error.is_some() || e.len() == DUP_VALUE_BYTES);
    e.into_bytes()
}

/// Decodes a dup kept under `key` (see [`dup_key`], [`encode_dup`]).
pub fn decode_dup(key: &[u8], value: Bytes) -> Result<(ReqId, Applied), String> {
    let version = parse_version(key.strip_prefix(DUP_PREFIX).ok_or("not a dup key")?)
        .ok_or_else(|| format!("bad dup key {:?}", String::from_utf8_lossy(key)))?;
    let mut d = carmine_types::encoding::Decoder::new(value);
    let (client, tid, user_version, error) = d
        .versioned("dup", 2, |d, dup_version| {
            let (client, tid, user_version) = (d.get_u64()?, d.get_u64()?, d.get_u64()?);
            let error = if dup_version < 2 {
                None
            } else {
                match d.get_u8()? {
                    0 => None,
                    1 => Some(OpError::decode(d)?),
                    other => {
                        return Err(carmine_types::encoding::DecodeError::Invalid {
                            what: "dup error flag",
                            value: u64::from(other),
                        })
                    }
                }
            };
            Ok((client, tid, user_version, error))
        })
        .map_err(|e| e.to_string())?;
    d.finish().map_err(|e| e.to_string())?;
    Ok((
        ReqId { client, tid },
        Applied {
            version,
            user_version,
            error,
        },
    ))
}

/// `EPOCH.VERSION` in decimal, as [`log_key`] writes it after its prefix.
fn parse_version(text: &[u8]) -> Option<EVersion> {
    let text = std::str::from_utf8(text).ok()?;
    let (epoch, version) = text.split_once('.')?;
    Some(EVersion {
        epoch: carmine_types::Epoch(epoch.parse().ok()?),
        version: version.parse().ok()?,
    })
}

/// Writes `value` right-aligned into `digits` (already `b'0'`-filled); a value wider
/// than `digits` keeps its low digits, as no epoch or version here can be.
fn write_decimal(digits: &mut [u8], mut value: u64) {
    for digit in digits.iter_mut().rev() {
        *digit = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
}

/// Hashes [`ReqId`]s for the log's indexes, which every write looks up, inserts into
/// and removes from: std's SipHash cost more than the rest of the lookup. Keyed with a
/// random seed per log, so clients cannot choose request ids that collide.
#[derive(Debug, Clone, Copy)]
struct ReqIdHash {
    seed: u64,
}

impl ReqIdHash {
    fn new() -> Self {
        use std::hash::BuildHasher;
        Self {
            seed: std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64),
        }
    }
}

impl std::hash::BuildHasher for ReqIdHash {
    type Hasher = ReqIdHasher;
    fn build_hasher(&self) -> ReqIdHasher {
        ReqIdHasher(self.seed)
    }
}

/// A multiply-fold hasher (folded 64×64→128-bit products, as foldhash does): enough
/// mixing for hashbrown, which takes its bucket from the low bits and its tag from
/// the high ones.
struct ReqIdHasher(u64);

impl ReqIdHasher {
    const MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

    fn fold(a: u64, b: u64) -> u64 {
        let product = u128::from(a) * u128::from(b);
        (product as u64) ^ ((product >> 64) as u64)
    }
}

impl std::hash::Hasher for ReqIdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = Self::fold(self.0 ^ value, Self::MULTIPLIER);
    }

    fn finish(&self) -> u64 {
        Self::fold(self.0, Self::MULTIPLIER.rotate_left(29) | 1)
    }
}

/// A request the log knows: where it was applied (or its failure logged), for
/// answering a resend with the original result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub version: EVersion,
    pub user_version: u64,
    /// The write failed with this error (an error entry): a resend gets it again.
    pub error: Option<OpError>,
}

impl Applied {
    fn of(entry: &LogEntry) -> Self {
        Self {
            version: entry.version,
            user_version: entry.user_version,
            error: entry.op.error().cloned(),
        }
    }

    fn of_dup(dup: &LogDup) -> Self {
        Self {
            version: dup.version,
            user_version: dup.user_version,
            error: dup.error.clone(),
        }
    }
}

/// The in-memory log, the request ids of trimmed entries ("dups"), persisted as `dup.`
/// keys beside the log (peering sends them with the log: see [`PgLog::merge_dups`]),
/// and one index of both.
#[derive(Debug)]
pub struct PgLog {
    entries: VecDeque<LogEntry>,
    dups: VecDeque<(ReqId, Applied)>,
    /// The newest version of each request in `entries` or `dups`. One index for both:
    /// a trimmed entry becomes a dup at the same version, so trimming leaves it as it
    /// is, and only a forgotten dup is removed from it.
    by_reqid: HashMap<ReqId, EVersion, ReqIdHash>,
    /// Entries kept after a trim.
    entries_max: usize,
    /// Entries beyond `entries_max` that make a trim: the log holds at most
    /// `entries_max + trim_batch - 1`, unless entries are pinned (`plan_trim`).
    trim_batch: usize,
    /// How many of the oldest entries the next push trims, as the PG planned it
    /// before the write (`plan_trim`); by count alone when not planned.
    planned_trim: Option<usize>,
}

impl Default for PgLog {
    fn default() -> Self {
        Self::with_entries_max(LOG_ENTRIES_MAX)
    }
}

impl PgLog {
    /// An empty log that keeps `entries_max` (at least 1) entries after each trim. It
    /// trims in batches of an eighth of that, at most [`LOG_TRIM_BATCH_MAX`] (so the
    /// simulator's tiny logs trim in batches of a few entries, or one by one).
    pub fn with_entries_max(entries_max: usize) -> Self {
        let hash = ReqIdHash::new();
        let entries_max = entries_max.max(1);
        Self {
            entries: VecDeque::new(),
            dups: VecDeque::new(),
            by_reqid: HashMap::with_hasher(hash),
            entries_max,
            trim_batch: (entries_max / 8).clamp(1, LOG_TRIM_BATCH_MAX),
            planned_trim: None,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn head(&self) -> EVersion {
        self.entries
            .back()
            .map(|entry| entry.version)
            .unwrap_or(EVersion::ZERO)
    }

    /// Where request `reqid` was applied, if its entry is still in the log or was
    /// trimmed recently enough to be remembered.
    pub fn find_reqid(&self, reqid: ReqId) -> Option<Applied> {
        let version = *self.by_reqid.get(&reqid)?;
        if let Ok(index) = self
            .entries
            .binary_search_by(|entry| entry.version.cmp(&version))
        {
            return self.entries.get(index).map(Applied::of);
        }
        // A resend of a trimmed write: rare, so a scan (dups adopted with a log need
        // not be in version order).
        self.dups
            .iter()
            .rev()
            .find(|(dup, applied)| *dup == reqid && applied.version == version)
            .map(|(_, applied)| applied.clone())
    }

    /// A dup loaded from the store (oldest first).
    pub fn load_dup(&mut self, reqid: ReqId, applied: Applied) {
        self.by_reqid.insert(reqid, applied.version);
        self.dups.push_back((reqid, applied));
    }

    /// Every remembered request as the omap entries that persist it.
    pub fn dup_omap(&self) -> Vec<(Bytes, Bytes)> {
        self.dups
            .iter()
            .map(|(reqid, applied)| (dup_key(applied.version), encode_dup(*reqid, applied)))
            .collect()
    }

    /// Remembers the request of a trimmed entry (the index already names its
    /// version) and forgets the oldest dups beyond `DUPS_MAX`.
    fn remember(&mut self, entry: &LogEntry) {
        self.dups.push_back((entry.reqid, Applied::of(entry)));
        while self.dups.len() > DUPS_MAX {
            let (reqid, applied) = self.dups.pop_front().expect("not empty");
            if self.by_reqid.get(&reqid) == Some(&applied.version) {
                self.by_reqid.remove(&reqid);
            }
        }
    }

    /// Rebuilds the index from the dups and the entries (the newest version of a
    /// request wins: dups are older than the log).
    fn reindex(&mut self) {
        self.by_reqid.clear();
        for (reqid, applied) in &self.dups {
            self.by_reqid.insert(*reqid, applied.version);
        }
        for entry in &self.entries {
            self.by_reqid.insert(entry.reqid, entry.version);
        }
    }

    /// Adds to `tx` the persistence of `entry` and `info` (which must already name
    /// `entry.version` as `last_update`) and the trimming of entries that
    /// [`PgLog::push`] will drop. Changes nothing in memory, so a transaction the store
    /// refuses leaves the log as it was.
    pub fn persist_append(&self, entry: &LogEntry, info: &PgInfo, tx: &mut Transaction) {
        assert!(
            entry.version > self.head(),
            "log entries must be appended in version order: {} after {}",
            entry.version,
            self.head()
        );
        assert_eq!(info.last_update, entry.version);
        let coll = CollectionId::Pg(info.pgid);
        let excess = self.trimmed_by_push();
        // The trimmed entries' requests are remembered durably as dups, the oldest dups
        // beyond DUPS_MAX forgotten, exactly as `push` does in memory. Every key is
        // distinct (a log key, a dup of a trimmed entry, an older dup, the info), so
        // one removal and one set carry it all, each built at its exact size.
        let over = (self.dups.len() + excess).saturating_sub(DUPS_MAX);
        if excess + over > 0 {
            let mut removed = Vec::with_capacity(excess + over);
            removed.extend(
                self.entries
                    .iter()
                    .take(excess)
                    .map(|old| log_key(old.version)),
            );
            removed.extend(
                self.dups
                    .iter()
                    .take(over)
                    .map(|(_, applied)| dup_key(applied.version)),
            );
            tx.omap_rm(coll, pgmeta_oid(), removed);
        }
        let mut set = Vec::with_capacity(excess + 2);
        set.extend(self.entries.iter().take(excess).map(|old| {
            (
                dup_key(old.version),
                encode_dup(old.reqid, &Applied::of(old)),
            )
        }));
        set.push((log_key(entry.version), entry.to_bytes()));
        set.push((Bytes::from_static(INFO_KEY), info.to_bytes()));
        tx.omap_set(coll, pgmeta_oid(), set);
    }

    /// How many of the oldest entries pushing one more trims: none until the log
    /// would exceed `entries_max` by a whole batch, then all beyond `entries_max`,
    /// short of the first entry `plan_trim` pinned.
    fn trimmed_by_push(&self) -> usize {
        (self.planned_trim).unwrap_or_else(|| self.trimmed_from(self.entries.len() + 1))
    }

    /// The next push trims by count alone.
    pub fn unplan_trim(&mut self) {
        self.planned_trim = None;
    }

    /// Primary, before a write: plans the trim its push makes so that it stops short
    /// of the oldest entry naming an object that is `pinned` (one this copy or a
    /// replica lacks), unless the log has grown past [`LOG_PINNED_GROWTH`] times
    /// `entries_max`. Ceph trims no further than every copy's `last_complete`. The
    /// entry tells which version of the object the history needs; trimmed, a copy
    /// holding that version no longer shows it does (its last update falls before
    /// the tail), and the object stayed missing with its only copy in reach (seed
    /// 15189 of remaps, space and snapshot trims). A replica trims to the primary's
    /// tail, which carries the plan. Looks only at the entries the trim would take,
    /// and stops at the first pinned one.
    pub fn plan_trim(&mut self, pinned: impl Fn(&str) -> bool) {
        let len = self.entries.len() + 1;
        let by_count = self.trimmed_from(len);
        let free = (self.entries.iter())
            .take(by_count)
            .take_while(|entry| !pinned(&entry.oid))
            .count();
        let over = len.saturating_sub(self.entries_max * LOG_PINNED_GROWTH);
        self.planned_trim = Some(free.max(over));
    }

    /// How many of the oldest of `len` entries a log trims.
    fn trimmed_from(&self, len: usize) -> usize {
        if len >= self.entries_max + self.trim_batch {
            len - self.entries_max
        } else {
            0
        }
    }

    /// The log tail after pushing one more entry (for the info persisted with it): the
    /// version of the newest entry the push trims, or `tail` (the current one) when it
    /// trims nothing. The log then holds exactly the history after the tail.
    pub fn tail_after_push(&self, tail: EVersion) -> EVersion {
        let excess = self.trimmed_by_push();
        match excess
            .checked_sub(1)
            .and_then(|last| self.entries.get(last))
        {
            Some(trimmed) => trimmed.version,
            None => tail,
        }
    }

    /// Every entry, oldest first.
    pub fn entries(&self) -> impl DoubleEndedIterator<Item = &LogEntry> + '_ {
        self.entries.iter()
    }

    /// Whether an entry with exactly `version` is in the log.
    pub fn contains(&self, version: EVersion) -> bool {
        self.entries
            .binary_search_by(|entry| entry.version.cmp(&version))
            .is_ok()
    }

    /// Replaces the whole log (a copy adopting the authoritative history); keeps all
    /// of `entries` that a log may hold (so a copy adopting another's log holds the
    /// same entries and tail, whatever point of its trim batch the other was at, and
    /// the entries its trimming pinned), or the newest of them a log may grow to when
    /// there are more, and returns the version of the newest one it dropped (the new
    /// tail), if it dropped any. `keep_dups`: whether the requests
    /// remembered so far belong to the adopted history (they do when this copy's log
    /// led up to a point of it; not when it is wiped for a backfill, since a trimmed
    /// divergent entry would then answer a resend of a write that was rolled back).
    pub fn replace(&mut self, entries: Vec<LogEntry>, keep_dups: bool) -> Option<EVersion> {
        self.entries.clear();
        self.planned_trim = None;
        if !keep_dups {
            self.dups.clear();
        }
        // A log whose trimming pinned entries is kept as long as it may grow.
        let excess = (entries.len()).saturating_sub(self.entries_max * LOG_PINNED_GROWTH);
        let tail = excess.checked_sub(1).map(|last| entries[last].version);
        for (index, entry) in entries.into_iter().enumerate() {
            if index < excess {
                self.dups.push_back((entry.reqid, Applied::of(&entry)));
            } else {
                self.entries.push_back(entry);
            }
        }
        let over = self.dups.len().saturating_sub(DUPS_MAX);
        self.dups.drain(..over);
        self.reindex();
        tail
    }

    /// Adds an entry whose persistence was submitted (by [`PgLog::persist_append`] on
    /// the primary, inside the primary's transaction on a replica), trimming the oldest.
    pub fn push(&mut self, entry: LogEntry) {
        if entry.version <= self.head() {
            return;
        }
        for _ in 0..self.trimmed_by_push() {
            self.trim_oldest();
        }
        self.planned_trim = None;
        self.load(entry);
    }

    /// Adds an entry read back from the store, trimming nothing: the log on disk is
    /// already as trimmed as it should be.
    pub fn load(&mut self, entry: LogEntry) {
        if entry.version <= self.head() {
            return;
        }
        self.by_reqid.insert(entry.reqid, entry.version);
        self.entries.push_back(entry);
    }

    /// Adds an entry a replica applied with the primary's transaction, which trimmed
    /// the persisted log up to `tail` (the primary's info): the log in memory trims
    /// to the same point, whatever its own length says.
    pub fn push_trimmed_to(&mut self, entry: LogEntry, tail: EVersion) {
        if entry.version <= self.head() {
            return;
        }
        self.by_reqid.insert(entry.reqid, entry.version);
        self.entries.push_back(entry);
        while self
            .entries
            .front()
            .is_some_and(|oldest| oldest.version <= tail)
        {
            self.trim_oldest();
        }
    }

    /// Drops the oldest entry, remembering its request (as a dup at the same version,
    /// so the index stays as it is).
    fn trim_oldest(&mut self) {
        if let Some(old) = self.entries.pop_front() {
            self.remember(&old);
        }
    }
}

/// Dups exchanged in peering: a copy that adopts another's log (or is backfilled
/// from it) takes its remembered requests too, so that a resend of a write trimmed
/// elsewhere is still answered from them after a primary change.
impl PgLog {
    /// Every remembered request, oldest first, as peering sends them.
    pub fn dups_to_send(&self) -> Vec<LogDup> {
        self.dups
            .iter()
            .map(|(reqid, applied)| LogDup {
                reqid: *reqid,
                version: applied.version,
                user_version: applied.user_version,
                error: applied.error.clone(),
            })
            .collect()
    }

    /// Adds the requests of `incoming` that neither the log nor the dups know yet,
    /// keeping the newest `DUPS_MAX` by version. The caller persists
    /// [`PgLog::dup_omap`] afterwards (adopting a log rewrites the whole metadata).
    pub fn merge_dups(&mut self, incoming: &[LogDup]) {
        let fresh: Vec<(ReqId, Applied)> = incoming
            .iter()
            .filter(|dup| !self.by_reqid.contains_key(&dup.reqid))
            .map(|dup| (dup.reqid, Applied::of_dup(dup)))
            .collect();
        if fresh.is_empty() {
            return;
        }
        let mut all: Vec<(ReqId, Applied)> = self.dups.drain(..).chain(fresh).collect();
        all.sort_by_key(|(_, applied)| applied.version);
        let excess = all.len().saturating_sub(DUPS_MAX);
        self.dups.extend(all.into_iter().skip(excess));
        self.reindex();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_keys_match_the_padded_format_and_sort_by_version() {
        for (epoch, version) in [
            (0, 0),
            (1, 9),
            (7, 10),
            (4_294_967_295, u64::MAX),
            (12, 345),
        ] {
            let ev = EVersion {
                epoch: carmine_types::Epoch(epoch),
                version,
            };
            let expected = format!("log.{epoch:010}.{version:020}");
            assert_eq!(log_key(ev), Bytes::from(expected));
        }
    }
    use carmine_proto::LogOp;
    use carmine_types::PgId;

    fn entry(version: u64, tid: u64) -> LogEntry {
        LogEntry {
            version: EVersion::new(1, version),
            prior_version: EVersion::ZERO,
            reqid: ReqId { client: 1, tid },
            oid: "o".into(),
            op: LogOp::Modify,
            user_version: version,
        }
    }

    #[test]
    fn finds_requests_and_trims_the_oldest() {
        let mut log = PgLog::default();
        let mut info = PgInfo {
            pgid: PgId::new(1, 0),
            ..PgInfo::default()
        };
        // A full log grows by a batch less one before it trims...
        let untrimmed = (LOG_ENTRIES_MAX + LOG_TRIM_BATCH_MAX - 1) as u64;
        for v in 1..=untrimmed {
            let mut tx = Transaction::new();
            info.last_update = EVersion::new(1, v);
            log.persist_append(&entry(v, v), &info, &mut tx);
            log.push(entry(v, v));
        }
        assert_eq!(log.len(), untrimmed as usize);
        // ...then the next append trims the whole batch, in one removal.
        for v in untrimmed + 1..=LOG_ENTRIES_MAX as u64 + LOG_TRIM_BATCH_MAX as u64 + 5 {
            let mut tx = Transaction::new();
            info.last_update = EVersion::new(1, v);
            let tail = log.tail_after_push(EVersion::ZERO);
            log.persist_append(&entry(v, v), &info, &mut tx);
            let removals: Vec<usize> = tx
                .ops
                .iter()
                .filter_map(|op| match op {
                    carmine_store::TxOp::OmapRm { keys, .. } => Some(keys.len()),
                    _ => None,
                })
                .collect();
            if v == untrimmed + 1 {
                assert_eq!(removals, [LOG_TRIM_BATCH_MAX]);
                assert_eq!(tail, EVersion::new(1, LOG_TRIM_BATCH_MAX as u64));
            } else {
                assert!(removals.is_empty(), "{removals:?}");
            }
            log.push(entry(v, v));
        }
        assert_eq!(log.len(), LOG_ENTRIES_MAX + 5);
        // Trimmed, but remembered: a resend is answered, not applied again.
        assert_eq!(
            log.find_reqid(ReqId { client: 1, tid: 3 }),
            Some(Applied {
                version: EVersion::new(1, 3),
                user_version: 3,
                error: None,
            })
        );
        assert!(log.find_reqid(ReqId { client: 1, tid: 0 }).is_none());
        let last = (LOG_ENTRIES_MAX + LOG_TRIM_BATCH_MAX + 5) as u64;
        assert_eq!(
            log.find_reqid(ReqId {
                client: 1,
                tid: last
            })
            .unwrap()
            .version,
            EVersion::new(1, last)
        );
        assert_eq!(info.last_update, EVersion::new(1, last));
    }

    #[test]
    #[should_panic(expected = "version order")]
    fn refuses_out_of_order_entries() {
        let mut log = PgLog::default();
        log.push(entry(2, 1));
        let info = PgInfo {
            last_update: EVersion::new(1, 1),
            ..PgInfo::default()
        };
        log.persist_append(&entry(1, 2), &info, &mut Transaction::new());
    }

    #[test]
    fn dups_persist_with_the_trim_and_load_back() {
        let mut log = PgLog::with_entries_max(2);
        let mut info = PgInfo {
            pgid: PgId::new(1, 0),
            ..PgInfo::default()
        };
        let mut last_tx = Transaction::new();
        for v in 1..=3 {
            let mut tx = Transaction::new();
            info.last_update = EVersion::new(1, v);
            log.persist_append(&entry(v, v), &info, &mut tx);
            log.push(entry(v, v));
            last_tx = tx;
        }
        // The third append trims the first entry: its request is written as a dup.
        let written = format!("{last_tx:?}");
        let key = dup_key(EVersion::new(1, 1));
        assert!(written.contains(&format!("{key:?}")), "{written}");
        let omap = log.dup_omap();
        assert_eq!(omap.len(), 1);
        let (reqid, applied) = decode_dup(&omap[0].0, omap[0].1.clone()).unwrap();
        assert_eq!(reqid, ReqId { client: 1, tid: 1 });
        assert_eq!(applied.version, EVersion::new(1, 1));
        let mut reloaded = PgLog::with_entries_max(2);
        reloaded.load_dup(reqid, applied.clone());
        assert_eq!(reloaded.find_reqid(reqid), Some(applied));
        assert!(decode_dup(b"dup.x", omap[0].1.clone()).is_err());
    }

    /// A MemStore holding one PG's collection and metadata object, and its empty info.
    fn store_with_pgmeta() -> (carmine_store::MemStore, CollectionId, PgInfo) {
        use carmine_store::ObjectStore;
        let pgid = PgId::new(1, 0);
        let coll = CollectionId::Pg(pgid);
        let mut store = carmine_store::MemStore::new();
        let mut tx = Transaction::new();
        tx.create_collection(coll);
        tx.touch(coll, pgmeta_oid());
        store.submit(tx).unwrap();
        let info = PgInfo {
            pgid,
            ..PgInfo::default()
        };
        (store, coll, info)
    }

    /// What the appends leave in the store is exactly the newest entries, the dups of
    /// the newest trimmed ones (at most DUPS_MAX) and the info, once the log and the
    /// dups are both full.
    #[test]
    fn persisted_log_holds_the_newest_entries_and_dups() {
        use carmine_store::ObjectStore;
        let entries_max = 3;
        let mut log = PgLog::with_entries_max(entries_max);
        let (mut store, coll, mut info) = store_with_pgmeta();
        let writes = (DUPS_MAX + entries_max + 5) as u64;
        for v in 1..=writes {
            let mut tx = Transaction::new();
            info.last_update = EVersion::new(1, v);
            log.persist_append(&entry(v, v), &info, &mut tx);
            store.submit(tx).unwrap();
            log.push(entry(v, v));
        }
        let omap = store
            .omap_list(coll, &pgmeta_oid(), None, usize::MAX)
            .unwrap();
        let first_logged = writes - entries_max as u64 + 1;
        let first_dup = first_logged - DUPS_MAX as u64;
        let mut expected: Vec<Bytes> = (first_dup..first_logged)
            .map(|v| dup_key(EVersion::new(1, v)))
            .collect();
        expected.push(Bytes::from_static(INFO_KEY));
        expected.extend((first_logged..=writes).map(|v| log_key(EVersion::new(1, v))));
        let keys: Vec<Bytes> = omap.iter().map(|(key, _)| key.clone()).collect();
        assert_eq!(keys, expected);
        let (reqid, applied) = decode_dup(&omap[0].0, omap[0].1.clone()).unwrap();
        assert_eq!(reqid.tid, first_dup);
        assert_eq!(applied.user_version, first_dup);
        assert_eq!(log.dup_omap().len(), DUPS_MAX);
    }

    /// With trims in batches, after every append the store holds exactly the info, the
    /// log entries after the persisted tail (those the log holds in memory) and the
    /// dups the log remembers; and a replica, applying the primary's transactions and
    /// trimming to the primary's tail, holds the same log as the primary.
    #[test]
    fn batched_trims_keep_store_memory_tail_and_replica_in_step() {
        use carmine_store::ObjectStore;
        let entries_max = 16;
        let mut primary = PgLog::with_entries_max(entries_max);
        assert_eq!(primary.trim_batch, 2);
        // The replica's own limit differs: what it trims follows the primary's tail.
        let mut replica = PgLog::with_entries_max(entries_max * 2);
        let (mut store, coll, mut info) = store_with_pgmeta();
        let mut lengths = std::collections::BTreeSet::new();
        for v in 1..=(DUPS_MAX + 3 * entries_max) as u64 {
            let mut tx = Transaction::new();
            info.last_update = EVersion::new(1, v);
            info.log_tail = primary.tail_after_push(info.log_tail);
            primary.persist_append(&entry(v, v), &info, &mut tx);
            store.submit(tx).unwrap();
            primary.push(entry(v, v));
            replica.push_trimmed_to(entry(v, v), info.log_tail);
            lengths.insert(primary.len());

            let logged: Vec<EVersion> = primary.entries().map(|e| e.version).collect();
            let first = logged[0].version;
            assert_eq!(info.log_tail.version, first - 1, "at {v}");
            assert_eq!(
                replica.entries().map(|e| e.version).collect::<Vec<_>>(),
                logged
            );
            if v % 97 != 0 && v < (DUPS_MAX + 2 * entries_max) as u64 {
                continue; // the whole omap is compared now and then, and at the end
            }
            let keys: Vec<Bytes> = store
                .omap_list(coll, &pgmeta_oid(), None, usize::MAX)
                .unwrap()
                .into_iter()
                .map(|(key, _)| key)
                .collect();
            let mut expected: Vec<Bytes> = primary
                .dups_to_send()
                .iter()
                .map(|dup| dup_key(dup.version))
                .collect();
            expected.push(Bytes::from_static(INFO_KEY));
            expected.extend(logged.iter().map(|version| log_key(*version)));
            assert_eq!(keys, expected, "at {v}");
        }
        // The log only ever held entries_max to entries_max + batch - 1 once full.
        assert_eq!(
            lengths.range(entries_max..).copied().collect::<Vec<_>>(),
            [entries_max, entries_max + 1]
        );
        assert_eq!(primary.dups_to_send().len(), DUPS_MAX);
        assert_eq!(replica.dups_to_send().len(), DUPS_MAX);
        // Every remembered request answers a resend, from the log or its dup; the
        // forgotten ones do not.
        let first_dup = primary.dups_to_send()[0].version.version;
        for log in [&primary, &replica] {
            for tid in 1..=(DUPS_MAX + 3 * entries_max) as u64 {
                let found = log.find_reqid(ReqId { client: 1, tid });
                let expected = (tid >= first_dup).then_some(EVersion::new(1, tid));
                assert_eq!(found.map(|applied| applied.version), expected, "tid {tid}");
            }
        }
    }

    /// A planned trim stops at the oldest entry naming a pinned object (those before
    /// it go), store, tail and replica in step; past `LOG_PINNED_GROWTH` times `entries_max` the oldest go
    /// anyway; unpinned, the next trim takes the whole backlog.
    #[test]
    fn a_planned_trim_keeps_entries_of_pinned_objects_up_to_the_growth_limit() {
        use carmine_store::ObjectStore;
        let entries_max = 8;
        let mut primary = PgLog::with_entries_max(entries_max);
        let mut replica = PgLog::with_entries_max(entries_max);
        let (mut store, coll, mut info) = store_with_pgmeta();
        let named = |v: u64| LogEntry {
            oid: if v == 5 { "lacked".into() } else { "o".into() },
            ..entry(v, v)
        };
        let mut write = |primary: &mut PgLog, v: u64, pinned: bool| {
            primary.plan_trim(|name| pinned && name == "lacked");
            let mut tx = Transaction::new();
            info.last_update = EVersion::new(1, v);
            info.log_tail = primary.tail_after_push(info.log_tail);
            primary.persist_append(&named(v), &info, &mut tx);
            store.submit(tx).unwrap();
            primary.push(named(v));
            replica.push_trimmed_to(named(v), info.log_tail);
            let first = primary.entries().next().unwrap().version.version;
            assert_eq!(info.log_tail.version, first - 1, "at {v}");
            let logged: Vec<EVersion> = primary.entries().map(|e| e.version).collect();
            let kept: Vec<EVersion> = replica.entries().map(|e| e.version).collect();
            assert_eq!(kept, logged, "at {v}");
            let keys = store
                .omap_list(coll, &pgmeta_oid(), None, usize::MAX)
                .unwrap();
            let log_keys = keys
                .iter()
                .filter(|(key, _)| key.starts_with(b"log."))
                .count();
            assert_eq!(log_keys, primary.len(), "at {v}");
        };
        let hard = (entries_max * LOG_PINNED_GROWTH) as u64;
        for v in 1..=hard + 4 {
            write(&mut primary, v, true);
            let first = primary.entries().next().unwrap().version.version;
            assert!(first <= 5, "the entry of \"lacked\" is kept, at {v}");
        }
        // The entries before "lacked" went; from it on the log grew to the limit.
        assert_eq!(primary.entries().next().unwrap().version.version, 5);
        assert_eq!(primary.len() as u64, hard);
        write(&mut primary, hard + 5, true);
        assert_eq!(primary.len() as u64, hard);
        assert_eq!(
            primary.entries().next().unwrap().version.version,
            6,
            "past the limit even the pinned entry goes"
        );
        write(&mut primary, hard + 6, false);
        assert_eq!(primary.len(), entries_max, "the backlog trimmed at once");
    }

    fn error_entry(version: u64, tid: u64) -> LogEntry {
        LogEntry {
            op: LogOp::Error(OpError::Exists),
            user_version: 0,
            ..entry(version, tid)
        }
    }

    /// An error entry answers a resend with its error while logged, as a dup once
    /// trimmed, from the persisted dup after a restart, and from a dup sent in peering.
    #[test]
    fn error_entries_answer_resends_with_their_error_even_trimmed() {
        let mut log = PgLog::with_entries_max(2);
        let mut info = PgInfo {
            pgid: PgId::new(1, 0),
            ..PgInfo::default()
        };
        let failed = ReqId { client: 1, tid: 1 };
        for v in 1..=3 {
            let logged = if v == 1 {
                error_entry(v, v)
            } else {
                entry(v, v)
            };
            if v == 1 {
                let found = log.find_reqid(failed);
                assert!(found.is_none());
            }
            let mut tx = Transaction::new();
            info.last_update = EVersion::new(1, v);
            log.persist_append(&logged, &info, &mut tx);
            log.push(logged);
            if v == 1 {
                let found = log.find_reqid(failed).unwrap();
                assert_eq!(found.error, Some(OpError::Exists));
                assert_eq!(found.version, EVersion::new(1, 1));
            }
        }
        // Trimmed: a dup with the error, in memory, in the store and in peering.
        let found = log.find_reqid(failed).unwrap();
        assert_eq!(found.error, Some(OpError::Exists));
        assert_eq!(
            log.find_reqid(ReqId { client: 1, tid: 2 }).unwrap().error,
            None
        );
        let omap = log.dup_omap();
        let (reqid, applied) = decode_dup(&omap[0].0, omap[0].1.clone()).unwrap();
        assert_eq!((reqid, &applied), (failed, &found));
        let sent = log.dups_to_send();
        assert_eq!(sent[0].error, Some(OpError::Exists));
        let mut other = PgLog::with_entries_max(2);
        other.merge_dups(&sent);
        assert_eq!(other.find_reqid(failed), Some(found));
    }

    #[test]
    fn dups_of_version_1_decode_and_bad_dups_are_errors() {
        let mut e = carmine_types::encoding::Encoder::with_capacity(32);
        e.versioned(1, 1, |e| {
            e.put_u64(4);
            e.put_u64(5);
            e.put_u64(6);
        });
        let key = dup_key(EVersion::new(2, 6));
        let (reqid, applied) = decode_dup(&key, e.into_bytes()).unwrap();
        assert_eq!(reqid, ReqId { client: 4, tid: 5 });
        assert_eq!(applied.user_version, 6);
        assert_eq!(applied.error, None);
        let applied = Applied {
            version: EVersion::new(2, 6),
            user_version: 0,
            error: Some(OpError::VersionMismatch {
                expected: 1,
                actual: 2,
            }),
        };
        let value = encode_dup(reqid, &applied);
        assert_eq!(decode_dup(&key, value.clone()).unwrap().1, applied);
        for length in 0..value.len() {
            assert!(decode_dup(&key, value.slice(..length)).is_err(), "{length}");
        }
    }

    #[test]
    fn log_keys_sort_by_version() {
        assert!(log_key(EVersion::new(1, 9)) < log_key(EVersion::new(1, 10)));
        assert!(log_key(EVersion::new(1, 99)) < log_key(EVersion::new(2, 1)));
    }

    #[test]
    fn merged_dups_answer_resends_and_stay_bounded() {
        let mut log = PgLog::with_entries_max(2);
        log.push(entry(10, 10));
        let dup = |v: u64| LogDup {
            reqid: ReqId { client: 1, tid: v },
            version: EVersion::new(1, v),
            user_version: v,
            error: None,
        };
        // tid 10 is in the log: its entry answers, not a dup.
        let incoming: Vec<LogDup> = (1..=DUPS_MAX as u64 + 10).map(dup).collect();
        log.merge_dups(&incoming);
        assert_eq!(log.dups_to_send().len(), DUPS_MAX);
        // The oldest were dropped, the newest kept.
        assert!(log.find_reqid(ReqId { client: 1, tid: 1 }).is_none());
        let last = DUPS_MAX as u64 + 10;
        let found = log
            .find_reqid(ReqId {
                client: 1,
                tid: last,
            })
            .unwrap();
        assert_eq!(found.version, EVersion::new(1, last));
        assert!(!log.dups_to_send().iter().any(|d| d.reqid.tid == 10));
        let versions: Vec<EVersion> = log.dups_to_send().iter().map(|d| d.version).collect();
        assert!(versions.windows(2).all(|w| w[0] < w[1]), "oldest first");
    }
}
