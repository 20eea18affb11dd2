//! Block devices under [`LogStore`](crate::LogStore): a byte-addressed, fixed-size
//! space with positional reads and writes and a durability barrier.
//!
//! Three implementations, as the house style asks for every seam:
//!
//! - [`FileDevice`]: one preallocated file per shard (`fdatasync` for [`BlockDevice::sync`]).
//! - [`MemDevice`]: a `Vec<u8>`; writes are durable at once.
//! - [`FaultyDevice`]: wraps any device and injects faults from an explicit seed: lost
//!   unsynced writes on a simulated power cut (keeping a random prefix of them, with a torn
//!   last sector), bit flips on read, and ENOSPC past a given offset.
//!
//! Contract: a write is durable only once a later [`BlockDevice::sync`] has returned
//! `Ok`; until then a crash may drop it, keep it, or tear it, but a write never changes
//! bytes outside its own range.

mod faulty;
mod file;

pub use faulty::{FaultConfig, FaultyDevice};
pub use file::FileDevice;

use std::io;

/// A fixed-size byte-addressed device owned by one shard (hence `&mut self` for writes).
pub trait BlockDevice {
    /// Fills `buf` from `offset`; fails if the range passes the end.
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()>;
    /// Writes `data` at `offset`; not durable until [`BlockDevice::sync`].
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Writes `parts` one after another from `offset`, as one write: like
    /// [`BlockDevice::write_at`] of their concatenation. The default concatenates;
    /// [`FileDevice`] hands the parts to the kernel without copying them.
    fn write_parts_at(&mut self, offset: u64, parts: &[&[u8]]) -> io::Result<()> {
        self.write_at(offset, &parts.concat())
    }
    /// Makes every completed write durable (`fdatasync`).
    fn sync(&mut self) -> io::Result<()>;
    fn size_bytes(&self) -> u64;
    /// Tells the device a range holds nothing of value. A hint: the default does nothing.
    fn trim(&mut self, _offset: u64, _length: u64) -> io::Result<()> {
        Ok(())
    }
}

impl<D: BlockDevice + ?Sized> BlockDevice for Box<D> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        (**self).read_at(offset, buf)
    }
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        (**self).write_at(offset, data)
    }
    fn write_parts_at(&mut self, offset: u64, parts: &[&[u8]]) -> io::Result<()> {
        (**self).write_parts_at(offset, parts)
    }
    fn sync(&mut self) -> io::Result<()> {
        (**self).sync()
    }
    fn size_bytes(&self) -> u64 {
        (**self).size_bytes()
    }
    fn trim(&mut self, offset: u64, length: u64) -> io::Result<()> {
        (**self).trim(offset, length)
    }
}

/// Checks that `offset..offset+length` lies inside a device of `size_bytes`.
pub(crate) fn check_range(offset: u64, length: usize, size_bytes: u64) -> io::Result<()> {
    match offset.checked_add(length as u64) {
        Some(end) if end <= size_bytes => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("range {offset}+{length} passes the device end {size_bytes}"),
        )),
    }
}

/// A device in memory. Every write is durable at once; wrap it in a [`FaultyDevice`]
/// to get volatile writes.
#[derive(Debug, Clone)]
pub struct MemDevice {
    bytes: Vec<u8>,
}

impl MemDevice {
    /// A zero-filled device.
    pub fn new(size_bytes: usize) -> Self {
        Self {
            bytes: vec![0; size_bytes],
        }
    }
}

impl BlockDevice for MemDevice {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        check_range(offset, buf.len(), self.size_bytes())?;
        let start = offset as usize;
        buf.copy_from_slice(&self.bytes[start..start + buf.len()]);
        Ok(())
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        check_range(offset, data.len(), self.size_bytes())?;
        let start = offset as usize;
        self.bytes[start..start + data.len()].copy_from_slice(data);
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }

    fn size_bytes(&self) -> u64 {
        self.bytes.len() as u64
    }
}
