/* A stand-in libllama over the stand-in libggml-base, shaped like llama.cpp's decode: the
 * first call computes a K-shift graph (no layer outputs), then each ubatch of at most
 * n_ubatch tokens sets the context's cb_eval on the scheduler (as process_ubatch does
 * when it rebuilds a graph) and computes a forward of 3 layers: attn-<il>, l_out-<il>,
 * then result_norm, result_output. The checksum adds up every ubatch's output. */
#include <stdio.h>
#include <stdlib.h>

#include "llama.h"

#define N_LAYER 3

struct llama_model { int unused; };
struct llama_context {
    uint32_t n_ubatch;
    ggml_backend_sched_t sched;
    ggml_backend_sched_eval_callback cb;
    void *ud;
    struct llama_model model;
    int shifted;
    int64_t checksum;
    struct ggml_tensor t[FAKE_MAX_NODES];
    struct ggml_cgraph g;
};

struct llama_context *fake_context_new(uint32_t n_ubatch, ggml_backend_sched_eval_callback cb, void *ud, int n_copies) {
    struct llama_context *c = calloc(1, sizeof *c);
    c->n_ubatch = n_ubatch;
    c->sched = ggml_backend_sched_new_fake(n_copies);
    c->cb = cb;
    c->ud = ud;
    return c;
}
ggml_backend_sched_t fake_context_sched(struct llama_context *c) { return c->sched; }
int64_t fake_checksum(const struct llama_context *c) { return c->checksum; }

static void node(struct llama_context *c, const char *name, int il) {
    struct ggml_tensor *t = &c->t[c->g.n_nodes];
    if (il >= 0) snprintf(t->name, sizeof t->name, "%s-%d", name, il);
    else snprintf(t->name, sizeof t->name, "%s", name);
    c->g.nodes[c->g.n_nodes++] = t;
}

int32_t llama_decode(struct llama_context *c, llama_batch b) {
    if (b.n_tokens <= 0) return -1;
    if (!c->shifted) {
        c->shifted = 1;
        c->g.n_nodes = 0;
        for (int il = 0; il < N_LAYER; il++) node(c, "k_shifted", il);
        if (ggml_backend_sched_graph_compute_async(c->sched, &c->g) != 0) return -3;
    }
    for (int32_t done = 0; done < b.n_tokens; done += (int32_t)c->n_ubatch) {
        ggml_backend_sched_set_eval_callback(c->sched, c->cb, c->ud);
        c->g.n_nodes = 0;
        for (int il = 0; il < N_LAYER; il++) {
            node(c, "attn", il);
            node(c, "l_out", il);
        }
        node(c, "result_norm", -1);
        node(c, "result_output", -1);
        if (ggml_backend_sched_graph_compute_async(c->sched, &c->g) != 0) return -3;
        c->checksum += ggml_graph_node(&c->g, -1)->value;
    }
    return 0;
}

uint32_t llama_n_seq_max(const struct llama_context *c) { (void)c; return 1; }
uint32_t llama_n_ctx(const struct llama_context *c) { (void)c; return 1024; }
uint32_t llama_n_ubatch(const struct llama_context *c) { return c->n_ubatch; }
const struct llama_model *llama_get_model(const struct llama_context *c) { return &c->model; }
int32_t llama_model_n_layer(const struct llama_model *m) { (void)m; return N_LAYER; }
void llama_free(struct llama_context *c) {
    ggml_backend_sched_free(c->sched);
    free(c);
}
