/*
 * hydra_progress.h - C view of the hydra-progress shared-memory segment, format v1.
 *
 * The normative specification is layout/FORMAT.md; the Rust crate hydra-layout
 * (layout/src/header.rs, layout/src/slot.rs) is the source of truth for every value
 * below, and layout/tests/c_header.rs checks this header against it.
 *
 * A segment is a regular file, `<engine-id>.hps`, in $HYDRA_PROGRESS_DIR (default
 * /dev/shm/hydra-progress). Map it read-only (PROT_READ, MAP_SHARED) and:
 *
 *   1. hydra_validate(base, st_size, &geometry) - magic, byte order, major version,
 *      lengths, alignment, slot table bounds, TOTAL_LEN == file size, lifecycle;
 *   2. hydra_slot_at(base, &geometry, i) - slot i (uses the file's stride, not sizeof);
 *   3. hydra_slot_read(slot, &copy, attempts) - a consistent copy through the seqlock;
 *   4. fstat() the file again before each later snapshot: if its size changed, stop
 *      reading it (touching pages past a shrunken end raises SIGBUS).
 *
 * Liveness is not in the mapping: flock(fd, LOCK_SH | LOCK_NB) on your read-only fd
 * fails with EWOULDBLOCK while the engine lives; if it succeeds, unlock at once, and the
 * engine exited cleanly if STATE is HYDRA_LIFECYCLE_CLOSED, else it died.
 *
 * ACCESS RULES. Every field is one naturally aligned 8-byte word in the writer's native
 * byte order. Memory other processes write must be accessed ONLY with atomic 8-byte loads,
 * never through plain or memcpy'd struct copies, e.g.
 *
 *     uint64_t hb = __atomic_load_n(&hdr->heartbeat_ns, __ATOMIC_RELAXED);
 *
 * Use RELAXED loads and add __atomic_thread_fence(__ATOMIC_ACQUIRE) where an acquire is
 * needed; this mirrors the Rust reader, whose memory model allows only relaxed loads on
 * read-only memory. Never use read-modify-write operations on a read-only mapping (they
 * write, and fault on PROT_READ pages). The structs below describe the layout; declare
 * pointers into the mapping as `const volatile` and never copy them by value. Atomics
 * must be lock-free to work across processes (checked below for 8-byte words).
 *
 * SEQLOCK (per slot; one writer, the engine's compute thread):
 *   write: seq = s+1 (relaxed); fence(release); data words (relaxed); seq = s+2 (release)
 *   read:  s1 = seq (relaxed); fence(acquire); if s1 odd retry;
 *          data words (relaxed); fence(acquire); s2 = seq (relaxed); ok iff s1 == s2
 * Words `task_id` .. `steps_done` are guarded, and from v1.1 (version_minor >= 1) also
 * `substep_done` .. `substep_step`, and from v1.2 (version_minor >= 2) `step_expected_ns`
 * and `expected_step` .. `expected_error_ppm` (the cost model's predictions, written in one
 * update with the record; the update skips `pending`); `pending` is outside the seqlock. In v1.1 two threads
 * of the writer process may update a record (the compute thread, and the one that sees a
 * layer finish, e.g. a CUDA host callback); the writer serialises them itself, so the
 * reader's protocol is unchanged.
 *
 * Requires GCC or Clang (__atomic builtins), C11 or later.
 */
#ifndef HYDRA_PROGRESS_H
#define HYDRA_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------------- */
/* Constants                                                                          */
/* ---------------------------------------------------------------------------------- */

/* The eight bytes at offset 0, in file order (the same on either byte order). */
#define HYDRA_MAGIC "HYDRPROG"
#define HYDRA_MAGIC_LEN 8
/* The word at offset 8 as read on a machine of the writer's byte order ... */
#define HYDRA_BYTE_ORDER_MARK UINT64_C(0x0102030405060708)
/* ... and as read on a machine of the other byte order (refuse such a file). */
#define HYDRA_BYTE_ORDER_MARK_SWAPPED UINT64_C(0x0807060504030201)

/* Readers accept exactly this major and ANY minor (never test the minor for equality). */
#define HYDRA_VERSION_MAJOR UINT64_C(1)
/* The minor this header describes. */
#define HYDRA_VERSION_MINOR UINT64_C(3)
/* The first minor whose writers publish the substep words (the layer position). */
#define HYDRA_SUBSTEP_MINOR UINT64_C(1)
/* The first minor whose writers may publish the prediction words (the cost model). */
#define HYDRA_PREDICTION_MINOR UINT64_C(2)
/* The first minor whose segments may carry regions after the slot table (statistics, the
   flight recorder, devices; FORMAT.md sections 16-19). */
#define HYDRA_REGIONS_MINOR UINT64_C(3)

