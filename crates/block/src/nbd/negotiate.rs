//! The fixed newstyle handshake as a sans-IO state machine.
//!
//! Feed received bytes to [`Negotiation::handle_input`], send what
//! [`Negotiation::poll_transmit`] returns, and stop when [`Negotiation::outcome`] says
//! so. Bytes after the option that starts transmission are left in the input buffer for
//! the request decoder.

use super::proto::*;
use bytes::{Buf, BufMut, BytesMut};

/// Largest option payload buffered; a larger one is skipped and refused with
/// NBD_REP_ERR_TOO_BIG. (An export name is at most 4 KiB by the protocol.)
pub const OPTION_DATA_BYTES_MAX: u32 = 64 * 1024;
/// Most options one connection may send before it is closed (stops a client looping).
pub const OPTIONS_PER_CONNECTION_MAX: u32 = 1024;
/// Bytes of an option header: magic, option, length.
const OPTION_HEADER_BYTES: usize = 16;
/// Longest export name the protocol allows.
const EXPORT_NAME_BYTES_MAX: u32 = 4096;

/// How the handshake ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Enter the transmission phase.
    Transmission,
    /// The client aborted (or exhausted its options); close after sending the output.
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    ClientFlags,
    OptionHeader,
    OptionData { option: u32, length: u32 },
    Skipping { option: u32, remaining: u32 },
    Done(Outcome),
}

/// The server's side of one handshake.
#[derive(Debug)]
pub struct Negotiation {
    export: ExportInfo,
    state: State,
    no_zeroes: bool,
    options_seen: u32,
    output: Vec<u8>,
}

impl Negotiation {
    /// Starts a handshake; the greeting is queued for sending.
    pub fn new(export: ExportInfo) -> Negotiation {
        let mut output = Vec::with_capacity(18);
        output.put_u64(NBD_MAGIC);
        output.put_u64(IHAVEOPT);
        output.put_u16(NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES);
        Negotiation {
            export,
            state: State::ClientFlags,
            no_zeroes: false,
            options_seen: 0,
            output,
        }
    }

