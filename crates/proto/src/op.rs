//! Object operations: the sub-ops of a compound, per-object atomic request (the role
//! of a RADOS `ObjectOperation`), their outputs and their errors.

use crate::snap::SnapSet;
use bytes::Bytes;
use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use carmine_types::limits::{
    LIST_ENTRIES_MAX, OBJECT_NAME_BYTES_MAX, OMAP_KEY_BYTES_MAX, WRITE_BYTES_MAX,
    XATTR_NAME_BYTES_MAX, XATTR_VALUE_BYTES_MAX,
};
use carmine_types::EVersion;
use std::collections::BTreeMap;

/// One sub-operation. Reads and writes may be mixed; the whole list is atomic: either
/// every write applies or none does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpCode {
    Read {
        offset: u64,
        length: u64,
    },
    Stat,
    GetXattr {
        name: String,
    },
    GetXattrs,
    /// Omap entries after `after` (all when `None`), at most `max_entries`.
    OmapGetVals {
        after: Option<Bytes>,
        max_entries: u32,
    },
    OmapGetValsByKeys {
        keys: Vec<Bytes>,
    },
    /// Guard: fails the request with `Canceled` unless the xattr equals `value`.
    CmpXattrEq {
        name: String,
        value: Bytes,
    },
    /// Guard: fails with `VersionMismatch` unless the object's version equals `version`.
    AssertVersion {
        version: u64,
    },
    /// Guard: fails with `NotFound` unless the object exists.
    AssertExists,
    /// Creates the object; with `exclusive`, fails with `Exists` if it exists.
    Create {
        exclusive: bool,
    },
    WriteFull {
        data: Bytes,
    },
    Write {
        offset: u64,
        data: Bytes,
    },
    Append {
        data: Bytes,
    },
    Truncate {
        size_bytes: u64,
    },
    Zero {
        offset: u64,
        length: u64,
    },
    Remove,
    SetXattr {
        name: String,
        value: Bytes,
    },
    RmXattr {
        name: String,
    },
    OmapSet {
        entries: Vec<(Bytes, Bytes)>,
    },
    OmapRm {
        keys: Vec<Bytes>,
    },
    OmapClear,
    /// The object's snapshot set: which clones exist and the snaps each covers
    /// (Ceph's `LIST_SNAPS`). Always answers for the head, whatever the request's
    /// `snapid`, and succeeds on an object that has only clones.
    ListSnaps,
    /// Lists the PG's objects after `after` (sent with an empty object name).
    PgList {
        after: Option<String>,
        max_entries: u32,
    },
    /// Lists the PG's unfound objects after `after`, with the version each needs (sent
    /// with an empty object name to the primary; Ceph's `pg PGID list_unfound`).
    PgListUnfound {
        after: Option<String>,
        max_entries: u32,
    },
    /// Gives up the PG's unfound objects: the primary logs the removal of each (sent
    /// with an empty object name; Ceph's `pg PGID mark_unfound_lost delete`). The
    /// answer, [`OpOutput::Unfound`], names those removed.
    PgMarkUnfoundLost,
}

impl OpCode {
    /// Whether the op addresses the PG rather than an object (sent alone, with an
    /// empty object name).
    pub fn is_pg_op(&self) -> bool {
        matches!(
            self,
            OpCode::PgList { .. } | OpCode::PgListUnfound { .. } | OpCode::PgMarkUnfoundLost
        )
    }

    /// Whether the op may add data to the store (refused while a PG's OSD is full);
    /// removals, truncates, zeroes and key/xattr removals free space and are not.
    pub fn adds_data(&self) -> bool {
        matches!(
            self,
            OpCode::Create { .. }
                | OpCode::WriteFull { .. }
                | OpCode::Write { .. }
                | OpCode::Append { .. }
                | OpCode::SetXattr { .. }
                | OpCode::OmapSet { .. }
        )
    }

    /// Whether the op changes the object (and so needs replication).
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            OpCode::Create { .. }
                | OpCode::WriteFull { .. }
                | OpCode::Write { .. }
                | OpCode::Append { .. }
                | OpCode::Truncate { .. }
                | OpCode::Zero { .. }
                | OpCode::Remove
                | OpCode::SetXattr { .. }
                | OpCode::RmXattr { .. }
                | OpCode::OmapSet { .. }
                | OpCode::OmapRm { .. }
                | OpCode::OmapClear
        )
    }
}