/* v1.0 header length: what a writer of v1.0 writes and the minimum a reader accepts. */
#define HYDRA_HEADER_LEN 1024
/* v1.0 slot record length: the minimum stride a reader accepts. */
#define HYDRA_SLOT_LEN 256
/* Stride a v1.0 writer uses. Readers use the header's SLOT_STRIDE, never this. */
#define HYDRA_SLOT_STRIDE 256
/* Alignment of SLOT_OFFSET and SLOT_STRIDE. */
#define HYDRA_SLOT_ALIGN 128
/* Largest slot count a reader accepts. */
#define HYDRA_MAX_SLOTS 4096

/* String field lengths (bytes, NUL-padded UTF-8, at least one NUL). */
#define HYDRA_ENGINE_ID_LEN 64
#define HYDRA_BOOT_ID_LEN 64
#define HYDRA_MODEL_NAME_LEN 128
#define HYDRA_MODEL_QUANT_LEN 32
#define HYDRA_TOKENIZER_LEN 32
#define HYDRA_DEVICE_LEN 64
#define HYDRA_MODEL_ALIAS_LEN 64
#define HYDRA_MODEL_PATH_LEN 256
/* Longest engine id: 1..63 bytes of [A-Za-z0-9._-], not starting with '.'. */
#define HYDRA_MAX_ENGINE_ID_LEN 63

/* Naming and permissions. */
#define HYDRA_DEFAULT_DIR "/dev/shm/hydra-progress"
#define HYDRA_DIR_ENV "HYDRA_PROGRESS_DIR"
#define HYDRA_FILE_EXTENSION "hps"
#define HYDRA_DIR_MODE 0750
#define HYDRA_SEGMENT_MODE 0640

/* ---------------------------------------------------------------------------------- */
/* Enumerations (stored as uint64_t words; keep unknown values, never reject them)    */
/* ---------------------------------------------------------------------------------- */

/* Header STATE word. */
enum hydra_lifecycle {
    HYDRA_LIFECYCLE_INIT = 1,   /* being built: trust nothing else yet */
    HYDRA_LIFECYCLE_READY = 2,  /* fully initialised; the writer publishes */
    HYDRA_LIFECYCLE_CLOSED = 3  /* the writer exited cleanly */
};

/* Slot PHASE word. */
enum hydra_phase {
    HYDRA_PHASE_IDLE = 0,    /* no task */
    HYDRA_PHASE_QUEUED = 1,  /* a task is posted and waits in the engine's queue */
    HYDRA_PHASE_PREFILL = 2, /* evaluating prompt tokens (work in tokens) */
    HYDRA_PHASE_DECODE = 3,  /* generating tokens (work in tokens) */
    HYDRA_PHASE_SAVE = 4,    /* saving the KV state (work in bytes) */
    HYDRA_PHASE_RESTORE = 5  /* restoring the KV state (work in bytes) */
};

/* Slot FINISH_REASON word: how the slot's last task ended. */
enum hydra_finish_reason {
    HYDRA_FINISH_NONE = 0,
    HYDRA_FINISH_COMPLETED = 1,
    HYDRA_FINISH_CANCELLED = 2,
    HYDRA_FINISH_ERROR = 3 /* see ERROR_CODE */
};

/* Slot WORK_UNIT word: unit of WORK_DONE / WORK_TOTAL / STEP_SIZE. */
enum hydra_work_unit {
    HYDRA_WORK_UNIT_NONE = 0,
    HYDRA_WORK_UNIT_TOKENS = 1,
    HYDRA_WORK_UNIT_BYTES = 2
};

/* Slot ERROR_CODE word (meaningful when FINISH_REASON is HYDRA_FINISH_ERROR). */
enum hydra_error_code {
    HYDRA_ERROR_NONE = 0,
    HYDRA_ERROR_CONTEXT_OVERFLOW = 1,
    HYDRA_ERROR_INVALID_INPUT = 2,
    HYDRA_ERROR_STATE_REJECTED = 3,
    HYDRA_ERROR_IO = 4,
    HYDRA_ERROR_COMPUTE = 5,
    HYDRA_ERROR_INTERNAL = 6
};

/* Bits of the header MODEL_CAPABILITIES word. */
enum hydra_capability {
    HYDRA_CAP_COMPLETION = 1 << 0,         /* text completion */
    HYDRA_CAP_STATE_SAVE_RESTORE = 1 << 1, /* KV state save and restore */
    HYDRA_CAP_CHUNKED_PREFILL = 1 << 2,    /* chunked prefill with per-chunk progress */
    HYDRA_CAP_LAYER_PROGRESS = 1 << 3,     /* v1.1: publishes the layer position in a step */
    HYDRA_CAP_STEP_PREDICTION = 1 << 4,    /* v1.2: publishes the cost model's predictions */
    HYDRA_CAP_SLOT_STATS = 1 << 5,         /* v1.3: fills the step-derived slot statistics */
    HYDRA_CAP_ARRIVAL_TIMES = 1 << 6,      /* v1.3: the host gives task arrival times */
    HYDRA_CAP_FINISH_CAUSES = 1 << 7,      /* v1.3: the host gives finish causes */
    HYDRA_CAP_FLIGHT_RECORDER = 1 << 8,    /* v1.3: keeps the flight recorder */
    HYDRA_CAP_DEVICES = 1 << 9,            /* v1.3: publishes its devices and layer map */
    HYDRA_CAP_DEVICE_WAIT = 1 << 10,       /* v1.3: publishes the device a step waits on */
    HYDRA_CAP_LAYERS_SENT = 1 << 11,       /* v1.3: publishes how far a step was sent */
    HYDRA_CAP_PROMPT_ARRIVALS = 1 << 12,   /* v1.3: arrival times are each prompt's start */
    HYDRA_CAP_PEER_READS = 1 << 13         /* v1.3: watches its RPC peers' reads (FORMAT 19.7) */
};

