/* A host that sets its own eval callback (as llama.cpp's imatrix and eval-callback tools
 * do through cb_eval): it wants every attn-1 node, counts what it is asked and shown, and
 * stops at checkpoints inside the compute until a line arrives on stdin. It prints what
 * must not change under the preload. */
#include <stdio.h>
#include <string.h>

#include "llama.h"

static long asks, shows;
static const char *pause_at; /* checkpoint name for the next attn-1 shown, or NULL */
static int skip;             /* attn-1 shows to let pass before pausing */

static void checkpoint(const char *name) {
    char line[64];
    printf("checkpoint %s\n", name);
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) { /* test gone: carry on */ }
}

static bool host_cb(struct ggml_tensor *t, bool ask, void *ud) {
    (void)ud;
    bool want = strcmp(ggml_get_name(t), "attn-1") == 0;
    if (ask) {
        asks++;
        return want;
    }
    shows++;
    if (!want) printf("shown a node it did not ask for: %s\n", ggml_get_name(t));
    if (pause_at && skip-- == 0) {
        const char *name = pause_at;
        pause_at = NULL;
        checkpoint(name);
    }
    return true;
}

#define MAXT 64
static int32_t pos[MAXT], nseq[MAXT], ids[MAXT], *idp[MAXT];

static llama_batch tokens(int n, int32_t p0) {
    for (int i = 0; i < n; i++) { pos[i] = p0 + i; nseq[i] = 1; ids[i] = 0; idp[i] = &ids[i]; }
    llama_batch b = { n, NULL, NULL, pos, nseq, idp, NULL };
    return b;
}

static void report(const char *what, struct llama_context *c, int ret) {
    printf("%s %d checksum %lld asks %ld shows %ld own-callback-back %d\n", what, ret,
           (long long)fake_checksum(c), asks, shows,
           fake_sched_callback(fake_context_sched(c)) == host_cb);
}

int main(void) {
    struct llama_context *a = fake_context_new(4, host_cb, NULL, 1);
    pause_at = "prompt"; skip = 1; /* the second ubatch's attn-1 */
    report("prompt", a, llama_decode(a, tokens(10, 0)));
    pause_at = "decode"; skip = 0;
    report("decode", a, llama_decode(a, tokens(1, 10)));
    llama_free(a);
    struct llama_context *b = fake_context_new(4, host_cb, NULL, 2);
    pause_at = "copies"; skip = 1;
    report("copies", b, llama_decode(b, tokens(10, 0)));
    llama_free(b);
    return 0;
}