    /// Bytes to send now, if any.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        (!self.output.is_empty()).then(|| std::mem::take(&mut self.output))
    }

    pub fn outcome(&self) -> Option<Outcome> {
        match self.state {
            State::Done(outcome) => Some(outcome),
            _ => None,
        }
    }

    /// Consumes every complete message in `input`. Stops at the end of the handshake.
    pub fn handle_input(&mut self, input: &mut BytesMut) -> Result<(), ProtocolError> {
        loop {
            let progressed = match self.state {
                State::Done(_) => return Ok(()),
                State::ClientFlags => self.client_flags(input)?,
                State::OptionHeader => self.option_header(input)?,
                State::OptionData { option, length } => self.option_data(input, option, length)?,
                State::Skipping { option, remaining } => self.skip(input, option, remaining),
            };
            if !progressed {
                return Ok(());
            }
        }
    }

    fn client_flags(&mut self, input: &mut BytesMut) -> Result<bool, ProtocolError> {
        if input.len() < 4 {
            return Ok(false);
        }
        let flags = input.get_u32();
        if flags & !(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES) != 0 {
            return Err(ProtocolError::BadClientFlags(flags));
        }
        self.no_zeroes = flags & NBD_FLAG_C_NO_ZEROES != 0;
        self.state = State::OptionHeader;
        Ok(true)
    }

    fn option_header(&mut self, input: &mut BytesMut) -> Result<bool, ProtocolError> {
        if input.len() < OPTION_HEADER_BYTES {
            return Ok(false);
        }
        let magic = input.get_u64();
        if magic != IHAVEOPT {
            return Err(ProtocolError::BadOptionMagic(magic));
        }
        let (option, length) = (input.get_u32(), input.get_u32());
        self.options_seen += 1;
        self.state = if length > OPTION_DATA_BYTES_MAX {
            State::Skipping {
                option,
                remaining: length,
            }
        } else {
            State::OptionData { option, length }
        };
        Ok(true)
    }

    fn skip(&mut self, input: &mut BytesMut, option: u32, remaining: u32) -> bool {
        let skip = (input.len() as u64).min(u64::from(remaining)) as u32;
        input.advance(skip as usize);
        if skip < remaining {
            self.state = State::Skipping {
                option,
                remaining: remaining - skip,
            };
            return false;
        }
        self.reply(option, NBD_REP_ERR_TOO_BIG, b"option data too large");
        self.after_option();
        true
    }

    fn option_data(
        &mut self,
        input: &mut BytesMut,
        option: u32,
        length: u32,
    ) -> Result<bool, ProtocolError> {
        if input.len() < length as usize {
            input.reserve(length as usize - input.len());
            return Ok(false);
        }
        let data = input.split_to(length as usize);
        match option {
            NBD_OPT_EXPORT_NAME => return self.export_name(&data).map(|()| true),
            NBD_OPT_ABORT => {
                self.reply(option, NBD_REP_ACK, b"");
                self.state = State::Done(Outcome::Closed);
                return Ok(true);
            }
            NBD_OPT_LIST if data.is_empty() => self.list(),
            NBD_OPT_LIST => self.reply(option, NBD_REP_ERR_INVALID, b"NBD_OPT_LIST takes no data"),
            NBD_OPT_INFO | NBD_OPT_GO => {
                if self.info_or_go(option, &data) && option == NBD_OPT_GO {
                    self.state = State::Done(Outcome::Transmission);
                    return Ok(true);
                }
            }
            NBD_OPT_STARTTLS => self.reply(option, NBD_REP_ERR_POLICY, b"TLS is not offered"),
            _ => self.reply(option, NBD_REP_ERR_UNSUP, b"option not supported"),
        }
        self.after_option();
        Ok(true)
    }

    fn after_option(&mut self) {
        self.state = if self.options_seen >= OPTIONS_PER_CONNECTION_MAX {
            State::Done(Outcome::Closed)
        } else {
            State::OptionHeader
        };
    }

    /// NBD_OPT_EXPORT_NAME: no error reply is possible, so an unknown name closes.
    fn export_name(&mut self, data: &[u8]) -> Result<(), ProtocolError> {
        let name = String::from_utf8_lossy(data);
        if !self.export.matches(&name) {
            return Err(ProtocolError::UnknownExport(name.into_owned()));
        }
        self.output.put_u64(self.export.size_bytes);
        self.output.put_u16(self.export.transmission_flags());
        if !self.no_zeroes {
            self.output.extend_from_slice(&[0u8; 124]);
        }
        self.state = State::Done(Outcome::Transmission);
        Ok(())
    }

    fn list(&mut self) {
        let name = self.export.name.clone();
        let mut data = Vec::with_capacity(4 + name.len());
        data.put_u32(name.len() as u32);
        data.extend_from_slice(name.as_bytes());
        self.reply(NBD_OPT_LIST, NBD_REP_SERVER, &data);
        self.reply(NBD_OPT_LIST, NBD_REP_ACK, b"");
    }

    /// NBD_OPT_INFO and NBD_OPT_GO; returns whether the export was granted.
    fn info_or_go(&mut self, option: u32, data: &[u8]) -> bool {
        let Some((name, requests)) = parse_info_request(data) else {
            self.reply(
                option,
                NBD_REP_ERR_INVALID,
                b"malformed NBD_OPT_INFO/GO data",
            );
            return false;
        };
        if !self.export.matches(&name) {
            self.reply(option, NBD_REP_ERR_UNKNOWN, b"no such export");
            return false;
        }
        let mut info = Vec::with_capacity(12);
        info.put_u16(NBD_INFO_EXPORT);
        info.put_u64(self.export.size_bytes);
        info.put_u16(self.export.transmission_flags());
        self.reply(option, NBD_REP_INFO, &info);
        if requests.contains(&NBD_INFO_NAME) {
            let mut info = vec![];
            info.put_u16(NBD_INFO_NAME);
            info.extend_from_slice(self.export.name.as_bytes());
            self.reply(option, NBD_REP_INFO, &info);
        }
        if requests.contains(&NBD_INFO_BLOCK_SIZE) {
            let mut info = vec![];
            info.put_u16(NBD_INFO_BLOCK_SIZE);
            info.put_u32(BLOCK_SIZE_MIN);
            info.put_u32(BLOCK_SIZE_PREFERRED);
            info.put_u32(REQUEST_PAYLOAD_BYTES_MAX);
            self.reply(option, NBD_REP_INFO, &info);
        }
        self.reply(option, NBD_REP_ACK, b"");
        true
    }

    fn reply(&mut self, option: u32, kind: u32, data: &[u8]) {
        self.output.put_u64(OPTION_REPLY_MAGIC);
        self.output.put_u32(option);
        self.output.put_u32(kind);
        self.output.put_u32(data.len() as u32);
        self.output.extend_from_slice(data);
    }
}

/// Parses NBD_OPT_INFO/GO data: `u32 name length | name | u16 count | count × u16`.
/// `None` when the lengths do not add up exactly or the name is not UTF-8.
pub fn parse_info_request(mut data: &[u8]) -> Option<(String, Vec<u16>)> {
    if data.len() < 4 {
        return None;
    }
    let name_length = data.get_u32();
    if name_length > EXPORT_NAME_BYTES_MAX || data.len() < name_length as usize + 2 {
        return None;
    }
    let name = std::str::from_utf8(&data[..name_length as usize])
        .ok()?
        .to_string();
    data.advance(name_length as usize);
    let count = data.get_u16() as usize;
    if data.len() != count * 2 {
        return None;
    }
    let requests = (0..count).map(|_| data.get_u16()).collect();
    Some((name, requests))
}