/* Results of the helpers below. */
enum hydra_result {
    HYDRA_OK = 0,
    /* hydra_slot_read */
    HYDRA_READ_TORN = -1,      /* seq stayed odd: the writer stopped or died mid-update */
    HYDRA_READ_CONTENDED = -2, /* the record changed under every attempt */
    /* hydra_validate, in the order the checks are made */
    HYDRA_E_TRUNCATED = -10,         /* file shorter than what must be read next */
    HYDRA_E_MAGIC = -11,             /* not a hydra-progress segment */
    HYDRA_E_FOREIGN_BYTE_ORDER = -12, /* written with the other byte order */
    HYDRA_E_BYTE_ORDER_MARK = -13,   /* corrupt byte-order mark */
    HYDRA_E_MAJOR = -14,             /* unsupported major version */
    HYDRA_E_GEOMETRY = -15,          /* bad header length, stride, offset or count */
    HYDRA_E_SLOT_TABLE = -16,        /* slot table ends past the end of the file */
    HYDRA_E_SIZE_MISMATCH = -17,     /* TOTAL_LEN != file size */
    HYDRA_E_NOT_READY = -18,         /* STATE is INIT: retry shortly */
    HYDRA_E_STATE = -19              /* STATE holds an unknown value */
};

/* ---------------------------------------------------------------------------------- */
/* Header, offset 0 of the file                                                       */
/* ---------------------------------------------------------------------------------- */

typedef struct hydra_header_v1 {
    uint64_t magic;                  /*   0 bytes "HYDRPROG" (compare bytewise) */
    uint64_t byte_order;             /*   8 HYDRA_BYTE_ORDER_MARK */
    uint64_t version_major;          /*  16 1 */
    uint64_t version_minor;          /*  24 0 (any accepted) */
    uint64_t header_len;             /*  32 >= 1024, multiple of 8 */
    uint64_t slot_offset;            /*  40 >= header_len, multiple of 128 */
    uint64_t slot_stride;            /*  48 >= 256, multiple of 128 */
    uint64_t slot_count;             /*  56 1..=4096 */
    uint64_t total_len;              /*  64 == file size */
    uint64_t state;                  /*  72 enum hydra_lifecycle; Release / Acquire */
    uint64_t pid;                    /*  80 writer's pid */
    uint64_t process_start_ns;       /*  88 writer start, ns since boot (0 = unknown) */
    uint64_t instance_id;            /*  96 random, per creation */
    uint64_t created_realtime_ns;    /* 104 CLOCK_REALTIME anchor */
    uint64_t created_monotonic_ns;   /* 112 CLOCK_MONOTONIC anchor (same instant) */
    uint64_t heartbeat_ns;           /* 120 compute loop, CLOCK_MONOTONIC */
    uint64_t loop_iterations;        /* 128 compute loop passes */
    uint64_t prompt_tokens_total;    /* 136 counter */
    uint64_t generated_tokens_total; /* 144 counter */
    uint64_t requests_running;       /* 152 gauge */
    uint64_t requests_waiting;       /* 160 gauge (atomic add/sub from several threads) */
    uint64_t kv_cells_used;          /* 168 gauge */
    uint64_t kv_cells_total;         /* 176 gauge */
    uint64_t model_capabilities;     /* 184 enum hydra_capability bits */
    uint64_t closed_ns;              /* 192 CLOCK_MONOTONIC at clean close, else 0 */
    uint64_t region_dir_offset;      /* 200 v1.3: byte offset of the region directory, 0 = none */
    uint64_t region_count;           /* 208 v1.3: entries in the region directory */
    uint64_t reserved_words[5];      /* 216 zero; future minors append words here */
    uint8_t engine_id[HYDRA_ENGINE_ID_LEN];     /* 256 */
    uint8_t boot_id[HYDRA_BOOT_ID_LEN];         /* 320 */
    uint8_t model_name[HYDRA_MODEL_NAME_LEN];   /* 384 */
    uint8_t model_quant[HYDRA_MODEL_QUANT_LEN]; /* 512 */
    uint8_t tokenizer[HYDRA_TOKENIZER_LEN];     /* 544 */
    uint8_t device[HYDRA_DEVICE_LEN];           /* 576 */
    uint8_t model_alias[HYDRA_MODEL_ALIAS_LEN]; /* 640 */
    uint8_t model_path[HYDRA_MODEL_PATH_LEN];   /* 704 */
    uint64_t reserved_strings[8];               /* 960 zero */
} hydra_header_v1;                              /* 1024 */

