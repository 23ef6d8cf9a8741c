//! A hostile-file corpus: segment-named entries that every reader must refuse with a clear
//! error (or, for hostile *contents* in a well-formed segment, read without harm).
//!
//! Files are built from the bytes of a real segment made by [`SegmentWriter`] and patched at
//! the documented offsets ([`hydra_layout::header`], [`hydra_layout::slot`]), plus entries
//! that are not regular files at all. Each [`Case`] names the kinds of error a reader may
//! report for it, as [`ErrorKind`]s (the one classification every surface maps from), so that the probe
//! library, the probe CLI, the exporter and the C ABI are checked against one expectation.

use hydra_layout::header as h;
use hydra_layout::slot as s;
use hydra_layout::{
    EngineDescription, ErrorKind, FinishReason, Phase, SegmentConfig, SegmentWriter, SlotState,
    WorkUnit,
};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

/// Slots in the corpus's template segment.
pub const SLOTS: usize = 4;

/// The engine id in the template segment's header: a file of its bytes reads as a valid
/// segment only as `<TEMPLATE_ID>.hps` (FORMAT §2.2).
pub const TEMPLATE_ID: &str = "template";

/// What a reader must do with a case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// Refuse it with one of these error kinds.
    Refused(&'static [ErrorKind]),
    /// Open and read it: the contents are hostile but the segment is well formed.
    Readable,
}

/// One entry of the corpus: `<engine_id>.hps` in the corpus directory.
#[derive(Debug, Clone)]
pub struct Case {
    /// What was done to it.
    pub name: String,
    /// Its engine id (the file is `<engine_id>.hps`).
    pub engine_id: String,
    /// What a reader must do.
    pub expect: Expect,
}

impl Case {
    /// The entry's path in `dir`.
    pub fn path(&self, dir: &Path) -> PathBuf {
        dir.join(format!("{}.hps", self.engine_id))
    }
}

const TRUNCATED: &[ErrorKind] = &[ErrorKind::Truncated, ErrorKind::BadGeometry];
const GEOMETRY: &[ErrorKind] = &[ErrorKind::BadGeometry, ErrorKind::Truncated];
const VERSION: &[ErrorKind] = &[ErrorKind::UnsupportedVersion];
const BYTE_ORDER: &[ErrorKind] = &[ErrorKind::ByteOrder];
const MAGIC: &[ErrorKind] = &[ErrorKind::BadMagic];
const NOT_REGULAR: &[ErrorKind] = &[ErrorKind::NotRegularFile, ErrorKind::Symlink];
const SYMLINK: &[ErrorKind] = &[ErrorKind::Symlink, ErrorKind::NotRegularFile];
const NOT_READY: &[ErrorKind] = &[ErrorKind::NotReady];
const BAD_STATE: &[ErrorKind] = &[ErrorKind::BadState];
const OWNER: &[ErrorKind] = &[ErrorKind::WrongOwner];
const ID_MISMATCH: &[ErrorKind] = &[ErrorKind::EngineIdMismatch];

/// A busy, fully populated slot record: decoding, half way.
pub fn busy_state(i: u64) -> SlotState {
    let now = hydra_layout::clock::monotonic_ns();
    SlotState {
        task_id: 100 + i,
        phase: Phase::Decode,
        finish_reason: FinishReason::None,
        work_unit: WorkUnit::Tokens,
        work_done: 10 * (i + 1),
        work_total: 20 * (i + 1),
        n_past: 40 + i,
        n_ctx: 4096,
        state_size: 1 << 20,
        task_start_ns: now.saturating_sub(2_000_000_000),
        phase_start_ns: now.saturating_sub(1_000_000_000),
        last_progress_ns: now,
        last_step_ns: 1_000_000,
        steps_done: 10 * (i + 1),
        ..SlotState::default()
    }
}

