#!/usr/bin/env python3
"""Write small random-weight GGUF models that carry a real vocabulary.

Each model copies every `tokenizer.*` key of one of llama.cpp's vocab-only
files (models/ggml-vocab-<name>.gguf) and adds seeded random weights for one
architecture, small enough to run in a test (2 layers, width 64); SIZED adds a
~1B-parameter llama for measuring a GPU, and the embedded model's shape with a
byte vocabulary both engines read, for comparing them on it
(scripts/bench-vs-llamacpp.sh --embedded-shape). The engine's
tests compare these files' greedy tokens and logits with candle-transformers'
own quantized models.

    make_gguf.py [--vocab-dir DIR] --out DIR [NAME ...]
    make_gguf.py --version

Writes OUT/<NAME>.gguf for every NAME of MODELS (all by default) or SIZED that
is not there yet. Needs the `gguf` and `numpy` packages (pip install gguf numpy).
The output depends only on this file: bump VERSION when the models change.
"""

import argparse
import os
import struct
import sys

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("make_gguf.py: the `gguf` package is missing (pip install gguf numpy)")

VERSION = 2

# In place of a vocab file: `<unk>`, `<s>`, `</s>`, the 256 byte tokens `<0xNN>` (byte
# fallback: every text tokenizes into them) and the SentencePiece space, 260 tokens.
BYTES = "bytes"

# Llama 3.1's scaling, with an original context short enough that the head's
# frequencies fall in all three bands (kept, blended, divided).
LLAMA3 = ("llama3", 8.0, 1.0, 4.0, 256)

# name: (architecture, vocab file, shape and options). Models with the same `seed`
# have the same weights, so the RoPE variants can be compared with each other.
MODELS = {
    # Llama 2 / Mistral style: SentencePiece vocabulary, separate output matrix.
    "llama-spm": ("llama", "llama-spm", dict(tied=False)),
    # Llama 3 style: byte-level BPE (llama-bpe), grouped-query attention, theta 500000.
    "llama-bpe": ("llama", "llama-bpe", dict(tied=False, theta=500000.0)),
    # Qwen2.5 style: Q/K/V biases, tied embeddings.
    "qwen2": ("qwen2", "qwen2", dict(tied=True, theta=1000000.0)),
    # Qwen3 style: per-head Q/K norms, head size 32 (not width / heads), tied embeddings.
    "qwen3": ("qwen3", "qwen2", dict(tied=True, theta=1000000.0, head_dim=32)),
    # `mistral` is read as llama: the llama-spm weights under the other name.
    "mistral": ("mistral", "llama-spm", dict(tied=False, seed="llama-spm")),
    # RoPE scaling, each spelled two ways: as metadata and as llama.cpp's converter
    # writes it (`rope_freqs.weight`, one divisor per rotated pair).
    "llama-linear": ("llama", "llama-spm", dict(tied=False, seed="llama-spm", scaling=("linear", 4.0))),
    "llama-linear-freqs": ("llama", "llama-spm", dict(tied=False, seed="llama-spm", freqs=("linear", 4.0))),
    "llama-llama3": ("llama", "llama-spm", dict(tied=False, seed="llama-spm", scaling=LLAMA3)),
    "llama-llama3-freqs": ("llama", "llama-spm", dict(tied=False, seed="llama-spm", freqs=LLAMA3)),
}

# Shape of the test models: (layers, width, heads, KV heads, feed-forward width, context).
SMALL = (2, 64, 4, 2, 128, 512)
# TinyLlama-1.1B's shape: the ~1B-parameter model of the GPU device check
# (scripts/device-check.sh), with a context long enough for a 4096-token prefill.
ONE_B = (22, 2048, 32, 4, 5632, 8192)

# The embedded model's shape (engine/core/src/model/builtin.rs).
EMBEDDED = (4, 256, 8, 4, 768, 4096)

# The smallest shape K-quants fit (rows of whole 256-weight super-blocks).
K_SMALL = (2, 256, 4, 2, 512, 512)

# Models written only when named (too large for the test suite, or for benchmarks only),
# in MODELS' form.
SIZED = {
    # reuse: one random matrix per shape, shared by every layer (a 22x faster write).
    "llama-1b": ("llama", "llama-spm", dict(tied=False, shape=ONE_B, reuse=True)),
    # The embedded model's shape and weight type, with a SentencePiece vocabulary of its
    # size (260) that llama.cpp also reads: hydra-engine's embedded model has a byte
    # tokenizer of its own, which llama.cpp does not know.
    "embedded-shape": ("llama", BYTES, dict(tied=True, shape=EMBEDDED, qtype="Q4_0", eps=1e-5)),
    # llama.cpp's Q4_K_M mixture: Q4_K, with Q6_K for the output matrix and for attn_v and
    # ffn_down of the first layer (llama.cpp gives them more bits in some layers).
    "llama-q4km": ("llama", "llama-spm", dict(tied=False, shape=K_SMALL, qtype="Q4_K_M")),
}


