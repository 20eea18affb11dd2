//! The clients' workload: which objects each client touches and the random compound
//! ops it issues. Every op here is one the [model](crate::model) implements.

use crate::rng::Rng;
use bytes::Bytes;
use carmine_proto::OpCode;

/// Largest offset and length the workload writes (objects stay small and collide).
pub const EXTENT_BYTES_MAX: u64 = 48;

/// Objects shared by all clients, then each client's own.
pub fn object_names(client: u32, shared: u32, private: u32) -> Vec<String> {
    let mut names: Vec<String> = (0..shared).map(|i| format!("shared-{i}")).collect();
    names.extend((0..private).map(|i| format!("client{client}-{i}")));
    names
}

fn data(rng: &mut Rng, length_max: u64) -> Bytes {
    let length = rng.between(1, length_max) as usize;
    Bytes::from(rng.bytes(length))
}

fn xattr_name(rng: &mut Rng) -> String {
    format!("x{}", rng.below(3))
}

fn omap_entries(rng: &mut Rng) -> Vec<(Bytes, Bytes)> {
    (0..rng.between(1, 2))
        .map(|_| (Bytes::from(format!("k{}", rng.below(6))), data(rng, 8)))
        .collect()
}

/// A random write: one sub-op or a small compound.
pub fn write_op(rng: &mut Rng) -> Vec<OpCode> {
    match rng.below(13) {
        0..=2 => vec![OpCode::WriteFull {
            data: data(rng, EXTENT_BYTES_MAX),
        }],
        3 | 4 => vec![OpCode::Write {
            offset: rng.below(EXTENT_BYTES_MAX),
            data: data(rng, 16),
        }],
        5 | 6 => vec![OpCode::Append {
            data: data(rng, 16),
        }],
        7 => vec![OpCode::Truncate {
            size_bytes: rng.below(EXTENT_BYTES_MAX),
        }],
        8 => vec![OpCode::Remove],
        9 => vec![OpCode::SetXattr {
            name: xattr_name(rng),
            value: data(rng, 8),
        }],
        10 => vec![OpCode::OmapSet {
            entries: omap_entries(rng),
        }],
        11 => vec![
            OpCode::WriteFull {
                data: data(rng, EXTENT_BYTES_MAX),
            },
            OpCode::SetXattr {
                name: xattr_name(rng),
                value: data(rng, 8),
            },
        ],
        _ => vec![
            OpCode::Append {
                data: data(rng, 16),
            },
            OpCode::OmapSet {
                entries: omap_entries(rng),
            },
        ],
    }
}

/// A random read: one sub-op or a small compound.
pub fn read_op(rng: &mut Rng) -> Vec<OpCode> {
    match rng.below(8) {
        0..=2 => vec![OpCode::Read {
            offset: 0,
            length: 0,
        }],
        3 => vec![OpCode::Read {
            offset: rng.below(EXTENT_BYTES_MAX),
            length: rng.between(1, 16),
        }],
        4 => vec![OpCode::Stat],
        5 => vec![OpCode::GetXattr {
            name: xattr_name(rng),
        }],
        6 => vec![OpCode::OmapGetVals {
            after: None,
            max_entries: 100,
        }],
        _ => full_read(),
    }
}

/// Everything about an object in one request (the final read-back).
pub fn full_read() -> Vec<OpCode> {
    vec![
        OpCode::Read {
            offset: 0,
            length: 0,
        },
        OpCode::Stat,
        OpCode::GetXattrs,
        OpCode::OmapGetVals {
            after: None,
            max_entries: 100,
        },
    ]
}

/// The next op of a client: 60% writes.
pub fn next_op(rng: &mut Rng) -> Vec<OpCode> {
    if rng.chance(3, 5) {
        write_op(rng)
    } else {
        read_op(rng)
    }
}
