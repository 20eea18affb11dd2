//! Versioned little-endian binary encoding.
//!
//! Every struct that goes on the wire or to disk is written inside an envelope:
//!
//! ```text
//! u8 version | u8 compat_version | u32 body_length | body
//! ```
//!
//! A decoder that supports up to version `S` accepts any envelope with
//! `compat_version <= S`: it decodes the fields it knows and skips the rest of the body,
//! so writers may append fields in new versions. An envelope whose `compat_version`
//! exceeds `S` was written by a newer, incompatible writer and fails with
//! [`DecodeError::UnsupportedVersion`]. Nothing here panics on malformed input: every
//! length is checked against what is left and against [`DECODE_ELEMENTS_MAX`].

use crate::limits::{DECODE_ELEMENTS_MAX, MESSAGE_BYTES_MAX};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Why bytes could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("truncated input: needed {needed} more bytes, {remaining} left")]
    Truncated { needed: usize, remaining: usize },
    #[error("{what}: encoded by a newer version (v{version}, compat v{compat}); this build reads up to v{supported}")]
    UnsupportedVersion {
        what: &'static str,
        version: u8,
        compat: u8,
        supported: u8,
    },
    #[error("{what}: length {length} exceeds the limit {limit}")]
    TooLong {
        what: &'static str,
        length: usize,
        limit: usize,
    },
    #[error("{what}: invalid value {value}")]
    Invalid { what: &'static str, value: u64 },
    #[error("{what}: not valid UTF-8")]
    Utf8 { what: &'static str },
    #[error("{count} unexpected trailing bytes")]
    TrailingBytes { count: usize },
}

/// Set in a blob's u32 length when its bytes sit in the message's data segment rather
/// than inline. Free because no blob may reach 2 GiB ([`MESSAGE_BYTES_MAX`] is far less).
pub const BLOB_OUT_OF_LINE_BIT: u32 = 1 << 31;
/// Shared blobs at least this long go to the data segment when an encoder has one
/// ([`Encoder::with_data_segment`]); shorter ones are cheaper to copy than to reference.
pub const BLOB_OUT_OF_LINE_BYTES_MIN: usize = 1024;
const _: () = assert!(MESSAGE_BYTES_MAX < BLOB_OUT_OF_LINE_BIT as usize);

/// Appends encoded values to a growable buffer.
///
/// An encoder made with [`Encoder::with_data_segment`] writes one large shared blob
/// ([`Encoder::put_shared_blob`]) by reference: the blob's bytes become the data
/// segment of the message and the buffer holds only `u32 (length | BLOB_OUT_OF_LINE_BIT)
/// | u32 offset`. A write payload then travels from the receive buffer to every replica
/// without a copy. Only messages use this; what goes to disk is always inline.
#[derive(Debug, Default)]
pub struct Encoder {
    buf: Vec<u8>,
    /// `Some` when a data segment may be used; holds the blob once one is placed there.
    data: Option<Option<Bytes>>,
}

impl Encoder {
    pub fn new() -> Self {
        Self {
            buf: Vec::new(),
            data: None,
        }
    }

    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            buf: Vec::with_capacity(capacity),
            data: None,
        }
    }

    /// An encoder that may move one large shared blob to a data segment; see
    /// [`Encoder::into_parts`].
    pub fn with_data_segment(capacity: usize) -> Self {
        Self {
            buf: Vec::with_capacity(capacity),
            data: Some(None),
        }
    }

    /// The encoded buffer and the data segment (empty when no blob went there).
    pub fn into_parts(self) -> (Bytes, Bytes) {
        let data = self.data.flatten().unwrap_or_default();
        (Bytes::from(self.buf), data)
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    pub fn into_vec(self) -> Vec<u8> {
        self.buf
    }

    pub fn into_bytes(self) -> Bytes {
        Bytes::from(self.buf)
    }

    pub fn put_u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub fn put_u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn put_u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn put_u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn put_i32(&mut self, v: i32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn put_i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub fn put_raw(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Writes a length-prefixed byte string.
    pub fn put_blob(&mut self, bytes: &[u8]) {
        let length = u32::try_from(bytes.len()).expect("blob over 4 GiB");
        self.put_u32(length);
        self.put_raw(bytes);
    }

    /// Writes a length-prefixed byte string that the caller shares: by reference into
    /// the data segment when this encoder has one still free and the blob is at least
    /// [`BLOB_OUT_OF_LINE_BYTES_MIN`] long, else inline exactly as [`Encoder::put_blob`].
    pub fn put_shared_blob(&mut self, bytes: &Bytes) {
        let slot_free = matches!(self.data, Some(None));
        if !slot_free || bytes.len() < BLOB_OUT_OF_LINE_BYTES_MIN {
            return self.put_blob(bytes);
        }
        let length = u32::try_from(bytes.len()).expect("blob over 4 GiB");
        assert!(length < BLOB_OUT_OF_LINE_BIT, "blob of 2 GiB or more");
        self.put_u32(length | BLOB_OUT_OF_LINE_BIT);
        self.put_u32(0); // offset in the data segment: one blob, so at its start
        self.data = Some(Some(bytes.clone()));
    }

    /// Writes `body` inside a version envelope (see the module docs).
    pub fn versioned(&mut self, version: u8, compat: u8, body: impl FnOnce(&mut Encoder)) {
        assert!(compat <= version, "compat {compat} above version {version}");
        self.put_u8(version);
        self.put_u8(compat);
        let length_at = self.buf.len();
        self.put_u32(0);
        body(self);
        let body_length = self.buf.len() - length_at - 4;
        let body_length = u32::try_from(body_length).expect("envelope over 4 GiB");
        self.buf[length_at..length_at + 4].copy_from_slice(&body_length.to_le_bytes());
    }
}

/// Reads encoded values from a shared buffer; byte strings come back as zero-copy
/// slices of it.
///
/// A decoder made with [`Decoder::with_data_segment`] also resolves blobs written out
/// of line ([`Encoder::put_shared_blob`]) to slices of the message's data segment.
#[derive(Debug, Clone)]
pub struct Decoder {
    buf: Bytes,
    position: usize,
    end: usize,
    /// The message's data segment (empty when it has none).
    data: Bytes,
}

impl Decoder {
    pub fn new(buf: Bytes) -> Self {
        Self::with_data_segment(buf, Bytes::new())
    }

    /// A decoder of `buf` whose out-of-line blobs are slices of `data`.
    pub fn with_data_segment(buf: Bytes, data: Bytes) -> Self {
        let end = buf.len();
        Self {
            buf,
            position: 0,
            end,
            data,
        }
    }

    pub fn from_slice(bytes: &[u8]) -> Self {
        Self::new(Bytes::copy_from_slice(bytes))
    }

    pub fn remaining(&self) -> usize {
        self.end - self.position
    }

    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Fails unless every byte was consumed.
    pub fn finish(&self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(DecodeError::TrailingBytes { count }),
        }
    }

    fn take(&mut self, count: usize) -> Result<&[u8], DecodeError> {
        if count > self.remaining() {
            return Err(DecodeError::Truncated {
                needed: count,
                remaining: self.remaining(),
            });
        }
        let start = self.position;
        self.position += count;
        Ok(&self.buf[start..start + count])
    }

    fn take_array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let slice = self.take(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(slice);
        Ok(out)
    }

    pub fn get_u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take_array::<1>()?[0])
    }
    pub fn get_u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.take_array()?))
    }
    pub fn get_u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take_array()?))
    }
    pub fn get_u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take_array()?))
    }
    pub fn get_i32(&mut self) -> Result<i32, DecodeError> {
        Ok(i32::from_le_bytes(self.take_array()?))
    }
    pub fn get_i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(self.take_array()?))
    }

    /// Reads `count` raw bytes as a zero-copy slice.
    pub fn get_raw(&mut self, count: usize) -> Result<Bytes, DecodeError> {
        if count > self.remaining() {
            return Err(DecodeError::Truncated {
                needed: count,
                remaining: self.remaining(),
            });
        }
        let start = self.position;
        self.position += count;
        Ok(self.buf.slice(start..start + count))
    }

    /// Reads a length-prefixed byte string of at most `limit` bytes.
    pub fn get_blob(&mut self, what: &'static str, limit: usize) -> Result<Bytes, DecodeError> {
        let raw_length = self.get_u32()?;
        let length = (raw_length & !BLOB_OUT_OF_LINE_BIT) as usize;
        if length > limit {
            return Err(DecodeError::TooLong {
                what,
                length,
                limit,
            });
        }
        if raw_length & BLOB_OUT_OF_LINE_BIT == 0 {
            return self.get_raw(length);
        }
        let offset = self.get_u32()? as usize;
        match offset.checked_add(length) {
            Some(end) if end <= self.data.len() => Ok(self.data.slice(offset..end)),
            _ => Err(DecodeError::Truncated {
                needed: offset.saturating_add(length),
                remaining: self.data.len(),
            }),
        }
    }

    /// Reads a length-prefixed UTF-8 string of at most `limit` bytes.
    pub fn get_string(&mut self, what: &'static str, limit: usize) -> Result<String, DecodeError> {
        let raw = self.get_blob(what, limit)?;
        String::from_utf8(raw.to_vec()).map_err(|_| DecodeError::Utf8 { what })
    }

    /// Reads an element count and checks it against the limit and what is left
    /// (every element takes at least `element_bytes_min` bytes).
    pub fn get_count(
        &mut self,
        what: &'static str,
        element_bytes_min: usize,
    ) -> Result<usize, DecodeError> {
        let count = self.get_u32()? as usize;
        if count > DECODE_ELEMENTS_MAX {
            return Err(DecodeError::TooLong {
                what,
                length: count,
                limit: DECODE_ELEMENTS_MAX,
            });
        }
        let bytes_min = count.saturating_mul(element_bytes_min.max(1));
        if bytes_min > self.remaining() {
            return Err(DecodeError::Truncated {
                needed: bytes_min,
                remaining: self.remaining(),
            });
        }
        Ok(count)
    }

    /// Opens a version envelope written by [`Encoder::versioned`] and decodes its body
    /// with `body(decoder, version)`. Fields a newer writer appended are skipped.
    pub fn versioned<T>(
        &mut self,
        what: &'static str,
        supported: u8,
        body: impl FnOnce(&mut Decoder, u8) -> Result<T, DecodeError>,
    ) -> Result<T, DecodeError> {
        let version = self.get_u8()?;
        let compat = self.get_u8()?;
        let length = self.get_u32()? as usize;
        if compat > supported {
            return Err(DecodeError::UnsupportedVersion {
                what,
                version,
                compat,
                supported,
            });
        }
        if compat > version {
            return Err(DecodeError::Invalid {
                what,
                value: u64::from(compat),
            });
        }
        if length > self.remaining() {
            return Err(DecodeError::Truncated {
                needed: length,
                remaining: self.remaining(),
            });
        }
        let mut inner = Decoder {
            buf: self.buf.clone(),
            position: self.position,
            end: self.position + length,
            data: self.data.clone(),
        };
        let value = body(&mut inner, version)?;
        self.position += length;
        Ok(value)
    }
}

