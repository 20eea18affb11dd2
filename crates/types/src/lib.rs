//! Carmine's shared vocabulary: identifiers (pools, PGs, OSDs, epochs, PG versions),
//! limits, and the versioned binary encoding every message, map and record uses.
//!
//! The encoding follows Ceph's `ENCODE_START(v, compat)` idea: every struct is written
//! inside an envelope of `version`, `compat_version` and `length`, so an older decoder
//! can skip fields a newer writer appended, and a decoder that is too old for the
//! writer's `compat_version` fails cleanly instead of misreading bytes.
//!
//! ```
//! use carmine_types::encoding::{Decode, Decoder, Encode, Encoder};
//! use carmine_types::PgId;
//!
//! let pg = PgId::new(3, 17);
//! let bytes = pg.to_bytes();
//! assert_eq!(PgId::from_bytes(&bytes).unwrap(), pg);
//! ```

pub mod encoding;
pub mod fast_hash;
pub mod ids;
pub mod limits;

pub use encoding::{Decode, DecodeError, Decoder, Encode, Encoder};
pub use ids::*;