/* ---------------------------------------------------------------------------------- */
/* Slot record, at slot_offset + i * slot_stride                                      */
/* ---------------------------------------------------------------------------------- */

/* Every word below is read with an atomic 8-byte load, e.g.
 *     uint64_t seq = __atomic_load_n(&p->seq, __ATOMIC_RELAXED);
 * and the guarded words only inside the seqlock protocol (use hydra_slot_read). */
typedef struct hydra_slot_v1 {
    uint64_t seq;              /*   0 seqlock sequence, odd while an update is in progress */
    /* --- seqlock-guarded words (one writer: the compute thread) --- */
    uint64_t task_id;          /*   8 changes when the slot takes a new task; 0 = never */
    uint64_t phase;            /*  16 enum hydra_phase */
    uint64_t finish_reason;    /*  24 enum hydra_finish_reason */
    uint64_t error_code;       /*  32 enum hydra_error_code */
    uint64_t work_unit;        /*  40 enum hydra_work_unit */
    uint64_t work_done;        /*  48 in work_unit, current phase */
    uint64_t work_total;       /*  56 in work_unit, current phase (0 = unknown) */
    uint64_t tokens_cached;    /*  64 prompt tokens reused from the KV cache */
    uint64_t n_past;           /*  72 tokens in the slot's KV cache */
    uint64_t n_ctx;            /*  80 slot context size, tokens */
    uint64_t state_size;       /*  88 bytes a state save would produce now */
    uint64_t task_start_ns;    /*  96 CLOCK_MONOTONIC */
    uint64_t phase_start_ns;   /* 104 CLOCK_MONOTONIC */
    uint64_t last_progress_ns; /* 112 CLOCK_MONOTONIC of the last work_done advance */
    uint64_t step_start_ns;    /* 120 CLOCK_MONOTONIC start of the step in flight, 0 = none */
    uint64_t step_size;        /* 128 tokens (or bytes) the step in flight carries */
    uint64_t last_step_ns;     /* 136 duration of the last finished step, ns */
    uint64_t steps_done;       /* 144 steps finished in the current phase */
    /* --- v1.1 (version_minor >= 1): the position inside the step in flight --- */
    uint64_t substep_done;     /* 152 layers of the forward finished */
    uint64_t substep_total;    /* 160 layers in the forward; 0 = no position */
    uint64_t substep_ns;       /* 168 CLOCK_MONOTONIC when substep_done last changed */
    uint64_t substep_step;     /* 176 step_start_ns of the step the position belongs to */
    /* --- v1.2 (version_minor >= 2, HYDRA_CAP_STEP_PREDICTION): predictions --- */
    uint64_t step_expected_ns; /* 184 predicted duration of step expected_step, ns; 0 = none */
    /* --- outside the seqlock, own cache line --- */
    uint64_t pending;          /* 192 tasks queued for the slot (atomic add/sub) */
    /* --- v1.2, seqlock-guarded again --- */
    uint64_t expected_step;    /* 200 step_start_ns of the step step_expected_ns predicts */
    uint64_t task_expected_end_ns; /* 208 CLOCK_MONOTONIC when work_total is predicted done */
    uint64_t expected_phase;   /* 216 phase_start_ns of the phase that end is for */
    uint64_t expected_error_ppm; /* 224 relative error bound, ppm (1000000 = 100%); 0 = none */
    uint64_t reserved_tail[3]; /* 232 zero */
} hydra_slot_v1;               /* 256 */

/* The guarded data words, in order; X(field) is expanded once per word. */
#define HYDRA_SLOT_GUARDED_WORDS(X)                                                      \
    X(task_id) X(phase) X(finish_reason) X(error_code) X(work_unit) X(work_done)         \
    X(work_total) X(tokens_cached) X(n_past) X(n_ctx) X(state_size) X(task_start_ns)     \
    X(phase_start_ns) X(last_progress_ns) X(step_start_ns) X(step_size) X(last_step_ns)  \
    X(steps_done)

/* The v1.1 guarded words (meaningful only when version_minor >= HYDRA_SUBSTEP_MINOR). */
#define HYDRA_SLOT_SUBSTEP_WORDS(X) X(substep_done) X(substep_total) X(substep_ns) X(substep_step)

/* The v1.2 guarded words (meaningful only when version_minor >= HYDRA_PREDICTION_MINOR and
   the header has HYDRA_CAP_STEP_PREDICTION). */
#define HYDRA_SLOT_PREDICTION_WORDS(X)                                                   \
    X(step_expected_ns) X(expected_step) X(task_expected_end_ns) X(expected_phase)       \
    X(expected_error_ppm)