/// A value that can be written with an [`Encoder`].
pub trait Encode {
    fn encode(&self, encoder: &mut Encoder);

    /// Encodes into a buffer of exactly the encoded length. The value is encoded into a
    /// per-thread scratch vector first and copied out once: a growing `Vec` would
    /// reallocate several times for a small struct, and a `Bytes` made from a `Vec`
    /// with spare capacity costs one more allocation for its shared header.
    fn to_bytes(&self) -> Bytes {
        let mut encoder = Encoder {
            buf: SCRATCH.with(std::cell::Cell::take),
            // Every byte inline: `to_bytes` has no data segment to put a blob in.
            data: None,
        };
        encoder.buf.clear();
        self.encode(&mut encoder);
        let bytes = Bytes::copy_from_slice(&encoder.buf);
        // A huge value's scratch is not kept, so one large encode does not pin memory.
        if encoder.buf.capacity() <= SCRATCH_BYTES_MAX {
            SCRATCH.with(|cell| cell.set(encoder.buf));
        }
        bytes
    }
}

/// Largest scratch buffer [`Encode::to_bytes`] keeps for the next call on its thread.
const SCRATCH_BYTES_MAX: usize = 64 * 1024;

thread_local! {
    /// [`Encode::to_bytes`]'s reusable buffer. `take` leaves an empty vector behind, so
    /// a nested `to_bytes` (an `encode` that calls it) simply allocates its own.
    static SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// A value that can be read back with a [`Decoder`].
pub trait Decode: Sized {
    fn decode(decoder: &mut Decoder) -> Result<Self, DecodeError>;

    /// Decodes a whole buffer; trailing bytes are an error.
    fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        Self::from_shared(Bytes::copy_from_slice(bytes))
    }

    /// Decodes a whole shared buffer without copying byte strings out of it.
    fn from_shared(bytes: Bytes) -> Result<Self, DecodeError> {
        let mut decoder = Decoder::new(bytes);
        let value = Self::decode(&mut decoder)?;
        decoder.finish()?;
        Ok(value)
    }
}

