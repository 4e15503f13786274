#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skiff_apiserver::fuzzing::request_body(data));
