//! [`FileDevice`]: a [`BlockDevice`] over one preallocated file.
//!
//! Each OSD shard owns one file (by convention `DATA_DIR/logstore.shard<N>`), created at
//! its full size and filled with zeros so that later writes overwrite allocated blocks
//! and `fdatasync` has no file-system metadata to flush. Reads and writes are
//! positional (`pread`/`pwrite`); only a write of several parts sets the file offset
//! first (`lseek`, then `writev`), under `&mut self`, and nothing else reads it.

use super::{check_range, BlockDevice};
use std::fs::{File, OpenOptions};
use std::io::{self, IoSlice, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// Bytes of zeros written per call while preallocating.
const PREALLOCATE_CHUNK_BYTES: usize = 1 << 20;

/// A device backed by one file. See the module docs.
#[derive(Debug)]
pub struct FileDevice {
    file: File,
    path: PathBuf,
    size_bytes: u64,
}

impl FileDevice {
    /// Creates (or truncates) `path` and fills it with `size_bytes` zeros.
    pub fn create(path: &Path, size_bytes: u64) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        let zeros = vec![0u8; PREALLOCATE_CHUNK_BYTES];
        let mut offset = 0;
        while offset < size_bytes {
            let length = (size_bytes - offset).min(zeros.len() as u64) as usize;
            file.write_all_at(&zeros[..length], offset)?;
            offset += length as u64;
        }
        file.sync_all()?;
        Ok(Self {
            file,
            path: path.to_owned(),
            size_bytes,
        })
    }

    /// Opens an existing device file; its size is the file's length.
    pub fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let size_bytes = file.metadata()?.len();
        Ok(Self {
            file,
            path: path.to_owned(),
            size_bytes,
        })
    }

    /// Opens `path` if it exists, or creates it with `size_bytes`.
    pub fn open_or_create(path: &Path, size_bytes: u64) -> io::Result<Self> {
        if path.exists() {
            Self::open(path)
        } else {
            Self::create(path, size_bytes)
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl BlockDevice for FileDevice {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        check_range(offset, buf.len(), self.size_bytes)?;
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        check_range(offset, data.len(), self.size_bytes)?;
        self.file.write_all_at(data, offset)
    }

    fn write_parts_at(&mut self, offset: u64, parts: &[&[u8]]) -> io::Result<()> {
        let length = parts.iter().map(|part| part.len()).sum();
        check_range(offset, length, self.size_bytes)?;
        self.file.seek(SeekFrom::Start(offset))?;
        let mut slices: Vec<IoSlice<'_>> = parts.iter().map(|part| IoSlice::new(part)).collect();
        let mut rest = &mut slices[..];
        while !rest.is_empty() {
            match self.file.write_vectored(rest) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(written) => IoSlice::advance_slices(&mut rest, written),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }
}
