/*
 * native_bench.c: per-call cost of the Rust probe library through its C ABI, with no managed
 * runtime in between: hydra_probe_read_slot, hydra_probe_read_meta (what C#'s ReadMeta calls)
 * and hydra_probe_meta_json on one slot, each call timed with CLOCK_MONOTONIC. The C# benchmark (Bench.cs) runs it on the same segment in the
 * same run, so the two sets of figures sit side by side.
 *
 *   native_bench DIR ENGINE SLOT CALLS
 * prints: "native read_slot median_ns P50 p90_ns P90 mean_ns MEAN" and the same for read_meta
 * and meta_json.
 */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "hydra_probe.h"

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *name, uint64_t *t, size_t n) {
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) sum += t[i];
    qsort(t, n, sizeof *t, cmp);
    printf("native %s median_ns %llu p90_ns %llu mean_ns %llu\n", name,
           (unsigned long long)t[n / 2], (unsigned long long)t[n * 9 / 10],
           (unsigned long long)(sum / n));
}

enum call { READ_SLOT, READ_META, META_JSON };

static HydraProbeSlot slot_out;
static HydraProbeMeta meta_out;
static char json_out[16384];

static int32_t call(enum call which, const HydraProbe *p, uint32_t slot) {
    switch (which) {
    case READ_SLOT:
        return hydra_probe_read_slot(p, slot, &slot_out);
    case READ_META:
        meta_out.size = sizeof meta_out;
        return hydra_probe_read_meta(p, slot, &meta_out);
    default:
        return hydra_probe_meta_json(p, slot, json_out, sizeof json_out, NULL);
    }
}

/* Times `calls` calls one by one and reports them; 1 when a call fails. */
static int bench(const char *name, enum call which, const HydraProbe *p, uint32_t slot,
                 uint64_t *t, size_t calls) {
    for (size_t i = 0; i < calls; i++) {
        uint64_t t0 = now_ns();
        int32_t rc = call(which, p, slot);
        t[i] = now_ns() - t0;
        if (rc != HYDRA_PROBE_OK) return 1;
    }
    report(name, t, calls);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: native_bench DIR ENGINE SLOT CALLS\n");
        return 2;
    }
    uint32_t slot = (uint32_t)strtoul(argv[3], NULL, 10);
    size_t calls = (size_t)strtoull(argv[4], NULL, 10);
    if (calls == 0) return 2;
    HydraProbe *p = NULL;
    char msg[512];
    if (hydra_probe_open(argv[1], argv[2], &p) != HYDRA_PROBE_OK) {
        hydra_probe_last_error(msg, sizeof msg, NULL);
        fprintf(stderr, "open: %s\n", msg);
        return 1;
    }
    uint64_t *t = malloc(calls * sizeof *t);
    if (!t) return 1;
    for (size_t i = 0; i < calls / 10 + 1; i++) /* warm-up */
        for (int c = READ_SLOT; c <= META_JSON; c++) call((enum call)c, p, slot);
    if (bench("read_slot", READ_SLOT, p, slot, t, calls) ||
        bench("read_meta", READ_META, p, slot, t, calls) ||
        bench("meta_json", META_JSON, p, slot, t, calls))
        return 1;
    free(t);
    hydra_probe_close(p);
    return 0;
}