/// What one sub-op returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpOutput {
    None,
    Data(Bytes),
    Stat {
        size_bytes: u64,
        mtime_ns: u64,
        version: u64,
    },
    Xattr(Bytes),
    Xattrs(BTreeMap<String, Bytes>),
    Omap {
        entries: Vec<(Bytes, Bytes)>,
        more: bool,
    },
    List {
        names: Vec<String>,
        /// Where to continue; `None` when the PG is exhausted.
        next: Option<String>,
    },
    /// The answer to [`OpCode::ListSnaps`].
    Snaps {
        snapset: SnapSet,
        head_exists: bool,
    },
    /// The answer to [`OpCode::PgListUnfound`]: each unfound object with the version
    /// the PG's history needs of it (`EVersion::ZERO` when no copy still records it).
    Unfound {
        objects: Vec<(String, EVersion)>,
        /// Where to continue; `None` when the list is exhausted.
        next: Option<String>,
    },
}

/// Why a request failed. Codes follow the errno a Ceph client would see.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OpError {
    #[error("no such object")]
    NotFound,
    #[error("object already exists")]
    Exists,
    #[error("no such attribute")]
    NoSuchXattr,
    #[error("comparison failed")]
    Canceled,
    #[error("object version is {actual}, not {expected}")]
    VersionMismatch { expected: u64, actual: u64 },
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("object would exceed the size limit of {limit_bytes} bytes")]
    TooLarge { limit_bytes: u64 },
    #[error("no space left (NoSpace): an OSD of the PG is full; delete objects, add OSDs or raise the ratio (see `carmine health`)")]
    NoSpace,
    #[error("this OSD is not the primary for the PG; retry with a newer map")]
    WrongPrimary,
    /// The op reached a shard that does not own its PG: the sender's map gave the OSD
    /// another shard count or other shard addresses (it restarted since). A redirect:
    /// the reply's epoch is the OSD's, and the sender retries once it holds a map at
    /// least that new that places the PG on the right shard.
    #[error("this OSD shard does not own the PG (the OSD runs {shard_count} shards); retry with a newer map")]
    WrongShard { shard_count: u16 },
    #[error("the PG is not active (fewer than min_size replicas up); retry later")]
    NotActive,
    #[error("the OSD is overloaded; retry")]
    Busy,
    #[error("storage error: {0}")]
    Io(String),
}

impl OpError {
    /// The errno-style code used on the wire.
    pub fn code(&self) -> u16 {
        match self {
            OpError::NotFound => 2,
            OpError::Exists => 17,
            OpError::NoSuchXattr => 61,
            OpError::Canceled => 125,
            OpError::VersionMismatch { .. } => 34,
            OpError::Invalid(_) => 22,
            OpError::TooLarge { .. } => 27,
            OpError::NoSpace => 28,
            OpError::WrongPrimary => 6,
            OpError::WrongShard { .. } => 18,
            OpError::NotActive => 11,
            OpError::Busy => 16,
            OpError::Io(_) => 5,
        }
    }
}

// --- encoding -------------------------------------------------------------------

fn put_entries(e: &mut Encoder, entries: &[(Bytes, Bytes)]) {
    e.put_u32(entries.len() as u32);
    for (key, value) in entries {
        e.put_blob(key);
        e.put_blob(value);
    }
}

fn get_entries(d: &mut Decoder) -> Result<Vec<(Bytes, Bytes)>, DecodeError> {
    let count = d.get_count("omap entries", 8)?;
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        let key = d.get_blob("omap key", OMAP_KEY_BYTES_MAX)?;
        let value = d.get_blob("omap value", WRITE_BYTES_MAX)?;
        entries.push((key, value));
    }
    Ok(entries)
}

fn get_keys(d: &mut Decoder) -> Result<Vec<Bytes>, DecodeError> {
    let count = d.get_count("omap keys", 4)?;
    let mut keys = Vec::with_capacity(count);
    for _ in 0..count {
        keys.push(d.get_blob("omap key", OMAP_KEY_BYTES_MAX)?);
    }
    Ok(keys)
}

fn get_xattr_name(d: &mut Decoder) -> Result<String, DecodeError> {
    d.get_string("xattr name", XATTR_NAME_BYTES_MAX)
}

fn get_data(d: &mut Decoder) -> Result<Bytes, DecodeError> {
    d.get_blob("write data", WRITE_BYTES_MAX)
}