/* ---------------------------------------------------------------------------------- */
/* Layout checks                                                                      */
/* ---------------------------------------------------------------------------------- */

#ifdef __cplusplus
#define HYDRA_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#define HYDRA_ALIGNOF(type) alignof(type)
#else
#define HYDRA_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#define HYDRA_ALIGNOF(type) _Alignof(type)
#endif

#define HYDRA_ASSERT_OFFSET(type, field, off) \
    HYDRA_STATIC_ASSERT(offsetof(type, field) == (off), #type "." #field " must be at offset " #off)

HYDRA_STATIC_ASSERT(sizeof(uint64_t) == 8, "uint64_t must be 8 bytes");
HYDRA_STATIC_ASSERT(sizeof(long long) == 8, "long long must be 8 bytes");
/* A lock-based (libatomic) 8-byte atomic would not synchronise with another process. */
#if !defined(__GCC_ATOMIC_LLONG_LOCK_FREE) || __GCC_ATOMIC_LLONG_LOCK_FREE != 2
#error "hydra_progress.h needs always-lock-free 8-byte atomics (GCC or Clang, 64-bit target)"
#endif
HYDRA_STATIC_ASSERT(sizeof(hydra_header_v1) == HYDRA_HEADER_LEN, "hydra_header_v1 must be 1024 bytes");
HYDRA_STATIC_ASSERT(HYDRA_ALIGNOF(hydra_header_v1) == 8, "hydra_header_v1 must be 8-byte aligned");
HYDRA_STATIC_ASSERT(sizeof(hydra_slot_v1) == HYDRA_SLOT_LEN, "hydra_slot_v1 must be 256 bytes");
HYDRA_STATIC_ASSERT(HYDRA_ALIGNOF(hydra_slot_v1) == 8, "hydra_slot_v1 must be 8-byte aligned");
HYDRA_STATIC_ASSERT(HYDRA_HEADER_LEN % HYDRA_SLOT_ALIGN == 0, "slot 0 may follow the header");
HYDRA_STATIC_ASSERT(HYDRA_SLOT_STRIDE % HYDRA_SLOT_ALIGN == 0, "stride must keep slots aligned");

HYDRA_ASSERT_OFFSET(hydra_header_v1, magic, 0);
HYDRA_ASSERT_OFFSET(hydra_header_v1, byte_order, 8);
HYDRA_ASSERT_OFFSET(hydra_header_v1, version_major, 16);
HYDRA_ASSERT_OFFSET(hydra_header_v1, version_minor, 24);
HYDRA_ASSERT_OFFSET(hydra_header_v1, header_len, 32);
HYDRA_ASSERT_OFFSET(hydra_header_v1, slot_offset, 40);
HYDRA_ASSERT_OFFSET(hydra_header_v1, slot_stride, 48);
HYDRA_ASSERT_OFFSET(hydra_header_v1, slot_count, 56);
HYDRA_ASSERT_OFFSET(hydra_header_v1, total_len, 64);
HYDRA_ASSERT_OFFSET(hydra_header_v1, state, 72);
HYDRA_ASSERT_OFFSET(hydra_header_v1, pid, 80);
HYDRA_ASSERT_OFFSET(hydra_header_v1, process_start_ns, 88);
HYDRA_ASSERT_OFFSET(hydra_header_v1, instance_id, 96);
HYDRA_ASSERT_OFFSET(hydra_header_v1, created_realtime_ns, 104);
HYDRA_ASSERT_OFFSET(hydra_header_v1, created_monotonic_ns, 112);
HYDRA_ASSERT_OFFSET(hydra_header_v1, heartbeat_ns, 120);
HYDRA_ASSERT_OFFSET(hydra_header_v1, loop_iterations, 128);
HYDRA_ASSERT_OFFSET(hydra_header_v1, prompt_tokens_total, 136);
HYDRA_ASSERT_OFFSET(hydra_header_v1, generated_tokens_total, 144);
HYDRA_ASSERT_OFFSET(hydra_header_v1, requests_running, 152);
HYDRA_ASSERT_OFFSET(hydra_header_v1, requests_waiting, 160);
HYDRA_ASSERT_OFFSET(hydra_header_v1, kv_cells_used, 168);
HYDRA_ASSERT_OFFSET(hydra_header_v1, kv_cells_total, 176);
HYDRA_ASSERT_OFFSET(hydra_header_v1, model_capabilities, 184);
HYDRA_ASSERT_OFFSET(hydra_header_v1, closed_ns, 192);
HYDRA_ASSERT_OFFSET(hydra_header_v1, region_dir_offset, 200);
HYDRA_ASSERT_OFFSET(hydra_header_v1, region_count, 208);
HYDRA_ASSERT_OFFSET(hydra_header_v1, reserved_words, 216);
HYDRA_ASSERT_OFFSET(hydra_header_v1, engine_id, 256);
HYDRA_ASSERT_OFFSET(hydra_header_v1, boot_id, 320);
HYDRA_ASSERT_OFFSET(hydra_header_v1, model_name, 384);
HYDRA_ASSERT_OFFSET(hydra_header_v1, model_quant, 512);
HYDRA_ASSERT_OFFSET(hydra_header_v1, tokenizer, 544);
HYDRA_ASSERT_OFFSET(hydra_header_v1, device, 576);
HYDRA_ASSERT_OFFSET(hydra_header_v1, model_alias, 640);
HYDRA_ASSERT_OFFSET(hydra_header_v1, model_path, 704);
HYDRA_ASSERT_OFFSET(hydra_header_v1, reserved_strings, 960);

HYDRA_ASSERT_OFFSET(hydra_slot_v1, seq, 0);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, task_id, 8);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, phase, 16);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, finish_reason, 24);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, error_code, 32);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, work_unit, 40);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, work_done, 48);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, work_total, 56);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, tokens_cached, 64);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, n_past, 72);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, n_ctx, 80);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, state_size, 88);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, task_start_ns, 96);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, phase_start_ns, 104);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, last_progress_ns, 112);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, step_start_ns, 120);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, step_size, 128);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, last_step_ns, 136);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, steps_done, 144);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, substep_done, 152);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, substep_total, 160);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, substep_ns, 168);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, substep_step, 176);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, step_expected_ns, 184);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, pending, 192);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, expected_step, 200);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, task_expected_end_ns, 208);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, expected_phase, 216);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, expected_error_ppm, 224);
HYDRA_ASSERT_OFFSET(hydra_slot_v1, reserved_tail, 232);

