/* The plain stand-in libllama (../fake/libllama.c, compiled with its llama_decode renamed
 * fake_plain_decode) behind a llama_decode that takes as long as a transformer's forward
 * would: 1 ms + 20 us per token + 1 us per (token, cached position) pair it attends, slept
 * for real. After `fake_pause_after(n, hook)` the n-th call from then calls `hook` halfway
 * through (the host stops there at a checkpoint while a reader looks). */
#include <time.h>

#include "llama.h"

int32_t fake_plain_decode(struct llama_context *c, llama_batch b);

static int pause_in = -1;
static void (*pause_hook)(void);

void fake_pause_after(int calls, void (*hook)(void)) {
    pause_in = calls;
    pause_hook = hook;
}

static void sleep_ns(long long ns) {
    struct timespec t = { (time_t)(ns / 1000000000LL), (long)(ns % 1000000000LL) };
    while (nanosleep(&t, &t) != 0) { /* interrupted: sleep the rest */ }
}

int32_t llama_decode(struct llama_context *c, llama_batch b) {
    long long pairs = 0, ns;
    for (int32_t i = 0; i < b.n_tokens; i++) pairs += (b.pos ? b.pos[i] : 0) + 1;
    ns = 1000000LL + 20000LL * (b.n_tokens > 0 ? b.n_tokens : 0) + 1000LL * pairs;
    sleep_ns(ns / 2);
    if (pause_in > 0 && --pause_in == 0 && pause_hook) pause_hook();
    sleep_ns(ns - ns / 2);
    return fake_plain_decode(c, b);
}