impl Encode for OpCode {
    fn encode(&self, e: &mut Encoder) {
        match self {
            OpCode::Read { offset, length } => {
                e.put_u8(1);
                e.put_u64(*offset);
                e.put_u64(*length);
            }
            OpCode::Stat => e.put_u8(2),
            OpCode::GetXattr { name } => {
                e.put_u8(3);
                name.encode(e);
            }
            OpCode::GetXattrs => e.put_u8(4),
            OpCode::OmapGetVals { after, max_entries } => {
                e.put_u8(5);
                after.encode(e);
                e.put_u32(*max_entries);
            }
            OpCode::OmapGetValsByKeys { keys } => {
                e.put_u8(6);
                keys.encode(e);
            }
            OpCode::CmpXattrEq { name, value } => {
                e.put_u8(7);
                name.encode(e);
                e.put_blob(value);
            }
            OpCode::AssertVersion { version } => {
                e.put_u8(8);
                e.put_u64(*version);
            }
            OpCode::AssertExists => e.put_u8(9),
            OpCode::ListSnaps => e.put_u8(10),
            OpCode::Create { exclusive } => {
                e.put_u8(20);
                exclusive.encode(e);
            }
            OpCode::WriteFull { data } => {
                e.put_u8(21);
                e.put_shared_blob(data);
            }
            OpCode::Write { offset, data } => {
                e.put_u8(22);
                e.put_u64(*offset);
                e.put_shared_blob(data);
            }
            OpCode::Append { data } => {
                e.put_u8(23);
                e.put_shared_blob(data);
            }
            OpCode::Truncate { size_bytes } => {
                e.put_u8(24);
                e.put_u64(*size_bytes);
            }
            OpCode::Zero { offset, length } => {
                e.put_u8(25);
                e.put_u64(*offset);
                e.put_u64(*length);
            }
            OpCode::Remove => e.put_u8(26),
            OpCode::SetXattr { name, value } => {
                e.put_u8(27);
                name.encode(e);
                e.put_blob(value);
            }
            OpCode::RmXattr { name } => {
                e.put_u8(28);
                name.encode(e);
            }
            OpCode::OmapSet { entries } => {
                e.put_u8(29);
                put_entries(e, entries);
            }
            OpCode::OmapRm { keys } => {
                e.put_u8(30);
                keys.encode(e);
            }
            OpCode::OmapClear => e.put_u8(31),
            OpCode::PgList { after, max_entries } => {
                e.put_u8(40);
                after.encode(e);
                e.put_u32(*max_entries);
            }
            OpCode::PgListUnfound { after, max_entries } => {
                e.put_u8(41);
                after.encode(e);
                e.put_u32(*max_entries);
            }
            OpCode::PgMarkUnfoundLost => e.put_u8(42),
        }
    }
}

impl Decode for OpCode {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        let tag = d.get_u8()?;
        Ok(match tag {
            1 => OpCode::Read {
                offset: d.get_u64()?,
                length: d.get_u64()?,
            },
            2 => OpCode::Stat,
            3 => OpCode::GetXattr {
                name: get_xattr_name(d)?,
            },
            4 => OpCode::GetXattrs,
            5 => OpCode::OmapGetVals {
                after: decode_optional_key(d)?,
                max_entries: d.get_u32()?,
            },
            6 => OpCode::OmapGetValsByKeys { keys: get_keys(d)? },
            7 => OpCode::CmpXattrEq {
                name: get_xattr_name(d)?,
                value: d.get_blob("xattr value", XATTR_VALUE_BYTES_MAX)?,
            },
            8 => OpCode::AssertVersion {
                version: d.get_u64()?,
            },
            9 => OpCode::AssertExists,
            10 => OpCode::ListSnaps,
            _ => return decode_write_op(tag, d),
        })
    }
}

fn decode_optional_key(d: &mut Decoder) -> Result<Option<Bytes>, DecodeError> {
    match d.get_u8()? {
        0 => Ok(None),
        1 => Ok(Some(d.get_blob("omap key", OMAP_KEY_BYTES_MAX)?)),
        other => Err(DecodeError::Invalid {
            what: "option tag",
            value: u64::from(other),
        }),
    }
}

