//! Frames: the unit the messenger puts on the wire after the banner.
//!
//! A frame is a fixed 24-byte preamble, up to [`SEGMENTS_MAX`] segments, and an
//! epilogue with one crc32c per segment. All integers are little-endian.
//!
//! ```text
//! offset  size  field
//! 0       1     tag                  (FrameTag as u8, see FrameTag::to_u8)
//! 1       1     segment_count        (0..=4)
//! 2       2     flags                (u16, must be 0 in protocol v1)
//! 4       4     segment_length[0]    (u32; unused slots must be 0)
//! 8       4     segment_length[1]
//! 12      4     segment_length[2]
//! 16      4     segment_length[3]
//! 20      4     preamble_crc         (crc32c of bytes 0..20)
//! 24      ...   segment 0 bytes, segment 1 bytes, ... (no padding)
//! ...     4*n   epilogue: crc32c of segment 0, crc32c of segment 1, ...
//! ```
//!
//! The whole frame, preamble and epilogue included, must not exceed the decoder's
//! `max_frame_bytes` (at most [`MESSAGE_BYTES_MAX`]); the decoder checks this from the
//! preamble alone, before buffering the body, so a hostile length cannot make it
//! allocate. Decoded segments are zero-copy [`Bytes`] slices of the receive buffer.

use bytes::{BufMut, Bytes, BytesMut};
use carmine_types::limits::MESSAGE_BYTES_MAX;

/// Most segments one frame carries.
pub const SEGMENTS_MAX: usize = 4;
/// Bytes of the fixed preamble, its crc included.
pub const PREAMBLE_BYTES: usize = 24;
/// Bytes of the preamble covered by its crc.
const PREAMBLE_CRC_COVERED_BYTES: usize = 20;
/// Bytes of epilogue per segment.
pub const EPILOGUE_BYTES_PER_SEGMENT: usize = 4;
/// Largest frame overhead (preamble + full epilogue).
pub const FRAME_OVERHEAD_BYTES_MAX: usize =
    PREAMBLE_BYTES + SEGMENTS_MAX * EPILOGUE_BYTES_PER_SEGMENT;
/// Segments at least this long are passed to the writer by reference instead of being
/// copied into the frame buffer.
pub const SEGMENT_COPY_BYTES_MAX: usize = 1024;

const _: () = assert!(FRAME_OVERHEAD_BYTES_MAX < MESSAGE_BYTES_MAX);
const _: () = assert!(SEGMENT_COPY_BYTES_MAX < MESSAGE_BYTES_MAX);

/// What a frame carries. The wire value of each tag is fixed forever.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FrameTag {
    Hello,
    HelloReply,
    AuthRequest,
    AuthDone,
    Message,
    Ack,
    Keepalive,
    KeepaliveAck,
    Close,
    SessionRequest,
    SessionReady,
}

impl FrameTag {
    pub fn to_u8(self) -> u8 {
        match self {
            FrameTag::Hello => 1,
            FrameTag::HelloReply => 2,
            FrameTag::AuthRequest => 3,
            FrameTag::AuthDone => 4,
            FrameTag::Message => 5,
            FrameTag::Ack => 6,
            FrameTag::Keepalive => 7,
            FrameTag::KeepaliveAck => 8,
            FrameTag::Close => 9,
            FrameTag::SessionRequest => 10,
            FrameTag::SessionReady => 11,
        }
    }

    pub fn from_u8(value: u8) -> Option<FrameTag> {
        Some(match value {
            1 => FrameTag::Hello,
            2 => FrameTag::HelloReply,
            3 => FrameTag::AuthRequest,
            4 => FrameTag::AuthDone,
            5 => FrameTag::Message,
            6 => FrameTag::Ack,
            7 => FrameTag::Keepalive,
            8 => FrameTag::KeepaliveAck,
            9 => FrameTag::Close,
            10 => FrameTag::SessionRequest,
            11 => FrameTag::SessionReady,
            _ => return None,
        })
    }
}

