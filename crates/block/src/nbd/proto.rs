//! NBD wire constants, the transmission-phase request decoder and reply encoder.
//!
//! Pure functions over bytes: no sockets, no clocks. Numbers are big-endian on the
//! wire. Constants follow the NBD protocol document (`doc/proto.md` of the reference
//! implementation).

use bytes::{Buf, BufMut, Bytes, BytesMut};

// --- handshake -------------------------------------------------------------------
/// "NBDMAGIC": the first eight bytes the server sends.
pub const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// "IHAVEOPT": newstyle negotiation, and the magic of every client option.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Magic of every option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;

pub const NBD_FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const NBD_FLAG_NO_ZEROES: u16 = 1 << 1;
pub const NBD_FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const NBD_FLAG_C_NO_ZEROES: u32 = 1 << 1;

pub const NBD_OPT_EXPORT_NAME: u32 = 1;
pub const NBD_OPT_ABORT: u32 = 2;
pub const NBD_OPT_LIST: u32 = 3;
pub const NBD_OPT_STARTTLS: u32 = 5;
pub const NBD_OPT_INFO: u32 = 6;
pub const NBD_OPT_GO: u32 = 7;
pub const NBD_OPT_STRUCTURED_REPLY: u32 = 8;

pub const NBD_REP_ACK: u32 = 1;
pub const NBD_REP_SERVER: u32 = 2;
pub const NBD_REP_INFO: u32 = 3;
pub const NBD_REP_FLAG_ERROR: u32 = 1 << 31;
pub const NBD_REP_ERR_UNSUP: u32 = NBD_REP_FLAG_ERROR | 1;
pub const NBD_REP_ERR_POLICY: u32 = NBD_REP_FLAG_ERROR | 2;
pub const NBD_REP_ERR_INVALID: u32 = NBD_REP_FLAG_ERROR | 3;
pub const NBD_REP_ERR_UNKNOWN: u32 = NBD_REP_FLAG_ERROR | 6;
pub const NBD_REP_ERR_TOO_BIG: u32 = NBD_REP_FLAG_ERROR | 9;

pub const NBD_INFO_EXPORT: u16 = 0;
pub const NBD_INFO_NAME: u16 = 1;
pub const NBD_INFO_DESCRIPTION: u16 = 2;
pub const NBD_INFO_BLOCK_SIZE: u16 = 3;

// --- transmission ----------------------------------------------------------------
pub const NBD_FLAG_HAS_FLAGS: u16 = 1 << 0;
pub const NBD_FLAG_READ_ONLY: u16 = 1 << 1;
pub const NBD_FLAG_SEND_FLUSH: u16 = 1 << 2;
pub const NBD_FLAG_SEND_FUA: u16 = 1 << 3;
pub const NBD_FLAG_SEND_TRIM: u16 = 1 << 5;
pub const NBD_FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const NBD_FLAG_CAN_MULTI_CONN: u16 = 1 << 8;

pub const NBD_REQUEST_MAGIC: u32 = 0x2560_9513;
pub const NBD_SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

pub const NBD_CMD_READ: u16 = 0;
pub const NBD_CMD_WRITE: u16 = 1;
pub const NBD_CMD_DISC: u16 = 2;
pub const NBD_CMD_FLUSH: u16 = 3;
pub const NBD_CMD_TRIM: u16 = 4;
pub const NBD_CMD_WRITE_ZEROES: u16 = 6;

pub const NBD_CMD_FLAG_FUA: u16 = 1 << 0;
pub const NBD_CMD_FLAG_NO_HOLE: u16 = 1 << 1;

pub const EPERM: u32 = 1;
pub const EIO: u32 = 5;
pub const EINVAL: u32 = 22;
pub const ENOSPC: u32 = 28;

