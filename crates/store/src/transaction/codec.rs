//! The wire form of a [`Transaction`]: the primary sends it to replica OSDs, which
//! decode and submit it, so decoding checks every length against
//! [`carmine_types::limits`] and never panics, and write payloads come back as
//! zero-copy slices of the received buffer.
//!
//! All integers are little-endian. Byte by byte:
//!
//! ```text
//! Transaction  := u8 version=1 | u8 compat=1 | u32 body_length | u32 op_count | TxOp*
//! CollectionId := u8 0                      (Meta)
//!               | u8 1 | u64 pool | u32 seed (Pg)
//! ObjectId     := blob name (<= OBJECT_NAME_BYTES_MAX) | u64 snap
//! blob         := u32 length | length bytes
//! TxOp         := u8 tag | CollectionId | fields:
//!    1 CreateCollection   -
//!    2 RemoveCollection   -
//!    3 Touch              ObjectId
//!    4 Write              ObjectId | u64 offset | blob data (<= MESSAGE_BYTES_MAX)
//!    5 Zero               ObjectId | u64 offset | u64 length
//!    6 Truncate           ObjectId | u64 size_bytes
//!    7 Remove             ObjectId
//!    8 SetMtime           ObjectId | u64 mtime_ns
//!    9 SetXattr           ObjectId | blob name (UTF-8, <= XATTR_NAME_BYTES_MAX)
//!                                  | blob value (<= XATTR_VALUE_BYTES_MAX)
//!   10 RmXattr            ObjectId | blob name
//!   11 OmapSet            ObjectId | u32 count | (blob key (<= OMAP_KEY_BYTES_MAX)
//!                                                | blob value (<= MESSAGE_BYTES_MAX))*
//!   12 OmapRm             ObjectId | u32 count | blob key*
//!   13 OmapClear          ObjectId
//!   14 Clone              ObjectId src | ObjectId dst
//! ```
//!
//! Ops carry no envelope of their own: a replica must apply all of a transaction or
//! none of it, so an op it does not know is an error, not something to skip. New ops
//! get new tags and a new transaction version.

use crate::{CollectionId, Transaction, TxOp};
use bytes::Bytes;
use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use carmine_types::limits::{
    MESSAGE_BYTES_MAX, OMAP_KEY_BYTES_MAX, XATTR_NAME_BYTES_MAX, XATTR_VALUE_BYTES_MAX,
};
use carmine_types::{ObjectId, PgId};

const TRANSACTION_VERSION: u8 = 1;
const TRANSACTION_COMPAT: u8 = 1;

/// The fewest bytes an encoded op takes (tag and a `Meta` collection).
const OP_BYTES_MIN: usize = 2;

mod tag {
    pub const CREATE_COLLECTION: u8 = 1;
    pub const REMOVE_COLLECTION: u8 = 2;
    pub const TOUCH: u8 = 3;
    pub const WRITE: u8 = 4;
    pub const ZERO: u8 = 5;
    pub const TRUNCATE: u8 = 6;
    pub const REMOVE: u8 = 7;
    pub const SET_MTIME: u8 = 8;
    pub const SET_XATTR: u8 = 9;
    pub const RM_XATTR: u8 = 10;
    pub const OMAP_SET: u8 = 11;
    pub const OMAP_RM: u8 = 12;
    pub const OMAP_CLEAR: u8 = 13;
    pub const CLONE: u8 = 14;
}

impl Encode for CollectionId {
    fn encode(&self, e: &mut Encoder) {
        match self {
            CollectionId::Meta => e.put_u8(0),
            CollectionId::Pg(pg) => {
                e.put_u8(1);
                pg.encode(e);
            }
        }
    }
}

impl Decode for CollectionId {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match d.get_u8()? {
            0 => Ok(CollectionId::Meta),
            1 => Ok(CollectionId::Pg(PgId::decode(d)?)),
            other => Err(DecodeError::Invalid {
                what: "collection kind",
                value: u64::from(other),
            }),
        }
    }
}

fn put_head(e: &mut Encoder, tag: u8, coll: &CollectionId, oid: Option<&ObjectId>) {
    e.put_u8(tag);
    coll.encode(e);
    if let Some(oid) = oid {
        oid.encode(e);
    }
}

fn put_count(e: &mut Encoder, count: usize) {
    e.put_u32(u32::try_from(count).expect("op with over u32::MAX elements"));
}

