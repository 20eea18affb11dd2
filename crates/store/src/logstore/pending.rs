//! [`PendingChunk`]: log bytes waiting to be written at one device offset. Record
//! headers and small payloads are copied into one buffer; large payloads stay shared
//! with the transaction that carried them and go to the device in the same vectored
//! write, so a 1 MiB write is not copied on its way.

use crate::device::BlockDevice;
use bytes::Bytes;
use std::io;
use std::ops::Range;

/// Payloads at least this large are shared rather than copied.
pub const SHARED_PAYLOAD_BYTES_MIN: usize = 4096;

#[derive(Debug, Clone)]
enum Part {
    /// A range of [`PendingChunk::copied`].
    Copied(Range<usize>),
    Shared(Bytes),
}

impl Part {
    fn length(&self) -> usize {
        match self {
            Part::Copied(range) => range.len(),
            Part::Shared(bytes) => bytes.len(),
        }
    }
}

/// Contiguous bytes waiting to be written at `device_offset`, in `parts` order.
#[derive(Debug, Clone)]
pub struct PendingChunk {
    pub device_offset: u64,
    copied: Vec<u8>,
    parts: Vec<Part>,
    length: u64,
}

impl PendingChunk {
    /// An empty chunk at `device_offset` that copies into `buffer` (emptied).
    pub fn new(device_offset: u64, mut buffer: Vec<u8>) -> Self {
        buffer.clear();
        Self {
            device_offset,
            copied: buffer,
            parts: Vec::new(),
            length: 0,
        }
    }

    /// The device offset just past the chunk.
    pub fn end(&self) -> u64 {
        self.device_offset + self.length
    }

    /// Appends the bytes `write` puts at the end of the copy buffer.
    pub fn extend_copied(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        let start = self.copied.len();
        write(&mut self.copied);
        let end = self.copied.len();
        self.length += (end - start) as u64;
        match self.parts.last_mut() {
            Some(Part::Copied(range)) if range.end == start => range.end = end,
            _ => self.parts.push(Part::Copied(start..end)),
        }
    }

    /// Appends a payload without copying it.
    pub fn push_shared(&mut self, payload: Bytes) {
        self.length += payload.len() as u64;
        self.parts.push(Part::Shared(payload));
    }

    fn part_bytes<'a>(&'a self, part: &'a Part) -> &'a [u8] {
        match part {
            Part::Copied(range) => &self.copied[range.clone()],
            Part::Shared(bytes) => bytes,
        }
    }

    /// Writes the chunk and then `fill`, in one device write; returns the bytes written.
    pub fn write_to(&mut self, device: &mut dyn BlockDevice, fill: &[u8]) -> io::Result<u64> {
        let total = self.length + fill.len() as u64;
        if let [Part::Copied(range)] = self.parts.as_slice() {
            assert_eq!(range.len(), self.copied.len());
            self.copied.extend_from_slice(fill);
            let result = device.write_at(self.device_offset, &self.copied);
            self.copied.truncate(range.len());
            return result.map(|()| total);
        }
        let mut slices: Vec<&[u8]> = self.parts.iter().map(|p| self.part_bytes(p)).collect();
        slices.push(fill);
        device.write_parts_at(self.device_offset, &slices)?;
        Ok(total)
    }

    /// Copies `buf.len()` bytes at `device_offset` if the chunk holds all of them;
    /// returns whether it did.
    pub fn read(&self, device_offset: u64, buf: &mut [u8]) -> bool {
        let end = device_offset + buf.len() as u64;
        if device_offset < self.device_offset || end > self.end() {
            return false;
        }
        let mut part_start = self.device_offset;
        for part in &self.parts {
            let part_end = part_start + part.length() as u64;
            let low = device_offset.max(part_start);
            let high = end.min(part_end);
            if low < high {
                let bytes = self.part_bytes(part);
                let from = (low - part_start) as usize;
                let to = (high - part_start) as usize;
                let into = (low - device_offset) as usize;
                buf[into..into + (to - from)].copy_from_slice(&bytes[from..to]);
            }
            part_start = part_end;
        }
        true
    }

    /// The copy buffer, for a later chunk.
    pub fn into_buffer(self) -> Vec<u8> {
        self.copied
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::MemDevice;

    #[test]
    fn parts_write_and_read_back_in_order() {
        let shared = Bytes::from(vec![7u8; 5000]);
        let mut chunk = PendingChunk::new(100, Vec::new());
        chunk.extend_copied(|out| out.extend_from_slice(b"head"));
        chunk.push_shared(shared.clone());
        chunk.extend_copied(|out| out.extend_from_slice(b"tail"));
        chunk.extend_copied(|out| out.extend_from_slice(b"!"));
        assert_eq!(chunk.end(), 100 + 4 + 5000 + 5);

        let mut buf = vec![0u8; 8];
        assert!(chunk.read(100 + 4 + 4996, &mut buf), "straddles two parts");
        assert_eq!(&buf, &[7, 7, 7, 7, b't', b'a', b'i', b'l']);
        assert!(!chunk.read(99, &mut buf), "starts before the chunk");
        assert!(
            !chunk.read(chunk.end() - 4, &mut buf),
            "ends after the chunk"
        );

        let mut device = MemDevice::new(8192);
        let written = chunk.write_to(&mut device, &[0u8; 3]).unwrap();
        assert_eq!(written, 5009 + 3);
        let mut all = vec![0u8; 5009];
        device.read_at(100, &mut all).unwrap();
        let mut expected = b"head".to_vec();
        expected.extend_from_slice(&shared);
        expected.extend_from_slice(b"tail!");
        assert_eq!(all, expected);
    }

    #[test]
    fn copied_only_chunks_are_one_plain_write() {
        let mut chunk = PendingChunk::new(0, vec![1, 2, 3]);
        chunk.extend_copied(|out| out.extend_from_slice(b"abc"));
        let mut device = MemDevice::new(4096);
        assert_eq!(chunk.write_to(&mut device, &[9u8; 2]).unwrap(), 5);
        let mut buf = [0u8; 5];
        device.read_at(0, &mut buf).unwrap();
        assert_eq!(&buf, b"abc\x09\x09");
        assert!(chunk.read(1, &mut buf[..2]));
        assert_eq!(&buf[..2], b"bc", "the fill is not part of the chunk");
    }
}