/// The bytes of a real segment with [`SLOTS`] busy slots, written by [`SegmentWriter`] in a
/// private directory and closed again (a copy of it reads as a dead writer's segment).
pub fn template() -> Vec<u8> {
    let tmp = crate::scratch("hydra-corpus-template.");
    let mut w = SegmentWriter::create(&SegmentConfig {
        dir: tmp.path().to_path_buf(),
        engine_id: TEMPLATE_ID.into(),
        slot_count: SLOTS,
        description: EngineDescription {
            model_name: "corpus-model".into(),
            model_quant: "Q8_0".into(),
            device: "cpu".into(),
            capabilities: hydra_layout::header::capabilities::LAYER_PROGRESS
                | hydra_layout::header::capabilities::STEP_PREDICTION,
            ..EngineDescription::default()
        },
    })
    .expect("create template segment");
    for i in 0..SLOTS {
        w.publish(i, &busy_state(i as u64)).expect("publish");
    }
    let bytes = std::fs::read(w.path()).expect("read template segment");
    w.close().expect("close template writer");
    bytes
}

fn set_word(bytes: &mut [u8], offset: usize, value: u64) {
    bytes[offset..offset + 8].copy_from_slice(&value.to_ne_bytes());
}

fn word(bytes: &[u8], offset: usize) -> u64 {
    u64::from_ne_bytes(bytes[offset..offset + 8].try_into().expect("8 bytes"))
}

/// Whether the geometry of `bytes` is one a reader accepts (FORMAT.md §10.2 steps 6-9):
/// a header of at least the v1 length in 8-byte words, the table `SLOT_ALIGN`-aligned at
/// or after it, the stride aligned and at least a record, 1 to `MAX_SLOTS` slots, all of
/// it inside `TOTAL_LEN`, which is the file's length.
fn slot_table_fits(bytes: &[u8]) -> bool {
    let header_len = word(bytes, h::HEADER_LEN_OFFSET);
    let offset = word(bytes, h::SLOT_OFFSET_OFFSET);
    let stride = word(bytes, h::SLOT_STRIDE_OFFSET);
    let count = word(bytes, h::SLOT_COUNT_OFFSET);
    let total = word(bytes, h::TOTAL_LEN_OFFSET);
    let align = s::SLOT_ALIGN as u64;
    let end = u128::from(offset) + u128::from(count) * u128::from(stride);
    header_len >= h::HEADER_LEN as u64
        && header_len % 8 == 0
        && offset % align == 0
        && offset >= header_len
        && stride % align == 0
        && stride >= s::SLOT_LEN as u64
        && (1..=h::MAX_SLOTS as u64).contains(&count)
        && total == bytes.len() as u64
        && end <= u128::from(total)
}

/// The offset in the template of word `off` of slot `i`'s record.
fn slot(i: usize, off: usize) -> usize {
    h::HEADER_LEN + i * s::SLOT_STRIDE + off
}

/// Sets every word of slot `i`'s record in `words` (offsets in the record) to `value`.
fn fill_slot_words(bytes: &mut [u8], i: usize, words: std::ops::Range<usize>, value: u64) {
    for off in words.step_by(8) {
        set_word(bytes, slot(i, off), value);
    }
}

/// Puts a step of one token in flight on every slot (slot `i`'s started at `1000 + i` ns)
/// and names it in each slot's word `step_word` (the step a layer position or a
/// prediction belongs to).
fn steps_in_flight(bytes: &mut [u8], step_word: usize) {
    for i in 0..SLOTS {
        let step = 1_000 + i as u64;
        set_word(bytes, slot(i, s::STEP_START_NS_OFFSET), step);
        set_word(bytes, slot(i, s::STEP_SIZE_OFFSET), 1);
        set_word(bytes, slot(i, step_word), step);
    }
}

/// Writes `<id>.hps`: `bytes` with the header's engine id set to `id` (where the bytes
/// reach that field), as a writer names its file and header from one value.
fn write(dir: &Path, id: &str, bytes: &[u8]) {
    let mut bytes = bytes.to_vec();
    if let Some(field) = bytes.get_mut(h::ENGINE_ID_OFFSET..h::ENGINE_ID_OFFSET + h::ENGINE_ID_LEN)
    {
        field.fill(0);
        field[..id.len()].copy_from_slice(id.as_bytes());
    }
    write_raw(dir, id, &bytes);
}

/// Writes `<id>.hps` with exactly `bytes`.
fn write_raw(dir: &Path, id: &str, bytes: &[u8]) {
    let path = dir.join(format!("{id}.hps"));
    std::fs::write(&path, bytes).expect("write corpus file");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).expect("chmod");
}

