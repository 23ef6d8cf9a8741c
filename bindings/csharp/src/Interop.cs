// Interop.cs: the C structs of include/hydra_probe.h, field for field, in the same order and
// with the same widths. The test program checks their sizes and offsets against the header
// (it compiles a C program that prints sizeof/offsetof), so a change there cannot go unseen.

using System;
using System.Runtime.InteropServices;

// The fields are documented in include/hydra_probe.h, whose names they carry in PascalCase.
#pragma warning disable 1591

namespace Hydra.Progress.Interop
{
    /// <summary>
    /// <c>HydraProbeThresholds</c>: classification thresholds in seconds (<c>BudgetS</c>
    /// negative = no budget). Use <see cref="Hydra.Progress.Thresholds"/> instead.
    /// </summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct HydraProbeThresholds
    {
        public double StallFloorS;
        public double StallFactor;
        public double BudgetS;
        public double HeartbeatTimeoutS;
    }

    /// <summary>
    /// <c>HydraProbeSlot</c> (248 bytes): one slot at one moment. Unknown derived figures are
    /// -1 here; <see cref="Hydra.Progress.SlotSnapshot"/> turns them into <c>null</c>.
    /// </summary>
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

    /// <summary>
    /// <c>HydraProbeStr</c>: a string the native handle owns (valid until it is closed):
    /// <c>Len</c> UTF-8 bytes at <c>Ptr</c>, then a NUL.
    /// </summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct HydraProbeStr
    {
        public IntPtr Ptr;
        public UIntPtr Len;
    }

    /// <summary>
    /// <c>HydraProbeDescription</c> (version 1: 128 bytes): the engine's fixed id, model
    /// strings, device and capability bits, the same for every read of a handle.
    /// </summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct HydraProbeDescription
    {
        public uint Size;
        public ulong Capabilities;
        public HydraProbeStr EngineId;
        public HydraProbeStr ModelAlias;
        public HydraProbeStr Tokenizer;
        public HydraProbeStr ModelName;
        public HydraProbeStr ModelQuant;
        public HydraProbeStr ModelPath;
        public HydraProbeStr Device;
    }

    /// <summary>
    /// <c>HydraProbeLayer</c> (40 bytes, ABI minor 2): the layer position inside a slot's
    /// step in flight. Use <see cref="Hydra.Progress.LayerPosition"/> instead.
    /// </summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct HydraProbeLayer
    {
        public uint Published;
        public uint InStep;
        public ulong LayersDone;
        public ulong NLayers;
        public long LayerAgeNs;
        public long StalledAtLayer;
    }

    /// <summary>
    /// <c>HydraProbePrediction</c> (32 bytes, ABI minor 3): the writer's cost model for a
    /// slot (segment format v1.2) and where the ETA comes from.
    /// </summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct HydraProbePrediction
    {
        public uint Published;
        public uint EtaSource;
        public long StepExpectedNs;
        public double PredictionError;
        public uint Confident;
        public uint Reserved;
    }

    /// <summary>
    /// <c>HydraProbeWait</c> (32 bytes, ABI minor 4): the device a slot's step in flight
    /// waits on, and the device of the layer it computes (segment format v1.3). Use
    /// <see cref="Hydra.Progress.DeviceWait"/> instead.
    /// </summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct HydraProbeWait
    {
        public uint Published;
        public uint Waiting;
        public ulong Device;
        public long WaitAgeNs;
        public ulong LayerDevice;
    }

    /// <summary>
    /// <c>HydraProbePeer</c> (32 bytes, ABI minor 7): the RPC peer that has read nothing the
    /// longest of what the engine sent it while the slot's step is in flight, with the peer
    /// rule's threshold (segment format v1.3). Read through
    /// <see cref="Hydra.Progress.SlotMeta.UnreadPeer"/> instead.
    /// </summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct HydraProbePeer
    {
        public uint Published;
        public uint Unread;
        public ulong Device;
        public long UnreadNs;
        public long ThresholdNs;
    }

