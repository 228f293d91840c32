//! Without a QAT device, QATzip 1.3.1 leaks a pthread key on every compress and
//! decompress call, and glibc gives a process 1024. kpress makes at most
//! [`MAX_CALLS_WITHOUT_HARDWARE`] such calls; past them the provider refuses (the
//! payload falls back to zlib, counted) and the process keeps keys for everything else.
//! Alone in its own test binary because the budget is per process.

use kpress_deflate::{
    compress_fallbacks, compress_with_fallback, DeflateError, GzipProvider, ProviderKind, Registry,
    ZlibProvider, MAX_CALLS_WITHOUT_HARDWARE,
};

/// Whether the process can still create (and then deletes) a pthread key.
fn pthread_key_available() -> bool {
    extern "C" {
        fn pthread_key_create(key: *mut u32, destructor: Option<extern "C" fn(*mut u8)>) -> i32;
        fn pthread_key_delete(key: u32) -> i32;
    }
    let mut key = 0u32;
    // SAFETY: a valid out-pointer and no destructor; the key is deleted at once.
    let created = unsafe { pthread_key_create(&mut key, None) } == 0;
    if created {
        // SAFETY: the key was just created by this thread.
        unsafe { pthread_key_delete(key) };
    }
    created
}

#[test]
fn qatzip_calls_without_a_device_stop_before_the_process_runs_out_of_pthread_keys() {
    let qat = Registry::global()
        .get(ProviderKind::Qat)
        .expect("QATzip from .cache/qatzip (scripts/setup.sh)");
    let hardware = Registry::global()
        .statuses()
        .into_iter()
        .any(|s| s.provider == ProviderKind::Qat && s.hardware);
    assert!(!hardware, "this test is about hosts without a QAT device");
    let input = b"a record value, a record value, a record value".repeat(20);
    let mut refused = 0;
    for _ in 0..1200 {
        let mut out = Vec::new();
        match qat.compress(&input, 6, &mut out) {
            Ok(()) => {}
            Err(DeflateError::Provider { reason, .. }) => {
                assert!(reason.contains("without a QAT device"), "{reason}");
                refused += 1;
            }
            Err(other) => panic!("{other}"),
        }
    }
    assert_eq!(refused, 1200 - MAX_CALLS_WITHOUT_HARDWARE as usize);
    assert!(
        pthread_key_available(),
        "QATzip used up the process's pthread keys"
    );
    // Past the budget the payload is still compressed, by zlib, and counted.
    let mut out = Vec::new();
    let wrote = compress_with_fallback(&*qat, &input, 6, &mut out).unwrap();
    assert_eq!(wrote, ProviderKind::Zlib);
    assert!(compress_fallbacks(ProviderKind::Qat) >= 1);
    let mut plain = Vec::new();
    ZlibProvider
        .decompress(&out, input.len(), &mut plain)
        .unwrap();
    assert_eq!(plain, input);
}
