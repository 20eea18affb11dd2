//! The frame decoder against arbitrary bytes, raw or wrapped into frames with valid
//! crcs: see `carmine_msgr::fuzzing::frame_decoder`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    carmine_msgr::fuzzing::frame_decoder(data);
});