/// Bytes of a request header: magic, flags, type, handle, offset, length.
pub const REQUEST_HEADER_BYTES: usize = 28;
/// Bytes of a simple reply header: magic, error, handle.
pub const SIMPLE_REPLY_BYTES: usize = 16;
/// Largest READ or WRITE payload accepted; the default maximum clients assume.
pub const REQUEST_PAYLOAD_BYTES_MAX: u32 = 32 * 1024 * 1024;
/// Block sizes advertised in NBD_INFO_BLOCK_SIZE.
pub const BLOCK_SIZE_MIN: u32 = 1;
pub const BLOCK_SIZE_PREFERRED: u32 = 4096;

/// What the server offers: one export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportInfo {
    /// The canonical name, listed by NBD_OPT_LIST.
    pub name: String,
    /// Other names a client may ask for ("" — the default export — always works).
    pub aliases: Vec<String>,
    pub size_bytes: u64,
    pub read_only: bool,
}

impl ExportInfo {
    pub fn matches(&self, requested: &str) -> bool {
        requested.is_empty()
            || requested == self.name
            || self.aliases.iter().any(|a| a == requested)
    }

    /// The transmission flags sent with the export.
    pub fn transmission_flags(&self) -> u16 {
        let mut flags =
            NBD_FLAG_HAS_FLAGS | NBD_FLAG_SEND_FLUSH | NBD_FLAG_SEND_FUA | NBD_FLAG_CAN_MULTI_CONN;
        if self.read_only {
            flags |= NBD_FLAG_READ_ONLY;
        } else {
            flags |= NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES;
        }
        flags
    }
}

/// A command the server should carry out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Read { offset: u64, length: u32 },
    Write { offset: u64, data: Bytes, fua: bool },
    Flush,
    Trim { offset: u64, length: u32, fua: bool },
    WriteZeroes { offset: u64, length: u32, fua: bool },
    Disconnect,
}

/// One decoded request: a command to run, or an errno to answer with at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub handle: u64,
    pub command: Result<Command, u32>,
}

/// Input after which the connection cannot continue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    #[error("request magic {0:#010x} is not NBD_REQUEST_MAGIC; the stream is out of sync")]
    BadRequestMagic(u32),
    #[error("client flags {0:#x} include unknown bits")]
    BadClientFlags(u32),
    #[error("option magic {0:#018x} is not IHAVEOPT")]
    BadOptionMagic(u64),
    #[error("the client asked for export '{0}', which does not exist")]
    UnknownExport(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    flags: u16,
    kind: u16,
    handle: u64,
    offset: u64,
    length: u32,
}

fn parse_header(bytes: &[u8]) -> Result<Header, ProtocolError> {
    assert!(bytes.len() >= REQUEST_HEADER_BYTES);
    let mut b = &bytes[..REQUEST_HEADER_BYTES];
    let magic = b.get_u32();
    if magic != NBD_REQUEST_MAGIC {
        return Err(ProtocolError::BadRequestMagic(magic));
    }
    Ok(Header {
        flags: b.get_u16(),
        kind: b.get_u16(),
        handle: b.get_u64(),
        offset: b.get_u64(),
        length: b.get_u32(),
    })
}

/// Decodes requests from a byte stream, one at a time. A WRITE whose payload is too
/// large is skipped (its bytes discarded as they arrive) and answered with EINVAL, so
/// the stream stays in sync.
#[derive(Debug, Default)]
pub struct RequestDecoder {
    discard_bytes_remaining: u64,
    after_discard: Option<Request>,
}

