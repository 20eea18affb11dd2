//! Identifiers: pools, placement groups, OSDs, shards, epochs, PG versions, objects,
//! entities and request ids. Each is a small `Copy` newtype with a Ceph-style display.

use crate::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
use crate::limits::OBJECT_NAME_BYTES_MAX;
use std::fmt;

macro_rules! newtype_int {
    ($(#[$meta:meta])* $name:ident($t:ty)) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name(pub $t);

        impl Encode for $name {
            fn encode(&self, e: &mut Encoder) { self.0.encode(e) }
        }
        impl Decode for $name {
            fn decode(d: &mut Decoder) -> Result<Self, DecodeError> { Ok(Self(<$t>::decode(d)?)) }
        }
    };
}

newtype_int!(
    /// A pool's id, assigned by the monitor, never reused.
    PoolId(u64)
);
newtype_int!(
    /// An OSD's id (`osd.N`).
    OsdId(u32)
);
newtype_int!(
    /// A cluster-map epoch. Every map change increments it.
    Epoch(u32)
);
newtype_int!(
    /// The index of a shard (one pinned thread) inside an OSD.
    ShardIndex(u16)
);
newtype_int!(
    /// A snapshot id; [`SnapId::HEAD`] names the live object.
    SnapId(u64)
);

impl SnapId {
    pub const HEAD: SnapId = SnapId(u64::MAX);
}

impl fmt::Display for PoolId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for OsdId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "osd.{}", self.0)
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "e{}", self.0)
    }
}

impl Epoch {
    pub fn next(self) -> Epoch {
        Epoch(self.0.checked_add(1).expect("epoch overflow"))
    }
}

/// A placement group: a pool and the PG's seed (`0..pg_num`). Displays as Ceph does,
/// `pool.seed_in_hex` (e.g. `3.1f`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PgId {
    pub pool: PoolId,
    pub seed: u32,
}

impl PgId {
    pub fn new(pool: u64, seed: u32) -> Self {
        Self {
            pool: PoolId(pool),
            seed,
        }
    }
}

impl fmt::Display for PgId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:x}", self.pool.0, self.seed)
    }
}

impl std::str::FromStr for PgId {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (pool, seed) = text
            .split_once('.')
            .ok_or_else(|| format!("PG id {text:?} is not POOL.SEED (e.g. 1.1f)"))?;
        let pool = pool
            .parse::<u64>()
            .map_err(|_| format!("PG id {text:?}: pool {pool:?} is not a number"))?;
        let seed = u32::from_str_radix(seed, 16)
            .map_err(|_| format!("PG id {text:?}: seed {seed:?} is not hexadecimal"))?;
        Ok(PgId::new(pool, seed))
    }
}

impl Encode for PgId {
    fn encode(&self, e: &mut Encoder) {
        self.pool.encode(e);
        self.seed.encode(e);
    }
}

impl Decode for PgId {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            pool: PoolId::decode(d)?,
            seed: d.get_u32()?,
        })
    }
}

/// A PG version, `(epoch, v)`: the epoch of the primary that ordered the write and a
/// per-PG counter. Displays as Ceph's `eversion_t`, `epoch'v`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct EVersion {
    pub epoch: Epoch,
    pub version: u64,
}

impl EVersion {
    pub const ZERO: EVersion = EVersion {
        epoch: Epoch(0),
        version: 0,
    };

    pub fn new(epoch: u32, version: u64) -> Self {
        Self {
            epoch: Epoch(epoch),
            version,
        }
    }
}

impl fmt::Display for EVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}'{}", self.epoch.0, self.version)
    }
}

impl Encode for EVersion {
    fn encode(&self, e: &mut Encoder) {
        self.epoch.encode(e);
        self.version.encode(e);
    }
}

impl Decode for EVersion {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            epoch: Epoch::decode(d)?,
            version: d.get_u64()?,
        })
    }
}

/// An object inside a PG's collection: its name and snapshot ([`SnapId::HEAD`] for the
/// live object). Ordered by name, then snapshot.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectId {
    pub name: String,
    pub snap: SnapId,
}