/// Whether this process runs as root (then files of another owner can be made).
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The cases of a corpus being built in `dir` from the bytes of `template`.
struct Cases<'d> {
    dir: &'d Path,
    template: &'d [u8],
    cases: Vec<Case>,
}

impl Cases<'_> {
    /// The entry `<id>.hps`, already made, is a case: `name` says what was done to it.
    fn case(&mut self, id: &str, name: impl Into<String>, expect: Expect) {
        self.cases.push(Case {
            name: name.into(),
            engine_id: id.into(),
            expect,
        });
    }

    /// Writes `<id>.hps` from `bytes` (see [`write`]) and makes it a case.
    fn file(&mut self, id: &str, bytes: &[u8], name: impl Into<String>, expect: Expect) {
        write(self.dir, id, bytes);
        self.case(id, name, expect);
    }

    /// Writes `<id>.hps` from the template with the header words `(offset, value)` of
    /// `words` set (see [`write`]) and makes it a case.
    fn patched(
        &mut self,
        id: &str,
        words: &[(usize, u64)],
        name: impl Into<String>,
        expect: Expect,
    ) {
        let mut b = self.template.to_vec();
        for &(offset, value) in words {
            set_word(&mut b, offset, value);
        }
        self.file(id, &b, name, expect);
    }

    /// Writes `<id>.hps` with exactly `bytes` (see [`write_raw`]) and makes it a case.
    fn raw_file(&mut self, id: &str, bytes: &[u8], name: impl Into<String>, expect: Expect) {
        write_raw(self.dir, id, bytes);
        self.case(id, name, expect);
    }
}

/// Builds the corpus in `dir` (which must be empty and owned by this user) and returns its
/// cases. `outside` is a second directory for the targets of symbolic links.
pub fn build(dir: &Path, outside: &Path) -> Vec<Case> {
    let t = template();
    let mut c = Cases {
        dir,
        template: &t,
        cases: Vec::new(),
    };

    truncated(&mut c);
    bad_lengths(&mut c);
    overflowing_tables(&mut c);
    other_versions(&mut c);
    other_byte_orders(&mut c);
    not_segments(&mut c);
    lifecycles(&mut c);
    special_entries(&mut c, outside);
    foreign_owner(&mut c);
    hostile_contents(&mut c);
    rpc_split_case(&mut c);
    served_case(&mut c);
    c.cases
}

/// Cases 1: Truncated at every header field boundary and inside the slot table.
fn truncated(c: &mut Cases<'_>) {
    let t = c.template;
    let total = t.len();
    let mut cuts: Vec<usize> = vec![0, 1, 7];
    cuts.extend((8..=h::WORDS_END).step_by(8));
    cuts.extend([
        h::STRINGS_OFFSET,
        h::BOOT_ID_OFFSET,
        h::MODEL_NAME_OFFSET,
        h::MODEL_QUANT_OFFSET,
        h::TOKENIZER_OFFSET,
        h::DEVICE_OFFSET,
        h::MODEL_ALIAS_OFFSET,
        h::MODEL_PATH_OFFSET,
        h::HEADER_LEN - 1,
        h::HEADER_LEN,
        h::HEADER_LEN + 1,
        h::HEADER_LEN + s::SLOT_ALIGN,
        total - s::SLOT_STRIDE,
        total - 8,
        total - 1,
    ]);
    cuts.sort_unstable();
    cuts.dedup();
    for cut in cuts {
        c.file(
            &format!("cut-{cut:05}"),
            &t[..cut],
            format!("truncated to {cut} of {total} bytes"),
            Expect::Refused(TRUNCATED),
        );
    }
}