macro_rules! impl_int {
    ($($t:ty => $put:ident, $get:ident;)*) => {$(
        impl Encode for $t {
            fn encode(&self, e: &mut Encoder) { e.$put(*self) }
        }
        impl Decode for $t {
            fn decode(d: &mut Decoder) -> Result<Self, DecodeError> { d.$get() }
        }
    )*};
}

impl_int! {
    u8 => put_u8, get_u8;
    u16 => put_u16, get_u16;
    u32 => put_u32, get_u32;
    u64 => put_u64, get_u64;
    i32 => put_i32, get_i32;
    i64 => put_i64, get_i64;
}

impl Encode for bool {
    fn encode(&self, e: &mut Encoder) {
        e.put_u8(u8::from(*self));
    }
}

impl Decode for bool {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match d.get_u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(DecodeError::Invalid {
                what: "bool",
                value: u64::from(other),
            }),
        }
    }
}

impl Encode for String {
    fn encode(&self, e: &mut Encoder) {
        e.put_blob(self.as_bytes());
    }
}

impl Decode for String {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.get_string("string", MESSAGE_BYTES_MAX)
    }
}

impl Encode for Bytes {
    fn encode(&self, e: &mut Encoder) {
        e.put_shared_blob(self);
    }
}

impl Decode for Bytes {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        d.get_blob("bytes", MESSAGE_BYTES_MAX)
    }
}