/// One frame: a tag and up to [`SEGMENTS_MAX`] segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub tag: FrameTag,
    pub segments: Vec<Bytes>,
}

impl Frame {
    pub fn new(tag: FrameTag, segments: Vec<Bytes>) -> Self {
        Self { tag, segments }
    }

    /// Bytes this frame takes on the wire.
    pub fn wire_bytes(&self) -> usize {
        frame_wire_bytes(self.segments.iter().map(|s| s.len()))
    }
}

/// A decoded frame as the session reads it: the frame's bytes and where its segments
/// lie in them, so that receiving a frame allocates nothing ([`Frame`] holds a `Vec`)
/// and only the segments asked for are sliced out.
#[derive(Debug, Clone)]
pub(crate) struct FrameParts {
    pub(crate) tag: FrameTag,
    /// The whole frame, preamble and epilogue included.
    raw: Bytes,
    lengths: [u32; SEGMENTS_MAX],
    count: u8,
}

impl FrameParts {
    pub(crate) fn segment_count(&self) -> usize {
        usize::from(self.count)
    }

    /// Where segment `index` lies in the frame's bytes.
    fn segment_range(&self, index: usize) -> std::ops::Range<usize> {
        assert!(index < self.segment_count());
        let start = PREAMBLE_BYTES
            + self.lengths[..index]
                .iter()
                .map(|&length| length as usize)
                .sum::<usize>();
        start..start + self.lengths[index] as usize
    }

    /// Segment `index`'s bytes, to read in place.
    pub(crate) fn segment_bytes(&self, index: usize) -> &[u8] {
        &self.raw[self.segment_range(index)]
    }

    /// Segment `index` as a shared slice of the frame.
    pub(crate) fn segment(&self, index: usize) -> Bytes {
        self.raw.slice(self.segment_range(index))
    }

    /// The segments, in order, when there are exactly `N` (else `Err(count)`).
    pub(crate) fn segments<const N: usize>(&self) -> Result<[Bytes; N], usize> {
        if self.segment_count() != N {
            return Err(self.segment_count());
        }
        Ok(std::array::from_fn(|index| self.segment(index)))
    }

    /// The last two segments (a message's front and data), consuming the frame: the
    /// data keeps the frame's own reference, so a received message costs one
    /// reference count for its front and none for its data (the header is read in
    /// place with [`FrameParts::segment_bytes`]). An empty segment holds no reference,
    /// so it does not keep the receive buffer alive.
    pub(crate) fn into_last_two(mut self) -> [Bytes; 2] {
        assert!(self.segment_count() >= 2);
        let front = self.segment(self.segment_count() - 2);
        let data = self.segment_range(self.segment_count() - 1);
        if data.is_empty() {
            return [front, Bytes::new()];
        }
        self.raw.truncate(data.end);
        bytes::Buf::advance(&mut self.raw, data.start);
        [front, self.raw]
    }

    /// Every segment, in order.
    fn into_frame(self) -> Frame {
        let mut offset = PREAMBLE_BYTES;
        let segments = self.lengths[..self.segment_count()]
            .iter()
            .map(|&length| {
                let segment = self.raw.slice(offset..offset + length as usize);
                offset += length as usize;
                segment
            })
            .collect();
        Frame::new(self.tag, segments)
    }
}

/// Bytes a frame with these segment lengths takes on the wire.
pub fn frame_wire_bytes(segment_lengths: impl Iterator<Item = usize>) -> usize {
    let mut total = PREAMBLE_BYTES;
    for length in segment_lengths {
        total += length + EPILOGUE_BYTES_PER_SEGMENT;
    }
    total
}

