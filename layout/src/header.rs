//! The segment header: offsets, sizes, lifecycle values and the other format facts both
//! sides share (the slot count limit, the engine's description, capability bits) (format v1).
//!
//! Every field is one native-byte-order `u64` word (see [`BYTE_ORDER_MARK`])
//! accessed atomically; strings are fixed-size, NUL-padded UTF-8 byte arrays that
//! are written before the segment turns [`Lifecycle::Ready`] and never change after.
//!
//! ```text
//! offset size  field                      written
//!      0    8  MAGIC "HYDRPROG"            at creation
//!      8    8  BYTE_ORDER 0x0102030405060708
//!     16    8  VERSION_MAJOR (1)
//!     24    8  VERSION_MINOR (3)
//!     32    8  HEADER_LEN                 (bytes; 1024 in v1.0)
//!     40    8  SLOT_OFFSET                (128-aligned, >= HEADER_LEN)
//!     48    8  SLOT_STRIDE                (multiple of 128, >= 256 in v1.0)
//!     56    8  SLOT_COUNT
//!     64    8  TOTAL_LEN                  (== file size)
//!     72    8  STATE                      INIT=1 READY=2 CLOSED=3 (Release/Acquire)
//!     80    8  PID
//!     88    8  PROCESS_START_NS           (ns since boot, from /proc/<pid>/stat)
//!     96    8  INSTANCE_ID                (random, per segment creation)
//!    104    8  CREATED_REALTIME_NS        clock anchor (CLOCK_REALTIME)
//!    112    8  CREATED_MONOTONIC_NS       clock anchor (CLOCK_MONOTONIC)
//!    120    8  HEARTBEAT_NS               compute loop, CLOCK_MONOTONIC
//!    128    8  LOOP_ITERATIONS            compute loop passes
//!    136    8  PROMPT_TOKENS_TOTAL        counter
//!    144    8  GENERATED_TOKENS_TOTAL     counter
//!    152    8  REQUESTS_RUNNING           gauge
//!    160    8  REQUESTS_WAITING           gauge (front end adds, compute thread subtracts)
//!    168    8  KV_CELLS_USED              gauge
//!    176    8  KV_CELLS_TOTAL             gauge
//!    184    8  MODEL_CAPABILITIES         bit set, immutable
//!    192    8  CLOSED_NS                  CLOCK_MONOTONIC at clean close, else 0
//!    200    8  REGION_DIR_OFFSET          v1.3: byte offset of the region directory (0 = none)
//!    208    8  REGION_COUNT               v1.3: entries in the region directory
//!    216   40  reserved (zero)
//!    256   64  ENGINE_ID                  string
//!    320   64  BOOT_ID                    string (/proc/sys/kernel/random/boot_id)
//!    384  128  MODEL_NAME                 string
//!    512   32  MODEL_QUANT                string
//!    544   32  TOKENIZER                  string
//!    576   64  DEVICE                     string
//!    640   64  MODEL_ALIAS                string
//!    704  256  MODEL_PATH                 string
//!    960   64  reserved (zero)
//!   1024       end of the v1.0 header
//! ```

/// The eight magic bytes at offset 0.
pub const MAGIC: [u8; 8] = *b"HYDRPROG";
/// Written as a native `u64`; reads back as this value only on a reader of the same byte order.
pub const BYTE_ORDER_MARK: u64 = 0x0102_0304_0506_0708;
/// [`BYTE_ORDER_MARK`] as seen by a reader of the other byte order.
pub const BYTE_ORDER_MARK_SWAPPED: u64 = BYTE_ORDER_MARK.swap_bytes();
/// Format major version this crate writes and reads. Readers accept only this major.
pub const VERSION_MAJOR: u64 = 1;
/// Format minor version this crate writes (1: the substep words of the slot record; 2: the
/// cost model's prediction words; 3: the regions after the slot table: statistics and the
/// flight recorder). Readers accept any minor.
pub const VERSION_MINOR: u64 = 3;

/// Bytes of one header or slot word: every numeric field is a `u64`.
pub const WORD_LEN: usize = 8;