impl<T: Encode> Encode for Vec<T> {
    fn encode(&self, e: &mut Encoder) {
        e.put_u32(u32::try_from(self.len()).expect("vector over u32::MAX"));
        for item in self {
            item.encode(e);
        }
    }
}

impl<T: Decode> Decode for Vec<T> {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        let count = d.get_count("vector", 1)?;
        let mut out = Vec::with_capacity(count);
        for _ in 0..count {
            out.push(T::decode(d)?);
        }
        Ok(out)
    }
}

impl<T: Encode> Encode for Option<T> {
    fn encode(&self, e: &mut Encoder) {
        match self {
            None => e.put_u8(0),
            Some(value) => {
                e.put_u8(1);
                value.encode(e);
            }
        }
    }
}

impl<T: Decode> Decode for Option<T> {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        match d.get_u8()? {
            0 => Ok(None),
            1 => Ok(Some(T::decode(d)?)),
            other => Err(DecodeError::Invalid {
                what: "option tag",
                value: u64::from(other),
            }),
        }
    }
}

impl<K: Encode, V: Encode> Encode for BTreeMap<K, V> {
    fn encode(&self, e: &mut Encoder) {
        e.put_u32(u32::try_from(self.len()).expect("map over u32::MAX"));
        for (key, value) in self {
            key.encode(e);
            value.encode(e);
        }
    }
}

