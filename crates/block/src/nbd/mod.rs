//! An NBD server for one image: the fixed newstyle handshake (`NBD_OPT_GO`, `INFO`,
//! `LIST`, `ABORT`, and the old `EXPORT_NAME`), simple replies, the commands READ,
//! WRITE (with FUA), FLUSH, TRIM, WRITE_ZEROES and DISCONNECT, many requests in flight
//! per connection and several connections per export.
//!
//! [`proto`] and [`negotiate`] are pure (bytes in, bytes out); [`server`] is the thin
//! tokio driver: one task per connection reads requests, runs them and writes their
//! replies.

mod in_flight;
pub mod negotiate;
pub mod proto;
pub mod server;

pub use server::NbdServer;
