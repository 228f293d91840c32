//! `batch_rewrite`: `Recompressor::rewrite_batch`, `rewrite_each` and
//! `rewrite_partition` over arbitrary bytes, under every policy.

use kpress_batch::{Outcome, ProduceAllowance, Recompressor, RecordBatch, CRC_START, LOG_OVERHEAD};
use kpress_protocol::produce_allows_zstd;

use crate::check::{check_rewrite, Expected};
use crate::choice::{policy_choice, request_choice};

/// Input: the policy byte, the request byte (see `choice`), then the batch bytes.
///
/// Invariants, for each of the three entry points: a batch passed through is copied
/// byte for byte; a rewritten batch parses, has a valid CRC, keeps every header field
/// but the codec bits, length and CRC, holds the same records once decompressed, obeys
/// the policy (target, mode, limits, growth) and came from a batch whose CRC was valid;
/// the outcomes cover the input exactly. `rewrite_batch` and `rewrite_each` agree on a
/// single batch; `rewrite_partition` gives one outcome for the whole field and never
/// writes zstd below Produce v7.
pub fn batch_rewrite(data: &[u8]) {
    let [policy_byte, request_byte, batch @ ..] = data else {
        return;
    };
    let choice = policy_choice(*policy_byte);
    let request = request_choice(*request_byte);
    let policy = &choice.policy;
    let mut batch = batch.to_vec();
    if choice.repair {
        repair_batch(&mut batch);
    }
    let batch = &batch[..];
    let mut recompressor = Recompressor::new();
    let unversioned = Expected {
        policy,
        produce_version: None,
    };

    let mut single = Vec::new();
    let outcome = recompressor.rewrite_batch(batch, policy, &mut single);
    check_rewrite(batch, &single, &[(outcome, batch.len())], unversioned);

    let mut each = Vec::new();
    let mut outcomes = Vec::new();
    recompressor.rewrite_each(batch, policy, &mut each, |outcome, size| {
        outcomes.push((*outcome, size))
    });
    check_rewrite(batch, &each, &outcomes, unversioned);
    if let [(each_outcome, size)] = outcomes[..] {
        if size == batch.len() {
            assert_eq!(
                each_outcome, outcome,
                "rewrite_each and rewrite_batch disagree"
            );
            assert!(
                each == single,
                "rewrite_each and rewrite_batch wrote different bytes"
            );
        }
    }

    let mut allowance = ProduceAllowance::new(
        produce_allows_zstd(request.produce_version),
        request.decompress_budget,
    );
    let mut partition = Vec::new();
    let mut outcomes = Vec::new();
    recompressor.rewrite_partition(
        batch,
        policy,
        &mut allowance,
        &mut partition,
        |outcome, size| outcomes.push((*outcome, size)),
    );
    assert_eq!(
        outcomes.len(),
        1,
        "rewrite_partition reports one outcome per field"
    );
    let decompressed = check_rewrite(
        batch,
        &partition,
        &outcomes,
        Expected {
            policy,
            produce_version: Some(request.produce_version),
        },
    );
    if matches!(outcomes[0].0, Outcome::Rewritten { .. }) {
        assert!(
            decompressed <= request.decompress_budget,
            "{decompressed} bytes decompressed within a budget of {}",
            request.decompress_budget
        );
    }
}

/// Makes the length field frame the whole input and the CRC match, so that mutated
/// records reach the codecs instead of stopping at the framing and CRC checks.
fn repair_batch(batch: &mut [u8]) {
    let Some(length) = batch
        .len()
        .checked_sub(LOG_OVERHEAD)
        .and_then(|n| i32::try_from(n).ok())
    else {
        return;
    };
    if let Some(field) = batch.get_mut(8..12) {
        field.copy_from_slice(&length.to_be_bytes());
    }
    fix_crc(batch);
}

/// Sets the CRC of the batch at the start of `bytes`, if one parses there.
pub(crate) fn fix_crc(bytes: &mut [u8]) {
    if let Ok(parsed) = RecordBatch::parse(bytes) {
        let crc = parsed.computed_crc();
        // The CRC field is the 4 bytes before the span it covers.
        bytes[CRC_START - 4..CRC_START].copy_from_slice(&crc.to_be_bytes());
    }
}