impl Encode for TxOp {
    fn encode(&self, e: &mut Encoder) {
        match self {
            TxOp::CreateCollection(coll) => put_head(e, tag::CREATE_COLLECTION, coll, None),
            TxOp::RemoveCollection(coll) => put_head(e, tag::REMOVE_COLLECTION, coll, None),
            TxOp::Touch(coll, oid) => put_head(e, tag::TOUCH, coll, Some(oid)),
            TxOp::Remove(coll, oid) => put_head(e, tag::REMOVE, coll, Some(oid)),
            TxOp::OmapClear(coll, oid) => put_head(e, tag::OMAP_CLEAR, coll, Some(oid)),
            TxOp::Write {
                coll,
                oid,
                offset,
                data,
            } => {
                put_head(e, tag::WRITE, coll, Some(oid));
                e.put_u64(*offset);
                // By reference into a message's data segment when encoding a RepOp;
                // inline (as before) everywhere else.
                e.put_shared_blob(data);
            }
            TxOp::Zero {
                coll,
                oid,
                offset,
                length,
            } => {
                put_head(e, tag::ZERO, coll, Some(oid));
                e.put_u64(*offset);
                e.put_u64(*length);
            }
            TxOp::Truncate {
                coll,
                oid,
                size_bytes,
            } => {
                put_head(e, tag::TRUNCATE, coll, Some(oid));
                e.put_u64(*size_bytes);
            }
            TxOp::SetMtime {
                coll,
                oid,
                mtime_ns,
            } => {
                put_head(e, tag::SET_MTIME, coll, Some(oid));
                e.put_u64(*mtime_ns);
            }
            _ => encode_attribute_op(self, e),
        }
    }
}

/// Encodes the xattr, omap and clone ops.
fn encode_attribute_op(op: &TxOp, e: &mut Encoder) {
    match op {
        TxOp::SetXattr {
            coll,
            oid,
            name,
            value,
        } => {
            put_head(e, tag::SET_XATTR, coll, Some(oid));
            e.put_blob(name.as_bytes());
            e.put_blob(value);
        }
        TxOp::RmXattr { coll, oid, name } => {
            put_head(e, tag::RM_XATTR, coll, Some(oid));
            e.put_blob(name.as_bytes());
        }
        TxOp::OmapSet { coll, oid, entries } => {
            put_head(e, tag::OMAP_SET, coll, Some(oid));
            put_count(e, entries.len());
            for (key, value) in entries {
                e.put_blob(key);
                e.put_blob(value);
            }
        }
        TxOp::OmapRm { coll, oid, keys } => {
            put_head(e, tag::OMAP_RM, coll, Some(oid));
            put_count(e, keys.len());
            for key in keys {
                e.put_blob(key);
            }
        }
        TxOp::Clone { coll, src, dst } => {
            put_head(e, tag::CLONE, coll, Some(src));
            dst.encode(e);
        }
        _ => unreachable!("encoded by TxOp::encode: {op:?}"),
    }
}

fn get_omap_key(d: &mut Decoder) -> Result<Bytes, DecodeError> {
    d.get_blob("omap key", OMAP_KEY_BYTES_MAX)
}

fn get_xattr_name(d: &mut Decoder) -> Result<String, DecodeError> {
    d.get_string("xattr name", XATTR_NAME_BYTES_MAX)
}

impl Decode for TxOp {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        let tag = d.get_u8()?;
        let coll = CollectionId::decode(d)?;
        match tag {
            tag::CREATE_COLLECTION => return Ok(TxOp::CreateCollection(coll)),
            tag::REMOVE_COLLECTION => return Ok(TxOp::RemoveCollection(coll)),
            tag::TOUCH..=tag::CLONE => {}
            other => {
                return Err(DecodeError::Invalid {
                    what: "transaction op",
                    value: u64::from(other),
                })
            }
        }
        let oid = ObjectId::decode(d)?;
        Ok(match tag {
            tag::TOUCH => TxOp::Touch(coll, oid),
            tag::REMOVE => TxOp::Remove(coll, oid),
            tag::OMAP_CLEAR => TxOp::OmapClear(coll, oid),
            tag::WRITE => TxOp::Write {
                coll,
                oid,
                offset: d.get_u64()?,
                data: d.get_blob("write data", MESSAGE_BYTES_MAX)?,
            },
            tag::ZERO => TxOp::Zero {
                coll,
                oid,
                offset: d.get_u64()?,
                length: d.get_u64()?,
            },
            tag::TRUNCATE => TxOp::Truncate {
                coll,
                oid,
                size_bytes: d.get_u64()?,
            },
            tag::SET_MTIME => TxOp::SetMtime {
                coll,
                oid,
                mtime_ns: d.get_u64()?,
            },
            _ => decode_attribute_op(tag, coll, oid, d)?,
        })
    }
}

