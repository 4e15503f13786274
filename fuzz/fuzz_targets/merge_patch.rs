#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skiff_apiserver::fuzzing::merge_patch(data));
