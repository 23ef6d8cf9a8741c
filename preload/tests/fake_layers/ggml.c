/* A stand-in libggml-base: ggml_backend_sched_graph_compute_async computes a graph of
 * named nodes (node i's value = previous value * 3 + i) exactly as ggml's
 * ggml_backend_sched_compute_splits drives an eval callback: ask each node, cut after
 * the ones the callback wants, compute the piece, show the last node; a false answer to
 * a show skips the rest of the graph (its outputs stay unset, which the checksum shows). */
#include <stdlib.h>
#include <string.h>

#include "ggml.h"

struct ggml_backend_sched {
    ggml_backend_sched_eval_callback cb;
    void *ud;
    int n_copies;
    int64_t pieces;
};

ggml_backend_sched_t ggml_backend_sched_new_fake(int n_copies) {
    ggml_backend_sched_t s = calloc(1, sizeof *s);
    s->n_copies = n_copies;
    return s;
}
void ggml_backend_sched_free(ggml_backend_sched_t s) { free(s); }
void ggml_backend_sched_set_eval_callback(ggml_backend_sched_t s, ggml_backend_sched_eval_callback cb, void *ud) {
    s->cb = cb;
    s->ud = ud;
}
int ggml_backend_sched_get_n_copies(ggml_backend_sched_t s) { return s->n_copies; }
ggml_backend_sched_eval_callback fake_sched_callback(ggml_backend_sched_t s) { return s->cb; }
int64_t fake_sched_pieces(ggml_backend_sched_t s) { return s->pieces; }
int ggml_graph_n_nodes(struct ggml_cgraph *g) { return g->n_nodes; }
struct ggml_tensor *ggml_graph_node(struct ggml_cgraph *g, int i) {
    return g->nodes[i < 0 ? g->n_nodes + i : i];
}
const char *ggml_get_name(const struct ggml_tensor *t) { return t->name; }

static void compute(struct ggml_cgraph *g, int j0, int j1) {
    for (int j = j0; j <= j1; j++) {
        int64_t prev = j > 0 ? g->nodes[j - 1]->value : 1;
        g->nodes[j]->value = prev * 3 + j;
    }
}

int ggml_backend_sched_graph_compute_async(ggml_backend_sched_t s, struct ggml_cgraph *g) {
    for (int j = 0; j < g->n_nodes; j++) g->nodes[j]->value = 0;
    if (!s->cb) {
        compute(g, 0, g->n_nodes - 1);
        s->pieces++;
        return 0;
    }
    for (int j0 = 0; j0 < g->n_nodes; j0++) {
        struct ggml_tensor *t = g->nodes[j0];
        bool need = s->cb(t, true, s->ud);
        int j1 = j0;
        while (!need && j1 < g->n_nodes - 1) {
            t = g->nodes[++j1];
            need = s->cb(t, true, s->ud);
        }
        compute(g, j0, j1);
        s->pieces++;
        if (need && !s->cb(t, false, s->ud)) break;
        j0 = j1;
    }
    return 0;
}
