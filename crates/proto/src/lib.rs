//! Carmine's wire messages: what clients, OSDs and monitors say to each other.
//!
//! Each message is a variant of [`Msg`], carried in a messenger frame whose header
//! `msg_type` is [`Msg::msg_type`] and whose front segment is the versioned encoding
//! of the variant's body. Byte payloads decode as zero-copy slices of the frame.
//!
//! ```
//! use carmine_proto::{Msg, MonGetMap};
//! use carmine_types::Epoch;
//!
//! let msg = Msg::MonGetMap(MonGetMap { have: Epoch(3), subscribe: true });
//! let front = msg.encode_front();
//! assert_eq!(Msg::decode(msg.msg_type(), front).unwrap(), msg);
//! ```

mod encode_once;
mod heartbeat;
mod lease;
mod mon;
mod msg;
mod op;
mod osd;
mod peering;
mod purge;
mod reserve;
mod scrub;
mod snap;

pub use encode_once::*;
pub use heartbeat::*;
pub use lease::*;
pub use mon::*;
pub use msg::*;
pub use op::*;
pub use osd::*;
pub use peering::*;
pub use purge::*;
pub use reserve::*;
pub use scrub::*;
pub use snap::*;
