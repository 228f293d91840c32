#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| kpress_fuzz::request_frame(data));