fn decode_write_op(tag: u8, d: &mut Decoder) -> Result<OpCode, DecodeError> {
    Ok(match tag {
        20 => OpCode::Create {
            exclusive: bool::decode(d)?,
        },
        21 => OpCode::WriteFull { data: get_data(d)? },
        22 => OpCode::Write {
            offset: d.get_u64()?,
            data: get_data(d)?,
        },
        23 => OpCode::Append { data: get_data(d)? },
        24 => OpCode::Truncate {
            size_bytes: d.get_u64()?,
        },
        25 => OpCode::Zero {
            offset: d.get_u64()?,
            length: d.get_u64()?,
        },
        26 => OpCode::Remove,
        27 => OpCode::SetXattr {
            name: get_xattr_name(d)?,
            value: d.get_blob("xattr value", XATTR_VALUE_BYTES_MAX)?,
        },
        28 => OpCode::RmXattr {
            name: get_xattr_name(d)?,
        },
        29 => OpCode::OmapSet {
            entries: get_entries(d)?,
        },
        30 => OpCode::OmapRm { keys: get_keys(d)? },
        31 => OpCode::OmapClear,
        40 => OpCode::PgList {
            after: get_list_cursor(d)?,
            max_entries: d.get_u32()?.min(LIST_ENTRIES_MAX as u32),
        },
        41 => OpCode::PgListUnfound {
            after: get_list_cursor(d)?,
            max_entries: d.get_u32()?.min(LIST_ENTRIES_MAX as u32),
        },
        42 => OpCode::PgMarkUnfoundLost,
        other => {
            return Err(DecodeError::Invalid {
                what: "op code",
                value: u64::from(other),
            })
        }
    })
}

/// A listing's cursor: an object name, or none to start from the beginning.
fn get_list_cursor(d: &mut Decoder) -> Result<Option<String>, DecodeError> {
    Ok(match d.get_u8()? {
        0 => None,
        1 => Some(d.get_string("list cursor", OBJECT_NAME_BYTES_MAX)?),
        other => {
            return Err(DecodeError::Invalid {
                what: "option tag",
                value: u64::from(other),
            })
        }
    })
}

impl Encode for OpOutput {
    fn encode(&self, e: &mut Encoder) {
        match self {
            OpOutput::None => e.put_u8(0),
            OpOutput::Data(data) => {
                e.put_u8(1);
                e.put_shared_blob(data);
            }
            OpOutput::Stat {
                size_bytes,
                mtime_ns,
                version,
            } => {
                e.put_u8(2);
                e.put_u64(*size_bytes);
                e.put_u64(*mtime_ns);
                e.put_u64(*version);
            }
            OpOutput::Xattr(value) => {
                e.put_u8(3);
                e.put_blob(value);
            }
            OpOutput::Xattrs(map) => {
                e.put_u8(4);
                map.encode(e);
            }
            OpOutput::Omap { entries, more } => {
                e.put_u8(5);
                put_entries(e, entries);
                more.encode(e);
            }
            OpOutput::List { names, next } => {
                e.put_u8(6);
                names.encode(e);
                next.encode(e);
            }
            OpOutput::Snaps {
                snapset,
                head_exists,
            } => {
                e.put_u8(7);
                snapset.encode(e);
                head_exists.encode(e);
            }
            OpOutput::Unfound { objects, next } => {
                e.put_u8(8);
                crate::peering::put_versioned_names(e, objects);
                next.encode(e);
            }
        }
    }
}

impl Decode for OpOutput {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(match d.get_u8()? {
            0 => OpOutput::None,
            1 => OpOutput::Data(Bytes::decode(d)?),
            2 => OpOutput::Stat {
                size_bytes: d.get_u64()?,
                mtime_ns: d.get_u64()?,
                version: d.get_u64()?,
            },
            3 => OpOutput::Xattr(Bytes::decode(d)?),
            4 => OpOutput::Xattrs(BTreeMap::decode(d)?),
            5 => OpOutput::Omap {
                entries: get_entries(d)?,
                more: bool::decode(d)?,
            },
            6 => OpOutput::List {
                names: Vec::decode(d)?,
                next: Option::decode(d)?,
            },
            7 => OpOutput::Snaps {
                snapset: SnapSet::decode(d)?,
                head_exists: bool::decode(d)?,
            },
            8 => {
                let objects = crate::peering::get_versioned_names(d, "unfound objects")?;
                if objects.len() > LIST_ENTRIES_MAX {
                    return Err(DecodeError::Invalid {
                        what: "unfound list length",
                        value: objects.len() as u64,
                    });
                }
                OpOutput::Unfound {
                    objects,
                    next: Option::decode(d)?,
                }
            }
            other => {
                return Err(DecodeError::Invalid {
                    what: "op output",
                    value: u64::from(other),
                })
            }
        })
    }
}

