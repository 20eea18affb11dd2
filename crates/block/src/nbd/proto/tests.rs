//! Tests of the pure protocol core: handshake, options and requests, including
//! malformed and adversarial input.

use super::*;
use crate::nbd::negotiate::{parse_info_request, Negotiation, Outcome, OPTION_DATA_BYTES_MAX};
use proptest::prelude::*;

fn export() -> ExportInfo {
    ExportInfo {
        name: "rbd/disk".into(),
        aliases: vec!["disk".into()],
        size_bytes: 1 << 20,
        read_only: false,
    }
}

fn option(option: u32, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.put_u64(IHAVEOPT);
    out.put_u32(option);
    out.put_u32(data.len() as u32);
    out.extend_from_slice(data);
    out
}

fn info_data(name: &str, requests: &[u16]) -> Vec<u8> {
    let mut out = Vec::new();
    out.put_u32(name.len() as u32);
    out.extend_from_slice(name.as_bytes());
    out.put_u16(requests.len() as u16);
    for request in requests {
        out.put_u16(*request);
    }
    out
}

/// Option replies as (option, reply type, data).
fn parse_replies(mut bytes: &[u8]) -> Vec<(u32, u32, Vec<u8>)> {
    let mut replies = Vec::new();
    while !bytes.is_empty() {
        assert_eq!(bytes.get_u64(), OPTION_REPLY_MAGIC);
        let (option, kind, length) = (bytes.get_u32(), bytes.get_u32(), bytes.get_u32() as usize);
        replies.push((option, kind, bytes[..length].to_vec()));
        bytes.advance(length);
    }
    replies
}

/// Runs a handshake over `input` (after the greeting); returns the negotiation, the
/// server's replies and what was left in the input.
fn negotiate(input: &[u8]) -> (Negotiation, Result<(), ProtocolError>, Vec<u8>, BytesMut) {
    let mut negotiation = Negotiation::new(export());
    let greeting = negotiation.poll_transmit().unwrap();
    assert_eq!(greeting.len(), 18);
    let mut buffer = BytesMut::from(input);
    let result = negotiation.handle_input(&mut buffer);
    let output = negotiation.poll_transmit().unwrap_or_default();
    (negotiation, result, output, buffer)
}

fn client_flags() -> Vec<u8> {
    (NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES)
        .to_be_bytes()
        .to_vec()
}

#[test]
fn greeting_is_nbdmagic_ihaveopt_and_flags() {
    let mut negotiation = Negotiation::new(export());
    let greeting = negotiation.poll_transmit().unwrap();
    assert_eq!(&greeting[..8], b"NBDMAGIC");
    assert_eq!(&greeting[8..16], b"IHAVEOPT");
    assert_eq!(&greeting[16..], &[0, 3]);
    assert_eq!(negotiation.poll_transmit(), None);
}

#[test]
fn go_grants_the_export_and_keeps_pipelined_bytes() {
    let mut input = client_flags();
    input.extend(option(
        NBD_OPT_GO,
        &info_data("", &[NBD_INFO_BLOCK_SIZE, NBD_INFO_NAME]),
    ));
    input.extend(encode_request(0, NBD_CMD_FLUSH, 9, 0, 0, b""));
    let (negotiation, result, output, leftover) = negotiate(&input);
    result.unwrap();
    assert_eq!(negotiation.outcome(), Some(Outcome::Transmission));
    assert_eq!(leftover.len(), REQUEST_HEADER_BYTES);
    let replies = parse_replies(&output);
    assert_eq!(replies.len(), 4);
    let mut info = &replies[0].2[..];
    assert_eq!(
        (replies[0].1, info.get_u16(), info.get_u64()),
        (NBD_REP_INFO, NBD_INFO_EXPORT, 1 << 20)
    );
    let flags = info.get_u16();
    for flag in [
        NBD_FLAG_HAS_FLAGS,
        NBD_FLAG_SEND_FLUSH,
        NBD_FLAG_SEND_FUA,
        NBD_FLAG_SEND_TRIM,
        NBD_FLAG_SEND_WRITE_ZEROES,
        NBD_FLAG_CAN_MULTI_CONN,
    ] {
        assert_ne!(flags & flag, 0, "flag {flag:#x}");
    }
    assert_eq!(flags & NBD_FLAG_READ_ONLY, 0);
    assert_eq!(&replies[1].2[2..], b"rbd/disk");
    let mut block = &replies[2].2[..];
    assert_eq!(
        (
            block.get_u16(),
            block.get_u32(),
            block.get_u32(),
            block.get_u32()
        ),
        (NBD_INFO_BLOCK_SIZE, 1, 4096, REQUEST_PAYLOAD_BYTES_MAX)
    );
    assert_eq!((replies[3].0, replies[3].1), (NBD_OPT_GO, NBD_REP_ACK));
}

