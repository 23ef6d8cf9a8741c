/* llama.cpp's `llama_batch`, as both stand-in libllamas (tests/fake, tests/fake_layers)
 * and their hosts pass it by value: the layout must be llama.h's, so it is written once. */
#ifndef HYDRA_FAKE_LLAMA_BATCH_H
#define HYDRA_FAKE_LLAMA_BATCH_H

#include <stdint.h>

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

#endif
