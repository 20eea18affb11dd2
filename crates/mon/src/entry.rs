//! The payload of a monitor's Raft log entry: the next cluster map(s), computed by the
//! leader, and who to answer when the entry is applied.
//!
//! An entry carries whole maps rather than the operation that produced them, so that
//! applying it needs no state beyond the previous map: every monitor that applies the
//! same log publishes byte-identical maps for every epoch. Each map's epoch must be the
//! applied map's epoch + 1; an entry that does not fit (proposed on a state a new leader
//! overtook) is skipped by every monitor alike.
//!
//! Encoding, version 1: `option<(u64 origin_rank, u64 token)> | string message |
//! u32 count | OsdMap × count`.

use carmine_clustermap::OsdMap;
use carmine_types::encoding::{Decode, DecodeError, Decoder, Encode, Encoder};

/// Maps one entry may carry (a restarted OSD's old instance down, then the new one up).
pub const ENTRY_MAPS_MAX: usize = 2;

/// Which monitor holds the request that caused a change, and its number there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Origin {
    pub rank: u64,
    pub token: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MonEntry {
    pub origin: Option<Origin>,
    /// What the operator is told (`pool 'rbd' created (id 1)`).
    pub message: String,
    pub maps: Vec<OsdMap>,
}

impl Encode for MonEntry {
    fn encode(&self, e: &mut Encoder) {
        assert!(!self.maps.is_empty(), "an entry changes the map");
        assert!(self.maps.len() <= ENTRY_MAPS_MAX);
        e.versioned(1, 1, |e| {
            self.origin.map(|o| (o.rank, o.token)).encode(e);
            self.message.encode(e);
            e.put_u32(self.maps.len() as u32);
            for map in &self.maps {
                map.encode(e);
            }
        });
    }
}

impl Decode for MonEntry {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.versioned("MonEntry", 1, |d, _| {
            let origin =
                Option::<(u64, u64)>::decode(d)?.map(|(rank, token)| Origin { rank, token });
            let message = String::decode(d)?;
            let count = d.get_u32()? as usize;
            if count == 0 || count > ENTRY_MAPS_MAX {
                return Err(DecodeError::Invalid {
                    what: "maps in a monitor entry",
                    value: count as u64,
                });
            }
            let maps = (0..count)
                .map(|_| OsdMap::decode(d))
                .collect::<Result<_, _>>()?;
            Ok(MonEntry {
                origin,
                message,
                maps,
            })
        })
    }
}