/// Decodes the rest of an xattr, omap or clone op.
fn decode_attribute_op(
    tag: u8,
    coll: CollectionId,
    oid: ObjectId,
    d: &mut Decoder,
) -> Result<TxOp, DecodeError> {
    Ok(match tag {
        tag::SET_XATTR => TxOp::SetXattr {
            coll,
            oid,
            name: get_xattr_name(d)?,
            value: d.get_blob("xattr value", XATTR_VALUE_BYTES_MAX)?,
        },
        tag::RM_XATTR => TxOp::RmXattr {
            coll,
            oid,
            name: get_xattr_name(d)?,
        },
        tag::OMAP_SET => {
            let count = d.get_count("omap entries", 8)?;
            let mut entries = Vec::with_capacity(count);
            for _ in 0..count {
                let key = get_omap_key(d)?;
                entries.push((key, d.get_blob("omap value", MESSAGE_BYTES_MAX)?));
            }
            TxOp::OmapSet { coll, oid, entries }
        }
        tag::OMAP_RM => {
            let count = d.get_count("omap keys", 4)?;
            let keys = (0..count)
                .map(|_| get_omap_key(d))
                .collect::<Result<_, _>>()?;
            TxOp::OmapRm { coll, oid, keys }
        }
        tag::CLONE => TxOp::Clone {
            coll,
            src: oid,
            dst: ObjectId::decode(d)?,
        },
        other => unreachable!("tag {other} checked by TxOp::decode"),
    })
}

impl Encode for Transaction {
    fn encode(&self, e: &mut Encoder) {
        e.versioned(TRANSACTION_VERSION, TRANSACTION_COMPAT, |e| {
            put_count(e, self.ops.len());
            for op in &self.ops {
                op.encode(e);
            }
        });
    }
}

