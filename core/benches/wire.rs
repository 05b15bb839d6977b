//! Wire benchmarks: signed-frame verification against raw `verify_strict`, batch against
//! single verification, frame signing against a raw Ed25519 signature of the same bytes, and
//! decode throughput of an unsigned 16 KiB data frame.
//!
//! Run with `cargo bench -p outpost-core --bench wire`.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use ed25519_dalek::Signature;
use outpost_core::json::parse_strict;
use outpost_core::keyset::{KeySet, PinnedRoots, test_root};
use outpost_core::sign::{FRAME_DOMAIN, FrameSigner, FrameVerifier, signing_input};
use outpost_core::time::UnixTime;
use outpost_core::wire::{DaemonFrame, FrameDecoder, ServerFrame, encode_frame};

const NOW: UnixTime = UnixTime(1_000);

fn keys() -> KeySet {
    let doc = test_root::key_set_document(1, UnixTime(0), UnixTime(1 << 40));
    KeySet::from_document(
        &doc,
        &PinnedRoots::default().with_test_root_if_local("localhost", true),
    )
    .unwrap()
}

fn commit(i: usize) -> ServerFrame {
    ServerFrame::RunCommit {
        run_id: format!("run_01JD8Z3Q4W7{i:08}").into(),
    }
}

fn signed_frames(n: usize) -> Vec<Vec<u8>> {
    let mut signer = FrameSigner::new("sess_01JD8Z3Q4W7A5B6C7D8E9F0G1H");
    let key = test_root::frame_signer();
    (0..n)
        .map(|i| signer.sign(&commit(i), &key).unwrap())
        .collect()
}

fn verification(c: &mut Criterion) {
    let frames = signed_frames(1);
    let frame = frames[0].clone();
    // The raw baseline: verify_strict over exactly the bytes the frame's signature covers.
    let mut value = parse_strict(&frame).unwrap();
    let sig = outpost_core::b64::decode_array::<64>(value.remove("sig").unwrap().as_str().unwrap())
        .unwrap();
    let sig = Signature::from_bytes(&sig);
    let input = signing_input(FRAME_DOMAIN, &value);
    let key = test_root::frame_signer().verifying_key();
    let verifier = FrameVerifier::new(keys(), "sess_01JD8Z3Q4W7A5B6C7D8E9F0G1H");

    let mut g = c.benchmark_group("verify");
    g.bench_function("raw_verify_strict", |b| {
        b.iter(|| {
            key.verify_strict(black_box(&input), black_box(&sig))
                .unwrap()
        })
    });
    g.bench_function("signed_frame", |b| {
        b.iter_batched_ref(
            || verifier.clone(),
            |v| v.verify(black_box(&frame), NOW).unwrap(),
            BatchSize::SmallInput,
        )
    });
    g.finish();

    const BATCH: usize = 64;
    let frames = signed_frames(BATCH);
    let refs: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
    let mut g = c.benchmark_group("queue_of_64");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function("one_by_one", |b| {
        b.iter_batched_ref(
            || verifier.clone(),
            |v| {
                for f in &refs {
                    v.verify(black_box(f), NOW).unwrap();
                }
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("batch", |b| {
        b.iter_batched_ref(
            || verifier.clone(),
            |v| {
                let out = v.verify_batch(black_box(&refs), NOW);
                assert!(out.iter().all(Result::is_ok));
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

/// What signing a frame costs above the signature itself: the raw baseline signs exactly the
/// bytes a `run.commit` frame's signature covers.
fn signing(c: &mut Criterion) {
    // An in-memory signer's `sign` is one `SigningKey::sign`: the raw signature.
    use outpost_core::sign::Signer as _;
    let frame = signed_frames(1).remove(0);
    let mut value = parse_strict(&frame).unwrap();
    value.remove("sig");
    let input = signing_input(FRAME_DOMAIN, &value);
    let raw = test_root::frame_signer();
    let key = test_root::frame_signer();
    let keystroke = ServerFrame::PtyInput {
        pty_id: "run_01JD8Z3Q4W7A5B6C7D8E9F0G1H".into(),
        data: outpost_core::b64::encode(b"a"),
    };

    let mut g = c.benchmark_group("sign");
    g.bench_function("raw_sign", |b| {
        b.iter(|| raw.sign(black_box(&input)).unwrap())
    });
    g.bench_function("run_commit", |b| {
        let mut signer = FrameSigner::new("sess_01JD8Z3Q4W7A5B6C7D8E9F0G1H");
        b.iter(|| signer.sign(black_box(&commit(7)), &key).unwrap())
    });
    g.bench_function("pty_input_1_byte", |b| {
        let mut signer = FrameSigner::new("sess_01JD8Z3Q4W7A5B6C7D8E9F0G1H");
        b.iter(|| signer.sign(black_box(&keystroke), &key).unwrap())
    });
    g.finish();
}

fn decode(c: &mut Criterion) {
    // An unsigned pty.output frame of 16 KiB on the wire.
    let mut data_len = 12_000;
    let frame = loop {
        let payload: Vec<u8> = (0..data_len).map(|i| (i * 7 % 251) as u8).collect();
        let f = DaemonFrame::PtyOutput {
            pty_id: "pty_1".into(),
            data: outpost_core::b64::encode(&payload),
        }
        .to_json();
        if f.len() >= 16 * 1024 {
            break f;
        }
        data_len += 1;
    };
    let mut stream = Vec::new();
    encode_frame(&frame, 1 << 20, &mut stream).unwrap();

    let mut g = c.benchmark_group("decode");
    g.throughput(Throughput::Bytes(stream.len() as u64));
    g.bench_function("data_frame_16k", |b| {
        let mut dec = FrameDecoder::default();
        b.iter(|| {
            let mut input = black_box(stream.as_slice());
            let body = dec.decode(&mut input).unwrap().unwrap();
            // A data frame is decoded down to its payload bytes.
            match DaemonFrame::from_json(&body).unwrap() {
                DaemonFrame::PtyOutput { data, .. } => {
                    black_box(outpost_core::b64::decode(&data).unwrap())
                }
                _ => unreachable!("the frame is pty.output"),
            }
        })
    });
    g.finish();
}

criterion_group!(benches, verification, signing, decode);
criterion_main!(benches);
