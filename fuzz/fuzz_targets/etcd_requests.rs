#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skiff_store::grpc::fuzzing::etcd_requests(data));
