//! Comparing the members' copies (Ceph's scrub maps): after a deep-scrub step over a
//! range of object names, the primary asks each replica what it holds in that range
//! and compares the answers with its own copy.
//!
//! The range is `(after, last]` by object name (`None`: from the first, or to the
//! last), clones included with their head. The request travels on the same ordered
//! session as the primary's `RepOp`s, and a replica answers the moment it arrives, so
//! both sides describe their copies after the same writes: no write has to wait.

use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use carmine_types::limits::OBJECT_NAME_BYTES_MAX;
use carmine_types::{EVersion, Epoch, ObjectId, PgId};

/// Primary → replica: describe your copies of the objects in `(after, last]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgScrubRequest {
    pub pgid: PgId,
    pub interval: Epoch,
    pub map_epoch: Epoch,
    /// Which comparison of the interval this is (answers to an earlier one are dropped).
    pub round: u64,
    pub after: Option<String>,
    pub last: Option<String>,
}

/// One stored object as a scrub map describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScrubEntry {
    pub oid: ObjectId,
    pub size_bytes: u64,
    /// From the object info (zero when it has none).
    pub version: EVersion,
    /// crc32c of the data; `None` when the copy cannot be read (corruption is the
    /// deep scrub's to report).
    pub data_crc: Option<u32>,
    /// crc32c of the xattrs (the object info included) and the omap entries, each
    /// name or key and value length-prefixed, in order (Ceph's scrub compares attrs
    /// and an omap digest). `None`: unreadable, or a map from a sender before
    /// PgScrubMap v2; not compared then.
    pub meta_crc: Option<u32>,
}

/// Replica → primary: its copies in the requested range, in object order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgScrubMap {
    pub pgid: PgId,
    pub interval: Epoch,
    pub map_epoch: Epoch,
    pub round: u64,
    /// Every object of the range is here; `false`: the map stops at its last entry
    /// (it reached [`SCRUB_MAP_ENTRIES_MAX`](crate::SCRUB_MAP_ENTRIES_MAX)).
    pub complete: bool,
    pub objects: Vec<ScrubEntry>,
}

/// The most entries one scrub map carries.
pub const SCRUB_MAP_ENTRIES_MAX: usize = 4096;

/// `Option<String>`'s encoding, read with the object-name length limit.
fn get_name(d: &mut Decoder) -> Result<Option<String>, DecodeError> {
    match d.get_u8()? {
        0 => Ok(None),
        1 => Ok(Some(d.get_string("object name", OBJECT_NAME_BYTES_MAX)?)),
        other => Err(DecodeError::Invalid {
            what: "range bound tag",
            value: u64::from(other),
        }),
    }
}

impl Encode for PgScrubRequest {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(1, 1, |e| {
            self.pgid.encode(e);
            self.interval.encode(e);
            self.map_epoch.encode(e);
            self.round.encode(e);
            self.after.encode(e);
            self.last.encode(e);
        });
    }
}

impl Decode for PgScrubRequest {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("PgScrubRequest", 1, |d, _| {
            Ok(PgScrubRequest {
                pgid: PgId::decode(d)?,
                interval: Epoch::decode(d)?,
                map_epoch: Epoch::decode(d)?,
                round: d.get_u64()?,
                after: get_name(d)?,
                last: get_name(d)?,
            })
        })
    }
}

/// A [`ScrubEntry`]'s v1 fields; `meta_crc` travels after the entries (v2), where a
/// v1 reader skips it.
impl Encode for ScrubEntry {
    fn encode(&self, e: &mut Encoder) {
        self.oid.encode(e);
        self.size_bytes.encode(e);
        self.version.encode(e);
        self.data_crc.encode(e);
    }
}

impl Decode for ScrubEntry {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(ScrubEntry {
            oid: ObjectId::decode(d)?,
            size_bytes: d.get_u64()?,
            version: EVersion::decode(d)?,
            data_crc: Option::<u32>::decode(d)?,
            meta_crc: None,
        })
    }
}

impl Encode for PgScrubMap {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(2, 1, |e| {
            self.pgid.encode(e);
            self.interval.encode(e);
            self.map_epoch.encode(e);
            self.round.encode(e);
            self.complete.encode(e);
            e.put_u32(u32::try_from(self.objects.len()).expect("a bounded scrub range"));
            for entry in &self.objects {
                entry.encode(e);
            }
            // v2: the metadata digests, one per entry, in the same order.
            for entry in &self.objects {
                entry.meta_crc.encode(e);
            }
        });
    }
}

