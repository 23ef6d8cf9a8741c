/* The part of llama.h that the stand-in layered libllama defines, with its helpers. */
#ifndef HYDRA_FAKE_LAYERS_LLAMA_H
#define HYDRA_FAKE_LAYERS_LLAMA_H

#include "ggml.h"

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

/* A context of one sequence whose graphs the host's `cb` watches (llama.cpp's
 * cparams.cb_eval), on a scheduler with `n_copies` pipeline copies. */
struct llama_context *fake_context_new(uint32_t n_ubatch, ggml_backend_sched_eval_callback cb, void *ud, int n_copies);
ggml_backend_sched_t fake_context_sched(struct llama_context *c);
int64_t fake_checksum(const struct llama_context *c);

int32_t llama_decode(struct llama_context *c, llama_batch b);
void llama_free(struct llama_context *c);

#endif
