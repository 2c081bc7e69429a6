#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| chime_tests::fuzz_targets::firing_headers(data));
