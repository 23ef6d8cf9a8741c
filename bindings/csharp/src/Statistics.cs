// Statistics.cs: an engine's statistics (histograms and counters the writer keeps from the
// segment's creation) and a slot's flight recorder (its last finished steps), segment
// format v1.3, ABI minor 6, as immutable values decoded from the native structs.

using System;
using System.Collections.Generic;
using Hydra.Progress.Interop;

namespace Hydra.Progress
{
    /// <summary>
    /// One histogram of an engine's statistics: how many values were observed, their sum, and
    /// how many fell in each bucket. Times are in seconds; the two cost-model histograms
    /// (<c>ratio_prefill</c>, <c>ratio_decode</c>) hold plain actual/predicted ratios.
    /// </summary>
    public sealed class Histogram
    {
        internal unsafe Histogram(string name, int index, HydraProbeHistogram* h, double[] bounds)
        {
            Name = name;
            IsRatio = index >= HydraProbeAbi.HistogramRatioPrefill;
            Count = h->Count;
            Sum = IsRatio ? h->Sum / (double)(1UL << 20) : h->Sum / 1e9;
            int used = (int)Math.Min(h->BucketCount, (ulong)bounds.Length);
            var buckets = new ulong[used];
            for (int k = 0; k < used; k++)
                buckets[k] = h->Buckets[k];
            Buckets = buckets;
            var upper = new double[used];
            Array.Copy(bounds, upper, used);
            UpperBounds = upper;
        }

        /// <summary>Its name: <c>time_to_first_token</c>, <c>inter_token_latency</c>, <c>queue_wait</c>, <c>step_decode</c>, ...</summary>
        public string Name { get; }
        /// <summary>Whether its values are actual/predicted ratios (else seconds).</summary>
        public bool IsRatio { get; }
        /// <summary>Observations.</summary>
        public ulong Count { get; }
        /// <summary>The sum of the observed values, in seconds (or the plain ratio).</summary>
        public double Sum { get; }
        /// <summary>Observations per bucket, not cumulative: bucket k holds the values in (UpperBounds[k-1], UpperBounds[k]].</summary>
        public IReadOnlyList<ulong> Buckets { get; }
        /// <summary>Each bucket's inclusive upper bound, in seconds (or the plain ratio); the last is +Infinity.</summary>
        public IReadOnlyList<double> UpperBounds { get; }
        /// <summary>The mean, or null without observations.</summary>
        public double? Mean => Count == 0 ? (double?)null : Sum / Count;

        /// <inheritdoc/>
        public override string ToString() => $"{Name}: {Count} observations, mean {Mean}";
    }

    /// <summary>
    /// An engine's statistics, or one slot's, read in one go: counters and histograms the
    /// engine keeps in its segment from its start, never reset by a task, readable while it
    /// is wedged and after it died. A writer that keeps none reads as
    /// <see cref="Published"/> false, with everything empty or null; a family it does not
    /// fill is absent (null counters, no histogram of that name), never zero. Immutable.
    /// </summary>
    public sealed class EngineStats
    {
        static readonly IReadOnlyDictionary<string, ulong> NoCounts = new Dictionary<string, ulong>();

        internal unsafe EngineStats(HydraProbeStats* s, NativeApi api, Func<int, double[]> bounds)
        {
            Published = s->State == HydraProbeAbi.StatsKnown;
            SlotsSummed = (int)s->SlotsSummed;
            SlotsLeftOut = (int)s->SlotsLeftOut;
            TasksBegun = Counter(s->TasksBegun);
            TasksEnded = Counter(s->TasksEnded);
            TasksWithoutArrival = Counter(s->TasksNoArrival);
            PromptTokensComputed = Counter(s->PromptTokensComputed);
            PromptTokensReused = Counter(s->PromptTokensReused);
            TokensGenerated = Counter(s->TokensGenerated);
            if (s->CausesPresent != 0)
            {
                TasksByCause = Named(s->TasksByCause, HydraProbeAbi.Causes, api, HydraProbeAbi.ValueFinishCause);
                ErrorsByCode = Named(s->ErrorsByCode, HydraProbeAbi.Causes, api, HydraProbeAbi.ValueErrorCode);
            }
            Steps = Named(s->Steps, HydraProbeAbi.Phases, api, HydraProbeAbi.ValuePhase);
            StepsAbandoned = Named(s->StepsAbandoned, HydraProbeAbi.Phases, api, HydraProbeAbi.ValuePhase);
            var busy = new Dictionary<string, double>();
            foreach (var pair in Named(s->BusyNs, HydraProbeAbi.Phases, api, HydraProbeAbi.ValuePhase))
                busy[pair.Key] = pair.Value / 1e9;
            BusySeconds = busy;
            var histograms = new Dictionary<string, Histogram>();
            HydraProbeHistogram* all = &s->Histograms.H0;
            for (int i = 0; i < HydraProbeAbi.Histograms; i++)
            {
                if (all[i].Present == 0)
                    continue;
                string name = api.ValueName(HydraProbeAbi.ValueHistogram, (ulong)i);
                histograms[name] = new Histogram(name, i, all + i, bounds(i));
            }
            Histograms = histograms;
        }

        static long? Counter(long v) => v < 0 ? (long?)null : v;

        /// <summary>The nonzero entries of a raw-indexed array, by name; values a newer writer uses add up under "unknown".</summary>
        static unsafe IReadOnlyDictionary<string, ulong> Named(ulong* words, int n, NativeApi api, uint kind)
        {
            var named = new Dictionary<string, ulong>();
            for (int i = 0; i < n; i++)
            {
                if (words[i] == 0)
                    continue;
                string name = api.ValueName(kind, (ulong)i);
                ulong before;
                named.TryGetValue(name, out before);
                named[name] = before + words[i] < before ? ulong.MaxValue : before + words[i];
            }
            return named.Count == 0 ? NoCounts : named;
        }

