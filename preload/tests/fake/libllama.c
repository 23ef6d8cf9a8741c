/* A stand-in libllama with the llama.h signatures the preload wraps or queries (and
 * deliberately no llama_get_model, to check that a missing symbol is only absent).
 * llama_decode returns 1 for a batch of 77 tokens (no KV room), -1 for an empty one. */
#include <stdlib.h>

#include "llama.h"

struct llama_memory_i { int unused; };
struct llama_context {
    uint32_t n_seq;
    struct llama_memory_i mem;
    int64_t decoded;
};

struct llama_context *fake_context_new(uint32_t n_seq) {
    struct llama_context *c = calloc(1, sizeof *c);
    c->n_seq = n_seq;
    return c;
}

int64_t fake_decoded(const struct llama_context *c) { return c->decoded; }

int32_t llama_decode(struct llama_context *c, llama_batch b) {
    if (b.n_tokens <= 0) return -1;
    if (b.n_tokens == 77) return 1;
    c->decoded += b.n_tokens;
    return 0;
}

uint32_t llama_n_seq_max(const struct llama_context *c) { return c->n_seq; }
uint32_t llama_n_ctx(const struct llama_context *c) { return 1024 * c->n_seq; }
uint32_t llama_n_ctx_seq(const struct llama_context *c) { (void)c; return 1024; }
struct llama_memory_i *llama_get_memory(const struct llama_context *c) {
    return (struct llama_memory_i *)&c->mem;
}
bool llama_memory_seq_rm(struct llama_memory_i *m, int32_t seq, int32_t p0, int32_t p1) {
    (void)m; (void)seq; (void)p0; (void)p1;
    return true;
}
void llama_memory_clear(struct llama_memory_i *m, bool data) { (void)m; (void)data; }
void llama_free(struct llama_context *c) { free(c); }
size_t llama_state_seq_get_data(struct llama_context *c, uint8_t *dst, size_t size, int32_t seq) {
    (void)c; (void)dst; (void)seq;
    return size;
}
size_t llama_state_seq_set_data(struct llama_context *c, const uint8_t *src, size_t size, int32_t seq) {
    (void)c; (void)src; (void)seq;
    return size / 2;
}
