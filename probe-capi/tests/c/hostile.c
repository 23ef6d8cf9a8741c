/* Misuses the reader C ABI on purpose: NULL pointers, short buffers, unknown engines and
 * hostile files. Every call must return an error code (never crash); each outcome is
 * printed as `<kind> <label> <code>` for the Rust test to check.
 *   hostile <dir with engines e1 and e2> <label>=<path>...  */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "hydra_probe.h"

#define CHECK(label, call) printf("check %s %d\n", label, (int)(call))

/* Every call given a NULL pointer where it needs one, and unknown kinds and codes. */
static void null_pointers(const char *dir) {
    HydraProbe *p = NULL;
    HydraProbeSlot slot;
    HydraProbeMeta meta;
    HydraProbeDescription desc;
    HydraProbeEngineId ids[1];
    HydraProbeThresholds t;
    size_t n = 0, needed = 0;
    uint32_t count = 0;
    char msg[256];

    CHECK("open_null_out", hydra_probe_open(dir, "e1", NULL));
    CHECK("open_null_dir", hydra_probe_open(NULL, "e1", &p));
    CHECK("open_null_engine", hydra_probe_open(dir, NULL, &p));
    CHECK("open_null_left_handle_null", p == NULL ? 0 : 1);
    CHECK("list_null_dir", hydra_probe_list(NULL, ids, 1, &n));
    CHECK("list_null_count", hydra_probe_list(dir, ids, 1, NULL));
    CHECK("list_null_ids", hydra_probe_list(dir, NULL, 1, &n));
    CHECK("close_null", hydra_probe_close(NULL));
    CHECK("slot_count_null_probe", hydra_probe_slot_count(NULL, &count));
    CHECK("read_slot_null_probe", hydra_probe_read_slot(NULL, 0, &slot));
    CHECK("meta_null_probe", hydra_probe_meta_json(NULL, 0, msg, sizeof msg, &needed));
    CHECK("read_meta_null_probe", hydra_probe_read_meta(NULL, 0, &meta));
    CHECK("describe_null_probe", hydra_probe_describe(NULL, &desc));
    CHECK("value_name_unknown_kind", hydra_probe_value_name(99, 0) == NULL ? 0 : 1);
    CHECK("value_name_unknown_value", strcmp(hydra_probe_value_name(HYDRA_PROBE_VALUE_PHASE, 1000), "unknown"));
    CHECK("thresholds_default_null", hydra_probe_thresholds_default(NULL));
    CHECK("set_thresholds_null_probe", hydra_probe_set_thresholds(NULL, &t));
    CHECK("last_error_null_buf", hydra_probe_last_error(NULL, 8, &needed));
    CHECK("error_name_unknown", strcmp(hydra_probe_error_name(-999), "HYDRA_PROBE_E_UNKNOWN_CODE"));
}

/* Too-small buffers and size queries; unknown engines and bad arguments. */
static void short_buffers_and_unknown_engines(const char *dir) {
    HydraProbe *p = NULL;
    HydraProbeEngineId ids[1];
    size_t n = 0, needed = 0;
    char msg[256];

    CHECK("list_count_only", hydra_probe_list(dir, NULL, 0, &n));
    CHECK("list_count_is_2", n == 2 ? 0 : 1);
    CHECK("list_too_small", hydra_probe_list(dir, ids, 1, &n));
    CHECK("list_too_small_filled_first", strcmp(ids[0].id, "e1"));

    /* Unknown engines and bad arguments. */
    CHECK("open_unknown", hydra_probe_open(dir, "nope", &p));
    hydra_probe_last_error(msg, sizeof msg, &needed);
    CHECK("unknown_message_lists_engines", strstr(msg, "found: e1, e2") ? 0 : 1);
    CHECK("open_empty_engine", hydra_probe_open(dir, "", &p));
    CHECK("open_missing_path", hydra_probe_open(dir, "/nonexistent/x.hps", &p));
    CHECK("list_missing_dir", hydra_probe_list("/nonexistent/hydra", ids, 1, &n));
    hydra_probe_last_error(msg, sizeof msg, &needed);
    CHECK("list_missing_dir_named", strstr(msg, "/nonexistent/hydra") ? 0 : 1);
}

/* A valid handle, misused: NULL outputs, slots out of range, sizes too small, thresholds
 * that are not numbers. */
