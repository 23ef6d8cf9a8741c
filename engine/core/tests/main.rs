//! The engine core's tests, in one test binary (one link of candle): the library API on
//! the embedded model and on written GGUF files, the real SmolLM2 model, model families
//! against candle-transformers, and tokenizers against llama.cpp's vocab test vectors.

mod common;
mod engine;
mod families;
mod prefix_cache;
mod smollm2;
mod tokenizer;
mod vocab_vectors;
