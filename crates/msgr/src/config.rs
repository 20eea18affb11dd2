//! Session configuration: policy, authentication method, timeouts and queue limits.

use crate::fault::FaultPlan;
use carmine_types::limits::MESSAGE_BYTES_MAX;
use carmine_types::EntityName;
use std::time::Duration;

/// What happens to queued messages when a connection fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Client ↔ OSD: a fault ends the session; the client resends and the OSD dedups
    /// by request id.
    Lossy,
    /// Daemon ↔ daemon: the connector reconnects, unacknowledged messages are
    /// replayed, and the receiver delivers each exactly once, in order.
    Lossless,
}

/// How the connector proves its identity. Only `None` exists for now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AuthMethod {
    /// No authentication: any peer is accepted under the name it claims.
    None,
}

impl AuthMethod {
    pub fn to_u8(self) -> u8 {
        match self {
            AuthMethod::None => 0,
        }
    }

    pub fn from_u8(value: u8) -> Option<Self> {
        match value {
            0 => Some(AuthMethod::None),
            _ => None,
        }
    }
}

/// Configuration of one session (and of the connections a driver makes for it).
/// Build it with [`SessionConfig::new`] and override fields with struct-update syntax.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionConfig {
    pub my_name: EntityName,
    /// The connector's policy; an acceptor follows the policy the connector asks for.
    pub policy: Policy,
    /// How often each side sends a keepalive once established.
    pub keepalive_interval: Duration,
    /// A peer silent this long is declared dead.
    pub keepalive_timeout: Duration,
    /// Largest frame accepted or sent, preamble and epilogue included.
    pub max_frame_bytes: usize,
    /// Most messages queued (unsent, or sent and unacknowledged when lossless).
    pub send_queue_messages_max: usize,
    /// Most payload bytes queued; one message larger than this is still accepted
    /// when the queue is empty.
    pub send_queue_bytes_max: usize,
    /// The handshake must complete within this long (drivers: connect included).
    pub handshake_timeout: Duration,
    /// Lossless: how long a session survives without a connection (the connector keeps
    /// reconnecting, the acceptor keeps the session state) before it is closed.
    pub reconnect_window: Duration,
    pub auth_method: AuthMethod,
    /// Injected faults, for tests; [`FaultPlan::none`] in production.
    pub faults: FaultPlan,
}

impl SessionConfig {
    pub fn new(my_name: EntityName, policy: Policy) -> Self {
        Self {
            my_name,
            policy,
            keepalive_interval: Duration::from_secs(1),
            keepalive_timeout: Duration::from_secs(10),
            max_frame_bytes: MESSAGE_BYTES_MAX,
            send_queue_messages_max: 4096,
            send_queue_bytes_max: 64 * 1024 * 1024,
            handshake_timeout: Duration::from_secs(5),
            reconnect_window: Duration::from_secs(30),
            auth_method: AuthMethod::None,
            faults: FaultPlan::none(),
        }
    }

    /// Panics on a configuration no session can run with (a programmer error).
    pub fn assert_valid(&self) {
        assert!(self.max_frame_bytes <= MESSAGE_BYTES_MAX);
        assert!(self.max_frame_bytes >= crate::frame::FRAME_OVERHEAD_BYTES_MAX + 1024);
        assert!(self.send_queue_messages_max > 0);
        assert!(self.send_queue_bytes_max > 0);
        assert!(!self.keepalive_interval.is_zero());
        assert!(self.keepalive_timeout > self.keepalive_interval);
        assert!(!self.handshake_timeout.is_zero());
    }
}