def f16_bytes(v):
    """float32 array -> its f16 values' little-endian bytes, (n, 2) uint8."""
    return v.astype("<f2").view(np.uint8).reshape(-1, 2)


def quantize_q4_k(x):
    """(rows, cols) float32 -> ggml Q4_K blocks as (rows, cols / 256 * 144) uint8.

    Each block of 32 gets its range's scale and minimum, the super-block's d and dmin the
    largest of them over 63, and each weight its nearest 4-bit quant under the stored
    (rounded) scales: weight = d * sc * q - dmin * m."""
    rows, cols = x.shape
    b = x.reshape(-1, 8, 32).astype(np.float32)
    lo = np.minimum(b.min(axis=2), 0.0)
    scale = (b.max(axis=2) - lo) / 15.0
    d = (scale.max(axis=1) / 63.0).astype(np.float16).astype(np.float32)
    dmin = ((-lo).max(axis=1) / 63.0).astype(np.float16).astype(np.float32)
    safe = lambda v: np.where(v == 0, 1.0, v)
    sc = np.clip(np.rint(scale / safe(d)[:, None]), 0, 63).astype(np.uint8)
    m = np.clip(np.rint(-lo / safe(dmin)[:, None]), 0, 63).astype(np.uint8)
    step = d[:, None] * sc
    q = np.rint((b + (dmin[:, None] * m)[:, :, None]) / safe(step)[:, :, None])
    q = np.where(step[:, :, None] == 0, 0, np.clip(q, 0, 15)).astype(np.uint8)
    s = np.zeros((b.shape[0], 12), dtype=np.uint8)
    s[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    s[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    s[:, 8:12] = (sc[:, 4:8] & 0x0F) | ((m[:, 4:8] & 0x0F) << 4)
    q = q.reshape(-1, 4, 2, 32)
    qs = (q[:, :, 0, :] | (q[:, :, 1, :] << 4)).reshape(-1, 128)
    out = np.concatenate([f16_bytes(d), f16_bytes(dmin), s, qs], axis=1)
    return out.reshape(rows, cols // 256 * 144)


def quantize_q6_k(x):
    """(rows, cols) float32 -> ggml Q6_K blocks as (rows, cols / 256 * 210) uint8:
    weight = d * s * (q - 32), a signed 8-bit s per 16 weights."""
    rows, cols = x.shape
    b = x.reshape(-1, 16, 16).astype(np.float32)
    sub = np.abs(b).max(axis=2) / 31.0
    d = (sub.max(axis=1) / 127.0).astype(np.float16).astype(np.float32)
    safe = lambda v: np.where(v == 0, 1.0, v)
    sc = np.clip(np.rint(sub / safe(d)[:, None]), -128, 127).astype(np.int8)
    step = d[:, None] * sc.astype(np.float32)
    q = np.rint(b / safe(step)[:, :, None])
    q = (np.where(step[:, :, None] == 0, 0, np.clip(q, -32, 31)) + 32).astype(np.uint8)
    q = q.reshape(-1, 2, 4, 32)  # (super-block, half of 128, quarter, l)
    ql = np.concatenate(
        [q[:, :, 0] & 0x0F | ((q[:, :, 2] & 0x0F) << 4), q[:, :, 1] & 0x0F | ((q[:, :, 3] & 0x0F) << 4)],
        axis=2,
    ).reshape(-1, 128)
    qh = ((q[:, :, 0] >> 4) | ((q[:, :, 1] >> 4) << 2) | ((q[:, :, 2] >> 4) << 4) | ((q[:, :, 3] >> 4) << 6))
    out = np.concatenate([ql, qh.reshape(-1, 64), sc.view(np.uint8), f16_bytes(d)], axis=1)
    return out.reshape(rows, cols // 256 * 210)


# The K-quants this generator writes itself (the gguf package reads them but has no
# quantizer for them).
K_QUANTIZERS = {"Q4_K": quantize_q4_k, "Q6_K": quantize_q6_k}


def mixture_type(mixture, tname):
    """The weight type of tensor `tname` in a llama.cpp-style mixture ("Q4_K_M")."""
    if mixture != "Q4_K_M":
        return mixture
    more_bits = tname == "output.weight" or tname in ("blk.0.attn_v.weight", "blk.0.ffn_down.weight")
    return "Q6_K" if more_bits else "Q4_K"


# Scalar value types of the GGUF format: struct code by GGUFValueType.
SCALARS = {
    gguf.GGUFValueType.UINT8: "B", gguf.GGUFValueType.INT8: "b",
    gguf.GGUFValueType.UINT16: "H", gguf.GGUFValueType.INT16: "h",
    gguf.GGUFValueType.UINT32: "I", gguf.GGUFValueType.INT32: "i",
    gguf.GGUFValueType.FLOAT32: "f", gguf.GGUFValueType.BOOL: "?",
    gguf.GGUFValueType.UINT64: "Q", gguf.GGUFValueType.INT64: "q",
    gguf.GGUFValueType.FLOAT64: "d",
}


def read_metadata(path):
    """The key/value pairs of a GGUF file as (key, type, value, array element type).

    gguf.GGUFReader maps every string of a 150k-token vocabulary as its own numpy
    view (over a minute per file); the header is read directly here instead."""
    with open(path, "rb") as f:
        buf = f.read()
    if buf[:4] != b"GGUF":
        sys.exit(f"make_gguf.py: {path} is not a GGUF file")
    _version, _n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
    pos = 24

    def string():
        nonlocal pos
        (n,) = struct.unpack_from("<Q", buf, pos)
        pos += 8 + n
        return buf[pos - n:pos].decode("utf-8")

    def value(vtype):
        nonlocal pos
        if vtype == gguf.GGUFValueType.STRING:
            return string()
        if vtype == gguf.GGUFValueType.ARRAY:
            sys.exit("make_gguf.py: nested GGUF arrays are not supported")
        code = SCALARS[vtype]
        (v,) = struct.unpack_from("<" + code, buf, pos)
        pos += struct.calcsize(code)
        return v

    out = []
    for _ in range(n_kv):
        key = string()
        (vtype,) = struct.unpack_from("<I", buf, pos)
        pos += 4
        vtype = gguf.GGUFValueType(vtype)
        if vtype != gguf.GGUFValueType.ARRAY:
            out.append((key, vtype, value(vtype), None))
            continue
        sub, n = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        sub = gguf.GGUFValueType(sub)
        if sub in SCALARS:
            code = SCALARS[sub]
            items = list(struct.unpack_from(f"<{n}{code}", buf, pos))
            pos += n * struct.calcsize(code)
        else:
            items = [value(sub) for _ in range(n)]
        out.append((key, vtype, items, sub))
    return out


def copy_tokenizer(vocab_path, writer):
    """Copy every `tokenizer.*` key; returns the vocabulary size."""
    n_vocab = None
    for key, vtype, val, sub in read_metadata(vocab_path):
        if not key.startswith("tokenizer."):
            continue
        writer.add_key_value(key, val, vtype, sub_type=sub)
        if key == "tokenizer.ggml.tokens":
            n_vocab = len(val)
    if n_vocab is None:
        sys.exit(f"make_gguf.py: {vocab_path} has no tokenizer.ggml.tokens")
    return n_vocab


def write_byte_vocab(writer):
    """A SentencePiece (`llama`) vocabulary of the byte tokens alone; returns its size."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + ["\u2581"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL]
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    return len(tokens)


def rope_factors(scaling, head_dim, theta):
    """The divisors llama.cpp's converter stores in `rope_freqs.weight`
    (conversion/llama.py, `generate_extra_tensors`)."""
    freqs = 1.0 / (theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    if scaling[0] == "linear":
        return np.full(len(freqs), scaling[1], dtype=np.float32)
    _, factor, low, high, old_ctx = scaling
    low_wavelen, high_wavelen = old_ctx / low, old_ctx / high
    out = []
    for f in freqs:
        wavelen = 2 * np.pi / f
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def write_model(name, arch, vocab_path, opts, out_path):
    seed = opts.get("seed", name)
    rng = np.random.default_rng(sum(map(ord, seed)) * 7919 + VERSION)
    tmp = f"{out_path}.{os.getpid()}.tmp"  # tests may run two writers at once
    w = gguf.GGUFWriter(tmp, arch)
    w.add_name(f"hydra-test-{name}")
    n_vocab = write_byte_vocab(w) if vocab_path is None else copy_tokenizer(vocab_path, w)
    n_layer, n_embd, n_head, n_kv_head, n_ff, n_ctx = opts.get("shape", SMALL)
    head_dim = opts.get("head_dim", n_embd // n_head)
    q_dim, kv_dim = n_head * head_dim, n_kv_head * head_dim
    w.add_block_count(n_layer)
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_kv_head)
    w.add_rope_dimension_count(head_dim)
    theta = opts.get("theta", 10000.0)
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(opts.get("eps", 1e-6))
    # candle-transformers' quantized_qwen3 builds its RoPE tables in this dtype
    # (0 = f32; without the key, f16, which alone moves its logits by ~1%).
    w.add_uint32("general.dtype", 0)
    if "scaling" in opts:
        kind, factor = opts["scaling"][:2]
        w.add_string(f"{arch}.rope.scaling.type", kind)
        w.add_float32(f"{arch}.rope.scaling.factor", factor)
        if kind == "llama3":
            _, _, low, high, old_ctx = opts["scaling"]
            w.add_float32(f"{arch}.rope.scaling.low_freq_factor", low)
            w.add_float32(f"{arch}.rope.scaling.high_freq_factor", high)
            w.add_uint32(f"{arch}.rope.scaling.original_context_length", old_ctx)
    if "head_dim" in opts:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)

    made = {}
    mixture = opts.get("qtype", "Q8_0")

    def mat(tname, rows, cols, std):
        name = mixture_type(mixture, tname)
        qtype = gguf.GGMLQuantizationType[name]
        quantize = K_QUANTIZERS.get(name, lambda data: gguf.quants.quantize(data, qtype))
        q = made.get((rows, cols, std)) if opts.get("reuse") else None
        if q is None:
            data = (rng.standard_normal((rows, cols)) * std).astype(np.float32)
            q = made[rows, cols, std] = quantize(data)
        w.add_tensor(tname, q, raw_shape=q.shape, raw_dtype=qtype)

    def vec(tname, n, mean, std):
        data = (mean + rng.standard_normal(n) * std).astype(np.float32)
        w.add_tensor(tname, data)

    if "freqs" in opts:
        w.add_tensor("rope_freqs.weight", rope_factors(opts["freqs"], head_dim, theta))
    mat("token_embd.weight", n_vocab, n_embd, 1.0)
    if not opts["tied"]:
        mat("output.weight", n_vocab, n_embd, 1.0 / np.sqrt(n_embd))
    vec("output_norm.weight", n_embd, 1.0, 0.1)
    for i in range(n_layer):
        p = f"blk.{i}"
        mat(f"{p}.attn_q.weight", q_dim, n_embd, 1.0 / np.sqrt(n_embd))
        mat(f"{p}.attn_k.weight", kv_dim, n_embd, 1.0 / np.sqrt(n_embd))
        mat(f"{p}.attn_v.weight", kv_dim, n_embd, 1.0 / np.sqrt(n_embd))
        mat(f"{p}.attn_output.weight", n_embd, q_dim, 1.0 / np.sqrt(q_dim))
        mat(f"{p}.ffn_gate.weight", n_ff, n_embd, 1.0 / np.sqrt(n_embd))
        mat(f"{p}.ffn_up.weight", n_ff, n_embd, 1.0 / np.sqrt(n_embd))
        mat(f"{p}.ffn_down.weight", n_embd, n_ff, 1.0 / np.sqrt(n_ff))
        vec(f"{p}.attn_norm.weight", n_embd, 1.0, 0.1)
        vec(f"{p}.ffn_norm.weight", n_embd, 1.0, 0.1)
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
    ap.add_argument("--vocab-dir", help="directory of ggml-vocab-*.gguf (all but embedded-shape)")
    ap.add_argument("--out", help="output directory (needed to write)")
    ap.add_argument("--version", action="store_true", help="print the generator version")
    ap.add_argument(
        "names", nargs="*",
        help=f"models to write (default: all of {', '.join(MODELS)}; also {', '.join(SIZED)})",
    )
    args = ap.parse_args()
    if args.version:
        print(VERSION)
        return
    if not args.out:
        ap.error("--out is needed to write models")
    os.makedirs(args.out, exist_ok=True)
    known = {**MODELS, **SIZED}
    for name in args.names or MODELS:
        if name not in known:
            sys.exit(f"make_gguf.py: unknown model {name!r} (known: {', '.join(known)})")
        arch, vocab, opts = known[name]
        out_path = os.path.join(args.out, f"{name}.gguf")
        if os.path.exists(out_path):
            continue
        if vocab != BYTES and not args.vocab_dir:
            sys.exit(f"make_gguf.py: {name} needs --vocab-dir")
        vocab_path = None if vocab == BYTES else os.path.join(args.vocab_dir, f"ggml-vocab-{vocab}.gguf")
        write_model(name, arch, vocab_path, opts, out_path)
        print(out_path)


if __name__ == "__main__":
    main()
