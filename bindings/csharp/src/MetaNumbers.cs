// MetaNumbers.cs: builds a SlotMeta from the native library's numbers (hydra_probe_read_meta)
// and the engine's fixed description (hydra_probe_describe, read once per probe), with no
// JSON. Every figure is the native library's; this only names raw values (through the
// library's own names) and turns its -1 into null.

using System;
using System.Text;
using Hydra.Progress.Interop;

namespace Hydra.Progress
{
    /// <summary>An engine's fixed description, decoded once per probe.</summary>
    internal sealed unsafe class EngineDescription
    {
        readonly string engineId, modelAlias, tokenizer, modelName, modelQuant, modelPath, device;
        readonly ulong capabilities;

        public EngineDescription(ref HydraProbeDescription d)
        {
            capabilities = d.Capabilities;
            engineId = Text(d.EngineId);
            modelAlias = Text(d.ModelAlias);
            tokenizer = Text(d.Tokenizer);
            modelName = Text(d.ModelName);
            modelQuant = Text(d.ModelQuant);
            modelPath = Text(d.ModelPath);
            device = Text(d.Device);
        }

        static string Text(HydraProbeStr s) =>
            Encoding.UTF8.GetString((byte*)s.Ptr, checked((int)s.Len.ToUInt64()));

        static ulong? Known(long v) => v < 0 ? (ulong?)null : (ulong)v;

        static double? Known(double v) => v < 0 ? (double?)null : v;

        /// <summary>The meta of one read: <paramref name="m"/> with this engine's strings.</summary>
        public SlotMeta Meta(ref HydraProbeMeta m, NativeApi api)
        {
            HydraProbeSlot s = m.Slot;
            return new SlotMeta
            {
                SlotId = (int)s.Slot,
                NPast = s.NPast,
                StateSize = s.StateSize,
                IsProcessing = m.IsProcessing != 0,
                ModelAlias = modelAlias,
                Tokenizer = tokenizer,
                ModelName = modelName,
                ModelQuant = modelQuant,
                ModelCapabilities = capabilities,
                ModelPath = modelPath,
                Operation = api.ValueName(HydraProbeAbi.ValuePhase, m.Operation),
                Progress = m.Progress,
                TokensProcessed = m.TokensProcessed,
                TokensTotal = m.TokensTotal,
                ElapsedMs = m.ElapsedMs,
                EngineId = engineId,
                EngineLiveness = s.EngineHealth,
                Classification = s.SlotClass,
                Queued = m.Queued != 0,
                Pending = s.Pending,
                Phase = api.ValueName(HydraProbeAbi.ValuePhase, s.Phase),
                TaskId = s.TaskId,
                WorkUnit = api.ValueName(HydraProbeAbi.ValueWorkUnit, s.WorkUnit),
                WorkDone = s.WorkDone,
                WorkTotal = s.WorkTotal,
                LastProgressAgeMs = Known(m.LastProgressAgeMs),
                RatePerS = Known(m.RatePerS),
                EtaS = Known(m.EtaS),
                EtaSource = m.Prediction.EtaSource == HydraProbeAbi.EtaModel ? "model"
                    : m.Prediction.EtaSource == HydraProbeAbi.EtaRate ? "rate" : null,
                HasPredictions = m.Prediction.Published != 0,
                StepExpectedMs = m.Prediction.StepExpectedNs < 0 ? (ulong?)null : (ulong)m.Prediction.StepExpectedNs / 1000000,
                PredictionError = Known(m.Prediction.PredictionError),
                PhaseStartNs = s.PhaseStartNs,
                PhaseStartUnixMs = Known(m.PhaseStartUnixMs),
                StepAgeMs = Known(m.StepAgeMs),
                StepSize = m.StepSize,
                StallThresholdMs = m.StallThresholdMs,
                FinishReason = api.ValueName(HydraProbeAbi.ValueFinishReason, s.FinishReason),
                ErrorCode = api.ValueName(HydraProbeAbi.ValueErrorCode, s.ErrorCode),
                NCtx = s.NCtx,
                TokensCached = s.TokensCached,
                Device = device,
                HeartbeatAgeMs = m.HeartbeatAgeMs,
                HasSubsteps = m.Layer.Published != 0,
                SubstepDone = m.Layer.InStep != 0 ? m.Layer.LayersDone : (ulong?)null,
                SubstepTotal = m.Layer.InStep != 0 ? m.Layer.NLayers : (ulong?)null,
                SubstepAgeMs = m.Layer.LayerAgeNs < 0 ? (ulong?)null : (ulong)m.Layer.LayerAgeNs / 1000000,
                StalledAtLayer = Known(m.Layer.StalledAtLayer),
                HasDeviceWaits = m.Wait.Published != 0,
                WaitMs = m.Wait.Waiting != 0 ? (ulong)m.Wait.WaitAgeNs / 1000000 : (ulong?)null,
                WaitLearntMaxMs = m.WaitLearntMaxNs < 0 ? (ulong?)null : (ulong)m.WaitLearntMaxNs / 1000000,
                WaitThresholdMs = m.WaitThresholdNs < 0 ? (ulong?)null : (ulong)m.WaitThresholdNs / 1000000,
                HasPeerReads = m.Peer.Published != 0,
                UnreadPeerMs = m.Peer.UnreadNs < 0 ? (ulong?)null : (ulong)m.Peer.UnreadNs / 1000000,
                UnreadPeerThresholdMs = m.Peer.ThresholdNs < 0 ? (ulong?)null : (ulong)m.Peer.ThresholdNs / 1000000,
            };
        }
    }
}
