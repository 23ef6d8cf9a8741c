/* writer_demo: an engine-shaped C program that publishes progress through the writer C ABI
 * (hydra_writer.h / libhydra_writer). It creates a segment, then obeys one command per
 * line on stdin and answers `ok` (or `err <code> <message>`) on stdout after each, so a
 * driver (the test in layout-capi/tests/c_writer.rs, or you at a terminal) decides when it
 * publishes and when it goes silent.
 *
 *   writer_demo <dir> <engine-id> <slots>      prints `ready <segment path>` first
 *   commands:  begin <slot> <task-id> <total>   a decode task of <total> tokens starts
 *              step <slot>                      one decode step (one token) runs
 *              queue <slot>                     a task for <slot> was queued (pending +1)
 *              finish <slot>                    the task completed
 *              close                            mark CLOSED, remove the segment, exit 0
 *
 * Build: cc -std=c11 -I include writer_demo.c target/debug/libhydra_writer.a \
 *           -lpthread -ldl -lm -lgcc_s -o writer_demo
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hydra_writer.h"

#define MAX_SLOTS 64

static int answer(int32_t rc) {
    if (rc == HYDRA_WRITER_OK) {
        printf("ok\n");
    } else {
        char msg[512];
        hydra_writer_last_error(msg, sizeof msg, NULL);
        printf("err %d %s\n", (int)rc, msg);
    }
    fflush(stdout);
    return rc;
}

/* The demo's state between commands: the writer, each slot's tokens, the engine's counters. */
typedef struct {
    HydraWriter *w;
    uint64_t done[MAX_SLOTS];
    HydraWriterCounters counters;
} Demo;

/* Creates the segment of engine `id` with `slots` slots in `dir` and prints
 * `ready <path>`; NULL (the reason on stderr) if it cannot. */
static HydraWriter *create(const char *dir, const char *id, uint32_t slots) {
    HydraWriterDescription desc = {
        .model_name = "demo-llama",
        .model_quant = "Q8_0",
        .model_path = "/models/demo.gguf",
        .tokenizer = "gpt2",
        .model_alias = "demo",
        .device = "cpu",
        .capabilities = HYDRA_WRITER_CAP_COMPLETION,
    };
    HydraWriter *w = NULL;
    int32_t rc = hydra_writer_create(dir, id, slots, &desc, &w);
    if (rc != HYDRA_WRITER_OK) {
        char msg[512];
        hydra_writer_last_error(msg, sizeof msg, NULL);
        fprintf(stderr, "hydra_writer_create: %d %s\n", (int)rc, msg);
        return NULL;
    }
    char path[4096];
    if (hydra_writer_path(w, path, sizeof path, NULL) != HYDRA_WRITER_OK) {
        hydra_writer_close(w);
        return NULL;
    }
    printf("ready %s\n", path);
    fflush(stdout);
    return w;
}

/* `begin`: a decode task `task` of `total` tokens starts on `slot`. */
static int32_t begin(Demo *d, unsigned slot, uint64_t task, uint64_t total) {
    if (slot < MAX_SLOTS)
        d->done[slot] = 0;
    int32_t rc = hydra_writer_begin_task(d->w, slot, task, HYDRA_WRITER_PHASE_DECODE,
                                         HYDRA_WRITER_UNIT_TOKENS, total);
    if (rc == HYDRA_WRITER_OK)
        rc = hydra_writer_set_slot_info(d->w, slot, 4096, 0, 0);
    if (rc == HYDRA_WRITER_OK) {
        d->counters.requests_running++;
        rc = hydra_writer_set_counters(d->w, &d->counters);
    }
    return rc;
}

/* `step`: one decode step on `slot` (< MAX_SLOTS): announce it, compute (here: nothing),
 * report it. */
static int32_t step(Demo *d, unsigned slot) {
    int32_t rc = hydra_writer_step_start(d->w, slot, 1);
    if (rc == HYDRA_WRITER_OK)
        rc = hydra_writer_step_finish(d->w, slot, ++d->done[slot]);
    if (rc == HYDRA_WRITER_OK)
        rc = hydra_writer_set_n_past(d->w, slot, d->done[slot]);
    if (rc == HYDRA_WRITER_OK) {
        d->counters.generated_tokens_total++;
        rc = hydra_writer_set_counters(d->w, &d->counters);
    }
    if (rc == HYDRA_WRITER_OK)
        rc = hydra_writer_heartbeat(d->w);
    return rc;
}

/* `finish`: the task on `slot` completed. */
static int32_t finish(Demo *d, unsigned slot) {
    int32_t rc = hydra_writer_finish(d->w, slot, HYDRA_WRITER_FINISH_COMPLETED,
                                     HYDRA_WRITER_ERROR_NONE);
    if (rc == HYDRA_WRITER_OK && d->counters.requests_running > 0) {
        d->counters.requests_running--;
        rc = hydra_writer_set_counters(d->w, &d->counters);
    }
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s <dir> <engine-id> <slots>\n", argv[0]);
        return 2;
    }
    uint32_t slots = (uint32_t)strtoul(argv[3], NULL, 10);
    if (slots == 0 || slots > MAX_SLOTS) {
        fprintf(stderr, "slots must be 1..%d\n", MAX_SLOTS);
        return 2;
    }
    Demo d = {.w = create(argv[1], argv[2], slots), .counters = {.kv_cells_total = 4096u * slots}};
    if (d.w == NULL)
        return 1;
    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        char cmd[32] = "";
        unsigned slot = 0;
        uint64_t a = 0, b = 0;
        int fields = sscanf(line, "%31s %u %" SCNu64 " %" SCNu64, cmd, &slot, &a, &b);
        if (fields < 1)
            continue;
        if (strcmp(cmd, "close") == 0) {
            return answer(hydra_writer_close(d.w)) == HYDRA_WRITER_OK ? 0 : 1;
        } else if (strcmp(cmd, "begin") == 0 && fields == 4) {
            answer(begin(&d, slot, a, b));
        } else if (strcmp(cmd, "step") == 0 && fields >= 2 && slot < MAX_SLOTS) {
            answer(step(&d, slot));
        } else if (strcmp(cmd, "queue") == 0 && fields >= 2) {
            answer(hydra_writer_pending_queued(d.w, slot));
        } else if (strcmp(cmd, "finish") == 0 && fields >= 2) {
            answer(finish(&d, slot));
        } else {
            printf("err 0 unknown command\n");
            fflush(stdout);
        }
    }
    /* stdin closed without `close`: close anyway (a killed process would leave it dead). */
    hydra_writer_close(d.w);
    return 0;
}