/// Cases 2: Every length field set to 0, huge, all ones, misaligned, and slightly off.
fn bad_lengths(c: &mut Cases<'_>) {
    let t = c.template;
    let fields = [
        ("header-len", h::HEADER_LEN_OFFSET),
        ("slot-offset", h::SLOT_OFFSET_OFFSET),
        ("slot-stride", h::SLOT_STRIDE_OFFSET),
        ("slot-count", h::SLOT_COUNT_OFFSET),
        ("total-len", h::TOTAL_LEN_OFFSET),
    ];
    for (field, offset) in fields {
        let valid = word(t, offset);
        let values = [
            ("zero", 0),
            ("huge", 1u64 << 62),
            ("max", u64::MAX),
            ("plus1", valid + 1),
            ("plus8", valid + 8),
            ("plus128", valid + 128),
            ("half", valid / 2 + 1),
        ];
        for (what, value) in values {
            // A slot table that still fits the file is valid (FORMAT.md §10.2 step 9: the
            // table must fit, trailing space is allowed): fewer slots, and, since v1.3
            // puts regions after the table, a table moved, widened or lengthened into
            // them (the reader then refuses the region directory, which the table now
            // overlaps: §16.4). Every other change is refused.
            let mut patched = t.to_vec();
            set_word(&mut patched, offset, value);
            let expect = if slot_table_fits(&patched) {
                Expect::Readable
            } else {
                Expect::Refused(GEOMETRY)
            };
            c.patched(
                &format!("len-{field}-{what}"),
                &[(offset, value)],
                format!("{field} = {value:#x} (valid {valid:#x})"),
                expect,
            );
        }
    }
}

/// Cases 3: Slot count times stride overflowing 64 bits (and the file size).
fn overflowing_tables(c: &mut Cases<'_>) {
    for (what, count, stride) in [
        ("wrap-zero", 1u64 << 56, 1u64 << 8),
        ("wrap-small", (u64::MAX / 256) + 2, 256),
        ("stride-max", 4, u64::MAX - 127),
    ] {
        c.patched(
            &format!("overflow-{what}"),
            &[
                (h::SLOT_COUNT_OFFSET, count),
                (h::SLOT_STRIDE_OFFSET, stride),
            ],
            format!("slot count {count:#x} x stride {stride:#x} overflows"),
            Expect::Refused(GEOMETRY),
        );
    }
}

/// Cases 4: Other format major versions are refused; a newer minor is read.
fn other_versions(c: &mut Cases<'_>) {
    for major in [0u64, 2, 255, u64::MAX] {
        c.patched(
            &format!("major-{major:x}"),
            &[(h::VERSION_MAJOR_OFFSET, major)],
            format!("format major version {major}"),
            Expect::Refused(VERSION),
        );
    }
    c.patched(
        "minor-999",
        &[(h::VERSION_MINOR_OFFSET, 999)],
        "format version 1.999 (a newer minor: readable)",
        Expect::Readable,
    );
}

/// Cases 5: Other byte order: every word swapped, or a corrupt marker.
fn other_byte_orders(c: &mut Cases<'_>) {
    let t = c.template;
    {
        let mut b = t.to_vec();
        for chunk in b.chunks_exact_mut(8) {
            chunk.reverse();
        }
        // The magic is a byte string, not a word: keep it as written.
        b[..8].copy_from_slice(&h::MAGIC);
        c.file(
            "byte-order-swapped",
            &b,
            "written with the other byte order",
            Expect::Refused(BYTE_ORDER),
        );
        c.patched(
            "byte-order-corrupt",
            &[(h::BYTE_ORDER_OFFSET, 0x0807_0605_0403_0201 ^ 0xff)],
            "corrupt byte-order marker",
            Expect::Refused(BYTE_ORDER),
        );
    }
}

/// Cases 6: Not a segment at all.
fn not_segments(c: &mut Cases<'_>) {
    let t = c.template;
    let total = t.len();
    {
        let mut b = t.to_vec();
        b[..8].copy_from_slice(b"NOTHYDRA");
        c.file("magic-wrong", &b, "wrong magic", Expect::Refused(MAGIC));
        let text = "#!/bin/sh\necho this is a shell script, not a segment\n".repeat(64);
        c.file(
            "magic-text",
            text.as_bytes(),
            "a text file",
            Expect::Refused(MAGIC),
        );
        // Deterministic noise (xorshift), segment-sized.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let noise: Vec<u8> = (0..total)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        c.file(
            "magic-noise",
            &noise,
            "random bytes",
            Expect::Refused(MAGIC),
        );
    }
}

/// Cases 7: Lifecycle: still initialising, or an unknown state.
fn lifecycles(c: &mut Cases<'_>) {
    for (id, state, expect) in [
        ("state-init", 1u64, NOT_READY),
        ("state-zero", 0, BAD_STATE),
        ("state-unknown", 77, BAD_STATE),
    ] {
        c.patched(
            id,
            &[(h::STATE_OFFSET, state)],
            format!("lifecycle state {state}"),
            Expect::Refused(expect),
        );
    }
}

