/* Reads one slot through the reader C ABI (hydra_probe.h / libhydra_probe_ffi).
 *   meta_reader json <dir> <engine> <slot>   prints the Hydra meta JSON (one line), like
 *                                            `hydra-probe --dir <dir> meta <engine> <slot>`
 *   meta_reader slot <dir> <engine> <slot>   prints the HydraProbeSlot fields, `name value`
 * Exit status 0 on success, 1 with the error on stderr. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hydra_probe.h"

static int fail(const char *what, int32_t rc) {
    char msg[512];
    hydra_probe_last_error(msg, sizeof msg, NULL);
    fprintf(stderr, "%s: %s (%d): %s\n", what, hydra_probe_error_name(rc), rc, msg);
    return 1;
}

static int print_json(const HydraProbe *p, uint32_t slot) {
    size_t cap = 16, needed = 0;
    char *buf = malloc(cap);
    /* Each call reads anew and the JSON may grow by a few bytes between calls: bounded retry. */
    for (int attempt = 0; attempt < 8; attempt++) {
        int32_t rc = hydra_probe_meta_json(p, slot, buf, cap, &needed);
        if (rc == HYDRA_PROBE_OK) {
            printf("%s\n", buf);
            free(buf);
            return 0;
        }
        if (rc != HYDRA_PROBE_E_BUFFER_TOO_SMALL) {
            free(buf);
            return fail("hydra_probe_meta_json", rc);
        }
        cap = needed + 64;
        buf = realloc(buf, cap);
    }
    free(buf);
    fprintf(stderr, "meta JSON kept growing\n");
    return 1;
}

static int print_slot(const HydraProbe *p, uint32_t slot) {
    HydraProbeSlot s;
    int32_t rc = hydra_probe_read_slot(p, slot, &s);
    if (rc != HYDRA_PROBE_OK)
        return fail("hydra_probe_read_slot", rc);
    printf("sizeof %zu\n", sizeof s);
    printf("slot %" PRIu32 "\n", s.slot);
    printf("slot_class %d\n", (int)s.slot_class);
    printf("engine_health %d\n", (int)s.engine_health);
    printf("task_id %" PRIu64 "\n", s.task_id);
    printf("phase %" PRIu64 "\n", s.phase);
    printf("work_unit %" PRIu64 "\n", s.work_unit);
    printf("work_done %" PRIu64 "\n", s.work_done);
    printf("work_total %" PRIu64 "\n", s.work_total);
    printf("n_past %" PRIu64 "\n", s.n_past);
    printf("n_ctx %" PRIu64 "\n", s.n_ctx);
    printf("pending %" PRIu64 "\n", s.pending);
    printf("steps_done %" PRIu64 "\n", s.steps_done);
    printf("progress %.6f\n", s.progress);
    printf("rate_per_s %.6f\n", s.rate_per_s);
    printf("eta_s %.6f\n", s.eta_s);
    printf("step_age_ns %" PRId64 "\n", s.step_age_ns);
    printf("expected_step_ns %" PRId64 "\n", s.expected_step_ns);
    printf("stall_threshold_ns %" PRIu64 "\n", s.stall_threshold_ns);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s json|slot <dir> <engine> <slot>\n", argv[0]);
        return 2;
    }
    if (hydra_probe_abi_version() != HYDRA_PROBE_ABI_VERSION) {
        fprintf(stderr, "ABI version mismatch\n");
        return 1;
    }
    HydraProbe *p = NULL;
    int32_t rc = hydra_probe_open(argv[2], argv[3], &p);
    if (rc != HYDRA_PROBE_OK)
        return fail("hydra_probe_open", rc);
    uint32_t slot = (uint32_t)strtoul(argv[4], NULL, 10);
    int status = strcmp(argv[1], "json") == 0 ? print_json(p, slot) : print_slot(p, slot);
    rc = hydra_probe_close(p);
    if (rc != HYDRA_PROBE_OK)
        return fail("hydra_probe_close", rc);
    return status;
}
