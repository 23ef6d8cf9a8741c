//! The engine as a separate process (the `hydra-engine` binary, spawned), in one test
//! binary: serving, progress read from other processes, the OpenAI surface with real
//! clients, the demo, the CUDA build started without a GPU, and the workspace's import
//! graph.

mod cancel;
#[path = "../../core/tests/common/mod.rs"]
mod common;
mod cost_model;
mod cuda_binary;
mod demo;
mod import_graph;
mod invariants;
mod layers;
mod openai_api;
mod openai_clients;
mod server;
mod support;
mod tokenize_api;