static void valid_handle_misused(const char *dir) {
    HydraProbe *p = NULL;
    HydraProbeSlot slot;
    HydraProbeMeta meta;
    HydraProbeDescription desc;
    HydraProbeThresholds t;
    size_t needed = 0;
    char small[4] = "xyz";
    char msg[256];

    CHECK("open_e1", hydra_probe_open(dir, "e1", &p));
    CHECK("slot_count_null_out", hydra_probe_slot_count(p, NULL));
    CHECK("read_slot_null_out", hydra_probe_read_slot(p, 0, NULL));
    CHECK("read_slot_out_of_range", hydra_probe_read_slot(p, 1000000, &slot));
    CHECK("meta_out_of_range", hydra_probe_meta_json(p, 99, msg, sizeof msg, &needed));
    CHECK("meta_null_buf", hydra_probe_meta_json(p, 0, NULL, 10, &needed));
    CHECK("read_meta_null_out", hydra_probe_read_meta(p, 0, NULL));
    meta.size = 8;
    CHECK("read_meta_size_too_small", hydra_probe_read_meta(p, 0, &meta));
    meta.size = sizeof meta;
    CHECK("read_meta_out_of_range", hydra_probe_read_meta(p, 99, &meta));
    CHECK("read_meta_ok", hydra_probe_read_meta(p, 0, &meta));
    CHECK("read_meta_size_filled", meta.size == sizeof meta ? 0 : 1);
    CHECK("describe_null_out", hydra_probe_describe(p, NULL));
    desc.size = 0;
    CHECK("describe_size_too_small", hydra_probe_describe(p, &desc));
    desc.size = sizeof desc;
    CHECK("describe_ok", hydra_probe_describe(p, &desc));
    CHECK("describe_engine_id", (desc.engine_id.len == 2 && strcmp(desc.engine_id.ptr, "e1") == 0) ? 0 : 1);
    CHECK("meta_size_query", hydra_probe_meta_json(p, 0, NULL, 0, &needed));
    CHECK("meta_size_query_needed", needed > 100 ? 0 : 1);
    CHECK("meta_too_small", hydra_probe_meta_json(p, 0, small, sizeof small, &needed));
    CHECK("meta_too_small_left_empty", small[0] == '\0' ? 0 : 1);
    CHECK("last_error_too_small", hydra_probe_last_error(small, sizeof small, &needed));
    CHECK("last_error_truncated", (strlen(small) == 3 && needed > 4) ? 0 : 1);
    hydra_probe_thresholds_default(&t);
    t.stall_factor = NAN;
    CHECK("set_thresholds_nan", hydra_probe_set_thresholds(p, &t));
    t.stall_factor = 10;
    t.stall_floor_s = -1;
    CHECK("set_thresholds_negative", hydra_probe_set_thresholds(p, &t));
    t.stall_floor_s = INFINITY;
    CHECK("set_thresholds_infinite", hydra_probe_set_thresholds(p, &t));
    t.stall_floor_s = 30;
    CHECK("set_thresholds_ok", hydra_probe_set_thresholds(p, &t));
    CHECK("close_e1", hydra_probe_close(p));
}

/* A hostile file given as `<label>=<path>`: it must fail to open with a code, or open and
 * read cleanly. Returns 2 for a malformed argument. */
static int hostile_file(const char *dir, const char *arg) {
    HydraProbe *p = NULL;
    HydraProbeSlot slot;
    HydraProbeMeta meta;
    char msg[256];
    char label[64];
    const char *eq = strchr(arg, '=');
    if (!eq || (size_t)(eq - arg) >= sizeof label)
        return 2;
    memcpy(label, arg, (size_t)(eq - arg));
    label[eq - arg] = '\0';
    int32_t rc = hydra_probe_open(dir, eq + 1, &p);
    printf("open %s %d\n", label, (int)rc);
    if (rc == HYDRA_PROBE_OK) {
        printf("read %s %d\n", label, (int)hydra_probe_read_slot(p, 0, &slot));
        meta.size = sizeof meta;
        printf("read_meta %s %d\n", label, (int)hydra_probe_read_meta(p, 0, &meta));
        hydra_probe_close(p);
    } else {
        hydra_probe_last_error(msg, sizeof msg, NULL);
        fprintf(stderr, "%s: %s\n", label, msg);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s <dir> [label=path]...\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    null_pointers(dir);
    short_buffers_and_unknown_engines(dir);
    valid_handle_misused(dir);
    for (int i = 2; i < argc; i++) {
        if (hostile_file(dir, argv[i]) != 0)
            return 2;
    }
    return 0;
}
