//! A session (banner, handshake, then messages and acks) against arbitrary bytes,
//! sends, timeouts and resets: see `carmine_msgr::fuzzing::session`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    carmine_msgr::fuzzing::session(data);
});
