"""The engine's OpenAI-compatible surface, driven by the `openai` PyPI package.

Run by engine/cli/tests/openai_clients.rs against `hydra-engine serve --model
SmolLM2-135M-Instruct.Q4_1.gguf --slots 2`:

    python3 openai_client.py BASE_URL MODEL_ID N_CTX

Prints one `ok: <check>` line per check that passed; exits 1 with the reason at the
first one that fails.
"""

import concurrent.futures
import sys

import openai

BASE, MODEL, N_CTX = sys.argv[1], sys.argv[2], int(sys.argv[3])
client = openai.OpenAI(base_url=BASE + "/v1", api_key="unused", max_retries=0, timeout=300)
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


def check(cond, what):
    if not cond:
        print(f"FAILED: {what}", flush=True)
        sys.exit(1)


def ok(name):
    print(f"ok: {name}", flush=True)


def greedy_chat(messages, **kw):
    return client.chat.completions.create(model=MODEL, messages=messages, temperature=0, **kw)


# models
models = client.models.list()
ids = [m.id for m in models.data]
check(ids == [MODEL], f"models: {ids}")
ok("models")

# chat: the capital of France
r = greedy_chat(QUESTION, max_tokens=48)
answer = r.choices[0].message.content
check("Paris" in answer, f"chat answer: {answer!r}")
check(r.object == "chat.completion" and r.id.startswith("chatcmpl-"), f"chat shape: {r}")
check(r.choices[0].finish_reason in ("stop", "length"), f"finish: {r.choices[0].finish_reason}")
check(r.choices[0].message.role == "assistant", "role")
u = r.usage
check(u.prompt_tokens > 10 and u.completion_tokens > 0, f"usage: {u}")
check(u.total_tokens == u.prompt_tokens + u.completion_tokens, f"usage total: {u}")
ok(f"chat: {answer!r}")

# streaming: the concatenated deltas are the non-streamed greedy answer
chunks = list(
    client.chat.completions.create(
        model=MODEL, messages=QUESTION, temperature=0, max_tokens=48, stream=True,
        stream_options={"include_usage": True},
    )
)
text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
check(text == answer, f"streamed {text!r} != non-streamed {answer!r}")
check(all(c.object == "chat.completion.chunk" for c in chunks), "chunk objects")
check(len({c.id for c in chunks}) == 1, "one id for every chunk")
content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
check(len(content_chunks) >= 3, f"tokens arrive one by one: {len(content_chunks)} chunks")
check(chunks[0].choices[0].delta.role == "assistant", "the first chunk names the role")
finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
check(finishes == [r.choices[0].finish_reason], f"finish reasons: {finishes}")
last = chunks[-1]
check(last.choices == [] and last.usage is not None, f"the last chunk carries the usage: {last}")
check(last.usage.completion_tokens == u.completion_tokens, f"stream usage {last.usage} vs {u}")
check(all(c.usage is None for c in chunks[:-1]), "usage only in the last chunk")
ok(f"streaming: {len(chunks)} chunks")

# completions
c = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=6, temperature=0)
check(c.object == "text_completion" and c.choices[0].text, f"completion: {c}")
check(c.choices[0].finish_reason in ("stop", "length"), f"completion finish: {c.choices[0].finish_reason}")
check(c.usage.completion_tokens <= 6, f"completion usage: {c.usage}")
streamed = "".join(
    e.choices[0].text
    for e in client.completions.create(
        model=MODEL, prompt="The capital of France is", max_tokens=6, temperature=0, stream=True
    )
    if e.choices
)
check(streamed == c.choices[0].text, f"streamed completion {streamed!r} vs {c.choices[0].text!r}")
ok(f"completions: {c.choices[0].text!r}")