/// Cases 8: Entries that are not regular files.
fn special_entries(c: &mut Cases<'_>, outside: &Path) {
    let t = c.template;
    let dir = c.dir;
    {
        let target = outside.join("elsewhere.hps");
        std::fs::write(&target, t).expect("write symlink target");
        for (id, to) in [
            ("link-to-segment", target.clone()),
            ("link-to-passwd", PathBuf::from("/etc/passwd")),
            ("link-to-dev-zero", PathBuf::from("/dev/zero")),
            ("link-dangling", outside.join("nothing-here.hps")),
        ] {
            std::os::unix::fs::symlink(&to, dir.join(format!("{id}.hps"))).expect("symlink");
            c.case(
                id,
                format!("symbolic link to {}", to.display()),
                Expect::Refused(SYMLINK),
            );
        }
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            dir.join("fifo.hps"),
            rustix::fs::Mode::from_raw_mode(0o640),
        )
        .expect("mkfifo");
        c.case(
            "fifo",
            "a FIFO (opening it for reading must not hang)",
            Expect::Refused(NOT_REGULAR),
        );
        std::fs::create_dir(dir.join("directory.hps")).expect("mkdir");
        c.case("directory", "a directory", Expect::Refused(NOT_REGULAR));
        let sock = std::os::unix::net::UnixListener::bind(dir.join("socket.hps")).expect("bind");
        // The socket file stays after the listener is dropped.
        drop(sock);
        c.case("socket", "a Unix socket", Expect::Refused(NOT_REGULAR));
    }
}

/// Cases 9: Owned by another user (only root can make one).
fn foreign_owner(c: &mut Cases<'_>) {
    let t = c.template;
    let dir = c.dir;
    if is_root() {
        write(dir, "other-owner", t);
        let nobody = rustix::process::Uid::from_raw(65534);
        rustix::fs::chown(dir.join("other-owner.hps"), Some(nobody), None).expect("chown");
        c.case(
            "other-owner",
            "owned by uid 65534, not the directory's owner",
            Expect::Refused(OWNER),
        );
    }
}

/// Cases 10: Well-formed segments with hostile contents: read, never trusted.
fn hostile_contents(c: &mut Cases<'_>) {
    let t = c.template;
    {
        let mut b = t.to_vec();
        // Strings: no NUL terminator, invalid UTF-8, control characters, quotes.
        let name = &mut b[h::MODEL_NAME_OFFSET..h::MODEL_NAME_OFFSET + h::MODEL_NAME_LEN];
        name.fill(b'"');
        name[0..4].copy_from_slice(&[0xff, 0xfe, b'\n', b'\\']);
        let dev = &mut b[h::DEVICE_OFFSET..h::DEVICE_OFFSET + h::DEVICE_LEN];
        dev.fill(0x1b);
        c.file(
            "content-strings",
            &b,
            "description strings unterminated, invalid UTF-8, escapes",
            Expect::Readable,
        );

        // The header names another engine than the file (FORMAT §2.2): a copy made by hand,
        // and an id field unterminated and not UTF-8.
        let mut hostile_id = t.to_vec();
        hostile_id[h::ENGINE_ID_OFFSET..h::ENGINE_ID_OFFSET + h::ENGINE_ID_LEN].fill(0xc3);
        for (id, bytes, name) in [
            (
                "id-mismatch",
                t,
                "header ENGINE_ID names another engine than the file",
            ),
            (
                "id-hostile",
                &hostile_id[..],
                "header ENGINE_ID unterminated, invalid UTF-8",
            ),
        ] {
            c.raw_file(id, bytes, name, Expect::Refused(ID_MISMATCH));
        }

        for (id, bytes, name) in [
            (
                "content-slots",
                hostile_slots(t),
                "slot words out of range, far-future times, a torn record",
            ),
            (
                "content-layers",
                hostile_layers(t),
                "layer positions past their total, of u64::MAX layers, from the far future",
            ),
            (
                "content-predictions",
                hostile_predictions(t),
                "predictions of u64::MAX ns, ends in the past, naming other steps, all ones",
            ),
        ] {
            c.file(id, &bytes, name, Expect::Readable);
        }
    }
}

