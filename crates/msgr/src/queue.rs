//! The outgoing message queue of a session.
//!
//! Messages get their sequence number when queued. A lossy session forgets a message
//! once it is encoded for the wire; a lossless one keeps it until the peer acknowledges
//! it, so it can replay it on a new connection. Either way the queue is bounded by
//! `send_queue_messages_max` and `send_queue_bytes_max`.

use crate::message::Message;
use std::collections::VecDeque;

/// Why a message could not be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueueFull {
    pub messages: usize,
    pub bytes: usize,
}

#[derive(Debug)]
pub(crate) struct OutQueue {
    /// Unacknowledged messages in sequence order; those after `sent_seq` are unsent.
    messages: VecDeque<Message>,
    payload_bytes: usize,
    /// Sequence number of the last message queued.
    last_seq: u64,
    /// Sequence number of the last message encoded on the current connection.
    sent_seq: u64,
    /// Highest sequence number the peer acknowledged.
    acked_seq: u64,
    messages_max: usize,
    bytes_max: usize,
}

impl OutQueue {
    pub(crate) fn new(messages_max: usize, bytes_max: usize) -> Self {
        assert!(messages_max > 0);
        Self {
            messages: VecDeque::new(),
            payload_bytes: 0,
            last_seq: 0,
            sent_seq: 0,
            acked_seq: 0,
            messages_max,
            bytes_max,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.messages.len()
    }

    pub(crate) fn payload_bytes(&self) -> usize {
        self.payload_bytes
    }

    pub(crate) fn last_seq(&self) -> u64 {
        self.last_seq
    }

    pub(crate) fn has_room(&self) -> bool {
        self.messages.len() < self.messages_max && self.payload_bytes < self.bytes_max
    }

    /// Whether `push` would accept a message of `payload_bytes`.
    pub(crate) fn fits(&self, payload_bytes: usize) -> bool {
        let over_bytes =
            self.payload_bytes + payload_bytes > self.bytes_max && !self.messages.is_empty();
        self.messages.len() < self.messages_max && !over_bytes
    }

    /// Queues `message`, assigning its sequence number.
    pub(crate) fn push(&mut self, mut message: Message) -> Result<u64, QueueFull> {
        let bytes = message.payload_bytes();
        if !self.fits(bytes) {
            return Err(QueueFull {
                messages: self.messages.len(),
                bytes: self.payload_bytes,
            });
        }
        self.last_seq += 1;
        message.header.seq = self.last_seq;
        self.payload_bytes += bytes;
        self.messages.push_back(message);
        Ok(self.last_seq)
    }

    /// Index of the first unsent message.
    fn unsent_index(&self) -> usize {
        match self.messages.front() {
            None => 0,
            Some(front) => usize::try_from(self.sent_seq + 1 - front.header.seq).unwrap_or(0),
        }
    }

    /// Visits every unsent message and marks it sent. A lossy queue forgets them.
    pub(crate) fn drain_unsent(&mut self, lossless: bool, mut visit: impl FnMut(&Message)) {
        if !lossless {
            assert_eq!(self.acked_seq, self.sent_seq);
            while let Some(message) = self.messages.pop_front() {
                visit(&message);
                self.payload_bytes -= message.payload_bytes();
                self.sent_seq = message.header.seq;
            }
            self.acked_seq = self.sent_seq;
            return;
        }
        for message in self.messages.range(self.unsent_index()..) {
            visit(message);
            self.sent_seq = message.header.seq;
        }
    }

    /// The peer has every message up to `seq`. Returns false if it acknowledges a
    /// message never sent, or goes back on an earlier acknowledgement.
    pub(crate) fn ack(&mut self, seq: u64) -> bool {
        if seq > self.last_seq || seq < self.acked_seq {
            return false;
        }
        while let Some(front) = self.messages.front() {
            if front.header.seq > seq {
                break;
            }
            self.payload_bytes -= front.payload_bytes();
            self.messages.pop_front();
        }
        self.acked_seq = seq;
        self.sent_seq = self.sent_seq.max(seq);
        true
    }

    /// A new connection to a peer that has everything up to `peer_in_seq`: replay the rest.
    pub(crate) fn rewind(&mut self, peer_in_seq: u64) -> bool {
        if !self.ack(peer_in_seq) {
            return false;
        }
        self.sent_seq = peer_in_seq;
        true
    }

    /// The peer lost the session: number the kept messages afresh from 1.
    pub(crate) fn renumber(&mut self) {
        let mut seq = 0;
        for message in &mut self.messages {
            seq += 1;
            message.header.seq = seq;
        }
        self.last_seq = seq;
        self.sent_seq = 0;
        self.acked_seq = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn message(payload: &'static [u8]) -> Message {
        Message::new(1, 0, 0, Bytes::from_static(payload))
    }

    fn sent(queue: &mut OutQueue, lossless: bool) -> Vec<u64> {
        let mut seqs = Vec::new();
        queue.drain_unsent(lossless, |m| seqs.push(m.header.seq));
        seqs
    }

    #[test]
    fn lossless_replays_unacked_after_rewind() {
        let mut queue = OutQueue::new(10, 1000);
        for _ in 0..5 {
            queue.push(message(b"abc")).unwrap();
        }
        assert_eq!(sent(&mut queue, true), [1, 2, 3, 4, 5]);
        assert_eq!(sent(&mut queue, true), Vec::<u64>::new());
        assert!(queue.ack(2));
        assert!(queue.rewind(3));
        assert_eq!(queue.len(), 2);
        assert_eq!(sent(&mut queue, true), [4, 5]);
        assert!(!queue.ack(9));
        assert!(!queue.rewind(1));
    }

    #[test]
    fn limits_hold_and_lossy_forgets() {
        let mut queue = OutQueue::new(2, 4);
        queue.push(message(b"abc")).unwrap();
        assert!(queue.push(message(b"de")).is_err());
        assert_eq!(sent(&mut queue, false), [1]);
        assert_eq!(queue.len(), 0);
        // One message larger than the byte limit fits into an empty queue.
        queue.push(message(b"0123456789")).unwrap();
        assert_eq!(queue.payload_bytes(), 10);
    }
}
