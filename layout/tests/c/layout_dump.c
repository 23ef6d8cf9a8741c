/* Prints every field offset and size, every constant and every enum value of
 * hydra_progress.h as `name value` lines, for tests/c_header.rs to compare with the
 * Rust constants. */
#include <stdio.h>

#include "hydra_progress.h"

#define FIELD(prefix, type, field)                                                    \
    printf("%s.%s %zu\n", prefix, #field, offsetof(type, field));                     \
    printf("%s.%s.size %zu\n", prefix, #field, sizeof(((type *)0)->field))
#define H(field) FIELD("header", hydra_header_v1, field)
#define S(field) FIELD("slot", hydra_slot_v1, field)
#define NUM(name) printf("%s %llu\n", #name, (unsigned long long)(name))
#define STR(name) printf("%s %s\n", #name, name)

/* The structs' sizes and alignments, and the header's fields. */
static void print_header(void) {
    printf("sizeof.hydra_header_v1 %zu\n", sizeof(hydra_header_v1));
    printf("sizeof.hydra_slot_v1 %zu\n", sizeof(hydra_slot_v1));
    printf("alignof.hydra_header_v1 %zu\n", _Alignof(hydra_header_v1));
    printf("alignof.hydra_slot_v1 %zu\n", _Alignof(hydra_slot_v1));

    H(magic);
    H(byte_order);
    H(version_major);
    H(version_minor);
    H(header_len);
    H(slot_offset);
    H(slot_stride);
    H(slot_count);
    H(total_len);
    H(state);
    H(pid);
    H(process_start_ns);
    H(instance_id);
    H(created_realtime_ns);
    H(created_monotonic_ns);
    H(heartbeat_ns);
    H(loop_iterations);
    H(prompt_tokens_total);
    H(generated_tokens_total);
    H(requests_running);
    H(requests_waiting);
    H(kv_cells_used);
    H(kv_cells_total);
    H(model_capabilities);
    H(closed_ns);
    H(region_dir_offset);
    H(region_count);
    H(reserved_words);
    H(engine_id);
    H(boot_id);
    H(model_name);
    H(model_quant);
    H(tokenizer);
    H(device);
    H(model_alias);
    H(model_path);
    H(reserved_strings);
}

/* The slot's fields. */
static void print_slot(void) {
    S(seq);
    S(task_id);
    S(phase);
    S(finish_reason);
    S(error_code);
    S(work_unit);
    S(work_done);
    S(work_total);
    S(tokens_cached);
    S(n_past);
    S(n_ctx);
    S(state_size);
    S(task_start_ns);
    S(phase_start_ns);
    S(last_progress_ns);
    S(step_start_ns);
    S(step_size);
    S(last_step_ns);
    S(steps_done);
    S(substep_done);
    S(substep_total);
    S(substep_ns);
    S(substep_step);
    S(step_expected_ns);
    S(pending);
    S(expected_step);
    S(task_expected_end_ns);
    S(expected_phase);
    S(expected_error_ppm);
    S(reserved_tail);
}

/* The geometry, naming and mode constants. */
static void print_constants(void) {
    STR(HYDRA_MAGIC);
    NUM(HYDRA_MAGIC_LEN);
    NUM(HYDRA_BYTE_ORDER_MARK);
    NUM(HYDRA_BYTE_ORDER_MARK_SWAPPED);
    NUM(HYDRA_VERSION_MAJOR);
    NUM(HYDRA_VERSION_MINOR);
    NUM(HYDRA_SUBSTEP_MINOR);
    NUM(HYDRA_PREDICTION_MINOR);
    NUM(HYDRA_REGIONS_MINOR);
    NUM(HYDRA_HEADER_LEN);
    NUM(HYDRA_SLOT_LEN);
    NUM(HYDRA_SLOT_STRIDE);
    NUM(HYDRA_SLOT_ALIGN);
    NUM(HYDRA_MAX_SLOTS);
    NUM(HYDRA_ENGINE_ID_LEN);
    NUM(HYDRA_BOOT_ID_LEN);
    NUM(HYDRA_MODEL_NAME_LEN);
    NUM(HYDRA_MODEL_QUANT_LEN);
    NUM(HYDRA_TOKENIZER_LEN);
    NUM(HYDRA_DEVICE_LEN);
    NUM(HYDRA_MODEL_ALIAS_LEN);
    NUM(HYDRA_MODEL_PATH_LEN);
    NUM(HYDRA_MAX_ENGINE_ID_LEN);
    STR(HYDRA_DEFAULT_DIR);
    STR(HYDRA_DIR_ENV);
    STR(HYDRA_FILE_EXTENSION);
    NUM(HYDRA_DIR_MODE);
    NUM(HYDRA_SEGMENT_MODE);
}

/* The lifecycle states, the enums' values and the capability bits. */
static void print_enums(void) {
    NUM(HYDRA_LIFECYCLE_INIT);
    NUM(HYDRA_LIFECYCLE_READY);
    NUM(HYDRA_LIFECYCLE_CLOSED);

    NUM(HYDRA_PHASE_IDLE);
    NUM(HYDRA_PHASE_QUEUED);
    NUM(HYDRA_PHASE_PREFILL);
    NUM(HYDRA_PHASE_DECODE);
    NUM(HYDRA_PHASE_SAVE);
    NUM(HYDRA_PHASE_RESTORE);

    NUM(HYDRA_FINISH_NONE);
    NUM(HYDRA_FINISH_COMPLETED);
    NUM(HYDRA_FINISH_CANCELLED);
    NUM(HYDRA_FINISH_ERROR);

    NUM(HYDRA_WORK_UNIT_NONE);
    NUM(HYDRA_WORK_UNIT_TOKENS);
    NUM(HYDRA_WORK_UNIT_BYTES);

    NUM(HYDRA_ERROR_NONE);
    NUM(HYDRA_ERROR_CONTEXT_OVERFLOW);
    NUM(HYDRA_ERROR_INVALID_INPUT);
    NUM(HYDRA_ERROR_STATE_REJECTED);
    NUM(HYDRA_ERROR_IO);
    NUM(HYDRA_ERROR_COMPUTE);
    NUM(HYDRA_ERROR_INTERNAL);

    NUM(HYDRA_CAP_COMPLETION);
    NUM(HYDRA_CAP_STATE_SAVE_RESTORE);
    NUM(HYDRA_CAP_CHUNKED_PREFILL);
    NUM(HYDRA_CAP_LAYER_PROGRESS);
    NUM(HYDRA_CAP_STEP_PREDICTION);
    NUM(HYDRA_CAP_SLOT_STATS);
    NUM(HYDRA_CAP_ARRIVAL_TIMES);
    NUM(HYDRA_CAP_FINISH_CAUSES);
    NUM(HYDRA_CAP_FLIGHT_RECORDER);
    NUM(HYDRA_CAP_DEVICES);
    NUM(HYDRA_CAP_DEVICE_WAIT);
    NUM(HYDRA_CAP_LAYERS_SENT);
    NUM(HYDRA_CAP_PROMPT_ARRIVALS);
    NUM(HYDRA_CAP_PEER_READS);
}

int main(void) {
    print_header();
    print_slot();
    print_constants();
    print_enums();
    return 0;
}