/// Offset of the magic bytes.
pub const MAGIC_OFFSET: usize = 0;
/// Offset of the byte-order marker.
pub const BYTE_ORDER_OFFSET: usize = MAGIC_OFFSET + WORD_LEN;
/// Offset of the major version.
pub const VERSION_MAJOR_OFFSET: usize = BYTE_ORDER_OFFSET + WORD_LEN;
/// Offset of the minor version.
pub const VERSION_MINOR_OFFSET: usize = VERSION_MAJOR_OFFSET + WORD_LEN;
/// Offset of the header length in bytes.
pub const HEADER_LEN_OFFSET: usize = VERSION_MINOR_OFFSET + WORD_LEN;
/// Offset of the byte offset of slot record 0.
pub const SLOT_OFFSET_OFFSET: usize = HEADER_LEN_OFFSET + WORD_LEN;
/// Offset of the slot stride in bytes.
pub const SLOT_STRIDE_OFFSET: usize = SLOT_OFFSET_OFFSET + WORD_LEN;
/// Offset of the slot count.
pub const SLOT_COUNT_OFFSET: usize = SLOT_STRIDE_OFFSET + WORD_LEN;
/// Offset of the total segment length in bytes.
pub const TOTAL_LEN_OFFSET: usize = SLOT_COUNT_OFFSET + WORD_LEN;
/// Offset of the lifecycle state ([`Lifecycle`]).
pub const STATE_OFFSET: usize = TOTAL_LEN_OFFSET + WORD_LEN;
/// Offset of the writer's process id.
pub const PID_OFFSET: usize = STATE_OFFSET + WORD_LEN;
/// Offset of the writer's process start time, ns since boot.
pub const PROCESS_START_NS_OFFSET: usize = PID_OFFSET + WORD_LEN;
/// Offset of the random instance id.
pub const INSTANCE_ID_OFFSET: usize = PROCESS_START_NS_OFFSET + WORD_LEN;
/// Offset of the CLOCK_REALTIME anchor taken at creation.
pub const CREATED_REALTIME_NS_OFFSET: usize = INSTANCE_ID_OFFSET + WORD_LEN;
/// Offset of the CLOCK_MONOTONIC anchor taken at creation (same instant as the realtime anchor).
pub const CREATED_MONOTONIC_NS_OFFSET: usize = CREATED_REALTIME_NS_OFFSET + WORD_LEN;
/// Offset of the compute loop heartbeat (CLOCK_MONOTONIC ns).
pub const HEARTBEAT_NS_OFFSET: usize = CREATED_MONOTONIC_NS_OFFSET + WORD_LEN;
/// Offset of the compute loop iteration counter.
pub const LOOP_ITERATIONS_OFFSET: usize = HEARTBEAT_NS_OFFSET + WORD_LEN;
/// Offset of the prompt tokens counter.
pub const PROMPT_TOKENS_TOTAL_OFFSET: usize = LOOP_ITERATIONS_OFFSET + WORD_LEN;
/// Offset of the generated tokens counter.
pub const GENERATED_TOKENS_TOTAL_OFFSET: usize = PROMPT_TOKENS_TOTAL_OFFSET + WORD_LEN;
/// Offset of the running requests gauge.
pub const REQUESTS_RUNNING_OFFSET: usize = GENERATED_TOKENS_TOTAL_OFFSET + WORD_LEN;
/// Offset of the waiting requests gauge.
pub const REQUESTS_WAITING_OFFSET: usize = REQUESTS_RUNNING_OFFSET + WORD_LEN;
/// Offset of the KV cells used gauge.
pub const KV_CELLS_USED_OFFSET: usize = REQUESTS_WAITING_OFFSET + WORD_LEN;
/// Offset of the KV cells total gauge.
pub const KV_CELLS_TOTAL_OFFSET: usize = KV_CELLS_USED_OFFSET + WORD_LEN;
/// Offset of the model capability bits.
pub const MODEL_CAPABILITIES_OFFSET: usize = KV_CELLS_TOTAL_OFFSET + WORD_LEN;
/// Offset of the clean-close timestamp (CLOCK_MONOTONIC ns, 0 while open).
pub const CLOSED_NS_OFFSET: usize = MODEL_CAPABILITIES_OFFSET + WORD_LEN;
/// v1.3: offset of the byte offset of the region directory ([`crate::region`]); 0 = none.
pub const REGION_DIR_OFFSET: usize = CLOSED_NS_OFFSET + WORD_LEN;
/// v1.3: offset of the number of region directory entries.
pub const REGION_COUNT_OFFSET: usize = REGION_DIR_OFFSET + WORD_LEN;
/// First minor version whose segments may carry regions (v1.3).
pub const REGIONS_MINOR: u64 = 3;
/// End of the word area; the bytes up to [`STRINGS_OFFSET`] are reserved and zero.
pub const WORDS_END: usize = REGION_COUNT_OFFSET + WORD_LEN;

