"""Requests through the `openai` PyPI client whose timings the engine's statistics must match.

Run by fault/tests/exactness.rs against `hydra-engine serve` with 2 slots:

    python3 stats_client.py BASE_URL MODEL_ID WAVES SEED

Sends WAVES waves of 4 streamed completions at once (so that 2 of each wave wait for a
slot), each with its own prompt length and `max_tokens`, drawn from SEED. For each request
it measures, from just before the request is sent: the time to its first content chunk
and to the end of its stream, and counts the completion tokens the usage chunk reports.
It also measures the HTTP overhead: the median round trip of `GET /v1/models`.

Prints one JSON object: {"requests": [{"ttft_s", "e2e_s", "completion_tokens",
"prompt_tokens", "started_s"}...], "http_overhead_s"}.
"""

import json
import random
import statistics
import sys
import threading
import time

import openai

BASE, MODEL, WAVES, SEED = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
client = openai.OpenAI(base_url=BASE + "/v1", api_key="unused", max_retries=0, timeout=300)
WORDS = "the quick brown fox jumps over a lazy dog while seven small birds sing".split()


def one(prompt, max_tokens, out, barrier):
    barrier.wait()
    started = time.perf_counter()
    first = None
    usage = None
    stream = client.completions.create(
        model=MODEL,
        prompt=prompt,
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].text:
            first = time.perf_counter()
        if chunk.usage is not None:
            usage = chunk.usage
    ended = time.perf_counter()
    out.append(
        {
            "started_s": started,
            "ttft_s": None if first is None else first - started,
            "e2e_s": ended - started,
            "completion_tokens": usage.completion_tokens,
            "prompt_tokens": usage.prompt_tokens,
        }
    )


def main():
    rng = random.Random(SEED)
    results = []
    for _ in range(WAVES):
        barrier = threading.Barrier(4)
        threads = []
        for _ in range(4):
            prompt = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 120)))
            max_tokens = rng.randint(96, 192)
            t = threading.Thread(target=one, args=(prompt, max_tokens, results, barrier))
            t.start()
            threads.append(t)
        for t in threads:
            t.join()
    rtts = []
    for _ in range(20):
        started = time.perf_counter()
        client.models.list()
        rtts.append(time.perf_counter() - started)
    print(json.dumps({"requests": results, "http_overhead_s": statistics.median(rtts)}))


main()