    /// <summary>
    /// <c>HydraProbeDeviceTable</c> (version 1: 56 bytes, ABI minor 4): the state and counts
    /// of an engine's device table. Use <see cref="Hydra.Progress.DeviceTable"/> instead.
    /// </summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct HydraProbeDeviceTable
    {
        public uint Size;
        public uint State;
        public ulong Seq;
        public ulong LayerCount;
        public ulong OutputDevice;
        public ulong DeviceCount;
        public ulong RangeCount;
        public ulong RangesIgnored;
    }

    /// <summary>
    /// <c>HydraProbeDevice</c> (408 bytes, ABI minor 4): one device of the table, its
    /// strings NUL-terminated UTF-8 in place.
    /// </summary>
    [StructLayout(LayoutKind.Sequential)]
    public unsafe struct HydraProbeDevice
    {
        public ulong Id;
        public ulong Kind;
        public ulong Flags;
        public fixed byte Name[64];
        public fixed byte Endpoint[128];
        public fixed byte Label[192];
    }

    /// <summary><c>HydraProbeLayerRange</c> (24 bytes, ABI minor 4): layers on one device.</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct HydraProbeLayerRange
    {
        public ulong FirstLayer;
        public ulong LastLayer;
        public ulong Device;
    }

    /// <summary>
    /// <c>HydraProbeMeta</c> (version 7: 520 bytes): one slot's Hydra meta as numbers, the
    /// slot read plus the figures the meta derives from it. Unknown values are -1;
    /// <see cref="Hydra.Progress.SlotMeta"/> turns them into <c>null</c>.
    /// </summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct HydraProbeMeta
    {
        public uint Size;
        public uint IsProcessing;
        public HydraProbeSlot Slot;
        public ulong Operation;
        public double Progress;
        public ulong TokensProcessed;
        public ulong TokensTotal;
        public ulong ElapsedMs;
        public ulong Queued;
        public long LastProgressAgeMs;
        public double RatePerS;
        public double EtaS;
        public long PhaseStartUnixMs;
        public long StepAgeMs;
        public ulong StepSize;
        public ulong StallThresholdMs;
        public ulong HeartbeatAgeMs;
        public HydraProbeLayer Layer;
        public HydraProbePrediction Prediction;
        public HydraProbeWait Wait;
        public long WaitLearntMaxNs;
        public long WaitThresholdNs;
        public HydraProbePeer Peer;
    }

    /// <summary>
    /// <c>HydraProbeHistogram</c> (464 bytes, ABI minor 6): one histogram's count, sum and
    /// observations per bucket (not cumulative).
    /// </summary>
    [StructLayout(LayoutKind.Sequential)]
    public unsafe struct HydraProbeHistogram
    {
        public ulong Present;
        public ulong Count;
        public ulong Sum;
        public ulong BucketCount;
        public fixed ulong Buckets[54];
    }

    /// <summary>
    /// The twelve <c>HydraProbeHistogram</c>s of <c>HydraProbeStats.histograms</c>, in
    /// <c>HYDRA_PROBE_HISTOGRAM_*</c> order (C# has no fixed arrays of structs).
    /// </summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct HydraProbeHistograms
    {
        public HydraProbeHistogram H0;
        public HydraProbeHistogram H1;
        public HydraProbeHistogram H2;
        public HydraProbeHistogram H3;
        public HydraProbeHistogram H4;
        public HydraProbeHistogram H5;
        public HydraProbeHistogram H6;
        public HydraProbeHistogram H7;
        public HydraProbeHistogram H8;
        public HydraProbeHistogram H9;
        public HydraProbeHistogram H10;
        public HydraProbeHistogram H11;
    }