impl Decode for Transaction {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("transaction", TRANSACTION_VERSION, |d, _version| {
            let count = d.get_count("transaction ops", OP_BYTES_MIN)?;
            let mut ops = Vec::with_capacity(count);
            for _ in 0..count {
                ops.push(TxOp::decode(d)?);
            }
            Ok(Transaction { ops })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use carmine_types::SnapId;
    use proptest::prelude::*;

    fn coll() -> impl Strategy<Value = CollectionId> {
        prop_oneof![
            Just(CollectionId::Meta),
            (any::<u64>(), any::<u32>())
                .prop_map(|(pool, seed)| CollectionId::Pg(PgId::new(pool, seed))),
        ]
    }

    fn oid() -> impl Strategy<Value = ObjectId> {
        (".{0,12}", any::<u64>()).prop_map(|(name, snap)| ObjectId {
            name,
            snap: SnapId(snap),
        })
    }

    fn bytes() -> impl Strategy<Value = Bytes> {
        proptest::collection::vec(any::<u8>(), 0..24).prop_map(Bytes::from)
    }

    fn op() -> impl Strategy<Value = TxOp> {
        prop_oneof![
            coll().prop_map(TxOp::CreateCollection),
            coll().prop_map(TxOp::RemoveCollection),
            (coll(), oid()).prop_map(|(c, o)| TxOp::Touch(c, o)),
            (coll(), oid(), any::<u64>(), bytes()).prop_map(|(coll, oid, offset, data)| {
                TxOp::Write {
                    coll,
                    oid,
                    offset,
                    data,
                }
            }),
            (coll(), oid(), any::<u64>(), any::<u64>()).prop_map(|(coll, oid, offset, length)| {
                TxOp::Zero {
                    coll,
                    oid,
                    offset,
                    length,
                }
            }),
            (coll(), oid(), any::<u64>()).prop_map(|(coll, oid, size_bytes)| TxOp::Truncate {
                coll,
                oid,
                size_bytes
            }),
            (coll(), oid()).prop_map(|(c, o)| TxOp::Remove(c, o)),
            (coll(), oid(), any::<u64>()).prop_map(|(coll, oid, mtime_ns)| TxOp::SetMtime {
                coll,
                oid,
                mtime_ns
            }),
            (coll(), oid(), ".{0,8}", bytes()).prop_map(|(coll, oid, name, value)| {
                TxOp::SetXattr {
                    coll,
                    oid,
                    name,
                    value,
                }
            }),
            (coll(), oid(), ".{0,8}").prop_map(|(coll, oid, name)| TxOp::RmXattr {
                coll,
                oid,
                name
            }),
            (
                coll(),
                oid(),
                proptest::collection::vec((bytes(), bytes()), 0..4)
            )
                .prop_map(|(coll, oid, entries)| TxOp::OmapSet { coll, oid, entries }),
            (coll(), oid(), proptest::collection::vec(bytes(), 0..4))
                .prop_map(|(coll, oid, keys)| TxOp::OmapRm { coll, oid, keys }),
            (coll(), oid()).prop_map(|(c, o)| TxOp::OmapClear(c, o)),
            (coll(), oid(), oid()).prop_map(|(coll, src, dst)| TxOp::Clone { coll, src, dst }),
        ]
    }

    fn transaction() -> impl Strategy<Value = Transaction> {
        proptest::collection::vec(op(), 0..8).prop_map(|ops| Transaction { ops })
    }

    #[test]
    fn write_data_is_a_zero_copy_slice_of_the_message() {
        let mut tx = Transaction::new();
        let data = Bytes::from(vec![9u8; 4096]);
        tx.write(CollectionId::Meta, ObjectId::head("o"), 0, data);
        let wire = tx.to_bytes();
        let decoded = Transaction::from_shared(wire.clone()).unwrap();
        assert_eq!(decoded, tx);
        let TxOp::Write { data, .. } = &decoded.ops[0] else {
            panic!("not a write")
        };
        let wire_range = wire.as_ptr_range();
        assert!(wire_range.contains(&data.as_ptr()));
    }

    #[test]
    fn overlong_names_and_unknown_tags_are_rejected() {
        let mut tx = Transaction::new();
        let long_name = "x".repeat(XATTR_NAME_BYTES_MAX + 1);
        tx.set_xattr(
            CollectionId::Meta,
            ObjectId::head("o"),
            long_name,
            Bytes::new(),
        );
        assert!(matches!(
            Transaction::from_bytes(&tx.to_bytes()),
            Err(DecodeError::TooLong {
                what: "xattr name",
                ..
            })
        ));
        let mut tx = Transaction::new();
        tx.omap_rm(
            CollectionId::Meta,
            ObjectId::head("o"),
            vec![Bytes::from(vec![0; OMAP_KEY_BYTES_MAX + 1])],
        );
        assert!(matches!(
            Transaction::from_bytes(&tx.to_bytes()),
            Err(DecodeError::TooLong {
                what: "omap key",
                ..
            })
        ));
        let mut e = Encoder::new();
        e.versioned(1, 1, |e| {
            e.put_u32(1);
            e.put_u8(99);
            e.put_u8(0);
        });
        assert!(matches!(
            Transaction::from_bytes(&e.into_vec()),
            Err(DecodeError::Invalid {
                what: "transaction op",
                value: 99
            })
        ));
    }

    proptest! {
        #[test]
        fn transactions_round_trip(tx in transaction()) {
            let wire = tx.to_bytes();
            prop_assert_eq!(Transaction::from_shared(wire).unwrap(), tx);
        }

        #[test]
        fn truncated_or_corrupted_input_never_panics(
            tx in transaction(),
            cut in any::<prop::sample::Index>(),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        ) {
            let wire = tx.to_bytes().to_vec();
            let cut = cut.index(wire.len() + 1);
            prop_assert!(cut == wire.len() || Transaction::from_bytes(&wire[..cut]).is_err());
            let mut corrupted = wire.clone();
            for (at, value) in flips {
                let at = at.index(corrupted.len());
                corrupted[at] = value;
            }
            let _ = Transaction::from_bytes(&corrupted);
        }

        #[test]
        fn garbage_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = Transaction::from_bytes(&raw);
            let _ = TxOp::from_bytes(&raw);
            let _ = CollectionId::from_bytes(&raw);
        }
    }
}