/* ---------------------------------------------------------------------------------- */
/* Helpers                                                                            */
/* ---------------------------------------------------------------------------------- */

/* A CPU hint for spin-wait loops; define it yourself before including to override. */
#ifndef HYDRA_SPIN_HINT
#if defined(__x86_64__) || defined(__i386__)
#define HYDRA_SPIN_HINT() __builtin_ia32_pause()
#elif defined(__aarch64__) || defined(__arm__)
#define HYDRA_SPIN_HINT() __asm__ __volatile__("yield" ::: "memory")
#else
#define HYDRA_SPIN_HINT() ((void)0)
#endif
#endif

/* Relaxed atomic 8-byte load: the only way to read a word of the mapping. */
static inline uint64_t hydra_load(const volatile uint64_t *word) {
    return __atomic_load_n(word, __ATOMIC_RELAXED);
}

/* Geometry validated by hydra_validate; use it, not the live header words, afterwards. */
typedef struct hydra_geometry {
    uint64_t file_len;
    uint64_t header_len;
    uint64_t slot_offset;
    uint64_t slot_stride;
    uint64_t slot_count;
    uint64_t version_minor;
} hydra_geometry;

/*
 * Validates the mapping `base` of a file of `file_len` bytes (st_size at mapping time),
 * in the order FORMAT.md prescribes, touching no byte at or past `file_len`. Returns
 * HYDRA_OK and fills `out`, or a negative HYDRA_E_* value. On HYDRA_OK, the STATE word
 * was READY or CLOSED and was read with acquire semantics, so the immutable header words
 * and strings may be read from then on.
 */