impl<K: Decode + Ord, V: Decode> Decode for BTreeMap<K, V> {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        let count = d.get_count("map", 2)?;
        let mut out = BTreeMap::new();
        for _ in 0..count {
            let key = K::decode(d)?;
            let value = V::decode(d)?;
            out.insert(key, value);
        }
        Ok(out)
    }
}

impl<A: Encode, B: Encode> Encode for (A, B) {
    fn encode(&self, e: &mut Encoder) {
        self.0.encode(e);
        self.1.encode(e);
    }
}

impl<A: Decode, B: Decode> Decode for (A, B) {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        Ok((A::decode(d)?, B::decode(d)?))
    }
}

impl Encode for SocketAddr {
    fn encode(&self, e: &mut Encoder) {
        match self.ip() {
            IpAddr::V4(ip) => {
                e.put_u8(4);
                e.put_raw(&ip.octets());
            }
            IpAddr::V6(ip) => {
                e.put_u8(6);
                e.put_raw(&ip.octets());
            }
        }
        e.put_u16(self.port());
    }
}

impl Decode for SocketAddr {
    fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
        let ip = match d.get_u8()? {
            4 => IpAddr::V4(Ipv4Addr::from(d.take_array::<4>()?)),
            6 => IpAddr::V6(Ipv6Addr::from(d.take_array::<16>()?)),
            other => {
                return Err(DecodeError::Invalid {
                    what: "address family",
                    value: u64::from(other),
                })
            }
        };
        Ok(SocketAddr::new(ip, d.get_u16()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn one_large_shared_blob_goes_to_the_data_segment_by_reference() {
        let big = Bytes::from(vec![7u8; 4096]);
        let small = Bytes::from_static(b"tiny");
        let mut e = Encoder::with_data_segment(64);
        small.encode(&mut e);
        big.encode(&mut e);
        big.encode(&mut e); // the segment is taken: this one is inline
        let (front, data) = e.into_parts();
        assert_eq!(data.as_ptr(), big.as_ptr(), "by reference, not copied");
        assert_eq!(front.len(), (4 + 4) + (4 + 4) + (4 + 4096));
        let mut d = Decoder::with_data_segment(front.clone(), data.clone());
        assert_eq!(Bytes::decode(&mut d).unwrap(), small);
        let out_of_line = Bytes::decode(&mut d).unwrap();
        assert_eq!(out_of_line, big);
        assert_eq!(out_of_line.as_ptr(), data.as_ptr(), "a slice, not a copy");
        assert_eq!(Bytes::decode(&mut d).unwrap(), big);
        d.finish().unwrap();
        // Without its data segment the reference is an error, not a panic.
        let mut d = Decoder::new(front);
        Bytes::decode(&mut d).unwrap();
        assert!(matches!(
            Bytes::decode(&mut d),
            Err(DecodeError::Truncated { .. })
        ));
    }

    #[test]
    fn plain_encoders_write_shared_blobs_inline() {
        let big = Bytes::from(vec![1u8; 4096]);
        let mut plain = Encoder::new();
        big.encode(&mut plain);
        let mut reference = Encoder::new();
        reference.put_blob(&big);
        assert_eq!(plain.into_vec(), reference.into_vec());
    }

    #[test]
    fn out_of_line_references_past_the_data_segment_are_refused() {
        for (length, offset) in [(10u32, 0u32), (4, 7), (u32::MAX >> 1, u32::MAX)] {
            let mut e = Encoder::new();
            e.put_u32(length | BLOB_OUT_OF_LINE_BIT);
            e.put_u32(offset);
            let data = Bytes::from_static(b"12345678");
            let mut d = Decoder::with_data_segment(e.into_bytes(), data);
            assert!(d.get_blob("blob", MESSAGE_BYTES_MAX).is_err());
        }
    }

    #[derive(Debug, PartialEq)]
    struct V1 {
        a: u32,
    }
    #[derive(Debug, PartialEq)]
    struct V2 {
        a: u32,
        b: String,
    }
    impl Encode for V2 {
        fn encode(&self, e: &mut Encoder) {
            e.versioned(2, 1, |e| {
                self.a.encode(e);
                self.b.encode(e);
            });
        }
    }
    impl Decode for V1 {
        fn decode(d: &mut Decoder) -> Result<Self, DecodeError> {
            d.versioned("V1", 1, |d, _| Ok(V1 { a: d.get_u32()? }))
        }
    }

    /// Encodes its inner value with `to_bytes` while the outer `to_bytes` holds the
    /// scratch buffer.
    struct Nested(V2);
    impl Encode for Nested {
        fn encode(&self, e: &mut Encoder) {
            e.put_u8(9);
            e.put_blob(&self.0.to_bytes());
            e.put_u8(9);
        }
    }

    #[test]
    fn to_bytes_is_exact_and_survives_nesting_and_reuse() {
        let inner = V2 {
            a: 1,
            b: "x".repeat(100),
        };
        let mut direct = Encoder::new();
        inner.encode(&mut direct);
        let direct = direct.into_bytes();
        for _ in 0..3 {
            assert_eq!(inner.to_bytes(), direct);
            let nested = Nested(V2 {
                a: 1,
                b: "x".repeat(100),
            })
            .to_bytes();
            assert_eq!(nested.len(), 1 + 4 + direct.len() + 1);
            assert_eq!(&nested[5..5 + direct.len()], &direct[..]);
            assert_eq!((nested[0], nested[nested.len() - 1]), (9, 9));
        }
        // A value larger than the kept scratch still encodes whole.
        let huge = Bytes::from(vec![3u8; SCRATCH_BYTES_MAX * 2]);
        assert_eq!(huge.to_bytes().len(), 4 + huge.len());
        assert_eq!(0u8.to_bytes(), Bytes::from_static(&[0]));
    }

    #[test]
    fn older_decoder_skips_appended_fields() {
        let bytes = V2 {
            a: 7,
            b: "new field".into(),
        }
        .to_bytes();
        assert_eq!(V1::from_bytes(&bytes).unwrap(), V1 { a: 7 });
    }

    #[test]
    fn incompatible_newer_version_fails_cleanly() {
        let mut e = Encoder::new();
        e.versioned(3, 3, |e| e.put_u32(1));
        let err = V1::from_bytes(&e.into_vec()).unwrap_err();
        assert!(matches!(
            err,
            DecodeError::UnsupportedVersion { compat: 3, .. }
        ));
    }

    #[test]
    fn huge_counts_are_rejected_before_allocating() {
        let mut e = Encoder::new();
        e.put_u32(u32::MAX);
        assert!(Vec::<u64>::from_bytes(&e.into_vec()).is_err());
    }

    proptest! {
        #[test]
        fn round_trips(v in proptest::collection::vec((any::<u64>(), ".{0,20}"), 0..20), o in any::<Option<i64>>()) {
            let value = (v.clone(), o);
            let bytes = value.to_bytes();
            prop_assert_eq!(<(Vec<(u64, String)>, Option<i64>)>::from_bytes(&bytes).unwrap(), value);
        }

        #[test]
        fn truncation_never_panics(cut in 0usize..64) {
            let bytes = V2 { a: 1, b: "hello world".into() }.to_bytes();
            let cut = cut.min(bytes.len());
            let _ = V1::from_bytes(&bytes[..cut]);
        }

        #[test]
        fn garbage_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = V1::from_bytes(&raw);
            let _ = Vec::<String>::from_bytes(&raw);
            let _ = BTreeMap::<u32, Bytes>::from_bytes(&raw);
            let _ = SocketAddr::from_bytes(&raw);
        }
    }
}