impl ObjectId {
    pub fn head(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            snap: SnapId::HEAD,
        }
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.snap == SnapId::HEAD {
            write!(f, "{}", self.name)
        } else {
            write!(f, "{}@{}", self.name, self.snap.0)
        }
    }
}

impl Encode for ObjectId {
    fn encode(&self, e: &mut Encoder) {
        self.name.encode(e);
        self.snap.encode(e);
    }
}

impl Decode for ObjectId {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            name: d.get_string("object name", OBJECT_NAME_BYTES_MAX)?,
            snap: SnapId::decode(d)?,
        })
    }
}

/// What kind of daemon or client an entity is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EntityKind {
    Mon,
    Osd,
    Client,
}

/// A named participant: `mon.0`, `osd.3`, `client.4711`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EntityName {
    pub kind: EntityKind,
    pub id: u64,
}

impl EntityName {
    pub fn osd(id: OsdId) -> Self {
        Self {
            kind: EntityKind::Osd,
            id: u64::from(id.0),
        }
    }
    pub fn mon(rank: u64) -> Self {
        Self {
            kind: EntityKind::Mon,
            id: rank,
        }
    }
    pub fn client(id: u64) -> Self {
        Self {
            kind: EntityKind::Client,
            id,
        }
    }
}

impl fmt::Display for EntityName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            EntityKind::Mon => "mon",
            EntityKind::Osd => "osd",
            EntityKind::Client => "client",
        };
        write!(f, "{kind}.{}", self.id)
    }
}

impl Encode for EntityName {
    fn encode(&self, e: &mut Encoder) {
        e.put_u8(match self.kind {
            EntityKind::Mon => 1,
            EntityKind::Osd => 2,
            EntityKind::Client => 3,
        });
        e.put_u64(self.id);
    }
}

impl Decode for EntityName {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        let kind = match d.get_u8()? {
            1 => EntityKind::Mon,
            2 => EntityKind::Osd,
            3 => EntityKind::Client,
            other => {
                return Err(DecodeError::Invalid {
                    what: "entity kind",
                    value: u64::from(other),
                })
            }
        };
        Ok(Self {
            kind,
            id: d.get_u64()?,
        })
    }
}

/// Identifies one client request across resends, so the PG log can answer a resent
/// write with the original result instead of applying it twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ReqId {
    /// The client's instance id (random per client process).
    pub client: u64,
    /// The client's transaction id, unique within the instance.
    pub tid: u64,
}

impl fmt::Display for ReqId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "client.{}:{}", self.client, self.tid)
    }
}

impl Encode for ReqId {
    fn encode(&self, e: &mut Encoder) {
        e.put_u64(self.client);
        e.put_u64(self.tid);
    }
}

impl Decode for ReqId {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok(Self {
            client: d.get_u64()?,
            tid: d.get_u64()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn displays_like_ceph() {
        assert_eq!(PgId::new(3, 31).to_string(), "3.1f");
        assert_eq!(EVersion::new(5, 12).to_string(), "5'12");
        assert_eq!(OsdId(2).to_string(), "osd.2");
        assert_eq!("3.1f".parse::<PgId>().unwrap(), PgId::new(3, 31));
        assert!("3".parse::<PgId>().is_err());
    }

    proptest! {
        #[test]
        fn ids_round_trip(pool in any::<u64>(), seed in any::<u32>(), epoch in any::<u32>(), v in any::<u64>(), name in ".{0,40}", snap in any::<u64>()) {
            let pg = PgId::new(pool, seed);
            prop_assert_eq!(PgId::from_bytes(&pg.to_bytes()).unwrap(), pg);
            let ev = EVersion::new(epoch, v);
            prop_assert_eq!(EVersion::from_bytes(&ev.to_bytes()).unwrap(), ev);
            let oid = ObjectId { name, snap: SnapId(snap) };
            prop_assert_eq!(ObjectId::from_bytes(&oid.to_bytes()).unwrap(), oid);
            let req = ReqId { client: pool, tid: v };
            prop_assert_eq!(ReqId::from_bytes(&req.to_bytes()).unwrap(), req);
        }
    }
}