/// Start of the string area.
pub const STRINGS_OFFSET: usize = 256;
/// Engine id string (64 bytes).
pub const ENGINE_ID_OFFSET: usize = STRINGS_OFFSET;
/// Length of the engine id field.
pub const ENGINE_ID_LEN: usize = 64;
/// Boot id string (64 bytes).
pub const BOOT_ID_OFFSET: usize = ENGINE_ID_OFFSET + ENGINE_ID_LEN;
/// Length of the boot id field.
pub const BOOT_ID_LEN: usize = 64;
/// Model name string (128 bytes).
pub const MODEL_NAME_OFFSET: usize = BOOT_ID_OFFSET + BOOT_ID_LEN;
/// Length of the model name field.
pub const MODEL_NAME_LEN: usize = 128;
/// Quantization string (32 bytes).
pub const MODEL_QUANT_OFFSET: usize = MODEL_NAME_OFFSET + MODEL_NAME_LEN;
/// Length of the quantization field.
pub const MODEL_QUANT_LEN: usize = 32;
/// Tokenizer family string (32 bytes).
pub const TOKENIZER_OFFSET: usize = MODEL_QUANT_OFFSET + MODEL_QUANT_LEN;
/// Length of the tokenizer field.
pub const TOKENIZER_LEN: usize = 32;
/// Device string (64 bytes).
pub const DEVICE_OFFSET: usize = TOKENIZER_OFFSET + TOKENIZER_LEN;
/// Length of the device field.
pub const DEVICE_LEN: usize = 64;
/// Model alias string (64 bytes).
pub const MODEL_ALIAS_OFFSET: usize = DEVICE_OFFSET + DEVICE_LEN;
/// Length of the model alias field.
pub const MODEL_ALIAS_LEN: usize = 64;
/// Model path string (256 bytes).
pub const MODEL_PATH_OFFSET: usize = MODEL_ALIAS_OFFSET + MODEL_ALIAS_LEN;
/// Length of the model path field.
pub const MODEL_PATH_LEN: usize = 256;
/// End of the string area; the bytes up to [`HEADER_LEN`] are reserved and zero.
pub const STRINGS_END: usize = MODEL_PATH_OFFSET + MODEL_PATH_LEN;

/// Header length written by this version, and the minimum a reader of v1.0 needs.
pub const HEADER_LEN: usize = 1024;

const _: () = assert!(WORDS_END <= STRINGS_OFFSET);
const _: () = assert!(STRINGS_END <= HEADER_LEN);
const _: () = assert!(HEADER_LEN % 128 == 0);
const _: () = assert!(CLOSED_NS_OFFSET == 192);
const _: () = assert!(REGION_DIR_OFFSET == 200 && REGION_COUNT_OFFSET == 208);
const _: () = assert!(STRINGS_END == 960);

/// Largest slot count a segment may have (readers refuse more, so a hostile count cannot
/// make them allocate without bound).
pub const MAX_SLOTS: usize = 4096;

/// What the engine says about itself in the header (immutable after creation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineDescription {
    /// Model name (e.g. "SmolLM2-135M-Instruct").
    pub model_name: String,
    /// Quantization (e.g. "Q4_1->Q8_0").
    pub model_quant: String,
    /// Model file path.
    pub model_path: String,
    /// Tokenizer family (e.g. "gpt2").
    pub tokenizer: String,
    /// The alias clients use for the model.
    pub model_alias: String,
    /// Compute device (e.g. "cpu", "cuda:0").
    pub device: String,
    /// Capability bits, see [`capabilities`].
    pub capabilities: u64,
}

/// Lifecycle of a segment, stored in the `STATE` word.
///
/// `Ready` is stored last during creation with Release; readers load it first with Acquire,
/// which makes every field and string written before it visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lifecycle {
    /// Being built; readers must not trust anything else yet.
    Init,
    /// Fully initialised; the writer publishes.
    Ready,
    /// The writer exited cleanly (the file is normally unlinked right after).
    Closed,
    /// A value this version does not know.
    Unknown(u64),
}

