// SlotSnapshot.cs: one slot at one moment (ReadSlot), immutable, with unknown figures as null.

using System;
using Hydra.Progress.Interop;

namespace Hydra.Progress
{
    /// <summary>
    /// One slot at one moment: the slot record, the figures derived from it, its
    /// classification and its engine's health, from one consistent read. Immutable.
    /// Unknown values (progress, rate, ETA, ages, a total of 0) are <c>null</c>, never -1 or NaN.
    /// </summary>
    public sealed class SlotSnapshot
    {
        const long NsPerTick = 100;

        // The native read, copied whole; every property is computed from it.
        readonly HydraProbeSlot s;

        /// <summary>Slot index.</summary>
        public int Slot => (int)s.Slot;
        /// <summary>Failed seqlock attempts before the consistent copy.</summary>
        public uint ReadRetries => s.ReadRetries;
        /// <summary>The verdict: slot class and engine health.</summary>
        public Classification Classification => new Classification(s.SlotClass, s.EngineHealth);
        /// <summary>The slot's class.</summary>
        public SlotClass Class => Classification.SlotClass;
        /// <summary>The engine's health.</summary>
        public EngineHealth EngineHealth => Classification.EngineHealth;
        /// <summary>Stuck: see <see cref="Hydra.Progress.Classification.IsStuck"/>.</summary>
        public bool IsStuck => Classification.IsStuck;
        /// <summary>The CLOCK_MONOTONIC instant (ns) every age is measured from.</summary>
        public ulong NowNs => s.NowNs;
        /// <summary>Task id; changes when the slot takes a new task (0 = never used).</summary>
        public ulong TaskId => s.TaskId;
        /// <summary>The phase (<see cref="SlotPhase.Unknown"/> for a value from a newer writer).</summary>
        public SlotPhase Phase => Names.PhaseOf(s.Phase);
        /// <summary>The raw phase word.</summary>
        public ulong PhaseRaw => s.Phase;
        /// <summary>How the last task ended: "none", "completed", "cancelled", "error" or "unknown" (a newer writer's value).</summary>
        public string FinishReason => NativeApi.Get().ValueName(HydraProbeAbi.ValueFinishReason, s.FinishReason);
        /// <summary>The raw finish-reason word.</summary>
        public ulong FinishReasonRaw => s.FinishReason;
        /// <summary>The raw error code of the last task (0 none; see layout/FORMAT.md).</summary>
        public ulong ErrorCode => s.ErrorCode;
        /// <summary>Unit of the work counters: "tokens", "bytes", "none" or "unknown" (a newer writer's value).</summary>
        public string WorkUnit => NativeApi.Get().ValueName(HydraProbeAbi.ValueWorkUnit, s.WorkUnit);
        /// <summary>The raw work-unit word.</summary>
        public ulong WorkUnitRaw => s.WorkUnit;
        /// <summary>Work done in the current phase.</summary>
        public ulong WorkDone => s.WorkDone;
        /// <summary>Work total of the current phase; null when unknown (the segment's 0).</summary>
        public ulong? WorkTotal => s.WorkTotal == 0 ? (ulong?)null : s.WorkTotal;
        /// <summary>Prompt tokens reused from the KV cache.</summary>
        public ulong TokensCached => s.TokensCached;
        /// <summary>Tokens in the slot's KV cache.</summary>
        public ulong NPast => s.NPast;
        /// <summary>Slot context size in tokens.</summary>
        public ulong NCtx => s.NCtx;
        /// <summary>Bytes a state save of the slot would produce now.</summary>
        public ulong StateSize => s.StateSize;
        /// <summary>When the current (or last) task started (CLOCK_MONOTONIC ns, 0 = never).</summary>
        public ulong TaskStartNs => s.TaskStartNs;
        /// <summary>When the current phase started (CLOCK_MONOTONIC ns, 0 = none).</summary>
        public ulong PhaseStartNs => s.PhaseStartNs;
        /// <summary>When the work done last advanced (CLOCK_MONOTONIC ns, 0 = never).</summary>
        public ulong LastProgressNs => s.LastProgressNs;
        /// <summary>Start of the step in flight (CLOCK_MONOTONIC ns); 0 when none runs.</summary>
        public ulong StepStartNs => s.StepStartNs;
        /// <summary>Tokens (or bytes) the step in flight carries.</summary>
        public ulong StepSize => s.StepSize;
        /// <summary>Duration of the last finished step, ns.</summary>
        public ulong LastStepNs => s.LastStepNs;
        /// <summary>Steps finished in the current phase.</summary>
        public ulong StepsDone => s.StepsDone;
        /// <summary>Tasks queued for the slot.</summary>
        public ulong Pending => s.Pending;
        /// <summary><c>WorkDone / WorkTotal</c> in 0..1; null when unknown.</summary>
        public double? Progress => Figure(s.Progress);
        /// <summary>Observed rate in work units per second; null when unknown.</summary>
        public double? RatePerS => Figure(s.RatePerS);
        /// <summary>Seconds to finish the phase at that rate; null when unknown.</summary>
        public double? EtaS => Figure(s.EtaS);
        /// <summary>Time since the slot last moved (progress, or its phase start); null when never.</summary>
        public TimeSpan? LastProgressAge => Age(s.LastProgressAgeNs);
        /// <summary>Time since the current phase started; null when no phase runs.</summary>
        public TimeSpan? PhaseAge => Age(s.PhaseAgeNs);
        /// <summary>Time since the step in flight started; null when no step runs.</summary>
        public TimeSpan? StepAge => Age(s.StepAgeNs);
        /// <summary>Predicted duration of the step in flight; null when unknown.</summary>
        public TimeSpan? ExpectedStep => Age(s.ExpectedStepNs);
        /// <summary>Silence beyond which this slot counts as stalled.</summary>
        public TimeSpan StallThreshold => FromNs(s.StallThresholdNs);
        /// <summary>Time since the engine loop's last heartbeat.</summary>
        public TimeSpan HeartbeatAge => FromNs(s.HeartbeatAgeNs);