/// A well-formed v1.3 engine split across two RPC peers, its slot 0 waiting on the
/// second: what each reader must name (its writer gone, so the slot reads orphaned).
fn rpc_split_case(c: &mut Cases<'_>) {
    let split = crate::scratch("hydra-corpus-split.");
    let (w, _) = crate::segments::rpc_split(split.path(), RPC_SPLIT_ID);
    let bytes = std::fs::read(w.path()).expect("read the RPC split segment");
    drop(w);
    c.file(
        RPC_SPLIT_ID,
        &bytes,
        "an engine split across two RPC peers, slot 0 waiting on the second",
        Expect::Readable,
    );
    let decoding = crate::scratch("hydra-corpus-split.");
    let (w, _) = crate::segments::rpc_split_decoding(decoding.path(), RPC_SPLIT_DECODING_ID);
    c.file(
        RPC_SPLIT_DECODING_ID,
        &std::fs::read(w.path()).expect("read the decoding RPC split segment"),
        "the RPC split with slot 0 decoding, waiting on the second peer for 5 s after decode waits of 2 ms there: past the wait rule's threshold",
        Expect::Readable,
    );
    drop(w);
    let unread = crate::scratch("hydra-corpus-split.");
    let (w, _) = crate::segments::rpc_split_unread(unread.path(), RPC_SPLIT_UNREAD_ID);
    let unread_bytes = std::fs::read(w.path()).expect("read the unread RPC split segment");
    drop(w);
    c.file(
        RPC_SPLIT_UNREAD_ID,
        &unread_bytes,
        "the RPC split watching its peers' reads, slot 0 prefilling while the second peer has read nothing for 5 s after a 2 s step: past the peer rule's threshold",
        Expect::Readable,
    );
    c.file(
        "devices-peer-unread-hostile",
        &hostile_unread(&unread_bytes),
        "the watched RPC split with every device's unread-since word all ones (a time far in the future, devices past the table's count included): no peer reads as unread for long, nothing panics",
        Expect::Readable,
    );
    c.file(
        "devices-wait-history-hostile",
        &hostile_wait_history(&bytes),
        "the RPC split with every device's wait history at its limits (steps and longest wait all ones) and slot 0 decoding while it waits: the wait rule's threshold saturates, nothing panics",
        Expect::Readable,
    );
}

/// The corpus entry of an engine that served requests ([`crate::segments::served`]).
pub const SERVED_ID: &str = "stats-served";

/// A well-formed v1.3 engine of three slots that served requests (statistics and flight
/// recorders filled), and two hostile copies: one slot's histogram whose buckets add up to
/// more than its count (a reader leaves that slot out of the sums), and flight recorders
/// whose head, capacity and entry words are hostile (a reader refuses the ring or shows
/// only the entries their own sequences vouch for).
fn served_case(c: &mut Cases<'_>) {
    let scratch = crate::scratch("hydra-corpus-served.");
    let w = crate::segments::served(scratch.path(), SERVED_ID, 3);
    let bytes = std::fs::read(w.path()).expect("read the served segment");
    drop(w);
    c.file(
        SERVED_ID,
        &bytes,
        "an engine of 3 slots that served 3 requests and failed one: statistics and flight recorders filled",
        Expect::Readable,
    );
    let mut older = bytes.clone();
    set_word(&mut older, h::VERSION_MINOR_OFFSET, 2);
    c.file(
        "stats-v1.2",
        &older,
        "the served engine relabelled format v1.2: no statistics and no flight recorder, absent rather than zero",
        Expect::Readable,
    );
    let layout = hydra_layout::region::Layout::for_slots(3);
    let mut backwards = bytes.clone();
    let itl = layout.stats.item(1) + hydra_layout::stats::HistogramKind::Itl.offset();
    set_word(
        &mut backwards,
        itl + hydra_layout::stats::HIST_COUNT_OFFSET,
        1,
    );
    c.file(
        "stats-buckets-backwards",
        &backwards,
        "the served engine with slot 1's inter-token latency count below its buckets' total",
        Expect::Readable,
    );
    let mut rings = bytes;
    use hydra_layout::flight::{ENTRIES_OFFSET, FR_CAPACITY_OFFSET, FR_HEAD_OFFSET};
    set_word(&mut rings, layout.flight.item(0) + FR_HEAD_OFFSET, u64::MAX);
    set_word(
        &mut rings,
        layout.flight.item(1) + FR_CAPACITY_OFFSET,
        u64::MAX,
    );
    let entry = layout.flight.item(2) + ENTRIES_OFFSET;
    for off in (entry..entry + 128).step_by(8) {
        set_word(&mut rings, off, u64::MAX);
    }
    c.file(
        "stats-rings-hostile",
        &rings,
        "the served engine with slot 0's ring head all ones, slot 1's ring capacity all ones and slot 2's first entry all ones",
        Expect::Readable,
    );
}