/// Why received bytes are not a valid frame. Every variant closes the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    #[error("frame preamble crc mismatch (expected {expected:#010x}, got {actual:#010x})")]
    BadPreambleCrc { expected: u32, actual: u32 },
    #[error("frame segment {index} crc mismatch (expected {expected:#010x}, got {actual:#010x})")]
    BadSegmentCrc {
        index: usize,
        expected: u32,
        actual: u32,
    },
    #[error("frame of {bytes} bytes exceeds the limit of {limit} bytes")]
    TooLarge { bytes: u64, limit: usize },
    #[error("unknown frame tag {tag}")]
    UnknownTag { tag: u8 },
    #[error("frame claims {count} segments; at most {SEGMENTS_MAX} are allowed")]
    BadSegmentCount { count: u8 },
    #[error("frame has length {length} in unused segment slot {index}")]
    UnusedSegmentLength { index: usize, length: u32 },
    #[error("frame has unknown flags {flags:#06x}")]
    UnknownFlags { flags: u16 },
}

/// Writes `frame` to `out`, copying every segment. Panics if the frame has more than
/// [`SEGMENTS_MAX`] segments or a segment over 4 GiB (programmer errors).
pub fn encode_frame(frame: &Frame, out: &mut BytesMut) {
    let lengths = segment_lengths(frame.tag, &frame.segments);
    out.reserve(frame.wire_bytes());
    put_preamble(frame.tag, &lengths, frame.segments.len(), out);
    for segment in &frame.segments {
        out.put_slice(segment);
    }
    for segment in &frame.segments {
        out.put_u32_le(crate::crc::crc32c(segment));
    }
}

/// A segment to encode: bytes to copy, or a shared buffer that may travel by reference.
#[derive(Debug, Clone, Copy)]
pub enum SegmentRef<'a> {
    Slice(&'a [u8]),
    Shared(&'a Bytes),
}

impl AsRef<[u8]> for SegmentRef<'_> {
    fn as_ref(&self) -> &[u8] {
        match self {
            SegmentRef::Slice(slice) => slice,
            SegmentRef::Shared(bytes) => bytes,
        }
    }
}

