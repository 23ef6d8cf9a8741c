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

        /// <summary>Slot index.</summary>
        public int Slot { get; }
        /// <summary>Failed seqlock attempts before the consistent copy.</summary>
        public uint ReadRetries { get; }
        /// <summary>The verdict: slot class and engine health.</summary>
        public Classification Classification { get; }
        /// <summary>The slot's class.</summary>
        public SlotClass Class => Classification.SlotClass;
        /// <summary>The engine's health.</summary>
        public EngineHealth EngineHealth => Classification.EngineHealth;
        /// <summary>Stuck: see <see cref="Hydra.Progress.Classification.IsStuck"/>.</summary>
        public bool IsStuck => Classification.IsStuck;
        /// <summary>The CLOCK_MONOTONIC instant (ns) every age is measured from.</summary>
        public ulong NowNs { get; }
        /// <summary>Task id; changes when the slot takes a new task (0 = never used).</summary>
        public ulong TaskId { get; }
        /// <summary>The phase (<see cref="SlotPhase.Unknown"/> for a value from a newer writer).</summary>
        public SlotPhase Phase { get; }
        /// <summary>The raw phase word.</summary>
        public ulong PhaseRaw { get; }
        /// <summary>How the last task ended.</summary>
        public FinishReason FinishReason { get; }
        /// <summary>The raw finish-reason word.</summary>
        public ulong FinishReasonRaw { get; }
        /// <summary>The raw error code of the last task (0 none; see layout/FORMAT.md).</summary>
        public ulong ErrorCode { get; }
        /// <summary>Unit of the work counters.</summary>
        public WorkUnit WorkUnit { get; }
        /// <summary>The raw work-unit word.</summary>
        public ulong WorkUnitRaw { get; }
        /// <summary>Work done in the current phase.</summary>
        public ulong WorkDone { get; }
        /// <summary>Work total of the current phase; null when unknown (the segment's 0).</summary>
        public ulong? WorkTotal { get; }
        /// <summary>Prompt tokens reused from the KV cache.</summary>
        public ulong TokensCached { get; }
        /// <summary>Tokens in the slot's KV cache.</summary>
        public ulong NPast { get; }
        /// <summary>Slot context size in tokens.</summary>
        public ulong NCtx { get; }
        /// <summary>Bytes a state save of the slot would produce now.</summary>
        public ulong StateSize { get; }
        /// <summary>When the current (or last) task started (CLOCK_MONOTONIC ns, 0 = never).</summary>
        public ulong TaskStartNs { get; }
        /// <summary>When the current phase started (CLOCK_MONOTONIC ns, 0 = none).</summary>
        public ulong PhaseStartNs { get; }
        /// <summary>When the work done last advanced (CLOCK_MONOTONIC ns, 0 = never).</summary>
        public ulong LastProgressNs { get; }
        /// <summary>Start of the step in flight (CLOCK_MONOTONIC ns); 0 when none runs.</summary>
        public ulong StepStartNs { get; }
        /// <summary>Tokens (or bytes) the step in flight carries.</summary>
        public ulong StepSize { get; }
        /// <summary>Duration of the last finished step, ns.</summary>
        public ulong LastStepNs { get; }
        /// <summary>Steps finished in the current phase.</summary>
        public ulong StepsDone { get; }
        /// <summary>Tasks queued for the slot.</summary>
        public ulong Pending { get; }
        /// <summary><c>WorkDone / WorkTotal</c> in 0..1; null when unknown.</summary>
        public double? Progress { get; }
        /// <summary>Observed rate in work units per second; null when unknown.</summary>
        public double? RatePerS { get; }
        /// <summary>Seconds to finish the phase at that rate; null when unknown.</summary>
        public double? EtaS { get; }
        /// <summary>Time since the slot last moved (progress, or its phase start); null when never.</summary>
        public TimeSpan? LastProgressAge { get; }
        /// <summary>Time since the current phase started; null when no phase runs.</summary>
        public TimeSpan? PhaseAge { get; }
        /// <summary>Time since the step in flight started; null when no step runs.</summary>
        public TimeSpan? StepAge { get; }
        /// <summary>Predicted duration of the step in flight; null when unknown.</summary>
        public TimeSpan? ExpectedStep { get; }
        /// <summary>Silence beyond which this slot counts as stalled.</summary>
        public TimeSpan StallThreshold { get; }
        /// <summary>Time since the engine loop's last heartbeat.</summary>
        public TimeSpan HeartbeatAge { get; }

        internal SlotSnapshot(ref HydraProbeSlot s)
        {
            Slot = (int)s.Slot;
            ReadRetries = s.ReadRetries;
            Classification = new Classification(s.SlotClass, s.EngineHealth);
            NowNs = s.NowNs;
            TaskId = s.TaskId;
            PhaseRaw = s.Phase;
            Phase = Names.PhaseOf(s.Phase);
            FinishReasonRaw = s.FinishReason;
            FinishReason = Names.FinishReasonOf(s.FinishReason);
            ErrorCode = s.ErrorCode;
            WorkUnitRaw = s.WorkUnit;
            WorkUnit = Names.WorkUnitOf(s.WorkUnit);
            WorkDone = s.WorkDone;
            WorkTotal = s.WorkTotal == 0 ? (ulong?)null : s.WorkTotal;
            TokensCached = s.TokensCached;
            NPast = s.NPast;
            NCtx = s.NCtx;
            StateSize = s.StateSize;
            TaskStartNs = s.TaskStartNs;
            PhaseStartNs = s.PhaseStartNs;
            LastProgressNs = s.LastProgressNs;
            StepStartNs = s.StepStartNs;
            StepSize = s.StepSize;
            LastStepNs = s.LastStepNs;
            StepsDone = s.StepsDone;
            Pending = s.Pending;
            Progress = Figure(s.Progress);
            RatePerS = Figure(s.RatePerS);
            EtaS = Figure(s.EtaS);
            LastProgressAge = Age(s.LastProgressAgeNs);
            PhaseAge = Age(s.PhaseAgeNs);
            StepAge = Age(s.StepAgeNs);
            ExpectedStep = Age(s.ExpectedStepNs);
            StallThreshold = FromNs(s.StallThresholdNs);
            HeartbeatAge = FromNs(s.HeartbeatAgeNs);
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
            $" {WorkUnit.ToString().ToLowerInvariant()}, {Classification}";
    }
}