/// `split`'s bytes with every device entry's wait words (FORMAT §19.6) all ones and slot
/// 0's phase decode, so that a reader judges its wait by those histories.
fn hostile_wait_history(split: &[u8]) -> Vec<u8> {
    use hydra_layout::device_waits::entry as e;
    let mut b = split.to_vec();
    let base = hydra_layout::region::Layout::for_slots(2).devices.item(0);
    for j in 0..hydra_layout::devices::MAX_DEVICES {
        let at = base + hydra_layout::devices::TABLE_OFFSET + j * hydra_layout::devices::DEVICE_LEN;
        for w in [
            e::DEV_PREFILL_WAIT_STEPS,
            e::DEV_PREFILL_WAIT_MAX_NS,
            e::DEV_DECODE_WAIT_STEPS,
            e::DEV_DECODE_WAIT_MAX_NS,
        ] {
            set_word(&mut b, at + w, u64::MAX);
        }
    }
    set_word(&mut b, slot(0, s::PHASE_OFFSET), Phase::Decode.to_raw());
    b
}

/// `split` (the watched RPC split) with every device's `DEV_UNREAD_SINCE_NS` all ones.
fn hostile_unread(split: &[u8]) -> Vec<u8> {
    let mut b = split.to_vec();
    let base = hydra_layout::region::Layout::for_slots(2).devices.item(0);
    for j in 0..hydra_layout::devices::MAX_DEVICES {
        let at = base + hydra_layout::devices::TABLE_OFFSET + j * hydra_layout::devices::DEVICE_LEN;
        set_word(
            &mut b,
            at + hydra_layout::peer_reads::entry::DEV_UNREAD_SINCE_NS,
            u64::MAX,
        );
    }
    b
}

/// The corpus entry of a well-formed engine on two RPC peers
/// ([`crate::segments::rpc_split`]).
pub const RPC_SPLIT_ID: &str = "devices-rpc-split";

/// The corpus entry of that engine decoding ([`crate::segments::rpc_split_decoding`]).
pub const RPC_SPLIT_DECODING_ID: &str = "devices-rpc-split-decoding";

/// The corpus entry of that engine with a peer that reads nothing
/// ([`crate::segments::rpc_split_unread`]).
pub const RPC_SPLIT_UNREAD_ID: &str = "devices-rpc-split-unread";

/// Slot words and engine counters that no conforming writer leaves, in `template`'s
/// well-formed segment.
fn hostile_slots(template: &[u8]) -> Vec<u8> {
    let mut b = template.to_vec();
    // Slot 0: unknown phase, unit and reasons; slot 1: work beyond its total and
    // timestamps in the far future; slot 2: all ones; slot 3: torn (odd sequence).
    set_word(&mut b, slot(0, s::PHASE_OFFSET), 999);
    set_word(&mut b, slot(0, s::WORK_UNIT_OFFSET), 77);
    set_word(&mut b, slot(0, s::FINISH_REASON_OFFSET), 55);
    set_word(&mut b, slot(0, s::ERROR_CODE_OFFSET), u64::MAX);
    set_word(&mut b, slot(1, s::WORK_DONE_OFFSET), u64::MAX);
    set_word(&mut b, slot(1, s::WORK_TOTAL_OFFSET), 3);
    set_word(&mut b, slot(1, s::LAST_PROGRESS_NS_OFFSET), u64::MAX);
    set_word(&mut b, slot(1, s::PHASE_START_NS_OFFSET), u64::MAX - 1);
    set_word(&mut b, slot(1, s::N_PAST_OFFSET), u64::MAX);
    fill_slot_words(&mut b, 2, s::TASK_ID_OFFSET..s::GUARDED_END, u64::MAX);
    let seq = word(&b, slot(3, s::SEQ_OFFSET));
    set_word(&mut b, slot(3, s::SEQ_OFFSET), seq | 1);
    // Engine counters at their limits.
    for off in (h::HEARTBEAT_NS_OFFSET..h::CLOSED_NS_OFFSET).step_by(8) {
        set_word(&mut b, off, u64::MAX);
    }
    b
}

