/* A stand-in libllama whose llama_decode takes as long as a transformer's forward would:
 * 1 ms + 20 us per token + 1 us per (token, cached position) pair it attends, slept for
 * real. After `fake_pause_after(n)` the n-th call from then calls the host's hook in the
 * middle of its work (the host stops there at a checkpoint while a reader looks).
 * llama_decode returns 1 for a batch of 77 tokens (no KV room), -1 for an empty one. */
#include <stdlib.h>
#include <time.h>

#include "llama.h"

struct llama_memory_i { int unused; };
struct llama_context {
    uint32_t n_seq;
    struct llama_memory_i mem;
    int64_t decoded;
};

static int pause_in = -1;
static void (*pause_hook)(void);

struct llama_context *fake_context_new(uint32_t n_seq) {
    struct llama_context *c = calloc(1, sizeof *c);
    c->n_seq = n_seq;
    return c;
}

int64_t fake_decoded(const struct llama_context *c) { return c->decoded; }

void fake_pause_after(int calls, void (*hook)(void)) {
    pause_in = calls;
    pause_hook = hook;
}

static void sleep_ns(long long ns) {
    struct timespec t = { (time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL) };
    while (nanosleep(&t, &t) != 0) { /* interrupted: sleep the rest */ }
}

int32_t llama_decode(struct llama_context *c, llama_batch b) {
    if (b.n_tokens <= 0) return -1;
    if (b.n_tokens == 77) return 1;
    long long pairs = 0;
    for (int32_t i = 0; i < b.n_tokens; i++) pairs += (b.pos ? b.pos[i] : 0) + 1;
    long long ns = 1000000LL + 20000LL * b.n_tokens + 1000LL * pairs;
    sleep_ns(ns / 2);
    if (pause_in > 0 && --pause_in == 0 && pause_hook) pause_hook();
    sleep_ns(ns - ns / 2);
    c->decoded += b.n_tokens;
    return 0;
}

uint32_t llama_n_seq_max(const struct llama_context *c) { return c->n_seq; }
uint32_t llama_n_ctx(const struct llama_context *c) { return 1024 * c->n_seq; }
uint32_t llama_n_ctx_seq(const struct llama_context *c) { (void)c; return 1024; }
struct llama_memory_i *llama_get_memory(const struct llama_context *c) {
    return (struct llama_memory_i *)&c->mem;
}
void llama_free(struct llama_context *c) { free(c); }
