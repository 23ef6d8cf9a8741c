#!/usr/bin/env python3
"""The GPU device check: measures the CUDA build of hydra-engine on one GPU.

    device_check.py --bundle DIR --out DIR [--deadline SECONDS] [--device cuda:0]

Run by scripts/device-check.sh from an unpacked CUDA bundle (scripts/build-cuda.sh
bundle). It writes a ~1B-parameter random-weight llama GGUF (the bundle's make_gguf.py,
model `llama-1b`), then, on the GPU:

  decode        decode tok/s (3 rounds of 128 tokens; median), publishing on
  prefill_512   prefill tok/s of a 512-token prompt (median of 3)
  prefill_4096  prefill tok/s of a 4096-token prompt (median of 2)
  four_slots    4 slots decoding at once: aggregate tok/s over the wall clock
  probe         a separate `hydra-probe watch` process reading slot 0's progress during a
                7680-token prefill: how many distinct progress values it saw
  publish_off   decode tok/s of an engine started with --no-publish beside one publishing,
                in ABBA order (4 rounds of 128 tokens each); median on/off ratio
  greedy        the embedded model's greedy tokens on the GPU and on the CPU, 32 steps
                (greedy_model: the same on the 1B model, whose tokens vary more)
  kv_state      a KV state saved on the GPU restored on the CPU and the other way round:
                the next 8 greedy tokens on both sides, and the largest difference
                between the two devices' saved values (kv_state_model: on the 1B model)

Every step is bounded (its own timeout, and an overall deadline) and records its failure
in the JSON instead of stopping the others. Results: OUT/device-check.json and
OUT/device-check.md (a table), rewritten after every step so that a run cut short still
leaves what it measured; engine logs in OUT/logs/. The model and the segments live in a
temporary directory, removed at the end.
"""

import argparse
import json
import os
import platform
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

STATE_DIR_NAME = "progress"
ENGINE_ID = "device-check"


class StepFailed(Exception):
    """A step could not produce its measurement."""


class Deadline:
    """The run's overall time limit; every wait asks it how long it may take."""

    def __init__(self, seconds):
        self.end = time.monotonic() + seconds

    def left(self):
        return self.end - time.monotonic()

    def cap(self, seconds):
        left = self.left()
        if left <= 1:
            raise StepFailed("the run's deadline has passed")
        return min(seconds, left)


def http(method, url, body=None, timeout=60.0, raw=False):
    """One request; returns (status, JSON or bytes). Network errors raise StepFailed."""
    data = None
    headers = {}
    if body is not None:
        if isinstance(body, (bytes, bytearray)):
            data = bytes(body)
            headers["Content-Type"] = "application/octet-stream"
        else:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            payload = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        payload = e.read()
        status = e.code
    except (urllib.error.URLError, OSError) as e:
        raise StepFailed(f"{method} {url}: {e}") from e
    if raw:
        return status, payload
    try:
        return status, json.loads(payload or b"null")
    except ValueError:
        return status, payload.decode(errors="replace")


def ok(status, body, what):
    if status != 200:
        raise StepFailed(f"{what}: HTTP {status}: {str(body)[:300]}")
    return body