        internal SlotSnapshot(ref HydraProbeSlot slot)
        {
            s = slot;
        }

        // The C ABI writes -1 for unknown figures and ages; anything negative or not finite
        // is unknown here.
        static double? Figure(double v) => v >= 0 && !double.IsInfinity(v) ? v : (double?)null;

        static TimeSpan? Age(long ns) => ns < 0 ? (TimeSpan?)null : TimeSpan.FromTicks(ns / NsPerTick);

        static TimeSpan FromNs(ulong ns) =>
            TimeSpan.FromTicks((long)Math.Min(ns / NsPerTick, (ulong)TimeSpan.MaxValue.Ticks));

        /// <summary>e.g. "slot 0: decode 120/4096 tokens, progressing (engine live)".</summary>
        public override string ToString() =>
            $"slot {Slot}: {Phase.ToString().ToLowerInvariant()} {WorkDone}/" +
            (WorkTotal.HasValue ? WorkTotal.Value.ToString() : "?") +
            $" {WorkUnit}, {Classification}";
    }

    /// <summary>
    /// The layer position inside a slot's step in flight (<see cref="ProgressProbe.ReadLayer"/>),
    /// from one read. Immutable.
    /// </summary>
    public sealed class LayerPosition
    {
        internal LayerPosition(ref HydraProbeLayer l)
        {
            Published = l.Published != 0;
            if (l.InStep != 0)
            {
                LayersDone = l.LayersDone;
                Layers = l.NLayers;
            }
            LayerAgeNs = l.LayerAgeNs < 0 ? (long?)null : l.LayerAgeNs;
            StalledAtLayer = l.StalledAtLayer < 0 ? (ulong?)null : (ulong)l.StalledAtLayer;
        }

        /// <summary>Whether the engine publishes layer positions (segment format v1.1); false: unknown.</summary>
        public bool Published { get; }
        /// <summary>Layers of the step's forward finished; null between steps or when unknown.</summary>
        public ulong? LayersDone { get; }
        /// <summary>Layers in the forward; null between steps or when unknown.</summary>
        public ulong? Layers { get; }
        /// <summary>Nanoseconds since the last layer finished; null when unknown.</summary>
        public long? LayerAgeNs { get; }
        /// <summary>For a stalled slot with a known position: the layer counter it stopped at.</summary>
        public ulong? StalledAtLayer { get; }

        /// <inheritdoc/>
        public override string ToString() =>
            LayersDone.HasValue ? $"layer {LayersDone}/{Layers}" : Published ? "no layer" : "unknown";
    }
}
