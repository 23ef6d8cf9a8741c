/* The part of llama.h that the stand-in libllama defines and the host calls, with the
 * stand-in's two helpers. */
#ifndef HYDRA_FAKE_LLAMA_H
#define HYDRA_FAKE_LLAMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/llama_batch.h"

struct llama_memory_i;

/* The stand-in's helpers: a context with n_seq sequences; tokens it decoded. */
struct llama_context *fake_context_new(uint32_t n_seq);
int64_t fake_decoded(const struct llama_context *c);

int32_t llama_decode(struct llama_context *c, llama_batch b);
struct llama_memory_i *llama_get_memory(const struct llama_context *c);
bool llama_memory_seq_rm(struct llama_memory_i *m, int32_t seq, int32_t p0, int32_t p1);
void llama_free(struct llama_context *c);
size_t llama_state_seq_get_data(struct llama_context *c, uint8_t *dst, size_t size, int32_t seq);
size_t llama_state_seq_set_data(struct llama_context *c, const uint8_t *src, size_t size, int32_t seq);

#endif