        /// <summary>Whether the engine keeps statistics (format v1.3); false for an older writer.</summary>
        public bool Published { get; }
        /// <summary>Slots summed.</summary>
        public int SlotsSummed { get; }
        /// <summary>Slots left out: their copy was torn or failed the format's checks (a faulty writer).</summary>
        public int SlotsLeftOut { get; }
        /// <summary>Tasks begun, or null when not kept.</summary>
        public long? TasksBegun { get; }
        /// <summary>Tasks ended, whatever the cause, or null.</summary>
        public long? TasksEnded { get; }
        /// <summary>Tasks begun without an arrival time (absent from the arrival histograms), or null when the engine is given none.</summary>
        public long? TasksWithoutArrival { get; }
        /// <summary>Prompt tokens evaluated, or null.</summary>
        public long? PromptTokensComputed { get; }
        /// <summary>Prompt tokens reused from the cache, or null.</summary>
        public long? PromptTokensReused { get; }
        /// <summary>Tokens generated, or null.</summary>
        public long? TokensGenerated { get; }
        /// <summary>Tasks ended per finish cause ("eos", "length", "cancelled", ...; nonzero ones), or null when the engine is not told causes.</summary>
        public IReadOnlyDictionary<string, ulong> TasksByCause { get; }
        /// <summary>Failed tasks per error code ("compute", "io", ...; nonzero ones), or null with <see cref="TasksByCause"/>.</summary>
        public IReadOnlyDictionary<string, ulong> ErrorsByCode { get; }
        /// <summary>Seconds spent in steps per phase ("prefill", "decode", "save", "restore"; nonzero ones).</summary>
        public IReadOnlyDictionary<string, double> BusySeconds { get; }
        /// <summary>Finished steps per phase (nonzero ones).</summary>
        public IReadOnlyDictionary<string, ulong> Steps { get; }
        /// <summary>Abandoned steps per phase: in flight when another event ended them (nonzero ones).</summary>
        public IReadOnlyDictionary<string, ulong> StepsAbandoned { get; }
        /// <summary>The histograms the engine fills, by name (<see cref="Histogram.Name"/>).</summary>
        public IReadOnlyDictionary<string, Histogram> Histograms { get; }
    }

    /// <summary>One finished (or abandoned) step of a slot's flight recorder. Immutable.</summary>
    public sealed class FlightStep
    {
        internal FlightStep(ref HydraProbeStep s, string kind, string result)
        {
            Ordinal = s.Ordinal;
            TaskId = s.TaskId;
            Kind = kind;
            Result = result;
            StartNs = s.StartNs;
            DurationNs = s.DurationNs;
            Size = s.Size;
            Advanced = s.Advanced;
            Context = s.Context;
            LayersDone = s.LayersDone;
            LayersTotal = s.LayersTotal;
            PredictedNs = s.PredictedNs == 0 ? (ulong?)null : s.PredictedNs;
            WaitDevice = s.WaitDevice == 0 ? (ulong?)null : s.WaitDevice;
            WaitNs = s.WaitNs;
        }

        /// <summary>Its ordinal among the slot's recorded steps, from 1 (gaps are missing steps).</summary>
        public ulong Ordinal { get; }
        /// <summary>The task it belonged to.</summary>
        public ulong TaskId { get; }
        /// <summary>"prefill", "decode", "save" or "restore".</summary>
        public string Kind { get; }
        /// <summary>How it ended: "advanced", "no_progress", "interrupted", ...</summary>
        public string Result { get; }
        /// <summary>Its start, CLOCK_MONOTONIC ns.</summary>
        public ulong StartNs { get; }
        /// <summary>Its duration, ns.</summary>
        public ulong DurationNs { get; }
        /// <summary>Units it carried (tokens; bytes for a save or restore block).</summary>
        public ulong Size { get; }
        /// <summary>How far the slot's work advanced at its end.</summary>
        public ulong Advanced { get; }
        /// <summary>The slot's context (n_past) when it started.</summary>
        public ulong Context { get; }
        /// <summary>Layers done when it ended (0 = none published).</summary>
        public ulong LayersDone { get; }
        /// <summary>Layers in that forward (0 = none).</summary>
        public ulong LayersTotal { get; }
        /// <summary>The writer's predicted duration, ns, or null without a prediction.</summary>
        public ulong? PredictedNs { get; }
        /// <summary>The device (id in <see cref="ProgressProbe.ReadDevices"/>'s table) it waited on longest, or null.</summary>
        public ulong? WaitDevice { get; }
        /// <summary>How long that wait lasted, ns.</summary>
        public ulong WaitNs { get; }

        /// <inheritdoc/>
        public override string ToString() => $"#{Ordinal} {Kind} {Result} {DurationNs / 1e6:0.###} ms";
    }

    /// <summary>A slot's flight recorder as read: its last finished steps, oldest first. Immutable.</summary>
    public sealed class SlotHistory
    {
        internal SlotHistory(bool published, IReadOnlyList<FlightStep> steps, int torn)
        {
            Published = published;
            Steps = steps;
            Torn = torn;
        }

        /// <summary>Whether the engine keeps a flight recorder (format v1.3).</summary>
        public bool Published { get; }
        /// <summary>The steps, oldest first; each vouched for by its own sequence.</summary>
        public IReadOnlyList<FlightStep> Steps { get; }
        /// <summary>Entries found torn (a writer that died writing them) or always changing: never shown.</summary>
        public int Torn { get; }
    }
}