#[test]
fn info_list_and_refusals_keep_the_handshake_going() {
    let mut input = client_flags();
    input.extend(option(NBD_OPT_INFO, &info_data("disk", &[])));
    input.extend(option(NBD_OPT_LIST, b""));
    input.extend(option(NBD_OPT_LIST, b"junk"));
    input.extend(option(NBD_OPT_INFO, &info_data("other", &[])));
    input.extend(option(NBD_OPT_GO, b"\0\0\0\x09short"));
    input.extend(option(NBD_OPT_STARTTLS, b""));
    input.extend(option(NBD_OPT_STRUCTURED_REPLY, b""));
    input.extend(option(99, b"x"));
    let (negotiation, result, output, leftover) = negotiate(&input);
    result.unwrap();
    assert_eq!(negotiation.outcome(), None);
    assert!(leftover.is_empty());
    let kinds: Vec<(u32, u32)> = parse_replies(&output).iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(
        kinds,
        vec![
            (NBD_OPT_INFO, NBD_REP_INFO),
            (NBD_OPT_INFO, NBD_REP_ACK),
            (NBD_OPT_LIST, NBD_REP_SERVER),
            (NBD_OPT_LIST, NBD_REP_ACK),
            (NBD_OPT_LIST, NBD_REP_ERR_INVALID),
            (NBD_OPT_INFO, NBD_REP_ERR_UNKNOWN),
            (NBD_OPT_GO, NBD_REP_ERR_INVALID),
            (NBD_OPT_STARTTLS, NBD_REP_ERR_POLICY),
            (NBD_OPT_STRUCTURED_REPLY, NBD_REP_ERR_UNSUP),
            (99, NBD_REP_ERR_UNSUP),
        ]
    );
    assert_eq!(&parse_replies(&output)[2].2[4..], b"rbd/disk");
}

#[test]
fn abort_acknowledges_and_closes() {
    let mut input = client_flags();
    input.extend(option(NBD_OPT_ABORT, b""));
    let (negotiation, result, output, _) = negotiate(&input);
    result.unwrap();
    assert_eq!(negotiation.outcome(), Some(Outcome::Closed));
    assert_eq!(
        parse_replies(&output),
        vec![(NBD_OPT_ABORT, NBD_REP_ACK, vec![])]
    );
}

#[test]
fn export_name_sends_size_flags_and_zeroes_unless_refused() {
    let mut input = NBD_FLAG_C_FIXED_NEWSTYLE.to_be_bytes().to_vec();
    input.extend(option(NBD_OPT_EXPORT_NAME, b"rbd/disk"));
    let (negotiation, result, output, _) = negotiate(&input);
    result.unwrap();
    assert_eq!(negotiation.outcome(), Some(Outcome::Transmission));
    assert_eq!(output.len(), 8 + 2 + 124);
    assert_eq!(&output[..8], &(1u64 << 20).to_be_bytes());
    let mut input = client_flags();
    input.extend(option(NBD_OPT_EXPORT_NAME, b"nope"));
    let (_, result, _, _) = negotiate(&input);
    assert_eq!(result, Err(ProtocolError::UnknownExport("nope".into())));
}

#[test]
fn bad_flags_and_magic_close_the_connection() {
    let (_, result, _, _) = negotiate(&4u32.to_be_bytes());
    assert_eq!(result, Err(ProtocolError::BadClientFlags(4)));
    let mut input = client_flags();
    input.extend_from_slice(&[0u8; 16]);
    let (_, result, _, _) = negotiate(&input);
    assert!(matches!(result, Err(ProtocolError::BadOptionMagic(0))));
}

#[test]
fn oversized_options_are_skipped_and_refused() {
    let mut input = client_flags();
    input.extend(option(77, &vec![1u8; OPTION_DATA_BYTES_MAX as usize + 1]));
    input.extend(option(NBD_OPT_GO, &info_data("", &[])));
    let (negotiation, result, output, _) = negotiate(&input);
    result.unwrap();
    assert_eq!(parse_replies(&output)[0].1, NBD_REP_ERR_TOO_BIG);
    assert_eq!(negotiation.outcome(), Some(Outcome::Transmission));
}

