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
static const char *next_checkpoint;

static void add(int32_t seq, int32_t p) {
    pos[n] = p; nseq[n] = 1; ids[n] = seq; idp[n] = &ids[n]; n++;
}

static int decode(struct llama_context *c) {
    llama_batch b = { n, NULL, NULL, pos, nseq, idp, NULL };
    n = 0;
    return llama_decode(c, b);
}

static void checkpoint(void) {
    char line[64];
    printf("checkpoint %s\n", next_checkpoint);
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) { /* test gone: carry on */ }
}

int main(void) {
    struct llama_context *a = fake_context_new(2);
    int ret = 0;
    for (int p = 0; p < 64; p++) add(0, p);
    printf("prompt %d\n", decode(a));
    next_checkpoint = "decode";
    fake_pause_after(25, checkpoint);
    for (int k = 0; k < 30; k++) {
        add(0, 64 + k);
        ret |= decode(a);
    }
    printf("decode %d\n", ret);
    for (int p = 0; p < 32; p++) add(1, p);
    printf("prompt %d\n", decode(a));
    next_checkpoint = "batch";
    fake_pause_after(10, checkpoint);
    for (int k = 0; k < 12; k++) {
        add(0, 94 + k);
        add(1, 32 + k);
        ret |= decode(a);
    }
    printf("batch %d\n", ret);
    printf("decoded %lld\n", (long long)fake_decoded(a));
    llama_free(a);
    return 0;
}
