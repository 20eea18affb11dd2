//! [`FaultyDevice`]: a [`BlockDevice`] wrapper that injects faults, for crash tests and
//! the simulator. Every random choice comes from [`FaultConfig::seed`], so a failing
//! run is reproduced by its seed; nothing here sleeps or reads the clock.
//!
//! Writes stay in a volatile list until [`BlockDevice::sync`] hands them to the inner
//! device, so the inner device always holds exactly what survived the last sync.
//! [`FaultyDevice::crash`] simulates a power cut: it drops the unsynced writes, or keeps
//! a random prefix of them, and may tear the first dropped one (a random prefix of its
//! bytes lands and the rest of the sector holding the cut fills with garbage; bytes
//! outside the write's range never change).

use super::{check_range, BlockDevice, MemDevice};
use std::cell::Cell;
use std::io;

/// Which faults a [`FaultyDevice`] injects. The default injects none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultConfig {
    pub seed: u64,
    /// On [`FaultyDevice::crash`], keep a random prefix of the unsynced writes instead of
    /// dropping them all.
    pub crash_keeps_random_prefix: bool,
    /// On [`FaultyDevice::crash`], tear the first dropped write.
    pub crash_tears_last_sector: bool,
    /// The unit a torn write garbles.
    pub sector_bytes: usize,
    /// Flip one random bit of a read with probability 1/`read_flip_one_in` (0: never).
    pub read_flip_one_in: u32,
    /// Writes that end past this offset fail with ENOSPC (a thin file system filling up).
    pub enospc_at_bytes: Option<u64>,
    /// The power fails right after this many more successful writes: later writes and
    /// syncs fail until [`FaultyDevice::crash`]. Lets a test crash in the middle of a
    /// flush (after some of its writes, before its sync).
    pub power_fails_after_writes: Option<u64>,
}

impl Default for FaultConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            crash_keeps_random_prefix: false,
            crash_tears_last_sector: false,
            sector_bytes: 512,
            read_flip_one_in: 0,
            enospc_at_bytes: None,
            power_fails_after_writes: None,
        }
    }
}

/// What a [`FaultyDevice::crash`] did, for test messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CrashReport {
    pub unsynced_writes: usize,
    pub kept_writes: usize,
    pub torn: bool,
}

/// A fault-injecting wrapper. See the module docs.
#[derive(Debug)]
pub struct FaultyDevice<D: BlockDevice = MemDevice> {
    inner: D,
    config: FaultConfig,
    unsynced: Vec<(u64, Vec<u8>)>,
    rng_state: Cell<u64>,
    powered_off: bool,
    writes_until_power_fails: Option<u64>,
}

/// splitmix64: small, fast and good enough for fault choices.
fn next_random(state: &Cell<u64>) -> u64 {
    let next = state.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
    state.set(next);
    let mut z = next;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn power_off_error() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "simulated power failure")
}

impl FaultyDevice<MemDevice> {
    /// A zero-filled in-memory device of `size_bytes`.
    pub fn in_memory(size_bytes: usize, config: FaultConfig) -> Self {
        Self::new(MemDevice::new(size_bytes), config)
    }
}

impl<D: BlockDevice> FaultyDevice<D> {
    pub fn new(inner: D, config: FaultConfig) -> Self {
        assert!(config.sector_bytes > 0);
        Self {
            inner,
            rng_state: Cell::new(config.seed),
            powered_off: false,
            writes_until_power_fails: config.power_fails_after_writes,
            unsynced: Vec::new(),
            config,
        }
    }

    pub fn config(&self) -> &FaultConfig {
        &self.config
    }

    /// Changes the faults from now on (the random stream continues).
    pub fn set_config(&mut self, config: FaultConfig) {
        self.writes_until_power_fails = config.power_fails_after_writes;
        self.config = config;
    }

    /// The power fails after `writes` more successful writes.
    pub fn fail_power_after_writes(&mut self, writes: u64) {
        self.writes_until_power_fails = Some(writes);
    }

    /// Cancels a power failure armed by [`FaultyDevice::fail_power_after_writes`] that
    /// has not happened yet (one that has stays until [`FaultyDevice::crash`]).
    pub fn cancel_power_failure(&mut self) {
        self.writes_until_power_fails = None;
    }

    pub fn unsynced_write_count(&self) -> usize {
        self.unsynced.len()
    }

    fn random_below(&self, bound: u64) -> u64 {
        if bound == 0 {
            return 0;
        }
        next_random(&self.rng_state) % bound
    }

    /// Simulates a power cut and restores power. See the module docs.
    pub fn crash(&mut self) -> io::Result<CrashReport> {
        let unsynced = std::mem::take(&mut self.unsynced);
        let mut report = CrashReport {
            unsynced_writes: unsynced.len(),
            ..CrashReport::default()
        };
        if self.config.crash_keeps_random_prefix {
            report.kept_writes = self.random_below(unsynced.len() as u64 + 1) as usize;
        }
        for (offset, data) in &unsynced[..report.kept_writes] {
            self.inner.write_at(*offset, data)?;
        }
        if let Some((offset, data)) = unsynced.get(report.kept_writes) {
            if self.config.crash_tears_last_sector && !data.is_empty() {
                self.tear(*offset, data)?;
                report.torn = true;
            }
        }
        self.inner.sync()?;
        self.powered_off = false;
        self.writes_until_power_fails = None;
        Ok(report)
    }