/// Layer positions (format v1.1) that no conforming writer leaves: more layers done
/// than the forward has, a total of u64::MAX, a stamp in the far future, a position
/// naming the step in flight of a slot with no step, and all ones.
fn hostile_layers(template: &[u8]) -> Vec<u8> {
    let mut b = template.to_vec();
    steps_in_flight(&mut b, s::SUBSTEP_STEP_OFFSET);
    set_word(&mut b, slot(0, s::SUBSTEP_DONE_OFFSET), 99);
    set_word(&mut b, slot(0, s::SUBSTEP_TOTAL_OFFSET), 3);
    set_word(&mut b, slot(1, s::SUBSTEP_TOTAL_OFFSET), u64::MAX);
    set_word(&mut b, slot(1, s::SUBSTEP_NS_OFFSET), u64::MAX);
    set_word(&mut b, slot(2, s::STEP_START_NS_OFFSET), 0);
    set_word(&mut b, slot(2, s::SUBSTEP_STEP_OFFSET), 0);
    set_word(&mut b, slot(2, s::SUBSTEP_TOTAL_OFFSET), 30);
    fill_slot_words(&mut b, 3, s::SUBSTEP_DONE_OFFSET..s::SUBSTEP_END, u64::MAX);
    b
}

/// Predictions (format v1.2) that no conforming writer leaves: a step and a phase
/// end of u64::MAX with an error bound of u64::MAX ppm, a step of 1 ns whose phase
/// end lies in the past, predictions naming another step and phase, and all ones.
fn hostile_predictions(template: &[u8]) -> Vec<u8> {
    let mut b = template.to_vec();
    steps_in_flight(&mut b, s::EXPECTED_STEP_OFFSET);
    for i in 0..SLOTS {
        let phase = word(&b, slot(i, s::PHASE_START_NS_OFFSET));
        set_word(&mut b, slot(i, s::EXPECTED_PHASE_OFFSET), phase);
    }
    set_word(&mut b, slot(0, s::STEP_EXPECTED_NS_OFFSET), u64::MAX);
    set_word(&mut b, slot(0, s::TASK_EXPECTED_END_NS_OFFSET), u64::MAX);
    set_word(&mut b, slot(0, s::EXPECTED_ERROR_PPM_OFFSET), u64::MAX);
    set_word(&mut b, slot(1, s::STEP_EXPECTED_NS_OFFSET), 1);
    set_word(&mut b, slot(1, s::TASK_EXPECTED_END_NS_OFFSET), 1);
    set_word(&mut b, slot(1, s::EXPECTED_ERROR_PPM_OFFSET), 1);
    set_word(&mut b, slot(2, s::STEP_EXPECTED_NS_OFFSET), 5_000_000);
    set_word(&mut b, slot(2, s::EXPECTED_STEP_OFFSET), 7);
    set_word(&mut b, slot(2, s::EXPECTED_PHASE_OFFSET), 7);
    set_word(
        &mut b,
        slot(2, s::TASK_EXPECTED_END_NS_OFFSET),
        u64::MAX / 2,
    );
    set_word(&mut b, slot(3, s::STEP_EXPECTED_NS_OFFSET), u64::MAX);
    fill_slot_words(
        &mut b,
        3,
        s::EXPECTED_STEP_OFFSET..s::PREDICTION_END,
        u64::MAX,
    );
    b
}

/// The C ABI's return code for a refusal of `kind`: the reader ABI's own mapping.
pub fn c_code(kind: ErrorKind) -> i32 {
    <hydra_probe_ffi::ProbeAbi as hydra_ffi_support::Abi>::code_of(kind)
}
