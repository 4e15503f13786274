#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skiff_machinery::fuzzing::label_selector(data));