# stop: the answer ends before the stop string, which is not returned
long = greedy_chat(QUESTION, max_tokens=64).choices[0].message.content
words = long.split(" ")
check(len(words) >= 3, f"an answer long enough to stop in: {long!r}")
stop_word = " " + words[2]
s = greedy_chat(QUESTION, max_tokens=64, stop=[stop_word, "never-appears"])
stopped = s.choices[0].message.content
check(stopped == long[: long.index(stop_word)], f"stopped {stopped!r} (stop {stop_word!r} in {long!r})")
check(s.choices[0].finish_reason == "stop", f"stop finish: {s.choices[0].finish_reason}")
ss = "".join(
    ch.choices[0].delta.content or ""
    for ch in client.chat.completions.create(
        model=MODEL, messages=QUESTION, temperature=0, max_tokens=64, stop=stop_word, stream=True
    )
    if ch.choices
)
check(ss == stopped, f"streamed with stop {ss!r} vs {stopped!r}")
ok(f"stop: {stopped!r}")

# seed: the same seed samples the same answer; another seed another one
def sampled(seed):
    return client.chat.completions.create(
        model=MODEL, messages=QUESTION, temperature=1.0, seed=seed, max_tokens=24
    ).choices[0].message.content


a, b = sampled(42), sampled(42)
check(a == b, f"seed 42 twice: {a!r} vs {b!r}")
others = {sampled(s) for s in (1, 2, 3)}
check(len(others | {a}) > 1, f"different seeds, one answer: {others}")
ok("seed")

# logprobs: one entry per token, alternatives best first, the greedy token the best
lp = greedy_chat(QUESTION, max_tokens=8, logprobs=True, top_logprobs=3)
content = lp.choices[0].logprobs.content
check(len(content) == lp.usage.completion_tokens, f"{len(content)} logprobs, {lp.usage}")
for t in content:
    check(len(t.top_logprobs) == 3, f"top_logprobs: {t}")
    check(t.logprob <= 0 and t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob, f"{t}")
    check(t.top_logprobs[0].token == t.token, f"greedy picks the best: {t}")
    check(abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4, f"{t}")
check("".join(t.token for t in content) == lp.choices[0].message.content, "tokens spell the answer")
clp = client.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=4, temperature=0, logprobs=2)
l = clp.choices[0].logprobs
check(len(l.tokens) == len(l.token_logprobs) == len(l.top_logprobs) == clp.usage.completion_tokens, f"{l}")
ok("logprobs")

# four chats at once on two slots
prompts = ["What is the capital of France?", "Name a colour.", "What is 2 + 2?", "Say hello."]


def one(p):
    return greedy_chat([{"role": "user", "content": p}], max_tokens=24).choices[0].message.content


with concurrent.futures.ThreadPoolExecutor(4) as pool:
    answers = list(pool.map(one, prompts))
check(all(a.strip() for a in answers), f"concurrent answers: {answers}")
check("Paris" in answers[0], f"concurrent France: {answers[0]!r}")
ok(f"four concurrent chats: {answers}")

# bad input: 400 in OpenAI's shape, and the engine keeps serving
bad = {
    "empty messages": {"messages": []},
    "unknown role": {"messages": [{"role": "wizard", "content": "hi"}]},
    "wrong type": {"messages": [{"role": "user", "content": 5}]},
    "n=2": {"messages": QUESTION, "n": 2},
    "negative max_tokens": {"messages": QUESTION, "max_tokens": -1},
    "prompt longer than the context": {
        "messages": [{"role": "user", "content": "word " * (N_CTX + 10)}]
    },
}
for name, body in bad.items():
    try:
        client.chat.completions.create(model=MODEL, **body)
        check(False, f"{name}: accepted")
    except openai.BadRequestError as e:
        check(e.status_code == 400, f"{name}: {e.status_code}")
        err = e.body
        check(isinstance(err, dict) and err.get("type") == "invalid_request_error", f"{name}: {err}")
        check(isinstance(err.get("message"), str) and err["message"], f"{name}: {err}")
        check("param" in err and "code" in err, f"{name}: {err}")
check("Paris" in greedy_chat(QUESTION, max_tokens=48).choices[0].message.content, "serving after bad input")
ok("bad input")
print("all passed", flush=True)
