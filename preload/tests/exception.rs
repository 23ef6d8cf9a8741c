//! An exception that unwinds through the `llama_decode` wrapper (a C++ exception from
//! llama.cpp, here a Rust panic through the same `C-unwind` ABI) ends the call: no step
//! stays in flight, the slot's task ends in error, the thread runs no tracked call any
//! more, and the next call is recorded as usual.

use hydra_layout::{ErrorCode, FinishReason, Phase, SegmentReader};
use hydra_preload::batch::OwnedBatch;
use hydra_preload::describe::ContextFacts;
use hydra_preload::ffi::{LlamaBatch, LlamaContext};
use hydra_preload::{interpose, layers};

/// Stands in for a `llama_decode` that throws.
unsafe extern "C-unwind" fn throwing_decode(_: *mut LlamaContext, _: LlamaBatch) -> i32 {
    panic!("an exception from inside llama_decode")
}

/// Stands in for a `llama_decode` that succeeds.
unsafe extern "C-unwind" fn ok_decode(_: *mut LlamaContext, _: LlamaBatch) -> i32 {
    0
}

#[test]
fn an_exception_through_llama_decode_ends_the_call_and_its_step() {
    let tmp = tempfile::tempdir().expect("temp dir");
    std::env::set_var("HYDRA_PROGRESS_DIR", tmp.path());
    std::env::set_var("HYDRA_ENGINE_ID", "exception-test");
    let ctx_cell = Box::new(0u8);
    let ctx = &*ctx_cell as *const u8 as *mut LlamaContext;
    let facts = || ContextFacts {
        n_seqs: 2,
        n_ctx_seq: 4096,
        n_ctx: 8192,
        ..Default::default()
    };
    // A 16-token prompt chunk of sequence 0.
    let tokens: Vec<(i32, i32)> = (0..16).map(|p| (p, 0)).collect();
    let mut batch = OwnedBatch::single(&tokens);
    let raw = batch.raw();

    let thrown = std::panic::catch_unwind(|| {
        // SAFETY: the stand-in reads nothing; `raw` points into `batch`, alive here.
        unsafe { interpose::decode_with(throwing_decode, ctx, raw, facts) }
    });
    assert!(thrown.is_err(), "the exception reaches the host");
    assert!(layers::call_context().is_none(), "no call left in flight");
    let r = SegmentReader::open_engine(tmp.path(), "exception-test").expect("segment");
    let s = r.slot(0).expect("slot 0").state;
    assert_eq!(s.step_start_ns, 0, "no step left in flight: {s:?}");
    assert_eq!(
        (s.phase, s.finish_reason, s.error_code),
        (Phase::Idle, FinishReason::Error, ErrorCode::Compute),
        "{s:?}"
    );

    // The next call is recorded as usual.
    // SAFETY: as above.
    let ret = unsafe { interpose::decode_with(ok_decode, ctx, raw, facts) };
    assert_eq!(ret, 0);
    let s = r.slot(0).expect("slot 0").state;
    assert_eq!(
        (s.phase, s.work_done, s.step_start_ns),
        (Phase::Prefill, 16, 0),
        "{s:?}"
    );
}