class Engine:
    """`run hydra-engine serve ...` on 127.0.0.1:0, stopped on exit of the `with` block."""

    def __init__(self, ctx, name, args, start_timeout):
        self.ctx = ctx
        self.name = name
        self.log_out = os.path.join(ctx.logs, f"{name}.out")
        self.log_err = os.path.join(ctx.logs, f"{name}.err")
        self.progress_dir = os.path.join(ctx.work, f"{STATE_DIR_NAME}-{name}")
        os.makedirs(self.progress_dir, exist_ok=True)
        cmd = [ctx.run, "hydra-engine", "serve", "--listen", "127.0.0.1:0",
               "--engine-id", ENGINE_ID, "--progress-dir", self.progress_dir] + args
        t0 = time.monotonic()
        with open(self.log_out, "wb") as out, open(self.log_err, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
        self.base = None
        limit = time.monotonic() + ctx.deadline.cap(start_timeout)
        while time.monotonic() < limit:
            text = read(self.log_out)
            m = re.search(r"^listening on (http://\S+)", text, re.M)
            if m:
                self.base = m.group(1)
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        self.start_seconds = time.monotonic() - t0
        if self.base is None:
            self.stop()
            raise StepFailed(f"engine {name} did not start (exit {self.proc.returncode}): "
                             f"{tail(read(self.log_err))}")

    def device_line(self):
        """The start-up line naming the GPU (`cuda:0: NVIDIA ..., ... GiB memory`)."""
        for line in read(self.log_err).splitlines():
            if re.match(r"^cuda:\d+: ", line):
                return line
        return None

    def url(self, path):
        return self.base + path

    def call(self, method, path, body=None, timeout=120.0, raw=False):
        return http(method, self.url(path), body, self.ctx.deadline.cap(timeout), raw)

    def erase(self, slot):
        ok(*self.call("POST", f"/slots/{slot}?action=erase"), f"erase slot {slot}")

    def completion(self, tokens, n_predict, slot=0, timeout=120.0):
        body = {"tokens": tokens, "n_predict": n_predict, "ignore_eos": True,
                "temperature": 0.0, "id_slot": slot}
        return ok(*self.call("POST", "/completion", body, timeout), f"completion on slot {slot}")

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def tail(text, n=5):
    return " | ".join(text.strip().splitlines()[-n:])


def prompt(n, seed):
    """n token ids of the llama-spm vocabulary (ordinary pieces, no control tokens)."""
    rng = random.Random(seed)
    return [1] + [rng.randrange(300, 31000) for _ in range(n - 1)]


class Context:
    def __init__(self, args):
        self.bundle = os.path.abspath(args.bundle)
        self.out = os.path.abspath(args.out)
        self.logs = os.path.join(self.out, "logs")
        os.makedirs(self.logs, exist_ok=True)
        self.work = tempfile.mkdtemp(prefix="hydra-device-check-")
        self.run = os.path.join(self.bundle, "run")
        self.device = args.device
        self.deadline = Deadline(args.deadline)
        self.model_name = args.model
        self.model = None
        self.results = {
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "host": platform.node(),
            "device": args.device,
            "build": "; ".join(read(os.path.join(self.bundle, "BUILD-INFO")).split("\n")).strip("; "),
            "steps": {},
        }

    def step(self, name, fn):
        """Runs one step; records its result or its failure, then rewrites the outputs."""
        t0 = time.monotonic()
        try:
            if self.deadline.left() <= 5:
                raise StepFailed("skipped: the run's deadline has passed")
            result = {"ok": True}
            result.update(fn(self))
        except Exception as e:  # every failure is a result; the next step still runs
            result = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        result["seconds"] = round(time.monotonic() - t0, 2)
        self.results["steps"][name] = result
        print(f"device-check: {name}: {'ok' if result['ok'] else result['error']} "
              f"({result['seconds']} s)", file=sys.stderr, flush=True)
        self.write()
        return result

    def write(self):
        self.results["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        path = os.path.join(self.out, "device-check.json")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(self.results, f, indent=2)
        os.replace(path + ".tmp", path)
        with open(os.path.join(self.out, "device-check.md"), "w", encoding="utf-8") as f:
            f.write(table(self.results))


def table(results):
    """The Markdown table of the headline figures."""
    s = results["steps"]

    def get(step, key, fmt="{:.1f}"):
        r = s.get(step) or {}
        if not r.get("ok"):
            return "failed: " + r.get("error", "not run")[:80] if r else "not run"
        v = r.get(key)
        return fmt.format(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)

    rows = [
        ("GPU", get("gpu", "device_line", "{}")),
        ("model", get("make_model", "description", "{}")),
        ("engine start (load) s", get("decode", "engine_start_s")),
        ("decode tok/s (1 slot, 128 tokens, median of 3)", get("decode", "tok_s")),
        ("prefill tok/s, 512 tokens", get("prefill_512", "tok_s")),
        ("prefill tok/s, 4096 tokens", get("prefill_4096", "tok_s")),
        ("4 slots at once: aggregate decode tok/s", get("four_slots", "aggregate_tok_s")),
        ("hydra-probe during a 7680-token prefill: distinct progress values seen",
         get("probe", "distinct_prefill_values", "{}")),
        ("decode tok/s, --no-publish", get("publish_off", "tok_s")),
        ("publishing on/off decode ratio", get("publish_off", "ratio_on_off", "{:.3f}")),
        ("greedy 32 tokens: CUDA == CPU (embedded model)", get("greedy", "equal", "{}")),
        ("greedy 32 tokens: CUDA == CPU (1B model)", get("greedy_model", "equal", "{}")),
        ("KV state CUDA -> CPU: next 8 tokens equal (embedded; 1B)",
         get("kv_state", "cuda_to_cpu_equal", "{}") + "; "
         + get("kv_state_model", "cuda_to_cpu_equal", "{}")),
        ("KV state CPU -> CUDA: next 8 tokens equal (embedded; 1B)",
         get("kv_state", "cpu_to_cuda_equal", "{}") + "; "
         + get("kv_state_model", "cpu_to_cuda_equal", "{}")),
        ("KV state values, max abs CUDA - CPU (1B)",
         get("kv_state_model", "max_abs_difference", "{:.2e}")),
    ]
    lines = [f"# hydra-engine device check ({results['device']}, {results['started_utc']})", "",
             f"Build: {results['build'] or 'unknown'}", "",
             "| measurement | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in rows]
    return "\n".join(lines) + "\n"


# ---- steps -------------------------------------------------------------------------


def step_gpu(ctx):
    out = {}
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        out["nvidia_smi"] = smi.stdout.strip() or smi.stderr.strip()
    except (OSError, subprocess.TimeoutExpired) as e:
        out["nvidia_smi"] = f"unavailable: {e}"
    lib = subprocess.run([ctx.run, "--library-path"], capture_output=True, text=True, timeout=60)
    if lib.returncode != 0:
        raise StepFailed(lib.stderr.strip())
    out["library_path"] = lib.stdout.strip()
    # The engine's own description of the GPU: start the embedded model, read the line.
    with Engine(ctx, "gpu-probe", ["--builtin", "--device", ctx.device, "--slots", "1"], 120) as e:
        out["device_line"] = e.device_line()
        out["engine_start_s"] = round(e.start_seconds, 2)
    if not out["device_line"]:
        raise StepFailed("the engine printed no device line")
    return out


def step_make_model(ctx):
    path = os.path.join(ctx.work, f"{ctx.model_name}.gguf")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ctx.bundle, "python") + os.pathsep + env.get("PYTHONPATH", "")
    script = os.path.join(ctx.bundle, "models", "make_gguf.py")
    p = subprocess.run(
        [sys.executable, script, "--vocab-dir", os.path.join(ctx.bundle, "models"),
         "--out", ctx.work, ctx.model_name],
        capture_output=True, text=True, env=env, timeout=ctx.deadline.cap(300))
    if p.returncode != 0 or not os.path.isfile(path):
        raise StepFailed(f"make_gguf.py exit {p.returncode}: {tail(p.stderr)}")
    ctx.model = path
    size = os.path.getsize(path)
    return {"path": path, "bytes": size,
            "description": f"{ctx.model_name}: random Q8_0 weights, {size / 2**30:.2f} GiB"}


def model_engine(ctx, name, slots, extra=()):
    if not ctx.model:
        raise StepFailed("no model (make_model failed)")
    args = ["--model", ctx.model, "--device", ctx.device, "--slots", str(slots),
            "--ctx", "8192", "--ubatch", "512"] + list(extra)
    return Engine(ctx, name, args, 240)


def decode_rounds(e, rounds, n_predict=128):
    """Median decode tok/s over `rounds` runs on slot 0 (after a warm-up that loads kernels)."""
    e.erase(0)
    e.completion(prompt(16, 1), 8)
    rates = []
    for r in range(rounds):
        e.erase(0)
        body = e.completion(prompt(16, 100 + r), n_predict)
        rates.append(body["timings"]["predicted_per_second"])
    return statistics.median(rates), rates


def prefill_rate(e, n, rounds):
    rates = []
    for r in range(rounds):
        e.erase(0)
        body = e.completion(prompt(n, 200 + r), 1, timeout=300)
        rates.append(body["timings"]["prompt_per_second"])
    return statistics.median(rates), rates


def step_main_engine(ctx):
    """decode, prefill_512, prefill_4096, four_slots and probe on one engine (one load)."""
    with model_engine(ctx, ctx.model_name, 4) as e:
        def decode(_):
            med, rates = decode_rounds(e, 3)
            return {"tok_s": med, "rounds": rates, "engine_start_s": round(e.start_seconds, 2),
                    "device_line": e.device_line()}

        def prefill(n, rounds):
            def run(_):
                med, rates = prefill_rate(e, n, rounds)
                return {"tok_s": med, "rounds": rates, "tokens": n}
            return run

        ctx.step("decode", decode)
        ctx.step("prefill_512", prefill(512, 3))
        ctx.step("prefill_4096", prefill(4096, 2))
        ctx.step("four_slots", lambda _: four_slots(ctx, e))
        ctx.step("probe", lambda _: probe_during_prefill(ctx, e))
    return {}


def four_slots(ctx, e):
    n_predict = 64
    for s in range(4):
        e.erase(s)
    results, errors = [None] * 4, []

    def one(s):
        try:
            results[s] = e.completion(prompt(16, 300 + s), n_predict, slot=s, timeout=300)
        except Exception as ex:  # recorded below
            errors.append(f"slot {s}: {ex}")

    threads = [threading.Thread(target=one, args=(s,)) for s in range(4)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(ctx.deadline.cap(320))
    wall = time.monotonic() - t0
    if errors or any(r is None for r in results):
        raise StepFailed("; ".join(errors) or "a request did not finish")
    total = sum(len(r["tokens"]) for r in results)
    return {"aggregate_tok_s": total / wall, "wall_s": wall, "tokens": total,
            "per_request_tok_s": [r["timings"]["predicted_per_second"] for r in results]}


def probe_during_prefill(ctx, e):
    """`hydra-probe --json watch` (its own process) polls the segment while slot 0
    prefills 7680 tokens; counts the distinct prefill progress values it saw."""
    e.erase(0)
    watch_out = os.path.join(ctx.logs, "probe-watch.jsonl")
    with open(watch_out, "wb") as out:
        watcher = subprocess.Popen(
            [ctx.run, "hydra-probe", "--dir", e.progress_dir, "--json", "watch", ENGINE_ID,
             "--interval", "10ms", "--count", "12000"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True)
    try:
        time.sleep(0.3)
        body = e.completion(prompt(7680, 400), 1, timeout=300)
    finally:
        time.sleep(0.2)
        if watcher.poll() is None:
            os.killpg(watcher.pid, signal.SIGTERM)
        try:
            watcher.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(watcher.pid, signal.SIGKILL)
            watcher.wait(timeout=10)
    seen, snapshots, bad = [], 0, 0
    decoder = json.JSONDecoder()
    text, pos = read(watch_out), 0
    while pos < len(text):
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            break
        try:
            view, pos = decoder.raw_decode(text, pos)
        except ValueError:
            bad += 1
            nl = text.find("\n", pos)
            pos = len(text) if nl < 0 else nl + 1
            continue
        snapshots += 1
        for slot in view.get("slots", []):
            st = slot.get("state") or {}
            if slot.get("slot") == 0 and st.get("phase") == "prefill":
                seen.append(st.get("work_done"))
    distinct = sorted(set(v for v in seen if isinstance(v, int)))
    monotonic = all(a <= b for a, b in zip(seen, seen[1:]))
    if not distinct:
        raise StepFailed(f"the probe saw no prefill progress ({snapshots} snapshots, "
                         f"{bad} unreadable; see logs/probe-watch.jsonl)")
    return {"distinct_prefill_values": len(distinct), "max_seen": distinct[-1],
            "total": 7680, "snapshots": snapshots, "unreadable": bad,
            "monotonic": monotonic, "prefill_tok_s": body["timings"]["prompt_per_second"]}


def step_publish_off(ctx):
    """Decode tok/s with publishing on and off: two engines loaded side by side (the GPU
    has room for both), decoding in turn in ABBA order so drift hits both alike."""
    with model_engine(ctx, ctx.model_name + "-publish", 1) as on, \
            model_engine(ctx, ctx.model_name + "-no-publish", 1, ["--no-publish"]) as off:
        rates = {"on": [], "off": []}
        for e in (on, off):
            e.erase(0)
            e.completion(prompt(16, 1), 8)
        for r, name in enumerate(["on", "off", "off", "on", "on", "off", "off", "on"]):
            e = on if name == "on" else off
            e.erase(0)
            rates[name].append(e.completion(prompt(16, 600 + r), 128)["timings"]["predicted_per_second"])
    pairs = [a / b for a, b in zip(rates["on"], rates["off"])]
    return {"tok_s": statistics.median(rates["off"]), "tok_s_on": statistics.median(rates["on"]),
            "ratio_on_off": statistics.median(pairs), "pair_ratios": pairs, "rounds": rates}


def state_payload(state):
    """The f32 values of a saved KV state (KV caches, then the last logits): the bytes
    between the header (its length is the u32 at offset 12) and the 8-byte checksum."""
    import numpy as np
    if len(state) < 16:
        raise StepFailed(f"a state of {len(state)} bytes has no header")
    header_len = int.from_bytes(state[12:16], "little")
    body = state[header_len:len(state) - 8]
    if header_len > len(state) - 8 or len(body) % 4:
        raise StepFailed(f"state of {len(state)} bytes with header length {header_len}")
    return state[:header_len], np.frombuffer(body, dtype="<f4")


def compare_devices(ctx, label, names, gpu_args, cpu_args, request):
    """Greedy tokens on the GPU and the CPU engine for the same request (32 steps), then a
    KV state saved on each restored on the other, and the next 8 greedy tokens on both."""
    with Engine(ctx, f"{label}-gpu", gpu_args, 240) as g, \
            Engine(ctx, f"{label}-cpu", cpu_args, 240) as c:

        def greedy(_):
            body = dict(request, n_predict=32, ignore_eos=True, temperature=0.0, id_slot=0)
            a = ok(*g.call("POST", "/completion", body, 300), "gpu completion")
            b = ok(*c.call("POST", "/completion", body, 300), "cpu completion")
            first_diff = next((i for i, (x, y) in enumerate(zip(a["tokens"], b["tokens"]))
                               if x != y), None)
            return {"equal": a["tokens"] == b["tokens"], "first_difference": first_diff,
                    "distinct_tokens": len(set(a["tokens"])),
                    "cuda_tokens": a["tokens"], "cpu_tokens": b["tokens"]}

        def kv_state(_):
            out = {}
            saved = {}
            for name, e in (("cuda", g), ("cpu", c)):
                status, state = e.call("GET", "/slots/0/state", raw=True)
                if status != 200:
                    raise StepFailed(f"save on {name}: HTTP {status}: {state[:200]!r}")
                saved[name] = state
            (hg, vg), (hc, vc) = state_payload(saved["cuda"]), state_payload(saved["cpu"])
            out["same_header"] = hg == hc
            out["same_length"] = len(saved["cuda"]) == len(saved["cpu"])
            if len(vg) == len(vc) and len(vg):
                out["max_abs_difference"] = float(abs(vg - vc).max())
                out["max_abs_value"] = float(abs(vc).max())
            for src, dst, name, key in ((g, c, "cuda", "cuda_to_cpu"),
                                        (c, g, "cpu", "cpu_to_cuda")):
                ok(*dst.call("PUT", "/slots/1/state", saved[name], 120), f"{key}: restore")
                step = {"n_predict": 8, "ignore_eos": True, "temperature": 0.0}
                a = ok(*src.call("POST", "/slots/0/decode", step, 120), f"{key}: source")
                b = ok(*dst.call("POST", "/slots/1/decode", step, 120), f"{key}: restored")
                out[key + "_equal"] = a["tokens"] == b["tokens"]
                out[key + "_tokens"] = [a["tokens"], b["tokens"]]
                dst.erase(1)
            out["state_bytes"] = len(saved["cpu"])
            return out

        ctx.step(names[0], greedy)
        ctx.step(names[1], kv_state)
    return {}


def step_builtin_devices(ctx):
    """The embedded model (the issue's 32-step greedy check)."""
    text = {"prompt": "The progress of a prefill is published after every chunk"}
    return compare_devices(ctx, "builtin", ("greedy", "kv_state"),
                           ["--builtin", "--device", ctx.device, "--slots", "2"],
                           ["--builtin", "--device", "cpu", "--slots", "2"], text)


def step_model_devices(ctx):
    """The random ~1B model: its greedy tokens vary, so agreement means more."""
    if not ctx.model:
        raise StepFailed("no model (make_model failed)")
    common = ["--model", ctx.model, "--slots", "2", "--ctx", "1024"]
    return compare_devices(ctx, "model", ("greedy_model", "kv_state_model"),
                           common + ["--device", ctx.device],
                           common + ["--device", "cpu"], {"tokens": prompt(16, 500)})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", required=True, help="the unpacked CUDA bundle")
    ap.add_argument("--out", required=True, help="directory for the results")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--deadline", type=float, default=480.0,
                    help="seconds for the whole run (default 480)")
    ap.add_argument("--model", default="llama-1b",
                    help="make_gguf.py model to measure (default llama-1b; a small one "
                         "such as llama-spm checks the script itself on a CPU)")
    args = ap.parse_args()
    # A SIGTERM (a time limit) unwinds like an exception, so every engine is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ctx = Context(args)
    ctx.step("gpu", step_gpu)
    ctx.step("make_model", step_make_model)
    ctx.step("main_engine", step_main_engine)
    ctx.step("publish_off", step_publish_off)
    ctx.step("builtin_devices", step_builtin_devices)
    ctx.step("model_devices", step_model_devices)
    ctx.write()
    shutil.rmtree(ctx.work, ignore_errors=True)  # the model and the segments
    failed = [k for k, v in ctx.results["steps"].items() if not v.get("ok")]
    print(f"device-check: {len(ctx.results['steps']) - len(failed)} steps ok, "
          f"{len(failed)} failed{': ' + ', '.join(failed) if failed else ''}", file=sys.stderr)
    print(read(os.path.join(ctx.out, "device-check.md")))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
