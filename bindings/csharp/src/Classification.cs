// Classification.cs: the verdict on one slot (its class and its engine's health) and the
// thresholds the native library classifies with.

using System;
using Hydra.Progress.Interop;

namespace Hydra.Progress
{
    /// <summary>
    /// The verdict on one slot at one moment: its <see cref="SlotClass"/> and its engine's
    /// <see cref="EngineHealth"/>, as the native library classified them with the probe's
    /// <see cref="Thresholds"/>.
    /// </summary>
    public struct Classification : IEquatable<Classification>
    {
        /// <summary>The slot's class.</summary>
        public SlotClass SlotClass { get; }

        /// <summary>The engine's health.</summary>
        public EngineHealth EngineHealth { get; }

        /// <summary>A verdict from its two parts.</summary>
        public Classification(SlotClass slotClass, EngineHealth engineHealth)
        {
            SlotClass = slotClass;
            EngineHealth = engineHealth;
        }

        /// <summary>
        /// Stuck: the slot is stalled (no progress for longer than the stall threshold),
        /// orphaned (its engine died or closed with work in flight) or torn (the writer died
        /// mid-update), or its engine is hung or dead. A slow slot is not stuck.
        /// </summary>
        public bool IsStuck =>
            SlotClass == SlotClass.Stalled || SlotClass == SlotClass.Orphaned || SlotClass == SlotClass.Torn ||
            EngineHealth == EngineHealth.Hung || EngineHealth == EngineHealth.Dead;

        /// <summary>Progressing, but its ETA exceeds the thresholds' budget.</summary>
        public bool IsSlow => SlotClass == SlotClass.Slow;

        /// <summary>Whether the slot has work: active, or queued.</summary>
        public bool IsBusy => SlotClass != SlotClass.Idle;

        /// <inheritdoc/>
        public bool Equals(Classification other) =>
            SlotClass == other.SlotClass && EngineHealth == other.EngineHealth;

        /// <inheritdoc/>
        public override bool Equals(object obj) => obj is Classification c && Equals(c);

        /// <inheritdoc/>
        public override int GetHashCode() => (int)SlotClass * 8 + (int)EngineHealth;

        /// <summary>e.g. "stalled (engine live): stuck".</summary>
        public override string ToString() =>
            $"{Names.Of(SlotClass)} (engine {Names.Of(EngineHealth)})" + (IsStuck ? ": stuck" : IsSlow ? ": slow" : "");
    }

    /// <summary>
    /// Classification thresholds: when a silent slot counts as stalled, when a moving one is
    /// slow, when a live engine is hung. Immutable; <see cref="Default"/> holds the native
    /// library's defaults (floor 30 s, factor 10, no budget, heartbeat timeout 30 s).
    /// </summary>
    public sealed class Thresholds
    {
        /// <summary>Shortest silence that can make an active slot stalled.</summary>
        public TimeSpan StallFloor { get; }

        /// <summary>Stalled after this many expected step times of silence (finite, &gt; 0).</summary>
        public double StallFactor { get; }

        /// <summary>A progressing slot whose ETA exceeds this is slow; null = no budget.</summary>
        public TimeSpan? Budget { get; }

        /// <summary>Heartbeat age beyond which a live engine whose active slots all stalled is hung.</summary>
        public TimeSpan HeartbeatTimeout { get; }

        /// <summary>
        /// Thresholds as given. The native library checks them when a probe takes them
        /// (<see cref="ArgumentException"/> for a negative time or a factor that is not &gt; 0).
        /// </summary>
        public Thresholds(TimeSpan stallFloor, double stallFactor, TimeSpan? budget, TimeSpan heartbeatTimeout)
        {
            StallFloor = stallFloor;
            StallFactor = stallFactor;
            Budget = budget;
            HeartbeatTimeout = heartbeatTimeout;
        }

        static readonly Lazy<Thresholds> Defaults = new Lazy<Thresholds>(LoadDefaults);

        /// <summary>The native library's defaults.</summary>
        public static Thresholds Default => Defaults.Value;

        /// <summary>These thresholds with another budget (null = none).</summary>
        public Thresholds WithBudget(TimeSpan? budget) => new Thresholds(StallFloor, StallFactor, budget, HeartbeatTimeout);

        /// <summary>These thresholds with another stall floor and factor.</summary>
        public Thresholds WithStall(TimeSpan floor, double factor) => new Thresholds(floor, factor, Budget, HeartbeatTimeout);

        /// <summary>These thresholds with another heartbeat timeout.</summary>
        public Thresholds WithHeartbeatTimeout(TimeSpan timeout) => new Thresholds(StallFloor, StallFactor, Budget, timeout);

        internal HydraProbeThresholds ToNative() => new HydraProbeThresholds
        {
            StallFloorS = StallFloor.TotalSeconds,
            StallFactor = StallFactor,
            BudgetS = Budget.HasValue ? Budget.Value.TotalSeconds : -1.0,
            HeartbeatTimeoutS = HeartbeatTimeout.TotalSeconds,
        };

        static unsafe Thresholds LoadDefaults()
        {
            var api = NativeApi.Get();
            HydraProbeThresholds t;
            int rc = api.ThresholdsDefault(&t);
            if (rc != HydraProbeAbi.Ok)
                throw Errors.Failure(api, "hydra_probe_thresholds_default", rc);
            return new Thresholds(
                TimeSpan.FromTicks((long)(t.StallFloorS * TimeSpan.TicksPerSecond)),
                t.StallFactor,
                t.BudgetS < 0 ? (TimeSpan?)null : TimeSpan.FromTicks((long)(t.BudgetS * TimeSpan.TicksPerSecond)),
                TimeSpan.FromTicks((long)(t.HeartbeatTimeoutS * TimeSpan.TicksPerSecond)));
        }

        /// <summary>e.g. "stall floor 30 s, factor 10, no budget, heartbeat timeout 30 s".</summary>
        public override string ToString() =>
            $"stall floor {StallFloor.TotalSeconds} s, factor {StallFactor}, " +
            (Budget.HasValue ? $"budget {Budget.Value.TotalSeconds} s" : "no budget") +
            $", heartbeat timeout {HeartbeatTimeout.TotalSeconds} s";
    }
}
