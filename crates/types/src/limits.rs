//! Limits shared by every component. Each is named `*_max` and tied to the others at
//! compile time where they depend on each other.

/// Longest object name in bytes (Ceph's `osd_max_object_name_len` default).
pub const OBJECT_NAME_BYTES_MAX: usize = 2048;
/// Longest pool name in bytes.
pub const POOL_NAME_BYTES_MAX: usize = 256;
/// Longest xattr name in bytes.
pub const XATTR_NAME_BYTES_MAX: usize = 255;
/// Largest xattr value in bytes.
pub const XATTR_VALUE_BYTES_MAX: usize = 64 * 1024;
/// Longest omap key in bytes.
pub const OMAP_KEY_BYTES_MAX: usize = 4096;
/// Largest single object in bytes (Ceph's `osd_max_object_size` default is 128 MiB).
pub const OBJECT_SIZE_BYTES_MAX: u64 = 128 * 1024 * 1024;
/// Largest payload a single client write may carry.
pub const WRITE_BYTES_MAX: usize = 16 * 1024 * 1024;
/// Most sub-operations in one compound op.
pub const OPS_PER_REQUEST_MAX: usize = 64;
/// Most entries an omap or listing reply returns at once.
pub const LIST_ENTRIES_MAX: usize = 10_000;
/// Largest encoded message (frame payload) accepted from the wire.
pub const MESSAGE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Most elements any decoded collection may claim (guards allocations on bad input).
pub const DECODE_ELEMENTS_MAX: usize = 1 << 24;

const _: () = assert!(WRITE_BYTES_MAX + 64 * 1024 < MESSAGE_BYTES_MAX);
const _: () = assert!((WRITE_BYTES_MAX as u64) <= OBJECT_SIZE_BYTES_MAX);
const _: () = assert!(OBJECT_NAME_BYTES_MAX < MESSAGE_BYTES_MAX);