#[test]
fn info_request_parsing_rejects_inconsistent_lengths() {
    assert_eq!(
        parse_info_request(&info_data("a", &[3])),
        Some(("a".into(), vec![3]))
    );
    let mut extra = info_data("a", &[3]);
    extra.push(0);
    assert_eq!(parse_info_request(&extra), None);
    assert_eq!(parse_info_request(&info_data("a", &[3])[..8]), None);
    assert_eq!(parse_info_request(&[0xff, 0xff, 0xff, 0xff, 0, 0]), None);
    assert_eq!(parse_info_request(&[0, 0, 0]), None);
}

fn decode_all(bytes: &[u8], export: &ExportInfo) -> Result<Vec<Request>, ProtocolError> {
    let mut decoder = RequestDecoder::default();
    let mut input = BytesMut::from(bytes);
    let mut out = Vec::new();
    while let Some(request) = decoder.decode(&mut input, export)? {
        out.push(request);
    }
    Ok(out)
}

#[test]
fn requests_decode_and_bad_ones_get_errnos() {
    let e = export();
    let mut bytes = encode_request(0, NBD_CMD_READ, 1, 512, 4096, b"");
    bytes.extend(encode_request(
        NBD_CMD_FLAG_FUA,
        NBD_CMD_WRITE,
        2,
        0,
        3,
        b"abc",
    ));
    bytes.extend(encode_request(0, NBD_CMD_READ, 3, (1 << 20) - 1, 2, b""));
    bytes.extend(encode_request(0, NBD_CMD_WRITE, 4, 1 << 20, 1, b"z"));
    bytes.extend(encode_request(0, NBD_CMD_READ, 5, 0, 0, b""));
    bytes.extend(encode_request(1 << 7, NBD_CMD_READ, 6, 0, 1, b""));
    bytes.extend(encode_request(
        NBD_CMD_FLAG_NO_HOLE,
        NBD_CMD_WRITE_ZEROES,
        7,
        0,
        10,
        b"",
    ));
    bytes.extend(encode_request(0, 7, 8, 0, 10, b""));
    bytes.extend(encode_request(0, NBD_CMD_TRIM, 9, u64::MAX, 10, b""));
    bytes.extend(encode_request(0, NBD_CMD_DISC, 10, 0, 0, b""));
    let got: Vec<_> = decode_all(&bytes, &e)
        .unwrap()
        .into_iter()
        .map(|r| (r.handle, r.command))
        .collect();
    assert_eq!(
        got,
        vec![
            (
                1,
                Ok(Command::Read {
                    offset: 512,
                    length: 4096
                })
            ),
            (
                2,
                Ok(Command::Write {
                    offset: 0,
                    data: Bytes::from_static(b"abc"),
                    fua: true
                })
            ),
            (3, Err(EINVAL)),
            (4, Err(ENOSPC)),
            (5, Err(EINVAL)),
            (6, Err(EINVAL)),
            (
                7,
                Ok(Command::WriteZeroes {
                    offset: 0,
                    length: 10,
                    fua: false
                })
            ),
            (8, Err(EINVAL)),
            (9, Err(EINVAL)),
            (10, Ok(Command::Disconnect)),
        ]
    );
}

#[test]
fn read_only_exports_refuse_writes() {
    let e = ExportInfo {
        read_only: true,
        ..export()
    };
    assert_ne!(e.transmission_flags() & NBD_FLAG_READ_ONLY, 0);
    assert_eq!(e.transmission_flags() & NBD_FLAG_SEND_TRIM, 0);
    let mut bytes = encode_request(0, NBD_CMD_WRITE, 1, 0, 1, b"x");
    bytes.extend(encode_request(0, NBD_CMD_TRIM, 2, 0, 1, b""));
    bytes.extend(encode_request(0, NBD_CMD_READ, 3, 0, 1, b""));
    let got: Vec<_> = decode_all(&bytes, &e)
        .unwrap()
        .into_iter()
        .map(|r| r.command.err())
        .collect();
    assert_eq!(got, vec![Some(EPERM), Some(EPERM), None]);
}

#[test]
fn oversized_writes_are_discarded_in_sync() {
    let e = export();
    let length = REQUEST_PAYLOAD_BYTES_MAX + 1;
    let mut bytes = encode_request(0, NBD_CMD_WRITE, 1, 0, length, b"");
    bytes.extend(vec![0u8; length as usize]);
    bytes.extend(encode_request(0, NBD_CMD_FLUSH, 2, 0, 0, b""));
    let got: Vec<_> = decode_all(&bytes, &e)
        .unwrap()
        .into_iter()
        .map(|r| (r.handle, r.command))
        .collect();
    assert_eq!(got, vec![(1, Err(EINVAL)), (2, Ok(Command::Flush))]);
}

