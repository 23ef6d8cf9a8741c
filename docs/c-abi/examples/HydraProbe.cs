// HydraProbe.cs: P/Invoke bindings of libhydra_probe_ffi (include/hydra_probe.h) for C#/.NET,
// and how to answer "is slot N stuck?" in-process, with no HTTP and no IPC to the engine.
//
// The structs mirror the C structs field for field, in the same order, with the same
// widths (a test, probe-capi/tests/ffi_header.rs, checks these field lists against the header).
// Put libhydra_probe_ffi.so next to the executable or on LD_LIBRARY_PATH.
//
//   var verdict = HydraProbe.IsStuck("", "engine-0", 3, out var slot);
//   Console.WriteLine($"{verdict}: {slot.SlotClass}, {slot.WorkDone}/{slot.WorkTotal}");

using System;
using System.Runtime.InteropServices;
using System.Text;

namespace Hydra.Progress
{
    /// <summary>HydraProbeSlotClass.</summary>
    public enum SlotClass : int
    {
        Idle = 0,
        Queued = 1,
        Progressing = 2,
        Slow = 3,
        Stalled = 4,
        Orphaned = 5,
        Torn = 6,
    }

    /// <summary>HydraProbeEngineHealth.</summary>
    public enum EngineHealth : int
    {
        Live = 0,
        Hung = 1,
        Closed = 2,
        Dead = 3,
    }

    /// <summary>HydraProbeThresholds (seconds; BudgetS negative = no budget).</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct HydraProbeThresholds
    {
        public double StallFloorS;
        public double StallFactor;
        public double BudgetS;
        public double HeartbeatTimeoutS;
    }

    /// <summary>HydraProbeSlot (248 bytes). Unknown derived figures are -1.</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct HydraProbeSlot
    {
        public uint Slot;
        public uint ReadRetries;
        public SlotClass SlotClass;
        public EngineHealth EngineHealth;
        public ulong NowNs;
        public ulong TaskId;
        public ulong Phase;
        public ulong FinishReason;
        public ulong ErrorCode;
        public ulong WorkUnit;
        public ulong WorkDone;
        public ulong WorkTotal;
        public ulong TokensCached;
        public ulong NPast;
        public ulong NCtx;
        public ulong StateSize;
        public ulong TaskStartNs;
        public ulong PhaseStartNs;
        public ulong LastProgressNs;
        public ulong StepStartNs;
        public ulong StepSize;
        public ulong LastStepNs;
        public ulong StepsDone;
        public ulong Pending;
        public double Progress;
        public double RatePerS;
        public double EtaS;
        public long LastProgressAgeNs;
        public long PhaseAgeNs;
        public long StepAgeNs;
        public long ExpectedStepNs;
        public ulong StallThresholdNs;
        public ulong HeartbeatAgeNs;
    }

    public static class HydraProbe
    {
        private const string Lib = "hydra_probe_ffi"; // libhydra_probe_ffi.so

        public const int Ok = 0;
        public const int ErrBufferTooSmall = -3;
        public const int ErrNotFound = -4;

        [DllImport(Lib, EntryPoint = "hydra_probe_abi_version")]
        public static extern uint AbiVersion();

        [DllImport(Lib, EntryPoint = "hydra_probe_error_name")]
        private static extern IntPtr ErrorNamePtr(int code);

        [DllImport(Lib, EntryPoint = "hydra_probe_last_error")]
        private static extern int LastError(byte[] buf, UIntPtr cap, out UIntPtr needed);

        [DllImport(Lib, EntryPoint = "hydra_probe_thresholds_default")]
        public static extern int ThresholdsDefault(out HydraProbeThresholds thresholds);

        [DllImport(Lib, EntryPoint = "hydra_probe_open")]
        public static extern int Open(
            [MarshalAs(UnmanagedType.LPUTF8Str)] string dir,
            [MarshalAs(UnmanagedType.LPUTF8Str)] string engine,
            out IntPtr probe);

        [DllImport(Lib, EntryPoint = "hydra_probe_close")]
        public static extern int Close(IntPtr probe);

        [DllImport(Lib, EntryPoint = "hydra_probe_set_thresholds")]
        public static extern int SetThresholds(IntPtr probe, ref HydraProbeThresholds thresholds);

        [DllImport(Lib, EntryPoint = "hydra_probe_slot_count")]
        public static extern int SlotCount(IntPtr probe, out uint count);

        [DllImport(Lib, EntryPoint = "hydra_probe_read_slot")]
        public static extern int ReadSlot(IntPtr probe, uint slot, out HydraProbeSlot result);

        [DllImport(Lib, EntryPoint = "hydra_probe_meta_json")]
        private static extern int MetaJson(IntPtr probe, uint slot, byte[] buf, UIntPtr cap, out UIntPtr needed);

        /// <summary>The message of this thread's last failed call.</summary>
        public static string LastErrorMessage()
        {
            var buf = new byte[1024];
            LastError(buf, (UIntPtr)buf.Length, out _);
            int len = Array.IndexOf(buf, (byte)0);
            return Encoding.UTF8.GetString(buf, 0, len < 0 ? buf.Length : len);
        }

        private static void Check(int rc, string what)
        {
            if (rc != Ok)
            {
                string name = Marshal.PtrToStringAnsi(ErrorNamePtr(rc)) ?? rc.ToString();
                throw new InvalidOperationException($"{what}: {name}: {LastErrorMessage()}");
            }
        }

        /// <summary>
        /// Is slot <paramref name="slot"/> of engine <paramref name="engine"/> stuck?
        /// Stuck = stalled, orphaned or torn, or its engine is hung or dead. Directory ""
        /// means $HYDRA_PROGRESS_DIR, else /dev/shm/hydra-progress.
        /// </summary>
        public static bool IsStuck(string dir, string engine, uint slot, out HydraProbeSlot result)
        {
            Check(Open(dir, engine, out IntPtr probe), "open");
            try
            {
                Check(ReadSlot(probe, slot, out result), "read slot");
            }
            finally
            {
                Close(probe);
            }
            return result.SlotClass == SlotClass.Stalled
                || result.SlotClass == SlotClass.Orphaned
                || result.SlotClass == SlotClass.Torn
                || result.EngineHealth == EngineHealth.Hung
                || result.EngineHealth == EngineHealth.Dead;
        }

        /// <summary>The Hydra meta JSON of one slot (what Hydra Core's SlotMeta parses).</summary>
        public static string Meta(IntPtr probe, uint slot)
        {
            var buf = new byte[2048];
            for (int attempt = 0; attempt < 8; attempt++)
            {
                int rc = MetaJson(probe, slot, buf, (UIntPtr)buf.Length, out UIntPtr needed);
                if (rc == Ok)
                    return Encoding.UTF8.GetString(buf, 0, (int)needed - 1);
                if (rc != ErrBufferTooSmall)
                    Check(rc, "meta");
                buf = new byte[(int)needed + 256];
            }
            throw new InvalidOperationException("meta JSON kept growing");
        }
    }
}
