//! `request_frame`: a client's request frame through kpress's framing, header peek,
//! and for Produce the `acks` read and the records walk and splice, each partition
//! rewritten by kpress-batch under the policy the input picks.

use std::sync::Arc;

use kpress_batch::{batches, Outcome, ProduceAllowance, Recompressor, RewritePolicy};
use kpress_protocol::frame::{
    check_frame, frame_body_len, peek_request_header, RequestHeader, SIZE_PREFIX_LEN,
};
use kpress_protocol::{
    api_key, produce_acks, produce_allows_zstd, rewrite_produce_with, Fault, ProtocolError,
    RecordsRewriter, PRODUCE_MAX_VERSION, PRODUCE_MIN_VERSION,
};

use crate::batch_rewrite::fix_crc;
use crate::check::{check_rewrite, Expected};
use crate::choice::{policy_choice, request_choice, RequestChoice};

/// Input: the policy byte, the request byte (see `choice`), then one request frame
/// (size prefix, header, body) as a client sends it.
///
/// Invariants: no panic; the framing functions agree with each other and the header
/// lies inside the frame. For Produce: a request the walk refuses was not handed to
/// the rewriter; each partition's new records are what kpress-batch's outcomes say
/// (see `check`); when no partition changed the splice is `None`; otherwise the new
/// frame is one whole frame with the same header, `acks` and partitions, holding
/// exactly the rewritten records where they changed and the original bytes elsewhere.
pub fn request_frame(data: &[u8]) {
    let [policy_byte, request_byte, frame @ ..] = data else {
        return;
    };
    let choice = policy_choice(*policy_byte);
    let request = request_choice(*request_byte);
    let mut frame = frame.to_vec();
    if choice.repair {
        if let Some(size) = frame
            .len()
            .checked_sub(SIZE_PREFIX_LEN)
            .and_then(|n| i32::try_from(n).ok())
        {
            frame[..SIZE_PREFIX_LEN].copy_from_slice(&size.to_be_bytes());
        }
    }
    let max = kpress_config::MAX_FRAME_BYTES_DEFAULT;
    let Ok(Some(frame_len)) = check_frame(&frame, max) else {
        return;
    };
    let prefix = frame
        .first_chunk::<SIZE_PREFIX_LEN>()
        .expect("a whole frame has a prefix");
    assert_eq!(
        frame_body_len(*prefix, max),
        Ok(frame_len - SIZE_PREFIX_LEN),
        "check_frame and frame_body_len disagree"
    );
    frame.truncate(frame_len);
    let mut payload = frame.split_off(SIZE_PREFIX_LEN);
    let Ok(header) = peek_request_header(&payload) else {
        return;
    };
    if let Some(header_len) = header.header_len {
        assert!(
            (8..=payload.len()).contains(&header_len),
            "header of {header_len} bytes in a {}-byte payload",
            payload.len()
        );
    }
    if header.api_key != api_key::PRODUCE {
        return;
    }
    let header_len = header
        .header_len
        .expect("Produce is a known API, so its header length is known");
    if choice.repair {
        repair_batches(&mut payload, header_len, header.api_version);
    }
    rewrite_produce(&payload, header, header_len, &choice.policy, request);
}

/// v13 topic ids are named when their first byte is even, so both the named and
/// the unknown-id paths run.
fn topic_name(id: &[u8; 16]) -> Option<Arc<str>> {
    id[0]
        .is_multiple_of(2)
        .then(|| Arc::from(format!("topic-{:02x}", id[0]).as_str()))
}

fn rewrite_produce(
    payload: &[u8],
    header: RequestHeader,
    header_len: usize,
    policy: &RewritePolicy,
    request: RequestChoice,
) {
    let version = header.api_version;
    let acks = produce_acks(&payload[header_len..], version).ok();
    let mut rewriter = FuzzRewriter {
        payload,
        policy,
        recompressor: Recompressor::new(),
        allowance: request.per_partition.then(|| {
            ProduceAllowance::new(produce_allows_zstd(version), request.decompress_budget)
        }),
        version,
        budget: request.decompress_budget,
        decompressed: 0,
        calls: Vec::new(),
    };
    let result = rewrite_produce_with(payload, header_len, version, &topic_name, &mut rewriter);
    let splice = match result {
        Ok(splice) => splice,
        // Only records past i32::MAX bytes fail to encode; no input here has them.
        Err(e) if e.fault() == Fault::Proxy => panic!("kpress failed on its own side: {e}"),
        Err(e) => {
            assert!(
                rewriter.calls.is_empty(),
                "records were rewritten in a request then refused: {e}"
            );
            return;
        }
    };
    assert!(
        (PRODUCE_MIN_VERSION..=PRODUCE_MAX_VERSION).contains(&version),
        "Produce v{version} was accepted"
    );
    let changed = rewriter.calls.iter().any(|call| call.new_records.is_some());
    let Some(new_frame) = splice.frame.as_deref() else {
        assert!(
            !changed,
            "records were rewritten but the splice returned no frame"
        );
        return;
    };
    assert!(changed, "a frame was spliced though no partition changed");
    assert_eq!(
        check_frame(new_frame, usize::MAX),
        Ok(Some(new_frame.len())),
        "the spliced frame's size prefix does not frame it"
    );
    let new_payload = &new_frame[SIZE_PREFIX_LEN..];
    assert_eq!(splice.payload(), Some(new_payload));
    assert_eq!(
        peek_request_header(new_payload).ok(),
        Some(header),
        "the spliced frame's header changed"
    );
    assert_eq!(
        &new_payload[..header_len],
        &payload[..header_len],
        "header bytes changed"
    );
    assert_eq!(
        produce_acks(&new_payload[header_len..], version).ok(),
        acks,
        "acks changed"
    );

    let (fields, again) = records_fields(new_payload, header_len, version)
        .expect("kpress cannot walk the request it spliced");
    assert!(again.frame.is_none());
    assert_eq!(
        again.unknown_topic_ids, splice.unknown_topic_ids,
        "the spliced request names other topics"
    );
    assert_eq!(
        fields.len(),
        rewriter.calls.len(),
        "the spliced request has other partitions"
    );
    for (i, (range, call)) in fields.iter().zip(&rewriter.calls).enumerate() {
        let now = &new_payload[range.clone()];
        let expected = call
            .new_records
            .as_deref()
            .unwrap_or(&payload[call.records.clone()]);
        assert!(
            now == expected,
            "partition {i}'s records are not what the rewrite made"
        );
    }
}

