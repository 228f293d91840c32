//! KIP-1121's compatibility plan for gzip providers, on the real libraries: QATzip
//! (software backup, no QAT device here), ISA-L, libdeflate and flate2/zlib-rs.

use std::io::{Read, Write};
use std::sync::Arc;

use kpress_deflate::{
    compress_fallbacks, compress_with_fallback, decompress_with_fallback, DeflateError,
    GzipProvider, ProviderChoice, ProviderError, ProviderKind, QatConfig, QatProvider, Registry,
    ZlibProvider,
};

fn registry() -> &'static Registry {
    Registry::global()
}

fn all_providers() -> Vec<Arc<dyn GzipProvider>> {
    ProviderKind::ALL
        .into_iter()
        .map(|k| {
            registry()
                .get(k)
                .unwrap_or_else(|e| panic!("{k} must be available on this machine: {e}"))
        })
        .collect()
}

fn dataset(name: &str) -> Vec<u8> {
    let dir = kpress_tests::paths::datasets_dir();
    std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name} in {}: {e}", dir.display()))
}

/// Payloads of several shapes: real log and JSON records at batch sizes, tiny, empty,
/// incompressible.
fn samples() -> Vec<(String, Vec<u8>)> {
    let apache = dataset("apache_access.log");
    let nginx = dataset("nginxplus_status.ndjson");
    let mut noise = vec![0u8; 100_000];
    let mut x = 0x2545_f491_u32;
    for b in &mut noise {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    vec![
        ("apache 16 KiB".into(), apache[..16 * 1024].to_vec()),
        ("apache 1 MiB".into(), apache[..1 << 20].to_vec()),
        ("nginx 16 KiB".into(), nginx[..16 * 1024].to_vec()),
        ("nginx 1 MiB".into(), nginx[..1 << 20].to_vec()),
        ("one byte".into(), b"k".to_vec()),
        ("empty".into(), Vec::new()),
        ("random 100 KB".into(), noise),
    ]
}

fn gunzip_with_flate2(gz: &[u8]) -> Vec<u8> {
    // GzDecoder reads one member only: all input consumed proves there was exactly one.
    let mut decoder = flate2::read::GzDecoder::new(gz);
    let mut out = Vec::new();
    decoder.read_to_end(&mut out).expect("flate2 decodes it");
    assert!(
        decoder.into_inner().is_empty(),
        "bytes left after the first gzip member"
    );
    out
}

#[test]
fn every_provider_writes_one_member_that_flate2_and_every_provider_read() {
    let providers = all_providers();
    for (name, input) in samples() {
        for writer in &providers {
            for level in [1, 6, 9] {
                let mut gz = b"prefix".to_vec();
                writer.compress(&input, level, &mut gz).unwrap();
                assert_eq!(&gz[..6], b"prefix", "output is appended");
                let gz = &gz[6..];
                assert!(
                    gunzip_with_flate2(gz) == input,
                    "{} level {level} on {name}: flate2 disagrees",
                    writer.kind()
                );
                for reader in &providers {
                    let mut out = b"keep".to_vec();
                    let n = reader
                        .decompress(gz, input.len(), &mut out)
                        .unwrap_or_else(|e| {
                            panic!(
                                "{} reading {} level {level} on {name}: {e}",
                                reader.kind(),
                                writer.kind()
                            )
                        });
                    assert_eq!(n, input.len());
                    assert!(
                        out[4..] == input[..] && &out[..4] == b"keep",
                        "{} reading {} on {name}",
                        reader.kind(),
                        writer.kind()
                    );
                }
            }
        }
    }
}

#[test]
fn every_provider_reads_what_flate2_and_java_style_writers_write() {
    let input = dataset("apache_access.log")[..300_000].to_vec();
    // flate2 at each level; and a member with FNAME, FCOMMENT, FEXTRA and mtime set
    // as other gzip writers produce; and Java's GZIPOutputStream header (OS 0).
    let mut members = Vec::new();
    for level in [1, 6, 9] {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
        e.write_all(&input).unwrap();
        members.push(e.finish().unwrap());
    }
    let mut e = flate2::GzBuilder::new()
        .filename("batch.log")
        .comment("kpress")
        .extra(vec![1, 2, 3])
        .mtime(1_700_000_000)
        .write(Vec::new(), flate2::Compression::default());
    e.write_all(&input).unwrap();
    members.push(e.finish().unwrap());
    let mut java = members[1].clone();
    java[8] = 0;
    java[9] = 0;
    members.push(java);
    for provider in all_providers() {
        for gz in &members {
            let mut out = Vec::new();
            provider.decompress(gz, input.len(), &mut out).unwrap();
            assert!(out == input, "{}", provider.kind());
        }
    }
}

/// The zlib provider's member body is flate2's raw deflate of the whole input in one
/// `Finish` call with room for all of it: zlib-rs's stream depends on how the input is
/// split (levels 1, 5, 6) and, at levels 5 and 6, on the output room per call, so one
/// call with ample room is the one output that does not depend on the caller.
#[test]
fn zlib_provider_output_is_flate2_deflate_of_the_whole_input_in_one_call() {
    for (name, input) in samples() {
        for level in 1..=9 {
            let mut c = flate2::Compress::new(flate2::Compression::new(level), false);
            let mut raw = Vec::with_capacity(2 * input.len() + 64);
            loop {
                let consumed = c.total_in() as usize;
                let status = c
                    .compress_vec(&input[consumed..], &mut raw, flate2::FlushCompress::Finish)
                    .unwrap();
                if status == flate2::Status::StreamEnd {
                    break;
                }
            }
            let mut ours = Vec::new();
            ZlibProvider.compress(&input, level, &mut ours).unwrap();
            let body = &ours[kpress_deflate::member::HEADER_LEN
                ..ours.len() - kpress_deflate::member::TRAILER_LEN];
            assert!(body == raw, "level {level} on {name}");
        }
    }
}

#[test]
fn several_members_concatenated_from_different_providers_decode_as_one() {
    let providers = all_providers();
    let input = dataset("nginxplus_status.ndjson");
    let parts: Vec<&[u8]> = input.chunks(200_000).take(providers.len()).collect();
    let mut gz = Vec::new();
    for (p, part) in providers.iter().zip(&parts) {
        p.compress(part, 6, &mut gz).unwrap();
    }
    let expected = parts.concat();
    for p in &providers {
        let mut out = Vec::new();
        assert_eq!(
            p.decompress(&gz, expected.len(), &mut out).unwrap(),
            expected.len()
        );
        assert!(out == expected, "{}", p.kind());
        // The bound covers all members together.
        let err = p.decompress(&gz, expected.len() - 1, &mut out).unwrap_err();
        assert!(
            matches!(err, DeflateError::LimitExceeded { .. }),
            "{}: {err}",
            p.kind()
        );
    }
}

#[test]
fn levels_change_the_output_and_higher_levels_compress_more() {
    let input = dataset("apache_access.log")[..1 << 20].to_vec();
    for p in all_providers() {
        let size = |level| {
            let mut out = Vec::new();
            p.compress(&input, level, &mut out).unwrap();
            out
        };
        let (fast, best) = (size(1), size(9));
        assert!(
            fast != best,
            "{}: levels 1 and 9 give the same bytes",
            p.kind()
        );
        assert!(
            best.len() < fast.len(),
            "{}: level 9 {} >= level 1 {}",
            p.kind(),
            best.len(),
            fast.len()
        );
    }
}

#[test]
fn bombs_are_refused_within_the_limit_by_every_provider() {
    // 64 MiB of zeros compress to about 64 KB.
    let zeros = vec![0u8; 64 << 20];
    let mut bomb = Vec::new();
    ZlibProvider.compress(&zeros, 9, &mut bomb).unwrap();
    assert!(bomb.len() < 200_000);
    let limit = 1 << 20;
    for p in all_providers() {
        let mut out = b"keep".to_vec();
        let err = p.decompress(&bomb, limit, &mut out).unwrap_err();
        assert_eq!(err, DeflateError::LimitExceeded { limit }, "{}", p.kind());
        assert_eq!(out, b"keep", "{}: output left as it was", p.kind());
        assert!(
            out.capacity() <= 3 * limit,
            "{}: allocated {} for a {limit} limit",
            p.kind(),
            out.capacity()
        );
    }
    // A trailer lying about the size (ISIZE 4 GiB - 1) is not trusted either.
    let small = b"a small payload".to_vec();
    let mut gz = Vec::new();
    ZlibProvider.compress(&small, 6, &mut gz).unwrap();
    let n = gz.len();
    gz[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
    for p in all_providers() {
        let mut out = Vec::new();
        let err = p.decompress(&gz, 1 << 20, &mut out).unwrap_err();
        assert!(
            matches!(err, DeflateError::Corrupt { .. }),
            "{}: {err}",
            p.kind()
        );
        assert!(out.capacity() < 1 << 20, "{}", p.kind());
    }
}

#[test]
fn a_trailer_claiming_more_than_the_member_can_inflate_to_reserves_no_more_than_it_can() {
    // Deflate writes at most 258 bytes per 2 bits: a member of n bytes inflates to at
    // most 1032 n. Its ISIZE claiming 60 MiB, within a 64 MiB limit, is not reserved.
    let limit = 64 << 20;
    let mut gz = Vec::new();
    ZlibProvider
        .compress(b"a small payload", 6, &mut gz)
        .unwrap();
    let n = gz.len();
    gz[n - 4..].copy_from_slice(&(60u32 << 20).to_le_bytes());
    // The same member cut short, so no provider can finish it.
    let cut = [&gz[..n - 12], &gz[n - 8..]].concat();
    for p in all_providers() {
        for payload in [&gz, &cut] {
            let mut out = Vec::new();
            let err = p.decompress(payload, limit, &mut out).unwrap_err();
            assert!(
                matches!(err, DeflateError::Corrupt { .. }),
                "{}: {err}",
                p.kind()
            );
            assert!(
                out.capacity() <= 1032 * payload.len(),
                "{}: reserved {} bytes for a {}-byte payload",
                p.kind(),
                out.capacity(),
                payload.len()
            );
        }
    }
}

#[test]
fn exact_limits_are_allowed_and_one_byte_less_is_not() {
    let input = dataset("apache_access.log")[..100_000].to_vec();
    for writer in all_providers() {
        let mut gz = Vec::new();
        writer.compress(&input, 6, &mut gz).unwrap();
        for reader in all_providers() {
            let mut out = Vec::new();
            assert_eq!(
                reader.decompress(&gz, input.len(), &mut out).unwrap(),
                input.len()
            );
            let err = reader
                .decompress(&gz, input.len() - 1, &mut Vec::new())
                .unwrap_err();
            assert!(
                matches!(err, DeflateError::LimitExceeded { .. }),
                "{}: {err}",
                reader.kind()
            );
        }
    }
}

#[test]
fn an_empty_member_fits_a_zero_limit_and_one_byte_does_not() {
    for writer in all_providers() {
        let (mut empty, mut one) = (Vec::new(), Vec::new());
        writer.compress(b"", 6, &mut empty).unwrap();
        writer.compress(b"x", 6, &mut one).unwrap();
        for reader in all_providers() {
            let mut out = Vec::new();
            assert_eq!(
                reader.decompress(&empty, 0, &mut out),
                Ok(0),
                "{} reading {}",
                reader.kind(),
                writer.kind()
            );
            assert_eq!(
                reader.decompress(&one, 0, &mut out),
                Err(DeflateError::LimitExceeded { limit: 0 }),
                "{}",
                reader.kind()
            );
            assert_eq!(
                reader.decompress(&one, 1, &mut out),
                Ok(1),
                "{}",
                reader.kind()
            );
        }
    }
}

#[test]
fn corruption_is_reported_and_never_laundered() {
    let input = dataset("apache_access.log")[..50_000].to_vec();
    let mut gz = Vec::new();
    ZlibProvider.compress(&input, 6, &mut gz).unwrap();
    let n = gz.len();
    let mut bad_crc = gz.clone();
    bad_crc[n - 8] ^= 0xff;
    let mut bad_len = gz.clone();
    bad_len[n - 4] ^= 0x01;
    let mut bad_body = gz.clone();
    bad_body[n / 2] ^= 0x55;
    let mut trailing = gz.clone();
    trailing.extend_from_slice(b"garbage");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("header only", gz[..10].to_vec()),
        ("truncated body", gz[..n / 2].to_vec()),
        ("missing trailer", gz[..n - 8].to_vec()),
        ("short trailer", gz[..n - 3].to_vec()),
        ("bad crc", bad_crc),
        ("bad isize", bad_len),
        ("flipped body byte", bad_body),
        ("trailing garbage", trailing),
        ("not gzip", input[..1000].to_vec()),
    ];
    for p in all_providers() {
        for (what, payload) in &cases {
            let mut out = b"keep".to_vec();
            let err = p
                .decompress(payload, 1 << 20, &mut out)
                .expect_err(&format!("{} accepted {what}", p.kind()));
            assert!(
                matches!(err, DeflateError::Corrupt { .. }),
                "{} on {what}: {err}",
                p.kind()
            );
            assert_eq!(out, b"keep", "{} on {what}", p.kind());
        }
    }
}

#[test]
fn qat_goes_through_the_real_libqatzip_in_software_backup() {
    let qat = QatProvider::open(QatConfig::default())
        .expect("QATzip from .cache/qatzip (scripts/setup.sh)");
    let mapped = qat
        .library()
        .mapped_file()
        .expect("libqatzip is mapped into this process");
    assert!(
        mapped.ends_with(qat_sys::LIBRARY_FILE)
            || mapped.to_string_lossy().contains("libqatzip.so.3"),
        "{}",
        mapped.display()
    );
    // Without an override and without a QATzip of the host's own (which the system
    // loader would have found first), the project cache's.
    if std::env::var_os("QATZIP_LIB_DIR").is_none()
        && qat.library().path() != std::path::Path::new(qat_sys::LIBRARY_FILE)
    {
        let cache = kpress_tests::paths::cache_dir()
            .join("qatzip/root/usr/lib/x86_64-linux-gnu/libqatzip.so.3");
        assert_eq!(
            mapped.canonicalize().unwrap(),
            cache.canonicalize().unwrap()
        );
    }
    let status = qat.status();
    assert!(status.available);
    assert!(!status.hardware, "no QAT device on these machines");
    assert!(
        status.detail.contains("QZ_NO_HW") && status.detail.contains("software backup"),
        "{}",
        status.detail
    );
    // The registry reports the same, and auto does not pick QAT without a device.
    let statuses = registry().statuses();
    let reported = statuses
        .iter()
        .find(|s| s.provider == ProviderKind::Qat)
        .unwrap();
    assert!(reported.available && !reported.hardware, "{reported:?}");
    assert_eq!(registry().auto_kind(), ProviderKind::Libdeflate);
    assert_eq!(
        registry().resolve(ProviderChoice::Auto).unwrap().kind(),
        ProviderKind::Libdeflate
    );
    // Raw deflate from QATzip, one member: the wrapped output round-trips.
    let input = dataset("apache_access.log")[..1 << 20].to_vec();
    let mut gz = Vec::new();
    qat.compress(&input, 6, &mut gz).unwrap();
    assert!(gunzip_with_flate2(&gz) == input);
}

#[test]
fn qat_sessions_outlive_threads_so_thread_churn_starts_none() {
    // QATzip 1.3.1 without a device leaks a pthread key per session start (and per call): sessions
    // are pooled, not per thread, so 40 short-lived threads reuse the same few.
    let qat = registry().get(ProviderKind::Qat).unwrap();
    let input = Arc::new(dataset("apache_access.log")[..50_000].to_vec());
    let warm = |qat: &Arc<dyn GzipProvider>, input: &[u8]| {
        let mut gz = Vec::new();
        qat.compress(input, 7, &mut gz).unwrap();
        let mut out = Vec::new();
        qat.decompress(&gz, input.len(), &mut out).unwrap();
    };
    warm(&qat, &input);
    let before = QatProvider::session_starts();
    for _ in 0..40 {
        let (qat, input) = (qat.clone(), input.clone());
        std::thread::spawn(move || warm(&qat, &input))
            .join()
            .unwrap();
    }
    // Other tests may start sessions concurrently; without the pool this would be 80.
    assert!(
        QatProvider::session_starts() - before < 20,
        "{} sessions started",
        QatProvider::session_starts() - before
    );
}

#[test]
fn a_first_member_larger_than_the_trailer_hint_streams_through_every_provider() {
    // The size hint is the last member's ISIZE: 10 bytes here, for a 1 MiB first member.
    let input = dataset("nginxplus_status.ndjson");
    let (big, small) = (&input[..1 << 20], &input[..10]);
    for writer in all_providers() {
        let mut gz = Vec::new();
        writer.compress(big, 6, &mut gz).unwrap();
        writer.compress(small, 6, &mut gz).unwrap();
        for reader in all_providers() {
            let mut out = Vec::new();
            reader
                .decompress(&gz, big.len() + small.len(), &mut out)
                .unwrap();
            assert!(
                out[..big.len()] == *big && out[big.len()..] == *small,
                "{} reading {}",
                reader.kind(),
                writer.kind()
            );
        }
    }
}

#[test]
fn qat_keeps_zlibs_ratio_on_1_mib_batches() {
    // QATzip deflates in independent hw_buff_sz pieces; with its 64 KiB default a
    // 1 MiB batch came out 13% larger than zlib-rs at the same level; with 512 KiB
    // pieces about 4%.
    let input = dataset("apache_access.log")[..1 << 20].to_vec();
    let (mut qat, mut zlib) = (Vec::new(), Vec::new());
    registry()
        .get(ProviderKind::Qat)
        .unwrap()
        .compress(&input, 6, &mut qat)
        .unwrap();
    ZlibProvider.compress(&input, 6, &mut zlib).unwrap();
    let excess = qat.len() as f64 / zlib.len() as f64 - 1.0;
    assert!(
        excess < 0.06,
        "qat-6 is {:.1}% larger than zlib-6",
        excess * 100.0
    );
}

#[test]
fn qat_without_software_backup_fails_to_start_on_a_host_without_a_device() {
    let lib = qat_sys::load().expect("QATzip from .cache/qatzip");
    let err = QatProvider::with_library(
        lib,
        QatConfig {
            software_backup: false,
        },
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(
        err,
        ProviderError::Unavailable {
            provider: ProviderKind::Qat,
            ..
        }
    ));
    assert!(
        msg.contains("QZ_NOSW_NO_HW") && msg.contains("software backup is off"),
        "{msg}"
    );
}

#[test]
fn missing_library_directory_gives_a_clear_error() {
    let empty = std::env::temp_dir().join(format!("kpress-no-qatzip-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let err = qat_sys::load_from_dir(&empty).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, qat_sys::LoadError::NotFound { .. }), "{msg}");
    assert!(
        msg.contains("libqatzip.so.3")
            && msg.contains("QATZIP_LIB_DIR")
            && msg.contains(&*empty.to_string_lossy()),
        "{msg}"
    );
    std::fs::remove_dir(&empty).unwrap();
}

#[test]
fn qat_sessions_are_per_thread_and_work_concurrently() {
    let qat = registry().get(ProviderKind::Qat).unwrap();
    let input = Arc::new(dataset("nginxplus_status.ndjson"));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (qat, input) = (qat.clone(), input.clone());
            std::thread::spawn(move || {
                for i in 0..5 {
                    let part = &input[(t * 5 + i) * 100_000..][..100_000];
                    let mut gz = Vec::new();
                    qat.compress(part, 1 + (i as u32 % 9), &mut gz).unwrap();
                    let mut out = Vec::new();
                    qat.decompress(&gz, part.len(), &mut out).unwrap();
                    assert!(out == part);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

/// Fault injection: a provider whose library fails every call, to check that the
/// batch is compressed by zlib instead and the fallback counted.
#[derive(Debug)]
struct FailingProvider;

impl GzipProvider for FailingProvider {
    fn kind(&self) -> ProviderKind {
        ProviderKind::Isal
    }
    fn deflate_raw(&self, _: &[u8], _: u32, out: &mut Vec<u8>) -> Result<(), DeflateError> {
        out.extend_from_slice(b"half-written");
        Err(DeflateError::Provider {
            provider: ProviderKind::Isal,
            reason: "injected failure".into(),
        })
    }
    fn inflate_raw(
        &self,
        _: &[u8],
        _: usize,
        _: Option<usize>,
        _: &mut Vec<u8>,
    ) -> Result<usize, DeflateError> {
        Err(DeflateError::Provider {
            provider: ProviderKind::Isal,
            reason: "injected failure".into(),
        })
    }
}

#[test]
fn a_failing_provider_falls_back_to_zlib_and_is_counted() {
    let input = dataset("apache_access.log")[..20_000].to_vec();
    let before = compress_fallbacks(ProviderKind::Isal);
    let mut out = b"hdr".to_vec();
    let used = compress_with_fallback(&FailingProvider, &input, 6, &mut out).unwrap();
    assert_eq!(used, ProviderKind::Zlib);
    assert_eq!(&out[..3], b"hdr");
    assert!(
        gunzip_with_flate2(&out[3..]) == input,
        "no partial output left behind"
    );
    assert!(compress_fallbacks(ProviderKind::Isal) > before);
    let mut back = Vec::new();
    decompress_with_fallback(&FailingProvider, &out[3..], input.len(), &mut back).unwrap();
    assert!(back == input);
    // Corrupt input stays an error after the fallback too.
    let err = decompress_with_fallback(
        &FailingProvider,
        b"\x1f\x8b\x08\0\0\0\0\0\0\xffjunk",
        100,
        &mut back,
    )
    .unwrap_err();
    assert!(matches!(err, DeflateError::Corrupt { .. }), "{err}");
}

#[test]
fn provider_names_parse_and_unknown_names_list_the_allowed_set() {
    for (name, choice) in [
        ("auto", ProviderChoice::Auto),
        ("qat", ProviderChoice::Named(ProviderKind::Qat)),
        ("isal", ProviderChoice::Named(ProviderKind::Isal)),
        (
            "libdeflate",
            ProviderChoice::Named(ProviderKind::Libdeflate),
        ),
        ("zlib", ProviderChoice::Named(ProviderKind::Zlib)),
    ] {
        assert_eq!(name.parse::<ProviderChoice>().unwrap(), choice);
        assert_eq!(choice.name(), name);
    }
    let msg = "zstd".parse::<ProviderChoice>().unwrap_err().to_string();
    assert!(
        msg.contains("\"zstd\"") && msg.contains("auto, qat, isal, libdeflate, zlib"),
        "{msg}"
    );
    assert_eq!(
        registry()
            .resolve(ProviderChoice::default())
            .unwrap()
            .kind(),
        ProviderKind::Zlib
    );
}

#[test]
fn statuses_without_probing_leave_qatzip_alone_until_something_asks() {
    let registry = Registry::detect();
    let before = registry.statuses_without_probing();
    assert_eq!(before.len(), 4);
    assert_eq!(before[0].provider, ProviderKind::Qat);
    assert!(!before[0].available && !before[0].hardware);
    assert_eq!(before[0].detail, ProviderError::NotProbed.to_string());
    assert!(before[1..].iter().all(|s| s.available && !s.hardware));
    // Asking for the statuses probes QATzip (software backup here: QZ_NO_HW) ...
    let probed = registry.statuses();
    assert!(
        probed[0].available && !probed[0].hardware,
        "{:?}",
        probed[0]
    );
    assert!(
        probed[0].detail.contains("QZ_NO_HW"),
        "{}",
        probed[0].detail
    );
    // ... and from then on the non-probing view reports the probe's result.
    assert_eq!(registry.statuses_without_probing(), probed);
}
