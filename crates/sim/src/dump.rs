//! Reading what a store holds for a PG, for the checkers: every object byte for byte,
//! and the PG log kept in the PG's metadata object.
//!
//! The metadata object's name (empty) and its log keys (`log.` + version) are the
//! OSD's on-disk format (`carmine_osd::pglog`, not exported); they are repeated here.

use bytes::Bytes;
use carmine_proto::{LogEntry, PgInfo};
use carmine_store::{CollectionId, ObjectStore};
use carmine_types::encoding::Decode;
use carmine_types::{ObjectId, PgId, SnapId};
use std::collections::BTreeMap;

/// The name of a PG's metadata object.
pub const PGMETA_NAME: &str = "";
const LOG_KEY_PREFIX: &[u8] = b"log.";
/// The omap key of the PG info in the metadata object.
pub const INFO_KEY: &[u8] = b"info";
const PAGE_MAX: usize = 256;

/// One object as a store holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectDump {
    pub size_bytes: u64,
    pub mtime_ns: u64,
    pub data: Bytes,
    /// Store xattrs: user xattrs carry a `_` prefix; `_` alone is the object info.
    pub xattrs: BTreeMap<String, Bytes>,
    pub omap: Vec<(Bytes, Bytes)>,
}

impl ObjectDump {
    /// Whether this is a whiteout head: kept only to hold its clones' snapshot set,
    /// its object info says the object does not exist.
    pub fn is_whiteout(&self) -> bool {
        self.xattrs
            .get("_")
            .and_then(|raw| carmine_proto::ObjectInfo::from_shared(raw.clone()).ok())
            .is_some_and(|info| info.whiteout)
    }

    /// The user's xattrs, as a client sees them.
    pub fn user_xattrs(&self) -> BTreeMap<String, Bytes> {
        self.xattrs
            .iter()
            .filter_map(|(name, value)| {
                let user = name.strip_prefix('_')?;
                (!user.is_empty()).then(|| (user.to_string(), value.clone()))
            })
            .collect()
    }
}

/// A PG's objects by name (clones by [`clone_key`]), the metadata object (empty name)
/// included; `None` when the store has no collection for the PG.
pub type PgDump = Option<BTreeMap<String, ObjectDump>>;

/// The dump's key of `name`'s clone `id` (heads are keyed by their name; the
/// simulated clients' names never hold an `@`).
pub fn clone_key(name: &str, id: u64) -> String {
    format!("{}{id}", clone_prefix(name))
}

/// What every clone key of `name` starts with.
pub fn clone_prefix(name: &str) -> String {
    format!("{name}@")
}

/// Whether a dump key names a clone rather than a head.
pub fn is_clone_key(key: &str) -> bool {
    key.contains('@')
}

pub fn dump_pg(store: &dyn ObjectStore, pgid: PgId) -> PgDump {
    let coll = CollectionId::Pg(pgid);
    if !store.collection_exists(coll) {
        return None;
    }
    let mut dump = BTreeMap::new();
    let mut after: Option<ObjectId> = None;
    loop {
        let page = store
            .list_objects(coll, after.as_ref(), PAGE_MAX)
            .expect("the collection exists");
        let Some(last) = page.last().cloned() else {
            return Some(dump);
        };
        for oid in page {
            let key = if oid.snap == SnapId::HEAD {
                oid.name.clone()
            } else {
                clone_key(&oid.name, oid.snap.0)
            };
            dump.insert(key, dump_object(store, coll, &oid));
        }
        after = Some(last);
    }
}

fn dump_object(store: &dyn ObjectStore, coll: CollectionId, oid: &ObjectId) -> ObjectDump {
    let stat = store.stat(coll, oid).expect("listed");
    ObjectDump {
        size_bytes: stat.size_bytes,
        mtime_ns: stat.mtime_ns,
        // A copy that fails its checksum shows as different bytes, so the checkers
        // report it instead of the dump panicking.
        data: store
            .read(coll, oid, 0, stat.size_bytes)
            .unwrap_or_else(|error| Bytes::from(format!("<unreadable: {error}>"))),
        xattrs: store.getxattrs(coll, oid).expect("listed"),
        omap: store
            .omap_list(coll, oid, None, usize::MAX)
            .expect("listed"),
    }
}

/// The PG log entries in `dump`'s metadata object, in version order.
pub fn log_entries(dump: &PgDump) -> Result<Vec<LogEntry>, String> {
    let Some(meta) = dump.as_ref().and_then(|d| d.get(PGMETA_NAME)) else {
        return Ok(Vec::new());
    };
    let mut entries = Vec::new();
    for (key, value) in &meta.omap {
        if key.starts_with(LOG_KEY_PREFIX) {
            let entry = LogEntry::from_shared(value.clone())
                .map_err(|e| format!("log entry {key:?} is corrupt: {e}"))?;
            entries.push(entry);
        }
    }
    entries.sort_by_key(|entry| entry.version);
    Ok(entries)
}

/// The PG info in `dump`'s metadata object, if any.
pub fn pg_info(dump: &PgDump) -> Result<Option<PgInfo>, String> {
    let Some(meta) = dump.as_ref().and_then(|d| d.get(PGMETA_NAME)) else {
        return Ok(None);
    };
    let Some((_, raw)) = meta.omap.iter().find(|(key, _)| &key[..] == INFO_KEY) else {
        return Ok(None);
    };
    PgInfo::from_shared(raw.clone())
        .map(Some)
        .map_err(|e| format!("PG info is corrupt: {e}"))
}

/// What every member of a PG must agree on in its info: the members' own fields
/// (`created`, `last_epoch_started`) legitimately differ, and so may counts one of them
/// holds in doubt (`stats_invalid`: a replica activated before its primary counted
/// them afresh keeps the doubtful ones until the next write brings the primary's), so
/// those are compared only when both are sure.
pub fn shared_info(info: &PgInfo) -> (carmine_types::EVersion, carmine_types::EVersion) {
    (info.last_update, info.log_tail)
}

/// A member's counts (objects, bytes), or `None` while it holds them in doubt.
pub fn sure_counts(info: &PgInfo) -> Option<(u64, u64)> {
    (!info.stats_invalid).then_some((info.object_count, info.data_bytes))
}