impl Decode for PgScrubMap {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("PgScrubMap", 2, |d, version| {
            let pgid = PgId::decode(d)?;
            let interval = Epoch::decode(d)?;
            let map_epoch = Epoch::decode(d)?;
            let round = d.get_u64()?;
            let complete = bool::decode(d)?;
            // An entry takes at least a name length, a snap, sizes and a tag.
            let count = d.get_count("scrub map entries", 4 + 8 + 8 + 12 + 1)?;
            let mut objects = Vec::with_capacity(count);
            for _ in 0..count {
                objects.push(ScrubEntry::decode(d)?);
            }
            if version >= 2 {
                for entry in &mut objects {
                    entry.meta_crc = Option::<u32>::decode(d)?;
                }
            }
            Ok(PgScrubMap {
                pgid,
                interval,
                map_epoch,
                round,
                complete,
                objects,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Msg;
    use carmine_types::SnapId;

    #[test]
    fn a_request_and_a_map_round_trip_as_message_types_53_and_54() {
        let request = Msg::PgScrubRequest(PgScrubRequest {
            pgid: PgId::new(2, 5),
            interval: Epoch(9),
            map_epoch: Epoch(11),
            round: 3,
            after: Some("a".into()),
            last: None,
        });
        assert_eq!(request.msg_type(), 53);
        assert_eq!(Msg::decode(53, request.encode_front()).unwrap(), request);
        let map = Msg::PgScrubMap(PgScrubMap {
            pgid: PgId::new(2, 5),
            interval: Epoch(9),
            map_epoch: Epoch(11),
            round: 3,
            complete: true,
            objects: vec![
                ScrubEntry {
                    oid: ObjectId {
                        name: "b".into(),
                        snap: SnapId(4),
                    },
                    size_bytes: 10,
                    version: EVersion::new(9, 2),
                    data_crc: Some(0xdead_beef),
                    meta_crc: Some(7),
                },
                ScrubEntry {
                    oid: ObjectId::head("b"),
                    size_bytes: 0,
                    version: EVersion::new(9, 3),
                    data_crc: None,
                    meta_crc: None,
                },
            ],
        });
        assert_eq!(map.msg_type(), 54);
        assert_eq!(Msg::decode(54, map.encode_front()).unwrap(), map);
    }

    #[test]
    fn a_truncated_or_lying_map_is_an_error_not_a_panic() {
        let map = Msg::PgScrubMap(PgScrubMap {
            pgid: PgId::new(1, 0),
            interval: Epoch(1),
            map_epoch: Epoch(1),
            round: 0,
            complete: false,
            objects: vec![ScrubEntry {
                oid: ObjectId::head("x"),
                size_bytes: 1,
                version: EVersion::new(1, 1),
                data_crc: Some(1),
                meta_crc: Some(2),
            }],
        });
        let front = map.encode_front();
        for cut in 0..front.len() {
            assert!(Msg::decode(54, front.slice(..cut)).is_err(), "cut at {cut}");
        }
        // A count far beyond what the frame holds.
        let mut lying = front.to_vec();
        let count_at = front.len() - (4 + 1 + 8 + 8 + 12 + 5) - 5 - 4;
        lying[count_at..count_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Msg::decode(54, lying.into()).is_err());
    }

    /// A map from a build before v2 has no metadata digests: they read as `None`, and
    /// such a copy's metadata is simply not compared.
    #[test]
    fn a_v1_map_reads_without_metadata_digests() {
        let entry = ScrubEntry {
            oid: ObjectId::head("x"),
            size_bytes: 3,
            version: EVersion::new(2, 4),
            data_crc: Some(9),
            meta_crc: None,
        };
        let mut e = Encoder::new();
        e.versioned(1, 1, |e| {
            PgId::new(1, 0).encode(e);
            Epoch(5).encode(e);
            Epoch(6).encode(e);
            e.put_u64(2);
            true.encode(e);
            e.put_u32(1);
            entry.encode(e);
        });
        let decoded = PgScrubMap::decode(&mut Decoder::new(e.into_bytes())).unwrap();
        assert_eq!(decoded.objects, vec![entry]);
        assert!(decoded.complete);
    }
}