    /// <summary>
    /// <c>HydraProbeStats</c> (version 1: 6,096 bytes, ABI minor 6): an engine's or a slot's
    /// statistics. Counters not kept are -1.
    /// </summary>
    [StructLayout(LayoutKind.Sequential)]
    public unsafe struct HydraProbeStats
    {
        public uint Size;
        public uint State;
        public ulong SlotsSummed;
        public ulong SlotsLeftOut;
        public long TasksBegun;
        public long TasksEnded;
        public long TasksNoArrival;
        public long PromptTokensComputed;
        public long PromptTokensReused;
        public long TokensGenerated;
        public ulong CausesPresent;
        public fixed ulong TasksByCause[16];
        public fixed ulong ErrorsByCode[16];
        public fixed ulong BusyNs[8];
        public fixed ulong Steps[8];
        public fixed ulong StepsAbandoned[8];
        public HydraProbeHistograms Histograms;
    }

    /// <summary><c>HydraProbeHistory</c> (version 1: 32 bytes, ABI minor 6): what a slot's flight recorder holds.</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct HydraProbeHistory
    {
        public uint Size;
        public uint State;
        public ulong Count;
        public ulong Torn;
        public ulong Head;
    }

    /// <summary><c>HydraProbeStep</c> (112 bytes, ABI minor 6): one step of a flight recorder.</summary>
    [StructLayout(LayoutKind.Sequential)]
    public struct HydraProbeStep
    {
        public ulong Ordinal;
        public ulong TaskId;
        public ulong Kind;
        public ulong Result;
        public ulong StartNs;
        public ulong DurationNs;
        public ulong Size;
        public ulong Advanced;
        public ulong Context;
        public ulong LayersDone;
        public ulong LayersTotal;
        public ulong PredictedNs;
        public ulong WaitDevice;
        public ulong WaitNs;
    }

    /// <summary>Constants of include/hydra_probe.h.</summary>
    public static class HydraProbeAbi
    {
        /// <summary><c>HYDRA_PROBE_ABI_VERSION</c>: the version these bindings were written for.</summary>
        public const uint AbiVersion = 1;

        /// <summary><c>HYDRA_PROBE_ABI_MINOR</c>: the least minor version these bindings need.</summary>
        public const uint AbiMinor = 7;

        /// <summary><c>HYDRA_PROBE_ETA_NONE</c>: no ETA.</summary>
        public const uint EtaNone = 0;
        /// <summary><c>HYDRA_PROBE_ETA_MODEL</c>: the writer's cost model.</summary>
        public const uint EtaModel = 1;
        /// <summary><c>HYDRA_PROBE_ETA_RATE</c>: the observed rate.</summary>
        public const uint EtaRate = 2;

        /// <summary><c>HYDRA_PROBE_VALUE_PHASE</c>: kind of <c>hydra_probe_value_name</c>.</summary>
        public const uint ValuePhase = 0;
        /// <summary><c>HYDRA_PROBE_VALUE_WORK_UNIT</c>.</summary>
        public const uint ValueWorkUnit = 1;
        /// <summary><c>HYDRA_PROBE_VALUE_FINISH_REASON</c>.</summary>
        public const uint ValueFinishReason = 2;
        /// <summary><c>HYDRA_PROBE_VALUE_ERROR_CODE</c>.</summary>
        public const uint ValueErrorCode = 3;
        /// <summary><c>HYDRA_PROBE_VALUE_SLOT_CLASS</c>.</summary>
        public const uint ValueSlotClass = 4;
        /// <summary><c>HYDRA_PROBE_VALUE_ENGINE_HEALTH</c>.</summary>
        public const uint ValueEngineHealth = 5;
        /// <summary><c>HYDRA_PROBE_VALUE_DEVICE_KIND</c>.</summary>
        public const uint ValueDeviceKind = 6;
        /// <summary><c>HYDRA_PROBE_VALUE_FINISH_CAUSE</c> (ABI minor 6).</summary>
        public const uint ValueFinishCause = 7;
        /// <summary><c>HYDRA_PROBE_VALUE_STEP_RESULT</c> (ABI minor 6).</summary>
        public const uint ValueStepResult = 8;
        /// <summary><c>HYDRA_PROBE_VALUE_HISTOGRAM</c> (ABI minor 6).</summary>
        public const uint ValueHistogram = 9;

