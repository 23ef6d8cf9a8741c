#!/usr/bin/env python3
"""Is slot N of an engine stuck? Answered in-process through libhydra_probe_ffi (ctypes).

    python3 is_stuck.py [--lib PATH] [--dir DIR] [--stall-floor SECS] ENGINE SLOT

Exit status: 0 not stuck, 1 stuck (stalled, orphaned, torn, or its engine hung or dead),
2 error. The structures below mirror include/hydra_probe.h field for field.
"""

import argparse
import ctypes
import os
import sys

# HydraProbeSlotClass / HydraProbeEngineHealth (int32 enums in hydra_probe.h).
SLOT_CLASSES = ["idle", "queued", "progressing", "slow", "stalled", "orphaned", "torn"]
ENGINE_HEALTH = ["live", "hung", "closed", "dead"]
STUCK_CLASSES = {"stalled", "orphaned", "torn"}
BAD_HEALTH = {"hung", "dead"}
HYDRA_PROBE_OK = 0


class HydraProbeThresholds(ctypes.Structure):
    _fields_ = [
        ("stall_floor_s", ctypes.c_double),
        ("stall_factor", ctypes.c_double),
        ("budget_s", ctypes.c_double),
        ("heartbeat_timeout_s", ctypes.c_double),
    ]


class HydraProbeSlot(ctypes.Structure):
    _fields_ = [
        ("slot", ctypes.c_uint32),
        ("read_retries", ctypes.c_uint32),
        ("slot_class", ctypes.c_int32),
        ("engine_health", ctypes.c_int32),
        ("now_ns", ctypes.c_uint64),
        ("task_id", ctypes.c_uint64),
        ("phase", ctypes.c_uint64),
        ("finish_reason", ctypes.c_uint64),
        ("error_code", ctypes.c_uint64),
        ("work_unit", ctypes.c_uint64),
        ("work_done", ctypes.c_uint64),
        ("work_total", ctypes.c_uint64),
        ("tokens_cached", ctypes.c_uint64),
        ("n_past", ctypes.c_uint64),
        ("n_ctx", ctypes.c_uint64),
        ("state_size", ctypes.c_uint64),
        ("task_start_ns", ctypes.c_uint64),
        ("phase_start_ns", ctypes.c_uint64),
        ("last_progress_ns", ctypes.c_uint64),
        ("step_start_ns", ctypes.c_uint64),
        ("step_size", ctypes.c_uint64),
        ("last_step_ns", ctypes.c_uint64),
        ("steps_done", ctypes.c_uint64),
        ("pending", ctypes.c_uint64),
        ("progress", ctypes.c_double),
        ("rate_per_s", ctypes.c_double),
        ("eta_s", ctypes.c_double),
        ("last_progress_age_ns", ctypes.c_int64),
        ("phase_age_ns", ctypes.c_int64),
        ("step_age_ns", ctypes.c_int64),
        ("expected_step_ns", ctypes.c_int64),
        ("stall_threshold_ns", ctypes.c_uint64),
        ("heartbeat_age_ns", ctypes.c_uint64),
    ]


class ProbeError(Exception):
    pass


def load(path):
    lib = ctypes.CDLL(path)
    i32, u32, sz = ctypes.c_int32, ctypes.c_uint32, ctypes.c_size_t
    handle = ctypes.c_void_p
    lib.hydra_probe_abi_version.restype = u32
    lib.hydra_probe_error_name.argtypes = [i32]
    lib.hydra_probe_error_name.restype = ctypes.c_char_p
    lib.hydra_probe_last_error.argtypes = [ctypes.c_char_p, sz, ctypes.POINTER(sz)]
    lib.hydra_probe_last_error.restype = i32
    lib.hydra_probe_thresholds_default.argtypes = [ctypes.POINTER(HydraProbeThresholds)]
    lib.hydra_probe_thresholds_default.restype = i32
    lib.hydra_probe_open.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(handle)]
    lib.hydra_probe_open.restype = i32
    lib.hydra_probe_close.argtypes = [handle]
    lib.hydra_probe_close.restype = i32
    lib.hydra_probe_set_thresholds.argtypes = [handle, ctypes.POINTER(HydraProbeThresholds)]
    lib.hydra_probe_set_thresholds.restype = i32
    lib.hydra_probe_read_slot.argtypes = [handle, u32, ctypes.POINTER(HydraProbeSlot)]
    lib.hydra_probe_read_slot.restype = i32
    if ctypes.sizeof(HydraProbeSlot) != 248:
        raise ProbeError("HydraProbeSlot mirror has the wrong size")
    return lib


def check(lib, rc, what):
    if rc != HYDRA_PROBE_OK:
        msg = ctypes.create_string_buffer(512)
        lib.hydra_probe_last_error(msg, len(msg), None)
        name = lib.hydra_probe_error_name(rc).decode()
        raise ProbeError(f"{what}: {name} ({rc}): {msg.value.decode(errors='replace')}")


def read_slot(lib, directory, engine, slot, stall_floor=None):
    h = ctypes.c_void_p()
    check(lib, lib.hydra_probe_open(directory.encode(), engine.encode(), ctypes.byref(h)), "open")
    try:
        if stall_floor is not None:
            t = HydraProbeThresholds()
            check(lib, lib.hydra_probe_thresholds_default(ctypes.byref(t)), "thresholds")
            t.stall_floor_s = stall_floor
            check(lib, lib.hydra_probe_set_thresholds(h, ctypes.byref(t)), "set thresholds")
        s = HydraProbeSlot()
        check(lib, lib.hydra_probe_read_slot(h, slot, ctypes.byref(s)), "read slot")
        return s
    finally:
        lib.hydra_probe_close(h)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", default=os.environ.get("HYDRA_PROBE_LIB", "libhydra_probe_ffi.so"))
    ap.add_argument("--dir", default="", help="segment directory ('' = $HYDRA_PROGRESS_DIR or /dev/shm/hydra-progress)")
    ap.add_argument("--stall-floor", type=float, help="seconds (default 30)")
    ap.add_argument("engine")
    ap.add_argument("slot", type=int)
    args = ap.parse_args()
    try:
        lib = load(args.lib)
        s = read_slot(lib, args.dir, args.engine, args.slot, args.stall_floor)
    except (OSError, ProbeError) as e:
        print(f"is_stuck: {e}", file=sys.stderr)
        return 2
    cls = SLOT_CLASSES[s.slot_class] if 0 <= s.slot_class < len(SLOT_CLASSES) else "unknown"
    health = ENGINE_HEALTH[s.engine_health] if 0 <= s.engine_health < len(ENGINE_HEALTH) else "unknown"
    age = "never" if s.last_progress_age_ns < 0 else f"{s.last_progress_age_ns / 1e9:.1f}s ago"
    eta = "unknown" if s.eta_s < 0 else f"{s.eta_s:.1f}s"
    stuck = cls in STUCK_CLASSES or health in BAD_HEALTH
    verdict = "STUCK" if stuck else "not stuck"
    print(f"slot {args.slot} of {args.engine}: {verdict} ({cls}; engine {health}; "
          f"{s.work_done}/{s.work_total} done, last progress {age}, "
          f"stall after {s.stall_threshold_ns / 1e9:.1f}s, eta {eta})")
    return 1 if stuck else 0


if __name__ == "__main__":
    sys.exit(main())