static inline int hydra_validate(const volatile void *base, uint64_t file_len,
                                 hydra_geometry *out) {
    const volatile hydra_header_v1 *h = (const volatile hydra_header_v1 *)base;
    if (file_len < 8)
        return HYDRA_E_TRUNCATED;
    {
        /* The magic is bytes, not a number: compare in file order. */
        uint64_t m = hydra_load(&h->magic);
        const unsigned char *b = (const unsigned char *)&m;
        for (int i = 0; i < HYDRA_MAGIC_LEN; i++)
            if (b[i] != (unsigned char)HYDRA_MAGIC[i])
                return HYDRA_E_MAGIC;
    }
    if (file_len < 16)
        return HYDRA_E_TRUNCATED;
    {
        uint64_t bom = hydra_load(&h->byte_order);
        if (bom == HYDRA_BYTE_ORDER_MARK_SWAPPED)
            return HYDRA_E_FOREIGN_BYTE_ORDER;
        if (bom != HYDRA_BYTE_ORDER_MARK)
            return HYDRA_E_BYTE_ORDER_MARK;
    }
    if (file_len < 24)
        return HYDRA_E_TRUNCATED;
    if (hydra_load(&h->version_major) != HYDRA_VERSION_MAJOR)
        return HYDRA_E_MAJOR;
    if (file_len < HYDRA_HEADER_LEN)
        return HYDRA_E_TRUNCATED;

    uint64_t header_len = hydra_load(&h->header_len);
    uint64_t slot_offset = hydra_load(&h->slot_offset);
    uint64_t slot_stride = hydra_load(&h->slot_stride);
    uint64_t slot_count = hydra_load(&h->slot_count);
    uint64_t total_len = hydra_load(&h->total_len);
    if (header_len < HYDRA_HEADER_LEN || header_len % 8 != 0)
        return HYDRA_E_GEOMETRY;
    if (header_len > file_len)
        return HYDRA_E_TRUNCATED;
    if (slot_stride < HYDRA_SLOT_LEN || slot_stride % HYDRA_SLOT_ALIGN != 0)
        return HYDRA_E_GEOMETRY;
    if (slot_offset < header_len || slot_offset % HYDRA_SLOT_ALIGN != 0)
        return HYDRA_E_GEOMETRY;
    if (slot_count == 0 || slot_count > HYDRA_MAX_SLOTS)
        return HYDRA_E_GEOMETRY;
    /* Overflow-safe: slot_count <= 4096 (checked above), so count * stride overflows only
       if stride > UINT64_MAX / count; then the table cannot fit any file. */
    if (slot_stride > UINT64_MAX / slot_count)
        return HYDRA_E_SLOT_TABLE;
    if (slot_offset > file_len || slot_count * slot_stride > file_len - slot_offset)
        return HYDRA_E_SLOT_TABLE;
    if (total_len != file_len)
        return HYDRA_E_SIZE_MISMATCH;

    /* Acquire: pairs with the writer's release store of READY (and of CLOSED). */
    uint64_t state = hydra_load(&h->state);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (state == HYDRA_LIFECYCLE_INIT)
        return HYDRA_E_NOT_READY;
    if (state != HYDRA_LIFECYCLE_READY && state != HYDRA_LIFECYCLE_CLOSED)
        return HYDRA_E_STATE;

    if (out) {
        out->file_len = file_len;
        out->header_len = header_len;
        out->slot_offset = slot_offset;
        out->slot_stride = slot_stride;
        out->slot_count = slot_count;
        out->version_minor = hydra_load(&h->version_minor);
    }
    return HYDRA_OK;
}

/* The STATE word with acquire semantics (relaxed load + acquire fence). */
static inline uint64_t hydra_lifecycle(const volatile hydra_header_v1 *h) {
    uint64_t state = hydra_load(&h->state);
    /* Pairs with the writer's release stores of READY and CLOSED. */
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return state;
}

/* Slot `index` of a validated mapping, or NULL if out of range. Uses the file's stride. */
static inline const volatile hydra_slot_v1 *hydra_slot_at(const volatile void *base,
                                                          const hydra_geometry *g,
                                                          uint64_t index) {
    if (index >= g->slot_count)
        return NULL;
    return (const volatile hydra_slot_v1 *)((const volatile unsigned char *)base +
                                            g->slot_offset + index * g->slot_stride);
}

/*
 * Takes a consistent copy of slot record `s` into `out` with the seqlock read protocol,
 * making at most `max_attempts` attempts (at least one), each followed by
 * HYDRA_SPIN_HINT(). Returns:
 *   HYDRA_OK              `out` holds a consistent copy; out->seq is the even sequence,
 *                         out->pending a separate relaxed load, reserved words zero; the
 *                         substep and prediction words are copied too (see
 *                         hydra_slot_layer, hydra_slot_prediction);
 *   HYDRA_READ_TORN       every odd sequence seen was the same value and no even one came
 *                         after it: the writer stopped (or died) mid-update. `out` holds a
 *                         best-effort, possibly inconsistent copy and out->seq that odd value;
 *   HYDRA_READ_CONTENDED  the record changed under every attempt; `out` is unspecified.
 *
 * A writer preempted mid-update also looks torn for a few microseconds. Before reporting
 * a slot torn, call again after sched_yield()/a short sleep (hydra-layout's Rust reader
 * makes 64 spinning then 2000 yielding attempts) and compare out->seq between calls.
 */
static inline int hydra_slot_read(const volatile hydra_slot_v1 *s, hydra_slot_v1 *out,
                                  int max_attempts) {
    int saw_odd = 0;
    int same_odd = 1;
    uint64_t first_odd = 0;
    if (max_attempts < 1)
        max_attempts = 1;
    for (size_t i = 0; i < sizeof out->reserved_tail / sizeof out->reserved_tail[0]; i++)
        out->reserved_tail[i] = 0;
    for (int attempt = 0; attempt < max_attempts; attempt++) {
        /* Relaxed load + acquire fence = acquire load: pairs with the writer's release
           store of the even sequence, so that update's data words are visible below. */
        uint64_t s1 = hydra_load(&s->seq);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
#define HYDRA_COPY_WORD_(field) out->field = hydra_load(&s->field);
        HYDRA_SLOT_GUARDED_WORDS(HYDRA_COPY_WORD_)
        HYDRA_SLOT_SUBSTEP_WORDS(HYDRA_COPY_WORD_)
        HYDRA_SLOT_PREDICTION_WORDS(HYDRA_COPY_WORD_)
#undef HYDRA_COPY_WORD_
        if (s1 & 1) {
            if (!saw_odd) {
                saw_odd = 1;
                first_odd = s1;
            } else if (s1 != first_odd) {
                same_odd = 0;
            }
        } else {
            if (saw_odd)
                same_odd = 0;
            /* Pairs with the writer's release fence after its odd store: if a load above
               saw data of a newer update, the load below sees that update's sequence. */
            __atomic_thread_fence(__ATOMIC_ACQUIRE);
            uint64_t s2 = hydra_load(&s->seq);
            if (s1 == s2) {
                out->seq = s1;
                out->pending = hydra_load(&s->pending);
                return HYDRA_OK;
            }
        }
        HYDRA_SPIN_HINT();
    }
    if (saw_odd && same_odd) {
        out->seq = first_odd;
        out->pending = hydra_load(&s->pending);
        return HYDRA_READ_TORN;
    }
    return HYDRA_READ_CONTENDED;
}

