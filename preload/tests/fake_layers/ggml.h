/* The part of ggml(-backend).h that the stand-in libggml-base defines: a scheduler that
 * computes a graph of named nodes with ggml's eval-callback protocol, and the stand-in's
 * helpers. */
#ifndef HYDRA_FAKE_GGML_H
#define HYDRA_FAKE_GGML_H

#include <stdbool.h>
#include <stdint.h>

struct ggml_tensor {
    char name[64];
    int64_t value;
};
#define FAKE_MAX_NODES 64
struct ggml_cgraph {
    int n_nodes;
    struct ggml_tensor *nodes[FAKE_MAX_NODES];
};
typedef struct ggml_backend_sched *ggml_backend_sched_t;
typedef bool (*ggml_backend_sched_eval_callback)(struct ggml_tensor *t, bool ask, void *user_data);

ggml_backend_sched_t ggml_backend_sched_new_fake(int n_copies);
void ggml_backend_sched_free(ggml_backend_sched_t sched);
void ggml_backend_sched_set_eval_callback(ggml_backend_sched_t sched, ggml_backend_sched_eval_callback cb, void *user_data);
int ggml_backend_sched_graph_compute_async(ggml_backend_sched_t sched, struct ggml_cgraph *graph);
int ggml_backend_sched_get_n_copies(ggml_backend_sched_t sched);
int ggml_graph_n_nodes(struct ggml_cgraph *graph);
struct ggml_tensor *ggml_graph_node(struct ggml_cgraph *graph, int i);
const char *ggml_get_name(const struct ggml_tensor *t);

/* The stand-in's helpers: the callback the scheduler holds now; pieces computed so far. */
ggml_backend_sched_eval_callback fake_sched_callback(ggml_backend_sched_t sched);
int64_t fake_sched_pieces(ggml_backend_sched_t sched);

#endif
