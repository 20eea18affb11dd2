//! Errors of the session state machine. Every error closes the session; a lossless
//! connector reconnects after the [recoverable](SessionError::is_recoverable) ones.

use crate::fault::InjectedFault;
use crate::frame::{FrameError, FrameTag};
use crate::handshake::BannerError;
use carmine_types::encoding::DecodeError;
use std::time::Duration;

/// Why a session failed or refused a call.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SessionError {
    #[error("bad frame from peer: {0}")]
    Frame(#[from] FrameError),
    #[error("handshake refused: {0}")]
    Banner(#[from] BannerError),
    #[error("malformed {what} from peer: {source}")]
    Decode {
        what: &'static str,
        source: DecodeError,
    },
    #[error("malformed {tag:?} frame from peer: {reason}")]
    MalformedFrame { tag: FrameTag, reason: String },
    #[error("unexpected {tag:?} frame while {state}")]
    UnexpectedFrame { tag: FrameTag, state: &'static str },
    #[error("authentication failed: {reason}")]
    AuthFailed { reason: String },
    #[error("peer closed the session: {reason}")]
    PeerClosed { reason: String },
    #[error("peer silent for {silence:?}, declared dead")]
    PeerTimedOut { silence: Duration },
    #[error("handshake did not complete within {after:?}")]
    HandshakeTimedOut { after: Duration },
    #[error("message sequence gap: expected {expected}, received {received}")]
    SequenceGap { expected: u64, received: u64 },
    #[error("peer acknowledged seq {acked}, but we sent only up to {sent} (or it went back)")]
    BadAck { acked: u64, sent: u64 },
    #[error("cannot resume the session: {reason}")]
    CannotResume { reason: String },
    #[error("send queue full ({messages} messages, {bytes} bytes)")]
    QueueFull { messages: usize, bytes: usize },
    #[error("message of {bytes} bytes exceeds the frame limit of {limit} bytes")]
    MessageTooLarge { bytes: usize, limit: usize },
    #[error("injected fault: {0}")]
    FaultInjected(InjectedFault),
    #[error("no connection for {after:?}; the lossless session is given up")]
    ReconnectWindowExpired { after: Duration },
    #[error("the session is disconnected, waiting to resume")]
    NotConnected,
    #[error("session is closed")]
    Closed,
}

impl From<InjectedFault> for SessionError {
    fn from(fault: InjectedFault) -> Self {
        SessionError::FaultInjected(fault)
    }
}

impl SessionError {
    /// Whether a lossless session should reconnect after this error (transport
    /// trouble) rather than give up (incompatible or misbehaving peer, or a close).
    pub fn is_recoverable(&self) -> bool {
        matches!(
            self,
            SessionError::Frame(_)
                | SessionError::PeerTimedOut { .. }
                | SessionError::HandshakeTimedOut { .. }
                | SessionError::FaultInjected(_)
        )
    }
}
