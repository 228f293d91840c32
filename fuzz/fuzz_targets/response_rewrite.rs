#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| kpress_fuzz::response_rewrite(data));
