/* A host that prefills and decodes over the timed stand-in libllama: a 64-token prompt and
 * 30 decode steps of sequence 0, then a 32-token prompt of sequence 1 and 12 decode batches
 * of both. It stops at a checkpoint inside the 25th decode step ("decode") and inside the
 * 10th batch ("batch") until a line arrives on stdin, and prints every return value. */
#include <stdio.h>

#include "llama.h"

void fake_pause_after(int calls, void (*hook)(void));

#define MAXT 128
static int32_t pos[MAXT], nseq[MAXT], ids[MAXT], *idp[MAXT];
static int n;
static const char *stop_name;

static void add(int32_t seq, int32_t p) {
    pos[n] = p; nseq[n] = 1; ids[n] = seq; idp[n] = &ids[n]; n++;
}

static int decode(struct llama_context *c) {
    llama_batch b = { n, NULL, NULL, pos, nseq, idp, NULL };
    n = 0;
    return llama_decode(c, b);
}

/* Tells the test where the call is, then waits for its go. */
static void stop_here(void) {
    char go[16];
    fprintf(stdout, "checkpoint %s\n", stop_name);
    if (fflush(stdout) == 0 && fgets(go, sizeof go, stdin) == NULL) { /* test gone */ }
}

/* `steps` decode calls of one token per sequence in [0, rows), sequence s from `from[s]`;
 * stops inside call `stop_at` (1-based) under `name`. Returns the calls' results or'ed. */
static int decode_steps(struct llama_context *c, int steps, int rows, const int32_t *from,
                        int stop_at, const char *name) {
    int ret = 0;
    stop_name = name;
    fake_pause_after(stop_at, stop_here);
    for (int k = 0; k < steps; k++) {
        for (int32_t s = 0; s < rows; s++) add(s, from[s] + k);
        ret |= decode(c);
    }
    return ret;
}

int main(void) {
    struct llama_context *a = fake_context_new(2);
    const int32_t after_prompts[2][2] = { { 64, 0 }, { 94, 32 } };
    for (int p = 0; p < 64; p++) add(0, p);
    printf("prompt %d\n", decode(a));
    printf("decode %d\n", decode_steps(a, 30, 1, after_prompts[0], 25, "decode"));
    for (int p = 0; p < 32; p++) add(1, p);
    printf("prompt %d\n", decode(a));
    printf("batch %d\n", decode_steps(a, 12, 2, after_prompts[1], 10, "batch"));
    printf("decoded %lld\n", (long long)fake_decoded(a));
    llama_free(a);
    return 0;
}