impl Encode for OpError {
    fn encode(&self, e: &mut Encoder) {
        e.put_u16(self.code());
        match self {
            OpError::VersionMismatch { expected, actual } => {
                e.put_u64(*expected);
                e.put_u64(*actual);
            }
            OpError::Invalid(text) | OpError::Io(text) => text.encode(e),
            OpError::TooLarge { limit_bytes } => e.put_u64(*limit_bytes),
            OpError::WrongShard { shard_count } => e.put_u16(*shard_count),
            _ => {}
        }
    }
}

impl Decode for OpError {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        let code = d.get_u16()?;
        Ok(match code {
            2 => OpError::NotFound,
            17 => OpError::Exists,
            61 => OpError::NoSuchXattr,
            125 => OpError::Canceled,
            34 => OpError::VersionMismatch {
                expected: d.get_u64()?,
                actual: d.get_u64()?,
            },
            22 => OpError::Invalid(d.get_string("error text", 4096)?),
            27 => OpError::TooLarge {
                limit_bytes: d.get_u64()?,
            },
            28 => OpError::NoSpace,
            6 => OpError::WrongPrimary,
            18 => OpError::WrongShard {
                shard_count: d.get_u16()?,
            },
            11 => OpError::NotActive,
            16 => OpError::Busy,
            5 => OpError::Io(d.get_string("error text", 4096)?),
            other => {
                return Err(DecodeError::Invalid {
                    what: "error code",
                    value: u64::from(other),
                })
            }
        })
    }
}

/// Object metadata kept with every object (Ceph's `object_info_t`, reduced): the PG
/// version of its last change and the client-visible version counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ObjectInfo {
    pub version: EVersion,
    pub user_version: u64,
    /// The head was removed but its clones remain: the head object stays only to keep
    /// the snapshot set, and reads of the head see no object (Ceph's whiteout).
    /// Encoding v2; false from v1.
    pub whiteout: bool,
}

impl Encode for ObjectInfo {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(2, 1, |e| {
            self.version.encode(e);
            e.put_u64(self.user_version);
            self.whiteout.encode(e);
        });
    }
}

impl Decode for ObjectInfo {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("ObjectInfo", 2, |d, version| {
            Ok(ObjectInfo {
                version: EVersion::decode(d)?,
                user_version: d.get_u64()?,
                whiteout: version >= 2 && bool::decode(d)?,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_round_trips_with_its_details() {
        let errors = [
            OpError::NotFound,
            OpError::Exists,
            OpError::NoSuchXattr,
            OpError::Canceled,
            OpError::VersionMismatch {
                expected: 3,
                actual: 9,
            },
            OpError::Invalid("bad".into()),
            OpError::TooLarge {
                limit_bytes: 1 << 30,
            },
            OpError::NoSpace,
            OpError::WrongPrimary,
            OpError::WrongShard { shard_count: 7 },
            OpError::NotActive,
            OpError::Busy,
            OpError::Io("disk".into()),
        ];
        for error in errors {
            let mut e = Encoder::new();
            error.encode(&mut e);
            let mut d = Decoder::new(e.into_bytes());
            assert_eq!(OpError::decode(&mut d).unwrap(), error);
            d.finish().unwrap();
        }
    }

    #[test]
    fn the_unfound_listing_round_trips_and_an_overlong_one_is_refused() {
        let op = OpCode::PgListUnfound {
            after: Some("obj".into()),
            max_entries: 100,
        };
        let mut e = Encoder::new();
        op.encode(&mut e);
        let mut d = Decoder::new(e.into_bytes());
        assert_eq!(OpCode::decode(&mut d).unwrap(), op);
        assert!(op.is_pg_op() && !op.is_write());

        let output = OpOutput::Unfound {
            objects: vec![
                ("a".into(), EVersion::new(3, 9)),
                ("b".into(), EVersion::ZERO),
            ],
            next: Some("b".into()),
        };
        let mut e = Encoder::new();
        output.encode(&mut e);
        let mut d = Decoder::new(e.into_bytes());
        assert_eq!(OpOutput::decode(&mut d).unwrap(), output);
        d.finish().unwrap();

        // A count beyond what a page may hold is refused before anything is read.
        let mut e = Encoder::new();
        e.put_u8(8);
        e.put_u32(LIST_ENTRIES_MAX as u32 + 1);
        let mut d = Decoder::new(e.into_bytes());
        assert!(OpOutput::decode(&mut d).is_err());
    }
}