/// One `rewrite_records` call: where its records were and what replaced them.
#[derive(Debug)]
struct Call {
    records: std::ops::Range<usize>,
    new_records: Option<Vec<u8>>,
}

/// Rewrites each partition as kpress-proxy does, checking every outcome.
struct FuzzRewriter<'a> {
    payload: &'a [u8],
    policy: &'a RewritePolicy,
    recompressor: Recompressor,
    /// `Some`: each partition through `rewrite_partition` with this allowance.
    allowance: Option<ProduceAllowance>,
    version: i16,
    budget: usize,
    /// Decompressed bytes of the batches rewritten so far.
    decompressed: usize,
    calls: Vec<Call>,
}

impl RecordsRewriter for FuzzRewriter<'_> {
    fn rewrite_records(&mut self, _topic: &str, records: &[u8], out: &mut Vec<u8>) -> bool {
        let start = out.len();
        let mut outcomes = Vec::new();
        let record = |outcome: &Outcome, size| outcomes.push((*outcome, size));
        let produce_version = match &mut self.allowance {
            Some(allowance) => {
                self.recompressor
                    .rewrite_partition(records, self.policy, allowance, out, record);
                assert_eq!(outcomes.len(), 1, "rewrite_partition reports one outcome");
                Some(self.version)
            }
            None => {
                self.recompressor
                    .rewrite_each(records, self.policy, out, record);
                None
            }
        };
        let expected = Expected {
            policy: self.policy,
            produce_version,
        };
        self.decompressed += check_rewrite(records, &out[start..], &outcomes, expected);
        if self.allowance.is_some() {
            assert!(
                self.decompressed <= self.budget,
                "the request's batches decompressed to {} bytes, over its budget of {}",
                self.decompressed,
                self.budget
            );
        }
        let changed = outcomes
            .iter()
            .any(|(outcome, _)| matches!(outcome, Outcome::Rewritten { .. }));
        self.calls.push(Call {
            records: offset_in(self.payload, records),
            new_records: changed.then(|| out[start..].to_vec()),
        });
        changed
    }
}

/// Where `part` (a subslice of `whole`) lies in it.
fn offset_in(whole: &[u8], part: &[u8]) -> std::ops::Range<usize> {
    let start = (part.as_ptr() as usize)
        .checked_sub(whole.as_ptr() as usize)
        .filter(|start| start + part.len() <= whole.len())
        .expect("the rewriter was handed records outside the request");
    start..start + part.len()
}

/// Walks a Produce payload without changing it: where each non-empty records field
/// the rewriter would see lies, and the walk's own result.
fn records_fields(
    payload: &[u8],
    header_len: usize,
    version: i16,
) -> Result<(Vec<std::ops::Range<usize>>, kpress_protocol::ProduceSplice), ProtocolError> {
    struct Collect<'a> {
        payload: &'a [u8],
        fields: Vec<std::ops::Range<usize>>,
    }
    impl RecordsRewriter for Collect<'_> {
        fn rewrite_records(&mut self, _topic: &str, records: &[u8], _out: &mut Vec<u8>) -> bool {
            self.fields.push(offset_in(self.payload, records));
            false
        }
    }
    let mut collect = Collect {
        payload,
        fields: Vec::new(),
    };
    let splice = rewrite_produce_with(payload, header_len, version, &topic_name, &mut collect)?;
    Ok((collect.fields, splice))
}

/// Fixes the CRC of every batch in every records field, so mutated records reach
/// the codecs.
fn repair_batches(payload: &mut [u8], header_len: usize, version: i16) {
    let Ok((fields, _)) = records_fields(payload, header_len, version) else {
        return;
    };
    for field in fields {
        let records = &mut payload[field];
        let mut at = 0;
        let sizes: Vec<usize> = batches(records)
            .map_while(Result::ok)
            .map(|batch| batch.bytes().len())
            .collect();
        for size in sizes {
            fix_crc(&mut records[at..at + size]);
            at += size;
        }
    }
}
