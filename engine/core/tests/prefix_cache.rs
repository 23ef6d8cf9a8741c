//! A slot keeps the tokens it holds, so that a prompt sharing their prefix reuses it:
//! `Slots::common_prefix`, `Slots::keep_first`, on the embedded model.

use std::sync::Arc;

use hydra_engine_core::{Model, Slots};

#[test]
fn keeping_a_prefix_then_prefilling_equals_a_fresh_prefill() {
    let model = Arc::new(Model::builtin().expect("builtin model"));
    let tok = model.tokenizer().clone();
    let mut slots = Slots::new(model, 2, 512).unwrap();
    let first = tok.encode("The cat sat on the mat.", true);
    let second = tok.encode("The cat sat on the hat, then left.", true);
    slots
        .prefill(slots.id(0).unwrap(), &first, 8, &mut ())
        .unwrap();
    assert_eq!(slots.cached_tokens(slots.id(0).unwrap()), Some(&first[..]));
    // A decode step is recorded too.
    slots.decode_step(slots.id(0).unwrap(), first[3]).unwrap();
    assert_eq!(
        slots.cached_tokens(slots.id(0).unwrap()).map(<[u32]>::len),
        Some(first.len() + 1)
    );

    let shared = slots.common_prefix(slots.id(0).unwrap(), &second);
    let expect = first
        .iter()
        .zip(&second)
        .take_while(|(a, b)| a == b)
        .count();
    assert_eq!(shared, expect);
    assert!(shared > 10 && shared < second.len(), "{shared}");

    slots.keep_first(slots.id(0).unwrap(), shared);
    assert_eq!(slots.n_past(slots.id(0).unwrap()), shared);
    assert_eq!(
        slots.last_logits(slots.id(0).unwrap()),
        None,
        "unknown after a cut"
    );
    let reused = slots
        .prefill(slots.id(0).unwrap(), &second[shared..], 8, &mut ())
        .unwrap();
    let fresh = slots
        .prefill(slots.id(1).unwrap(), &second, 8, &mut ())
        .unwrap();
    assert_eq!(
        reused, fresh,
        "the reused prefix gives the logits of a fresh prefill"
    );
    assert_eq!(slots.cached_tokens(slots.id(0).unwrap()), Some(&second[..]));

    // Keeping more than is held changes nothing; keeping none erases.
    slots.keep_first(slots.id(1).unwrap(), 10_000);
    assert_eq!(slots.n_past(slots.id(1).unwrap()), second.len());
    slots.keep_first(slots.id(1).unwrap(), 0);
    assert!(slots.is_empty(slots.id(1).unwrap()));
    assert_eq!(slots.cached_tokens(slots.id(1).unwrap()), Some(&[][..]));
    assert!(slots.id(2).is_err(), "no slot 2");
}
