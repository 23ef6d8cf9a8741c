/* A host that drives the stand-in libllama through a fixed scenario, printing every
 * return value, and stops at two checkpoints until a line arrives on stdin. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct llama_batch {
    int32_t n_tokens;
    int32_t *token;
    float *embd;
    int32_t *pos;
    int32_t *n_seq_id;
    int32_t **seq_id;
    int8_t *logits;
} llama_batch;
struct llama_context;
struct llama_memory_i;

struct llama_context *fake_context_new(uint32_t n_seq);
long long fake_decoded(const struct llama_context *c);
int32_t llama_decode(struct llama_context *c, llama_batch b);
struct llama_memory_i *llama_get_memory(const struct llama_context *c);
bool llama_memory_seq_rm(struct llama_memory_i *m, int32_t seq, int32_t p0, int32_t p1);
void llama_free(struct llama_context *c);
size_t llama_state_seq_get_data(struct llama_context *c, uint8_t *dst, size_t size, int32_t seq);
size_t llama_state_seq_set_data(struct llama_context *c, const uint8_t *src, size_t size, int32_t seq);

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
    printf("decoded %lld %lld\n", fake_decoded(a), fake_decoded(b));
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
