/* A host that drives the stand-in libllama through a fixed scenario, printing every
 * return value, and stops at two checkpoints until a line arrives on stdin. */
#include <stdio.h>
#include <string.h>

#include "llama.h"

#define MAXT 128
static int32_t tok[MAXT], pos[MAXT], nseq[MAXT], ids[MAXT];
static int32_t *idp[MAXT];
static float embd[MAXT * 4];

/* n tokens of sequence `seq` at positions p0.. */
static llama_batch tokens(int n, int32_t seq, int32_t p0) {
    for (int i = 0; i < n; i++) {
        tok[i] = 1000 + i; pos[i] = p0 + i; nseq[i] = 1; ids[i] = seq; idp[i] = &ids[i];
    }
    llama_batch b = { n, tok, NULL, pos, nseq, idp, NULL };
    return b;
}

static void checkpoint(const char *name) {
    char line[64];
    printf("checkpoint %s\n", name);
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) { /* test gone: carry on */ }
}

int main(void) {
    struct llama_context *a = fake_context_new(2);
    struct llama_context *b = fake_context_new(1);
    printf("prompt %d\n", llama_decode(a, tokens(5, 1, 0)));
    printf("decode %d\n", llama_decode(a, tokens(1, 1, 5)));
    printf("decode %d\n", llama_decode(a, tokens(1, 1, 6)));
    llama_batch e = { 3, NULL, embd, NULL, NULL, NULL, NULL }; /* embeddings, sequence 0 */
    printf("embd %d\n", llama_decode(b, e));
    llama_batch odd = tokens(2, 0, 0);
    nseq[1] = 100000;
    printf("odd %d\n", llama_decode(a, odd));
    printf("foreign %d\n", llama_decode(a, tokens(2, 7, 0)));
    printf("negative %d\n", llama_decode(a, tokens(2, -4, 0)));
    printf("full %d\n", llama_decode(a, tokens(77, 0, 0)));
    printf("empty %d\n", llama_decode(a, tokens(0, 0, 0)));
    printf("decoded %lld %lld\n", (long long)fake_decoded(a), (long long)fake_decoded(b));
    checkpoint("one");
    printf("rm %d\n", llama_memory_seq_rm(llama_get_memory(a), 1, -1, -1));
    static uint8_t buf[4096];
    printf("save %zu\n", llama_state_seq_get_data(a, buf, sizeof buf, 0));
    printf("restore %zu\n", llama_state_seq_set_data(a, buf, sizeof buf, 1));
    llama_free(b);
    checkpoint("two");
    llama_free(a);
    return 0;
}