        /// <summary><c>HYDRA_PROBE_STATS_ABSENT</c>: the engine keeps no statistics (or no flight recorder).</summary>
        public const uint StatsAbsent = 0;
        /// <summary><c>HYDRA_PROBE_STATS_KNOWN</c>.</summary>
        public const uint StatsKnown = 1;
        /// <summary><c>HYDRA_PROBE_HISTOGRAMS</c>.</summary>
        public const int Histograms = 12;
        /// <summary><c>HYDRA_PROBE_HISTOGRAM_BUCKETS</c>.</summary>
        public const int HistogramBuckets = 54;
        /// <summary><c>HYDRA_PROBE_CAUSES</c>.</summary>
        public const int Causes = 16;
        /// <summary><c>HYDRA_PROBE_PHASES</c>.</summary>
        public const int Phases = 8;
        /// <summary><c>HYDRA_PROBE_HISTOGRAM_RATIO_PREFILL</c>: the first of the two ratio histograms (Q20 values).</summary>
        public const uint HistogramRatioPrefill = 10;

        /// <summary><c>HYDRA_PROBE_DEVICES_ABSENT</c>: the engine publishes no device table.</summary>
        public const uint DevicesAbsent = 0;
        /// <summary><c>HYDRA_PROBE_DEVICES_NOT_YET_KNOWN</c>: not published yet.</summary>
        public const uint DevicesNotYetKnown = 1;
        /// <summary><c>HYDRA_PROBE_DEVICES_KNOWN</c>.</summary>
        public const uint DevicesKnown = 2;
        /// <summary><c>HYDRA_PROBE_DEVICES_UNREADABLE</c>: left mid-update.</summary>
        public const uint DevicesUnreadable = 3;
        /// <summary><c>HYDRA_PROBE_MAX_DEVICES</c>.</summary>
        public const int MaxDevices = 16;
        /// <summary><c>HYDRA_PROBE_MAX_LAYER_RANGES</c>.</summary>
        public const int MaxLayerRanges = 64;

        /// <summary><c>HYDRA_PROBE_ENGINE_ID_LEN</c>: bytes of one <c>HydraProbeEngineId</c>.</summary>
        public const int EngineIdLen = 64;

        /// <summary><c>HYDRA_PROBE_OK</c>.</summary>
        public const int Ok = 0;
        /// <summary><c>HYDRA_PROBE_E_NULL</c>.</summary>
        public const int ENull = -1;
        /// <summary><c>HYDRA_PROBE_E_INVALID_ARGUMENT</c>.</summary>
        public const int EInvalidArgument = -2;
        /// <summary><c>HYDRA_PROBE_E_BUFFER_TOO_SMALL</c>.</summary>
        public const int EBufferTooSmall = -3;
        /// <summary><c>HYDRA_PROBE_E_NOT_FOUND</c>.</summary>
        public const int ENotFound = -4;
        /// <summary><c>HYDRA_PROBE_E_SLOT_OUT_OF_RANGE</c>.</summary>
        public const int ESlotOutOfRange = -5;
        /// <summary><c>HYDRA_PROBE_E_NOT_A_SEGMENT</c>.</summary>
        public const int ENotASegment = -6;
        /// <summary><c>HYDRA_PROBE_E_UNSUPPORTED_VERSION</c>.</summary>
        public const int EUnsupportedVersion = -7;
        /// <summary><c>HYDRA_PROBE_E_REFUSED</c>.</summary>
        public const int ERefused = -8;
        /// <summary><c>HYDRA_PROBE_E_IO</c>.</summary>
        public const int EIo = -9;
        /// <summary><c>HYDRA_PROBE_E_INTERNAL</c>.</summary>
        public const int EInternal = -10;
    }
}