    /// Lands a random prefix of a write, with garbage from the cut to its sector's end.
    fn tear(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        let cut = self.random_below(data.len() as u64) as usize;
        let sector_bytes = self.config.sector_bytes as u64;
        let sector_end = ((offset + cut as u64) / sector_bytes + 1) * sector_bytes;
        let garbage_end = ((sector_end - offset) as usize).min(data.len());
        let mut torn = data[..garbage_end].to_vec();
        for byte in &mut torn[cut..] {
            *byte = self.random_below(256) as u8;
        }
        self.inner.write_at(offset, &torn)
    }

    /// Flips bit `bit` (0..8) of the durable byte at `offset`, as media decay would.
    pub fn corrupt_durable_bit(&mut self, offset: u64, bit: u8) -> io::Result<()> {
        let mut byte = [0u8];
        self.inner.read_at(offset, &mut byte)?;
        byte[0] ^= 1 << (bit % 8);
        self.inner.write_at(offset, &byte)?;
        self.inner.sync()
    }

    /// The inner device with only the synced writes.
    pub fn into_inner(self) -> D {
        self.inner
    }
}

impl<D: BlockDevice> BlockDevice for FaultyDevice<D> {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.inner.read_at(offset, buf)?;
        let end = offset + buf.len() as u64;
        for (write_offset, data) in &self.unsynced {
            let low = offset.max(*write_offset);
            let high = end.min(write_offset + data.len() as u64);
            if low < high {
                let out = (low - offset) as usize..(high - offset) as usize;
                let from = (low - write_offset) as usize..(high - write_offset) as usize;
                buf[out].copy_from_slice(&data[from]);
            }
        }
        let one_in = u64::from(self.config.read_flip_one_in);
        if one_in > 0 && !buf.is_empty() && self.random_below(one_in) == 0 {
            let bit = self.random_below(buf.len() as u64 * 8);
            buf[(bit / 8) as usize] ^= 1 << (bit % 8);
        }
        Ok(())
    }

    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<()> {
        check_range(offset, data.len(), self.size_bytes())?;
        if self.powered_off {
            return Err(power_off_error());
        }
        if let Some(limit) = self.config.enospc_at_bytes {
            if offset + data.len() as u64 > limit {
                return Err(io::Error::from_raw_os_error(28));
            }
        }
        if self.writes_until_power_fails == Some(0) {
            self.powered_off = true;
            return Err(power_off_error());
        }
        self.unsynced.push((offset, data.to_vec()));
        if let Some(left) = self.writes_until_power_fails {
            // The power fails right after the last allowed write: it is not synced.
            self.writes_until_power_fails = Some(left - 1);
            self.powered_off = left == 1;
        }
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        if self.powered_off {
            return Err(power_off_error());
        }
        for (offset, data) in std::mem::take(&mut self.unsynced) {
            self.inner.write_at(offset, &data)?;
        }
        self.inner.sync()
    }

    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crash_drops_unsynced_writes_and_keeps_synced_ones() {
        let mut device = FaultyDevice::in_memory(4096, FaultConfig::default());
        device.write_at(0, b"durable").unwrap();
        device.sync().unwrap();
        device.write_at(100, b"volatile").unwrap();
        let mut buf = [0u8; 8];
        device.read_at(100, &mut buf).unwrap();
        assert_eq!(&buf, b"volatile");
        device.crash().unwrap();
        device.read_at(100, &mut buf).unwrap();
        assert_eq!(buf, [0; 8]);
        device.read_at(0, &mut buf[..7]).unwrap();
        assert_eq!(&buf[..7], b"durable");
    }

    #[test]
    fn torn_write_stays_inside_its_range_and_sector() {
        for seed in 0..50 {
            let config = FaultConfig {
                seed,
                crash_tears_last_sector: true,
                ..FaultConfig::default()
            };
            let mut device = FaultyDevice::in_memory(4096, config);
            device.write_at(600, &[7u8; 1000]).unwrap();
            device.crash().unwrap();
            let mut all = vec![0u8; 4096];
            device.read_at(0, &mut all).unwrap();
            assert!(all[..600].iter().all(|&b| b == 0), "seed {seed}");
            assert!(all[1600..].iter().all(|&b| b == 0), "seed {seed}");
            let changed_end = all.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            assert!(changed_end <= 1600, "seed {seed}: garbage past the write");
        }
    }

    #[test]
    fn power_failure_and_enospc() {
        let config = FaultConfig {
            enospc_at_bytes: Some(1000),
            power_fails_after_writes: Some(1),
            ..FaultConfig::default()
        };
        let mut device = FaultyDevice::in_memory(4096, config);
        assert_eq!(
            device.write_at(990, &[1; 20]).unwrap_err().raw_os_error(),
            Some(28)
        );
        device.write_at(0, &[1; 20]).unwrap();
        assert!(device.sync().is_err());
        assert!(device.write_at(0, &[1; 20]).is_err());
        assert_eq!(device.unsynced_write_count(), 1);
        device.crash().unwrap();
        device.write_at(0, &[1; 20]).unwrap();
        device.sync().unwrap();
    }
}
