//! carmine-msgr: the messenger — frames, the sans-IO session state machine, and a
//! thin tokio TCP driver.
//!
//! Layers, bottom up:
//!
//! - [`frame`]: preamble + segments + crc32c epilogue, and an incremental decoder whose
//!   segments are zero-copy slices of the receive buffer;
//! - [`message`]: the message header and body segments;
//! - [`handshake`]: the banner (protocol version, feature bits) and handshake bodies;
//! - [`session`]: the pure state machine (handshake, sequencing, lossy and lossless
//!   policies with resume, acks, keepalives), driven by `handle_*` / `poll_*`;
//! - [`fault`]: the built-in fault injector;
//! - [`crc`]: crc32c, folded with VPCLMULQDQ where the CPU has it;
//! - [`tcp`]: one task per connection; vectored writes, many frames per read; messages
//!   go to a [`Dispatch`] handler on the connection's own task ([`serve_with`],
//!   [`connect_with`]; [`serve_local_with`], [`connect_local_with`] for handlers that
//!   share state on one thread) or to an owner task as [`NetEvent`]s ([`serve`],
//!   [`connect`]);
//! - [`bench`](mod@bench): the scenarios of `carmine bench msgr`, with raw-TCP baselines;
//! - `fuzzing` (feature `fuzzing`): the harnesses of `crates/msgr/fuzz`.
//!
//! Two sessions wired back to back in memory:
//!
//! ```
//! use carmine_msgr::{Message, Policy, Session, SessionConfig, SessionEvent};
//! use carmine_types::{EntityName, ShardIndex};
//! use std::time::Instant;
//!
//! let now = Instant::now();
//! let mut client = Session::connect(SessionConfig::new(EntityName::client(1), Policy::Lossy), ShardIndex(0), now);
//! let mut osd = Session::accept(SessionConfig::new(EntityName::osd(carmine_types::OsdId(0)), Policy::Lossy), now);
//! client.send(now, Message::new(7, 1, 0, "hello".into())).unwrap();
//! for _ in 0..3 {
//!     let mut wire = Vec::new();
//!     client.poll_transmit(&mut wire);
//!     for chunk in wire.drain(..) { osd.handle_received(now, &chunk).unwrap(); }
//!     osd.poll_transmit(&mut wire);
//!     for chunk in wire.drain(..) { client.handle_received(now, &chunk).unwrap(); }
//! }
//! assert!(matches!(osd.poll_event(), Some(SessionEvent::Established { .. })));
//! match osd.poll_event() {
//!     Some(SessionEvent::Message(message)) => assert_eq!(&message.front[..], b"hello"),
//!     other => panic!("{other:?}"),
//! }
//! ```

pub mod bench;
pub mod config;
pub mod crc;
pub mod error;
pub mod fault;
pub mod frame;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod handshake;
pub mod idle_poll;
pub mod message;
mod queue;
pub mod session;
pub mod tcp;

pub use config::{AuthMethod, Policy, SessionConfig};
pub use error::SessionError;
pub use fault::{FaultPlan, HandshakeStep};
pub use frame::{encode_frame, Frame, FrameDecoder, FrameError, FrameTag};
pub use message::{Message, MessageHeader};
pub use session::{Session, SessionEvent};
pub use tcp::{
    connect, connect_local_with, connect_with, serve, serve_local_with, serve_with, ConnId,
    ConnectError, ConnectionHandle, Dispatch, NetEvent, Outbox, SendError,
};
