// Enums.cs: the classification, engine health and the slot's phase, with the lower-case
// names the JSON and the C ABI use.

namespace Hydra.Progress
{
    /// <summary>Classification of a slot (<c>HydraProbeSlotClass</c>); JSON names in lower case.</summary>
    public enum SlotClass : int
    {
        /// <summary>No task.</summary>
        Idle = 0,
        /// <summary>A task waits in the engine's queue for this slot.</summary>
        Queued = 1,
        /// <summary>Active and moving.</summary>
        Progressing = 2,
        /// <summary>Moving, but its ETA exceeds the budget of the <see cref="Thresholds"/>.</summary>
        Slow = 3,
        /// <summary>Active with no progress for longer than the stall threshold: stuck.</summary>
        Stalled = 4,
        /// <summary>Active (or queued) while its engine is dead or closed: will never finish.</summary>
        Orphaned = 5,
        /// <summary>No consistent copy could be read: the writer stopped in the middle of an update.</summary>
        Torn = 6,
    }

    /// <summary>Health of an engine (<c>HydraProbeEngineHealth</c>); JSON names in lower case.</summary>
    public enum EngineHealth : int
    {
        /// <summary>The writer holds its lock and its loop is not hung.</summary>
        Live = 0,
        /// <summary>Alive, but its heartbeat is old and every active slot is stalled.</summary>
        Hung = 1,
        /// <summary>The writer exited cleanly.</summary>
        Closed = 2,
        /// <summary>The writer died (lock free, segment never closed).</summary>
        Dead = 3,
    }

    /// <summary>What a slot is doing (the segment's phase word).</summary>
    public enum SlotPhase
    {
        /// <summary>No task.</summary>
        Idle = 0,
        /// <summary>A task waits in the engine's queue.</summary>
        Queued = 1,
        /// <summary>Evaluating prompt tokens.</summary>
        Prefill = 2,
        /// <summary>Generating tokens.</summary>
        Decode = 3,
        /// <summary>Saving the KV state (work in bytes).</summary>
        Save = 4,
        /// <summary>Restoring the KV state (work in bytes).</summary>
        Restore = 5,
        /// <summary>A value this library does not know (from a newer writer); see the raw word.</summary>
        Unknown = -1,
    }

    /// <summary>The lower-case names of the enums, as the JSON writes them.</summary>
    public static class Names
    {
        static readonly string[] SlotClasses =
            { "idle", "queued", "progressing", "slow", "stalled", "orphaned", "torn" };
        static readonly string[] Healths = { "live", "hung", "closed", "dead" };

        /// <summary>"idle", "queued", "progressing", "slow", "stalled", "orphaned" or "torn".</summary>
        public static string Of(SlotClass c)
        {
            int i = (int)c;
            return i >= 0 && i < SlotClasses.Length ? SlotClasses[i] : "unknown";
        }

        /// <summary>"live", "hung", "closed" or "dead".</summary>
        public static string Of(EngineHealth h)
        {
            int i = (int)h;
            return i >= 0 && i < Healths.Length ? Healths[i] : "unknown";
        }

        /// <summary>The slot class named <paramref name="name"/>, or null.</summary>
        public static SlotClass? SlotClassNamed(string name)
        {
            int i = System.Array.IndexOf(SlotClasses, name);
            return i < 0 ? (SlotClass?)null : (SlotClass)i;
        }

        /// <summary>The engine health named <paramref name="name"/>, or null.</summary>
        public static EngineHealth? EngineHealthNamed(string name)
        {
            int i = System.Array.IndexOf(Healths, name);
            return i < 0 ? (EngineHealth?)null : (EngineHealth)i;
        }

        internal static SlotPhase PhaseOf(ulong raw) => raw <= 5 ? (SlotPhase)(int)raw : SlotPhase.Unknown;
    }
}