impl Lifecycle {
    /// Raw value of [`Lifecycle::Init`].
    pub const INIT: u64 = 1;
    /// Raw value of [`Lifecycle::Ready`].
    pub const READY: u64 = 2;
    /// Raw value of [`Lifecycle::Closed`].
    pub const CLOSED: u64 = 3;

    /// Decodes a raw `STATE` word.
    pub fn from_raw(raw: u64) -> Self {
        match raw {
            Self::INIT => Self::Init,
            Self::READY => Self::Ready,
            Self::CLOSED => Self::Closed,
            other => Self::Unknown(other),
        }
    }

    /// The raw `STATE` word.
    pub fn to_raw(self) -> u64 {
        match self {
            Self::Init => Self::INIT,
            Self::Ready => Self::READY,
            Self::Closed => Self::CLOSED,
            Self::Unknown(raw) => raw,
        }
    }

    /// Lower-case name, for display and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Init => "init",
            Self::Ready => "ready",
            Self::Closed => "closed",
            Self::Unknown(_) => "unknown",
        }
    }
}

/// Bits of the `MODEL_CAPABILITIES` word (Hydra's `model_capabilities`).
pub mod capabilities {
    /// Text completion.
    pub const COMPLETION: u64 = 1 << 0;
    /// KV state save and restore.
    pub const STATE_SAVE_RESTORE: u64 = 1 << 1;
    /// Chunked prefill with per-chunk progress.
    pub const CHUNKED_PREFILL: u64 = 1 << 2;
    /// The writer publishes the layer position inside each step (the substep words of
    /// format v1.1). Without it a reader reports the position unknown, whatever the minor.
    pub const LAYER_PROGRESS: u64 = 1 << 3;
    /// The writer publishes its cost model's predictions (the prediction words of format
    /// v1.2): the duration of the step in flight, the end of the phase's work where its total
    /// is known, and an error bound. Without it a reader has no prediction, whatever the
    /// minor, and falls back to the observed rate.
    pub const STEP_PREDICTION: u64 = 1 << 4;
    /// v1.3: the writer fills the slot statistics derived from its steps (counts, busy
    /// times, step, inter-token, prefill and decode histograms). Set by every
    /// `SegmentWriter`.
    pub const SLOT_STATS: u64 = 1 << 5;
    /// v1.3: the host gives task arrival times, so time to first token, queue wait and
    /// end-to-end time are filled. Set by the host, never guessed.
    pub const ARRIVAL_TIMES: u64 = 1 << 6;
    /// v1.3: the host gives finish causes, so tasks by cause and by error code are filled.
    /// Set by the host, never guessed.
    pub const FINISH_CAUSES: u64 = 1 << 7;
    /// v1.3: the writer keeps the flight recorder. Set by every `SegmentWriter`.
    pub const FLIGHT_RECORDER: u64 = 1 << 8;
    /// v1.3: the writer publishes its device table and layer map.
    pub const DEVICES: u64 = 1 << 9;
    /// v1.3: the writer publishes the device a step waits on.
    pub const DEVICE_WAIT: u64 = 1 << 10;
    /// v1.3: the writer publishes how far the step in flight was sent to its devices.
    pub const LAYERS_SENT: u64 = 1 << 11;
    /// v1.3: the writer's arrival times are each task's first compute (its prompt's start),
    /// not the request's: time to first token and end-to-end time are filled from there,
    /// queue wait is not (it never saw the request wait). For a writer inside a server that
    /// does not say when a request arrives (the preload library). `ARRIVAL_TIMES`, when set
    /// too, takes precedence.
    pub const PROMPT_ARRIVALS: u64 = 1 << 12;
    /// v1.3: the writer watches its RPC peers' sockets and publishes, per device, since
    /// when the peer has read nothing of what was sent to it (`DEV_UNREAD_SINCE_NS`,
    /// FORMAT §19.7); without it that word is unknown, not "keeping up".
    pub const PEER_READS: u64 = 1 << 13;
    /// The bits every `SegmentWriter` sets by itself, since it derives their families.
    pub const WRITER_DERIVED: u64 = SLOT_STATS | FLIGHT_RECORDER;
}