#[test]
fn bad_request_magic_is_fatal_and_partial_input_waits() {
    let mut bytes = encode_request(0, NBD_CMD_READ, 1, 0, 1, b"");
    bytes[0] ^= 0xff;
    assert!(matches!(
        decode_all(&bytes, &export()),
        Err(ProtocolError::BadRequestMagic(_))
    ));
    let bytes = encode_request(0, NBD_CMD_WRITE, 1, 0, 4, b"abcd");
    let mut decoder = RequestDecoder::default();
    let mut input = BytesMut::new();
    for (index, byte) in bytes.iter().enumerate() {
        input.put_u8(*byte);
        let got = decoder.decode(&mut input, &export()).unwrap();
        assert_eq!(got.is_some(), index == bytes.len() - 1);
    }
}

#[test]
fn simple_replies_are_sixteen_bytes() {
    let reply = simple_reply(0x0102_0304_0506_0708, EIO);
    assert_eq!(&reply[..4], &NBD_SIMPLE_REPLY_MAGIC.to_be_bytes());
    assert_eq!(&reply[4..8], &5u32.to_be_bytes());
    assert_eq!(&reply[8..], &0x0102_0304_0506_0708u64.to_be_bytes());
}

proptest! {
    #[test]
    fn valid_requests_round_trip(handle: u64, offset in 0u64..(1 << 20), length in 1u32..4096, fua: bool, kind in prop_oneof![Just(NBD_CMD_READ), Just(NBD_CMD_WRITE), Just(NBD_CMD_TRIM), Just(NBD_CMD_WRITE_ZEROES), Just(NBD_CMD_FLUSH)]) {
        let e = ExportInfo { size_bytes: 1 << 21, ..export() };
        let flags = if fua { NBD_CMD_FLAG_FUA } else { 0 };
        let payload = if kind == NBD_CMD_WRITE { vec![0xa5u8; length as usize] } else { vec![] };
        let length_field = if kind == NBD_CMD_FLUSH { 0 } else { length };
        let got = decode_all(&encode_request(flags, kind, handle, offset, length_field, &payload), &e).unwrap();
        prop_assert_eq!(got.len(), 1);
        prop_assert_eq!(got[0].handle, handle);
        let expected = match kind {
            NBD_CMD_READ => Command::Read { offset, length },
            NBD_CMD_WRITE => Command::Write { offset, data: Bytes::from(payload), fua },
            NBD_CMD_TRIM => Command::Trim { offset, length, fua },
            NBD_CMD_WRITE_ZEROES => Command::WriteZeroes { offset, length, fua },
            _ => Command::Flush,
        };
        prop_assert_eq!(got[0].command.clone(), Ok(expected));
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512), split in 0usize..512) {
        let _ = decode_all(&bytes, &export());
        let mut negotiation = Negotiation::new(export());
        let split = split.min(bytes.len());
        let mut first = BytesMut::from(&bytes[..split]);
        if negotiation.handle_input(&mut first).is_ok() {
            first.extend_from_slice(&bytes[split..]);
            let _ = negotiation.handle_input(&mut first);
        }
    }

    #[test]
    fn handshake_output_does_not_depend_on_how_input_is_split(cuts in proptest::collection::vec(0usize..200, 0..6)) {
        let mut input = client_flags();
        input.extend(option(NBD_OPT_LIST, b""));
        input.extend(option(NBD_OPT_INFO, &info_data("disk", &[NBD_INFO_BLOCK_SIZE])));
        input.extend(option(42, b"xyz"));
        input.extend(option(NBD_OPT_GO, &info_data("", &[])));
        let (_, _, whole, _) = negotiate(&input);
        let mut negotiation = Negotiation::new(export());
        negotiation.poll_transmit();
        let mut buffer = BytesMut::new();
        let mut output = Vec::new();
        let mut cuts = cuts;
        cuts.push(input.len());
        cuts.sort_unstable();
        let mut start = 0;
        for cut in cuts {
            let cut = cut.clamp(start, input.len());
            buffer.extend_from_slice(&input[start..cut]);
            start = cut;
            negotiation.handle_input(&mut buffer).unwrap();
            output.extend(negotiation.poll_transmit().unwrap_or_default());
        }
        prop_assert_eq!(output, whole);
        prop_assert_eq!(negotiation.outcome(), Some(Outcome::Transmission));
    }
}