/// Appends a frame to a gather list for one vectored write: small segments are copied
/// into `scratch` (flushed into `chunks` as needed), shared segments of
/// [`SEGMENT_COPY_BYTES_MAX`] bytes or more travel by reference.
pub fn encode_frame_gather(
    tag: FrameTag,
    segments: &[SegmentRef<'_>],
    scratch: &mut BytesMut,
    chunks: &mut Vec<Bytes>,
) {
    let lengths = segment_lengths(tag, segments);
    put_preamble(tag, &lengths, segments.len(), scratch);
    for segment in segments {
        match segment {
            SegmentRef::Shared(bytes) if bytes.len() >= SEGMENT_COPY_BYTES_MAX => {
                if !scratch.is_empty() {
                    chunks.push(scratch.split().freeze());
                }
                chunks.push((*bytes).clone());
            }
            other if other.as_ref().is_empty() => {}
            other => scratch.put_slice(other.as_ref()),
        }
    }
    // The epilogue goes in with one copy; the crc32c of an empty segment is 0.
    let mut epilogue = [0u8; SEGMENTS_MAX * EPILOGUE_BYTES_PER_SEGMENT];
    for (slot, segment) in epilogue
        .chunks_exact_mut(EPILOGUE_BYTES_PER_SEGMENT)
        .zip(segments)
    {
        let crc = match segment {
            empty if empty.as_ref().is_empty() => 0,
            SegmentRef::Shared(bytes) => crate::crc::crc32c_shared(bytes),
            SegmentRef::Slice(slice) => crate::crc::crc32c(slice),
        };
        slot.copy_from_slice(&crc.to_le_bytes());
    }
    scratch.put_slice(&epilogue[..segments.len() * EPILOGUE_BYTES_PER_SEGMENT]);
}

fn segment_lengths<S: AsRef<[u8]>>(tag: FrameTag, segments: &[S]) -> [u32; SEGMENTS_MAX] {
    assert!(
        segments.len() <= SEGMENTS_MAX,
        "{tag:?} frame with {} segments",
        segments.len()
    );
    let mut lengths = [0u32; SEGMENTS_MAX];
    for (slot, segment) in lengths.iter_mut().zip(segments) {
        *slot = u32::try_from(segment.as_ref().len()).expect("segment over 4 GiB");
    }
    lengths
}

fn put_preamble(tag: FrameTag, lengths: &[u32; SEGMENTS_MAX], count: usize, out: &mut BytesMut) {
    let mut preamble = [0u8; PREAMBLE_BYTES];
    preamble[0] = tag.to_u8();
    preamble[1] = u8::try_from(count).expect("segment count checked");
    preamble[2..4].copy_from_slice(&0u16.to_le_bytes());
    for (index, length) in lengths.iter().enumerate() {
        let at = 4 + index * 4;
        preamble[at..at + 4].copy_from_slice(&length.to_le_bytes());
    }
    let crc = crate::crc::crc32c(&preamble[..PREAMBLE_CRC_COVERED_BYTES]);
    preamble[PREAMBLE_CRC_COVERED_BYTES..].copy_from_slice(&crc.to_le_bytes());
    out.put_slice(&preamble);
}

/// A parsed, crc-checked preamble.
#[derive(Debug, Clone, Copy)]
struct Preamble {
    tag: FrameTag,
    count: usize,
    lengths: [u32; SEGMENTS_MAX],
    total_bytes: usize,
}

fn parse_preamble(raw: &[u8], max_frame_bytes: usize) -> Result<Preamble, FrameError> {
    assert!(raw.len() >= PREAMBLE_BYTES);
    let expected = crate::crc::crc32c(&raw[..PREAMBLE_CRC_COVERED_BYTES]);
    let actual = u32::from_le_bytes([raw[20], raw[21], raw[22], raw[23]]);
    if expected != actual {
        return Err(FrameError::BadPreambleCrc { expected, actual });
    }
    let tag = FrameTag::from_u8(raw[0]).ok_or(FrameError::UnknownTag { tag: raw[0] })?;
    let count = raw[1];
    if usize::from(count) > SEGMENTS_MAX {
        return Err(FrameError::BadSegmentCount { count });
    }
    let flags = u16::from_le_bytes([raw[2], raw[3]]);
    if flags != 0 {
        return Err(FrameError::UnknownFlags { flags });
    }
    let mut lengths = [0u32; SEGMENTS_MAX];
    let mut total = PREAMBLE_BYTES as u64;
    for (index, slot) in lengths.iter_mut().enumerate() {
        let at = 4 + index * 4;
        let length = u32::from_le_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
        if index >= usize::from(count) && length != 0 {
            return Err(FrameError::UnusedSegmentLength { index, length });
        }
        *slot = length;
        if index < usize::from(count) {
            total += u64::from(length) + EPILOGUE_BYTES_PER_SEGMENT as u64;
        }
    }
    if total > max_frame_bytes as u64 {
        return Err(FrameError::TooLarge {
            bytes: total,
            limit: max_frame_bytes,
        });
    }
    let total_bytes = usize::try_from(total).map_err(|_| FrameError::TooLarge {
        bytes: total,
        limit: max_frame_bytes,
    })?;
    Ok(Preamble {
        tag,
        count: usize::from(count),
        lengths,
        total_bytes,
    })
}

/// A frame whose preamble has been read but whose body is still arriving. Segment
/// crcs are computed over the body as it arrives, so a large frame is not checksummed
/// all at once after its last byte (that would add to its latency).
#[derive(Debug, Clone, Copy)]
struct PendingFrame {
    preamble: Preamble,
    /// Running crc of each segment over the bytes checked so far.
    crcs: [u32; SEGMENTS_MAX],
    /// Body bytes covered by `crcs`.
    checked_bytes: usize,
}

impl PendingFrame {
    fn new(preamble: Preamble) -> Self {
        Self {
            preamble,
            crcs: [0; SEGMENTS_MAX],
            checked_bytes: 0,
        }
    }

    /// Extends the running crcs over `body`, the body bytes received so far.
    fn check(&mut self, body: &[u8]) {
        let mut segment_start = 0;
        for index in 0..self.preamble.count {
            let segment_end = segment_start + self.preamble.lengths[index] as usize;
            let end = segment_end.min(body.len());
            if self.checked_bytes < end {
                let bytes = &body[self.checked_bytes..end];
                self.crcs[index] = crate::crc::crc32c_append(self.crcs[index], bytes);
                self.checked_bytes = end;
            }
            segment_start = segment_end;
        }
    }
}

/// Incremental frame decoder: push received bytes (or read straight into
/// [`FrameDecoder::buffer`]), then pop every complete frame. Once it has returned an
/// error it keeps returning that error: the stream cannot be resynchronised.
#[derive(Debug)]
pub struct FrameDecoder {
    buffer: BytesMut,
    max_frame_bytes: usize,
    pending: Option<PendingFrame>,
    failed: Option<FrameError>,
}

impl FrameDecoder {
    pub fn new(max_frame_bytes: usize) -> Self {
        assert!(max_frame_bytes >= FRAME_OVERHEAD_BYTES_MAX);
        assert!(max_frame_bytes <= MESSAGE_BYTES_MAX);
        Self {
            buffer: BytesMut::new(),
            max_frame_bytes,
            pending: None,
            failed: None,
        }
    }

    pub fn push(&mut self, data: &[u8]) {
        self.buffer.extend_from_slice(data);
    }

    /// The largest frame accepted from the next preamble on. A session keeps this small
    /// until the handshake completes, so a peer that has not yet said who it is cannot
    /// make the decoder reserve room for a large frame.
    pub fn set_max_frame_bytes(&mut self, max_frame_bytes: usize) {
        assert!(max_frame_bytes >= FRAME_OVERHEAD_BYTES_MAX);
        assert!(max_frame_bytes <= MESSAGE_BYTES_MAX);
        self.max_frame_bytes = max_frame_bytes;
    }

    pub fn max_frame_bytes(&self) -> usize {
        self.max_frame_bytes
    }

    /// The receive buffer, for reading from a socket without an extra copy.
    pub fn buffer(&mut self) -> &mut BytesMut {
        &mut self.buffer
    }

    /// Bytes received but not yet returned as frames.
    pub fn buffered_bytes(&self) -> usize {
        self.buffer.len()
    }

    /// Returns the next complete frame, `Ok(None)` if more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        Ok(self.next_frame_parts()?.map(FrameParts::into_frame))
    }

    /// [`FrameDecoder::next_frame`] without a `Vec` per frame.
    pub(crate) fn next_frame_parts(&mut self) -> Result<Option<FrameParts>, FrameError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        match self.decode_one() {
            Ok(frame) => Ok(frame),
            Err(error) => {
                self.failed = Some(error.clone());
                Err(error)
            }
        }
    }

    fn decode_one(&mut self) -> Result<Option<FrameParts>, FrameError> {
        let mut pending = match self.pending {
            Some(pending) => pending,
            None => {
                if self.buffer.len() < PREAMBLE_BYTES {
                    return Ok(None);
                }
                let preamble =
                    parse_preamble(&self.buffer[..PREAMBLE_BYTES], self.max_frame_bytes)?;
                PendingFrame::new(preamble)
            }
        };
        let preamble = pending.preamble;
        let body_bytes =
            preamble.total_bytes - PREAMBLE_BYTES - preamble.count * EPILOGUE_BYTES_PER_SEGMENT;
        let body_end = (PREAMBLE_BYTES + body_bytes).min(self.buffer.len());
        pending.check(&self.buffer[PREAMBLE_BYTES..body_end]);
        if self.buffer.len() < preamble.total_bytes {
            self.pending = Some(pending);
            self.buffer
                .reserve(preamble.total_bytes - self.buffer.len());
            return Ok(None);
        }
        self.pending = None;
        assert_eq!(pending.checked_bytes, body_bytes);
        // Segments are slices of the frame's bytes: one reference count each, no copy.
        let raw = self.buffer.split_to(preamble.total_bytes).freeze();
        let epilogue_at = PREAMBLE_BYTES + body_bytes;
        let mut offset = PREAMBLE_BYTES;
        for index in 0..preamble.count {
            let length = preamble.lengths[index] as usize;
            let at = epilogue_at + index * EPILOGUE_BYTES_PER_SEGMENT;
            let expected = u32::from_le_bytes([raw[at], raw[at + 1], raw[at + 2], raw[at + 3]]);
            let actual = pending.crcs[index];
            if expected != actual {
                return Err(FrameError::BadSegmentCrc {
                    index,
                    expected,
                    actual,
                });
            }
            if length >= crate::crc::MEMO_BYTES_MIN {
                // A large payload is often sent on as it is (a primary forwarding a
                // write to its replicas): its crc need not be computed again.
                crate::crc::remember(&raw.slice(offset..offset + length), actual);
            }
            offset += length;
        }
        assert_eq!(offset, epilogue_at);
        assert_eq!(
            epilogue_at + preamble.count * EPILOGUE_BYTES_PER_SEGMENT,
            raw.len()
        );
        Ok(Some(FrameParts {
            tag: preamble.tag,
            raw,
            lengths: preamble.lengths,
            count: u8::try_from(preamble.count).expect("segment count checked"),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TAGS: [FrameTag; 11] = [
        FrameTag::Hello,
        FrameTag::HelloReply,
        FrameTag::AuthRequest,
        FrameTag::AuthDone,
        FrameTag::Message,
        FrameTag::Ack,
        FrameTag::Keepalive,
        FrameTag::KeepaliveAck,
        FrameTag::Close,
        FrameTag::SessionRequest,
        FrameTag::SessionReady,
    ];

    fn arb_frame() -> impl Strategy<Value = Frame> {
        (
            0..TAGS.len(),
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..=4),
        )
            .prop_map(|(tag, segments)| {
                Frame::new(TAGS[tag], segments.into_iter().map(Bytes::from).collect())
            })
    }

    fn encode_all(frames: &[Frame]) -> Vec<u8> {
        let mut out = BytesMut::new();
        for frame in frames {
            encode_frame(frame, &mut out);
        }
        out.to_vec()
    }

    fn decode_chunks(wire: &[u8], chunk_bytes: &[usize]) -> Result<Vec<Frame>, FrameError> {
        let mut decoder = FrameDecoder::new(MESSAGE_BYTES_MAX);
        let mut frames = Vec::new();
        let mut offset = 0;
        let mut chunk_index = 0;
        while offset < wire.len() {
            let step = chunk_bytes[chunk_index % chunk_bytes.len()].max(1);
            chunk_index += 1;
            let end = (offset + step).min(wire.len());
            decoder.push(&wire[offset..end]);
            offset = end;
            while let Some(frame) = decoder.next_frame()? {
                frames.push(frame);
            }
        }
        Ok(frames)
    }

    #[test]
    fn tags_round_trip() {
        for tag in TAGS {
            assert_eq!(FrameTag::from_u8(tag.to_u8()), Some(tag));
        }
        assert_eq!(FrameTag::from_u8(0), None);
        assert_eq!(FrameTag::from_u8(200), None);
    }

    #[test]
    fn truncated_frames_wait_for_more() {
        let frame = Frame::new(FrameTag::Message, vec![Bytes::from_static(b"hello")]);
        let wire = encode_all(std::slice::from_ref(&frame));
        let mut decoder = FrameDecoder::new(MESSAGE_BYTES_MAX);
        for byte in &wire[..wire.len() - 1] {
            decoder.push(&[*byte]);
            assert_eq!(decoder.next_frame().unwrap(), None);
        }
        decoder.push(&wire[wire.len() - 1..]);
        assert_eq!(decoder.next_frame().unwrap(), Some(frame));
        assert_eq!(decoder.next_frame().unwrap(), None);
    }

    #[test]
    fn oversized_frames_are_rejected_from_the_preamble() {
        let frame = Frame::new(FrameTag::Message, vec![Bytes::from(vec![7u8; 2000])]);
        let wire = encode_all(&[frame]);
        let mut decoder = FrameDecoder::new(1024);
        decoder.push(&wire[..PREAMBLE_BYTES]);
        assert!(matches!(
            decoder.next_frame(),
            Err(FrameError::TooLarge { limit: 1024, .. })
        ));
        // The error is sticky.
        assert!(decoder.next_frame().is_err());
    }

    #[test]
    fn frame_parts_give_the_segments_and_release_the_buffer() {
        for data in [Bytes::new(), Bytes::from(vec![7u8; 5000])] {
            let segments = vec![Bytes::from_static(b"header"), Bytes::new(), data.clone()];
            let frame = Frame::new(FrameTag::Message, segments);
            let mut decoder = FrameDecoder::new(1 << 20);
            decoder.push(&encode_all(&[frame]));
            let parts = decoder.next_frame_parts().unwrap().unwrap();
            assert_eq!(parts.segment_count(), 3);
            assert_eq!(parts.segment_bytes(0), b"header");
            assert!(parts.segments::<2>().is_err());
            let [front, received] = parts.into_last_two();
            assert!(front.is_empty());
            assert_eq!(received, data);
            // Once the frame's pieces are gone (an empty one never held any), the
            // emptied receive buffer is the decoder's alone again.
            drop(received);
            let buffer = decoder.buffer();
            assert!(buffer.is_empty());
            assert!(buffer.try_reclaim(buffer.capacity() + 1));
        }
    }

    #[test]
    fn gather_encoding_matches_plain_encoding() {
        let big = Bytes::from(vec![3u8; SEGMENT_COPY_BYTES_MAX + 5]);
        let small = Bytes::from_static(b"abc");
        let empty = Bytes::new();
        let frame = Frame::new(
            FrameTag::Message,
            vec![small.clone(), big.clone(), empty.clone(), small.clone()],
        );
        let mut scratch = BytesMut::new();
        let mut chunks = Vec::new();
        encode_frame_gather(
            FrameTag::Message,
            &[
                SegmentRef::Slice(&small),
                SegmentRef::Shared(&big),
                SegmentRef::Shared(&empty), // its crc is written as 0, not computed
                SegmentRef::Shared(&small),
            ],
            &mut scratch,
            &mut chunks,
        );
        chunks.push(scratch.split().freeze());
        assert_eq!(chunks.len(), 3);
        let gathered: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        assert_eq!(gathered, encode_all(&[frame]));
    }

    proptest! {
        #[test]
        fn frames_round_trip_in_any_chunking(
            frames in proptest::collection::vec(arb_frame(), 1..6),
            chunks in proptest::collection::vec(1usize..97, 1..8),
        ) {
            let wire = encode_all(&frames);
            prop_assert_eq!(decode_chunks(&wire, &[wire.len()]).unwrap(), frames.clone());
            prop_assert_eq!(decode_chunks(&wire, &[1]).unwrap(), frames.clone());
            prop_assert_eq!(decode_chunks(&wire, &chunks).unwrap(), frames);
        }

        #[test]
        fn any_corrupted_byte_is_an_error(frame in arb_frame(), position in any::<usize>(), flip in 1u8..=255) {
            let mut wire = encode_all(&[frame]);
            let position = position % wire.len();
            wire[position] ^= flip;
            // crc32c detects every error burst of up to 32 bits, so a flipped byte in
            // the preamble, a segment or the epilogue is always caught.
            prop_assert!(decode_chunks(&wire, &[wire.len()]).is_err());
        }

        #[test]
        fn garbage_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut decoder = FrameDecoder::new(4096);
            decoder.push(&raw);
            while let Ok(Some(_)) = decoder.next_frame() {}
        }
    }
}
