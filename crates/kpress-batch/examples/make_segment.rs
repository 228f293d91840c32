//! Cuts a line-oriented file into v2 record batches (one record per line, no key) of
//! about BATCH_BYTES uncompressed, compressed with CODEC, written back to back as a
//! log segment: input for `kpress recompress` by hand.
//!
//! cargo run -p kpress-batch --features test-util --example make_segment -- \
//!     LINES_FILE CODEC BATCH_BYTES OUT.log

use kpress_batch::builder::{encode_records, BatchBuilder, Record};
use kpress_codec::Codec;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, codec, batch_bytes, output] = &args[..] else {
        return Err("usage: make_segment LINES_FILE CODEC BATCH_BYTES OUT.log".into());
    };
    let codec: Codec = codec.parse()?;
    let batch_bytes: usize = batch_bytes.parse()?;
    let text = std::fs::read(input)?;

    let mut segment = Vec::new();
    let mut pending: Vec<Record> = Vec::new();
    let mut pending_bytes = 0;
    let mut offset = 0i64;
    let mut flush = |pending: &mut Vec<Record>,
                     segment: &mut Vec<u8>|
     -> Result<(), Box<dyn std::error::Error>> {
        if pending.is_empty() {
            return Ok(());
        }
        let raw = encode_records(pending);
        let batch = BatchBuilder {
            base_offset: offset,
            ..BatchBuilder::codec(codec)
        }
        .build_raw(&raw, pending.len() as i32, pending.len() as i32 - 1)?;
        offset += pending.len() as i64;
        segment.extend_from_slice(&batch);
        pending.clear();
        Ok(())
    };
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        pending_bytes += line.len() + 8;
        pending.push(Record::value(line));
        if pending_bytes >= batch_bytes {
            flush(&mut pending, &mut segment)?;
            pending_bytes = 0;
        }
    }
    flush(&mut pending, &mut segment)?;
    std::fs::write(output, &segment)?;
    println!("{} records, {} bytes of batches", offset, segment.len());
    Ok(())
}
