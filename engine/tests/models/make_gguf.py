#!/usr/bin/env python3
"""Write small random-weight GGUF models that carry a real vocabulary.

Each model copies every `tokenizer.*` key of one of llama.cpp's vocab-only
files (models/ggml-vocab-<name>.gguf) and adds seeded random weights for one
architecture, small enough to run in a test (2 layers, width 64). The engine's
tests compare these files' greedy tokens and logits with candle-transformers'
own quantized models.

    make_gguf.py --vocab-dir DIR --out DIR [NAME ...]

Writes OUT/<NAME>.gguf for every NAME of MODELS (all by default) that is not
there yet. Needs the `gguf` and `numpy` packages (pip install gguf numpy).
The output depends only on this file: bump VERSION when the models change.
"""

import argparse
import os
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("make_gguf.py: the `gguf` package is missing (pip install gguf numpy)")

VERSION = 1

# name: (architecture, vocab file, shape and options)
MODELS = {
    # Llama 2 / Mistral style: SentencePiece vocabulary, separate output matrix.
    "llama-spm": ("llama", "llama-spm", dict(tied=False)),
    # Llama 3 style: byte-level BPE (llama-bpe), grouped-query attention, theta 500000.
    "llama-bpe": ("llama", "llama-bpe", dict(tied=False, theta=500000.0)),
    # Qwen2.5 style: Q/K/V biases, tied embeddings.
    "qwen2": ("qwen2", "qwen2", dict(tied=True, theta=1000000.0)),
    # Qwen3 style: per-head Q/K norms, head size 32 (not width / heads), tied embeddings.
    "qwen3": ("qwen3", "qwen2", dict(tied=True, theta=1000000.0, head_dim=32)),
}

N_LAYER, N_EMBD, N_HEAD, N_KV_HEAD, N_FF, N_CTX = 2, 64, 4, 2, 128, 512


def copy_tokenizer(reader, writer):
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(name, field.contents(), vtype, sub_type=field.types[1])
        else:
            writer.add_key_value(name, field.contents(), vtype)
    n_vocab = len(reader.fields["tokenizer.ggml.tokens"].data)
    return n_vocab


def write_model(name, arch, vocab_path, opts, out_path):
    rng = np.random.default_rng(sum(map(ord, name)) * 7919 + VERSION)
    reader = gguf.GGUFReader(vocab_path)
    tmp = out_path + ".tmp"
    w = gguf.GGUFWriter(tmp, arch)
    w.add_name(f"hydra-test-{name}")
    n_vocab = copy_tokenizer(reader, w)
    head_dim = opts.get("head_dim", N_EMBD // N_HEAD)
    q_dim, kv_dim = N_HEAD * head_dim, N_KV_HEAD * head_dim
    w.add_block_count(N_LAYER)
    w.add_context_length(N_CTX)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_KV_HEAD)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(opts.get("theta", 10000.0))
    w.add_layer_norm_rms_eps(1e-6)
    if "head_dim" in opts:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)

    def mat(tname, rows, cols, std):
        data = (rng.standard_normal((rows, cols)) * std).astype(np.float32)
        q = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor(tname, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)

    def vec(tname, n, mean, std):
        data = (mean + rng.standard_normal(n) * std).astype(np.float32)
        w.add_tensor(tname, data)

    mat("token_embd.weight", n_vocab, N_EMBD, 1.0)
    if not opts["tied"]:
        mat("output.weight", n_vocab, N_EMBD, 1.0 / np.sqrt(N_EMBD))
    vec("output_norm.weight", N_EMBD, 1.0, 0.1)
    for i in range(N_LAYER):
        p = f"blk.{i}"
        mat(f"{p}.attn_q.weight", q_dim, N_EMBD, 1.0 / np.sqrt(N_EMBD))
        mat(f"{p}.attn_k.weight", kv_dim, N_EMBD, 1.0 / np.sqrt(N_EMBD))
        mat(f"{p}.attn_v.weight", kv_dim, N_EMBD, 1.0 / np.sqrt(N_EMBD))
        mat(f"{p}.attn_output.weight", N_EMBD, q_dim, 1.0 / np.sqrt(q_dim))
        mat(f"{p}.ffn_gate.weight", N_FF, N_EMBD, 1.0 / np.sqrt(N_EMBD))
        mat(f"{p}.ffn_up.weight", N_FF, N_EMBD, 1.0 / np.sqrt(N_EMBD))
        mat(f"{p}.ffn_down.weight", N_EMBD, N_FF, 1.0 / np.sqrt(N_FF))
        vec(f"{p}.attn_norm.weight", N_EMBD, 1.0, 0.1)
        vec(f"{p}.ffn_norm.weight", N_EMBD, 1.0, 0.1)
        if arch == "qwen2":
            vec(f"{p}.attn_q.bias", q_dim, 0.0, 0.5)
            vec(f"{p}.attn_k.bias", kv_dim, 0.0, 0.5)
            vec(f"{p}.attn_v.bias", kv_dim, 0.0, 0.5)
        if arch == "qwen3":
            vec(f"{p}.attn_q_norm.weight", head_dim, 1.0, 0.1)
            vec(f"{p}.attn_k_norm.weight", head_dim, 1.0, 0.1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, out_path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab-dir", required=True, help="directory of ggml-vocab-*.gguf")
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--version", action="store_true", help="print the generator version")
    ap.add_argument("names", nargs="*", help=f"models to write (default: all of {', '.join(MODELS)})")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name in args.names or MODELS:
        if name not in MODELS:
            sys.exit(f"make_gguf.py: unknown model {name!r} (known: {', '.join(MODELS)})")
        arch, vocab, opts = MODELS[name]
        out_path = os.path.join(args.out, f"{name}.gguf")
        if os.path.exists(out_path):
            continue
        vocab_path = os.path.join(args.vocab_dir, f"ggml-vocab-{vocab}.gguf")
        write_model(name, arch, vocab_path, opts, out_path)
        print(out_path)


if __name__ == "__main__":
    main()
