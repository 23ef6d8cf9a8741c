/* The part of llama.h that the stand-in layered libllama defines, with its helpers. */
#ifndef HYDRA_FAKE_LAYERS_LLAMA_H
#define HYDRA_FAKE_LAYERS_LLAMA_H

#include "ggml.h"

#include "../common/llama_batch.h"

/* A context of one sequence whose graphs the host's `cb` watches (llama.cpp's
 * cparams.cb_eval), on a scheduler with `n_copies` pipeline copies. */
struct llama_context *fake_context_new(uint32_t n_ubatch, ggml_backend_sched_eval_callback cb, void *ud, int n_copies);
ggml_backend_sched_t fake_context_sched(struct llama_context *c);
int64_t fake_checksum(const struct llama_context *c);

int32_t llama_decode(struct llama_context *c, llama_batch b);
void llama_free(struct llama_context *c);

#endif