/*
 * The layer position inside the step in flight of `copy` (a consistent copy from
 * hydra_slot_read of a segment whose geometry is `g` and whose header's
 * model_capabilities is `capabilities`): returns 1 and sets *done, *total and *at_ns when
 * the writer publishes positions (v1.1 and HYDRA_CAP_LAYER_PROGRESS), a step is in flight,
 * the position names that step and counts something; 0 otherwise (unknown for other
 * writers, none between steps or while only an earlier step's position is published).
 */
static inline int hydra_slot_layer(const hydra_geometry *g, uint64_t capabilities,
                                   const hydra_slot_v1 *copy, uint64_t *done, uint64_t *total,
                                   uint64_t *at_ns) {
    if (g->version_minor < HYDRA_SUBSTEP_MINOR || !(capabilities & HYDRA_CAP_LAYER_PROGRESS) ||
        copy->step_start_ns == 0 ||
        copy->substep_step != copy->step_start_ns || copy->substep_total == 0)
        return 0;
    *done = copy->substep_done;
    *total = copy->substep_total;
    *at_ns = copy->substep_ns;
    return 1;
}

/*
 * The cost model's predictions for `copy` (a consistent copy from hydra_slot_read; `g` and
 * `capabilities` as for hydra_slot_layer), v1.2. Returns 0 when the writer publishes none
 * (an older minor, or no HYDRA_CAP_STEP_PREDICTION): use the observed rate then. Otherwise
 * returns 1 and sets, each to 0 when unknown:
 *   *step_ns    the predicted duration of the step in flight (the prediction names it:
 *               expected_step == step_start_ns != 0);
 *   *end_ns     CLOCK_MONOTONIC when the current phase's work_total is predicted done (the
 *               prediction names the phase: expected_phase == phase_start_ns, the phase is
 *               prefill, decode, save or restore, work_total != 0);
 *   *error_ppm  the error bound of the step prediction in ppm (only with *step_ns).
 * The ETA is *end_ns - now while that lies ahead (FORMAT.md §5.5).
 */
static inline int hydra_slot_prediction(const hydra_geometry *g, uint64_t capabilities,
                                        const hydra_slot_v1 *copy, uint64_t *step_ns,
                                        uint64_t *end_ns, uint64_t *error_ppm) {
    if (g->version_minor < HYDRA_PREDICTION_MINOR || !(capabilities & HYDRA_CAP_STEP_PREDICTION))
        return 0;
    int step = copy->step_start_ns != 0 && copy->expected_step == copy->step_start_ns &&
               copy->step_expected_ns != 0;
    int active = copy->phase >= HYDRA_PHASE_PREFILL && copy->phase <= HYDRA_PHASE_RESTORE;
    int end = active && copy->work_total != 0 && copy->phase_start_ns != 0 &&
              copy->expected_phase == copy->phase_start_ns && copy->task_expected_end_ns != 0;
    *step_ns = step ? copy->step_expected_ns : 0;
    *error_ppm = step ? copy->expected_error_ppm : 0;
    *end_ns = end ? copy->task_expected_end_ns : 0;
    return 1;
}

/*
 * Copies the NUL-padded string field `field` (`field_len` bytes, e.g. hdr->model_name and
 * HYDRA_MODEL_NAME_LEN) into `dst` (`dst_len` > 0 bytes), always NUL-terminated, and
 * returns its length. Strings are immutable once STATE is READY, so byte loads after
 * hydra_validate are race-free. The bytes should be UTF-8 but are not guaranteed to be:
 * validate (or replace invalid sequences) before trusting them as text.
 */
static inline size_t hydra_copy_string(const volatile uint8_t *field, size_t field_len,
                                       char *dst, size_t dst_len) {
    size_t n = 0;
    if (dst_len == 0)
        return 0;
    while (n < field_len && n + 1 < dst_len && field[n] != 0) {
        dst[n] = (char)field[n];
        n++;
    }
    dst[n] = '\0';
    return n;
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HYDRA_PROGRESS_H */