impl RequestDecoder {
    /// The next complete request in `input` (consumed from it), `None` when more bytes
    /// are needed, or an error after which the connection must close.
    pub fn decode(
        &mut self,
        input: &mut BytesMut,
        export: &ExportInfo,
    ) -> Result<Option<Request>, ProtocolError> {
        if self.discard_bytes_remaining > 0 {
            let skip = (input.len() as u64).min(self.discard_bytes_remaining);
            input.advance(skip as usize);
            self.discard_bytes_remaining -= skip;
            if self.discard_bytes_remaining > 0 {
                return Ok(None);
            }
            return Ok(self.after_discard.take());
        }
        if input.len() < REQUEST_HEADER_BYTES {
            return Ok(None);
        }
        let header = parse_header(input)?;
        if header.kind != NBD_CMD_WRITE {
            input.advance(REQUEST_HEADER_BYTES);
            return Ok(Some(Request {
                handle: header.handle,
                command: validate(&header, Bytes::new(), export),
            }));
        }
        if header.length > REQUEST_PAYLOAD_BYTES_MAX {
            input.advance(REQUEST_HEADER_BYTES);
            self.discard_bytes_remaining = u64::from(header.length);
            self.after_discard = Some(Request {
                handle: header.handle,
                command: Err(EINVAL),
            });
            return self.decode(input, export);
        }
        let total = REQUEST_HEADER_BYTES + header.length as usize;
        if input.len() < total {
            input.reserve(total - input.len());
            return Ok(None);
        }
        input.advance(REQUEST_HEADER_BYTES);
        let payload = input.split_to(header.length as usize).freeze();
        Ok(Some(Request {
            handle: header.handle,
            command: validate(&header, payload, export),
        }))
    }
}

/// Checks a request against the export; `Err(errno)` is the error reply to send.
fn validate(header: &Header, payload: Bytes, export: &ExportInfo) -> Result<Command, u32> {
    let fua = header.flags & NBD_CMD_FLAG_FUA != 0;
    let allowed_flags = match header.kind {
        NBD_CMD_WRITE_ZEROES => NBD_CMD_FLAG_FUA | NBD_CMD_FLAG_NO_HOLE,
        _ => NBD_CMD_FLAG_FUA,
    };
    if header.flags & !allowed_flags != 0 {
        return Err(EINVAL);
    }
    let (offset, length) = (header.offset, header.length);
    let in_range = offset
        .checked_add(u64::from(length))
        .is_some_and(|end| end <= export.size_bytes);
    let writes = matches!(
        header.kind,
        NBD_CMD_WRITE | NBD_CMD_TRIM | NBD_CMD_WRITE_ZEROES
    );
    if writes && export.read_only {
        return Err(EPERM);
    }
    let data_command = writes || header.kind == NBD_CMD_READ;
    if data_command && length == 0 {
        return Err(EINVAL);
    }
    if data_command && !in_range {
        return Err(
            if header.kind == NBD_CMD_READ || header.kind == NBD_CMD_TRIM {
                EINVAL
            } else {
                ENOSPC
            },
        );
    }
    match header.kind {
        NBD_CMD_READ if length > REQUEST_PAYLOAD_BYTES_MAX => Err(EINVAL),
        NBD_CMD_READ => Ok(Command::Read { offset, length }),
        NBD_CMD_WRITE => Ok(Command::Write {
            offset,
            data: payload,
            fua,
        }),
        NBD_CMD_DISC => Ok(Command::Disconnect),
        NBD_CMD_FLUSH => Ok(Command::Flush),
        NBD_CMD_TRIM => Ok(Command::Trim {
            offset,
            length,
            fua,
        }),
        NBD_CMD_WRITE_ZEROES => Ok(Command::WriteZeroes {
            offset,
            length,
            fua,
        }),
        _ => Err(EINVAL),
    }
}

/// A simple reply header: magic, error (0 for success), handle. A successful READ's
/// data follows it.
pub fn simple_reply(handle: u64, error: u32) -> [u8; SIMPLE_REPLY_BYTES] {
    let mut reply = [0u8; SIMPLE_REPLY_BYTES];
    let mut b = &mut reply[..];
    b.put_u32(NBD_SIMPLE_REPLY_MAGIC);
    b.put_u32(error);
    b.put_u64(handle);
    reply
}

/// Encodes a request (the client's side; used by tests and tools).
pub fn encode_request(
    flags: u16,
    kind: u16,
    handle: u64,
    offset: u64,
    length: u32,
    payload: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(REQUEST_HEADER_BYTES + payload.len());
    out.put_u32(NBD_REQUEST_MAGIC);
    out.put_u16(flags);
    out.put_u16(kind);
    out.put_u64(handle);
    out.put_u64(offset);
    out.put_u32(length);
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests;
