// SlotMeta.cs: Hydra Core's SlotMeta (its fifteen fields, with their JSON names and types)
// plus the probe's own fields, and its JSON form, byte for byte what `hydra-probe meta` prints.

using System.Text;

namespace Hydra.Progress
{
    /// <summary>
    /// One slot's meta: first the fifteen fields of Hydra Core's <c>SlotMeta</c> (same JSON
    /// names and types), then the probe's fields. The probe's fields are nullable so that a
    /// JSON without them (an older producer) still parses; <c>RatePerS</c>, <c>EtaS</c> and
    /// the ages are null when unknown. <see cref="ToJson"/> writes exactly what
    /// <c>hydra-probe meta</c> prints for the same snapshot.
    /// </summary>
    /// <remarks>
    /// <c>progress</c> keeps Hydra Core's contract, a float that is 0 when unknown or idle; a
    /// <c>work_total</c> of 0 says the total (and so the progress) is unknown.
    /// <see cref="SlotSnapshot.Progress"/> gives null then.
    /// </remarks>
    public sealed class SlotMeta
    {
        // ---- Hydra Core SlotMeta (names and JSON types fixed) ----

        /// <summary><c>slot_id</c> (int): slot index.</summary>
        public int SlotId { get; set; }
        /// <summary><c>n_past</c> (int): tokens in the slot's KV cache.</summary>
        public ulong NPast { get; set; }
        /// <summary><c>state_size</c> (int): bytes a state save of the slot produces now.</summary>
        public ulong StateSize { get; set; }
        /// <summary><c>is_processing</c> (bool): prefill, decode, save or restore running.</summary>
        public bool IsProcessing { get; set; }
        /// <summary><c>model_alias</c> (string).</summary>
        public string ModelAlias { get; set; } = "";
        /// <summary><c>tokenizer</c> (string): tokenizer family.</summary>
        public string Tokenizer { get; set; } = "";
        /// <summary><c>model_name</c> (string).</summary>
        public string ModelName { get; set; } = "";
        /// <summary><c>model_quant</c> (string).</summary>
        public string ModelQuant { get; set; } = "";
        /// <summary><c>model_capabilities</c> (unsigned int): capability bits.</summary>
        public ulong ModelCapabilities { get; set; }
        /// <summary><c>model_path</c> (string).</summary>
        public string ModelPath { get; set; } = "";
        /// <summary><c>operation</c>: "prefill", "decode", "save", "restore" or "idle".</summary>
        public string Operation { get; set; } = "idle";
        /// <summary><c>progress</c> (float, 0..1): of the current phase; 0 when unknown or idle.</summary>
        public double Progress { get; set; }
        /// <summary><c>tokens_processed</c> (int): in the current phase (0 for byte-measured phases).</summary>
        public ulong TokensProcessed { get; set; }
        /// <summary><c>tokens_total</c> (int): of the current phase (0 when unknown or byte-measured).</summary>
        public ulong TokensTotal { get; set; }
        /// <summary><c>elapsed_ms</c> (int): since the current phase started (0 when idle or queued).</summary>
        public ulong ElapsedMs { get; set; }

        // ---- the probe's fields ----

        /// <summary><c>engine_id</c>.</summary>
        public string EngineId { get; set; }
        /// <summary><c>engine_liveness</c>: "live", "hung", "closed" or "dead".</summary>
        public EngineHealth? EngineLiveness { get; set; }
        /// <summary><c>classification</c>: the slot's class.</summary>
        public SlotClass? Classification { get; set; }
        /// <summary><c>queued</c>: a task waits in the queue for this slot.</summary>
        public bool? Queued { get; set; }
        /// <summary><c>pending</c>: tasks queued for this slot.</summary>
        public ulong? Pending { get; set; }
        /// <summary><c>phase</c>: the segment's phase ("queued" and "unknown" included).</summary>
        public string Phase { get; set; }
        /// <summary><c>task_id</c> (0 = never used).</summary>
        public ulong? TaskId { get; set; }
        /// <summary><c>work_unit</c>: "tokens", "bytes" or "none".</summary>
        public string WorkUnit { get; set; }
        /// <summary><c>work_done</c>, in <c>work_unit</c>.</summary>
        public ulong? WorkDone { get; set; }
        /// <summary><c>work_total</c>, in <c>work_unit</c> (0 = unknown).</summary>
        public ulong? WorkTotal { get; set; }
        /// <summary><c>last_progress_age_ms</c>: null if never.</summary>
        public ulong? LastProgressAgeMs { get; set; }
        /// <summary><c>rate_per_s</c>: in <c>work_unit</c> per second; null when unknown.</summary>
        public double? RatePerS { get; set; }
        /// <summary><c>eta_s</c>: seconds to finish the phase; null when unknown.</summary>
        public double? EtaS { get; set; }
        /// <summary><c>eta_source</c>: "model" (the writer's cost model, segment format v1.2)
        /// or "rate" (the observed rate); null when there is no ETA.</summary>
        public string EtaSource { get; set; }
        /// <summary>
        /// Whether the engine publishes its cost model's predictions (segment format v1.2):
        /// then <c>step_expected_ms</c> and <c>prediction_error</c> are written, null when
        /// unknown; else they are left out.
        /// </summary>
        public bool HasPredictions { get; set; }
        /// <summary><c>step_expected_ms</c>: the writer's predicted duration of the step in flight.</summary>
        public ulong? StepExpectedMs { get; set; }
        /// <summary><c>prediction_error</c>: the error bound the writer states for it (0.2 = 20%).</summary>
        public double? PredictionError { get; set; }
        /// <summary><c>phase_start_ns</c>: CLOCK_MONOTONIC ns (0 = none).</summary>
        public ulong? PhaseStartNs { get; set; }
        /// <summary><c>phase_start_unix_ms</c>: null when no phase runs.</summary>
        public ulong? PhaseStartUnixMs { get; set; }
        /// <summary><c>step_age_ms</c>: null when no step runs.</summary>
        public ulong? StepAgeMs { get; set; }
        /// <summary><c>step_size</c>: tokens (or bytes) of the step in flight; 0 when none.</summary>
        public ulong? StepSize { get; set; }
        /// <summary><c>stall_threshold_ms</c>: silence beyond which the slot counts as stalled.</summary>
        public ulong? StallThresholdMs { get; set; }
        /// <summary><c>finish_reason</c>: "none", "completed", "cancelled" or "error".</summary>
        public string FinishReason { get; set; }
        /// <summary><c>error_code</c>: why the last task failed ("none" unless it did).</summary>
        public string ErrorCode { get; set; }
        /// <summary><c>n_ctx</c>: slot context size in tokens.</summary>
        public ulong? NCtx { get; set; }
        /// <summary><c>tokens_cached</c>: prompt tokens reused from the KV cache.</summary>
        public ulong? TokensCached { get; set; }
        /// <summary><c>device</c>: "cpu", "cuda:0", ...</summary>
        public string Device { get; set; }
        /// <summary><c>heartbeat_age_ms</c>: since the engine loop's last heartbeat.</summary>
        public ulong? HeartbeatAgeMs { get; set; }
        /// <summary><c>read_error</c>: why the record could not be read consistently (torn slots only).</summary>
        public string ReadError { get; set; }
        /// <summary>
        /// Whether the engine publishes layer positions (segment format v1.1): then the three
        /// <c>substep_*</c> fields are written, null between steps; else they are left out.
        /// </summary>
        public bool HasSubsteps { get; set; }
        /// <summary><c>substep_done</c>: layers of the step in flight's forward finished.</summary>
        public ulong? SubstepDone { get; set; }
        /// <summary><c>substep_total</c>: layers in that forward.</summary>
        public ulong? SubstepTotal { get; set; }
        /// <summary><c>substep_age_ms</c>: since the last layer finished.</summary>
        public ulong? SubstepAgeMs { get; set; }
        /// <summary><c>stalled_at_layer</c>: the layer counter a stalled slot stopped at.</summary>
        public ulong? StalledAtLayer { get; set; }
        /// <summary>
        /// Whether the engine publishes the device a step waits on (segment format v1.3):
        /// then <c>wait_device</c>, <c>wait_ms</c>, <c>wait_learnt_max_ms</c> and
        /// <c>wait_threshold_ms</c> are written, null without a wait; else they are left out.
        /// </summary>
        public bool HasDeviceWaits { get; set; }
        /// <summary><c>wait_device</c>: the device the step in flight waits on (<c>RPC1 127.0.0.1:50053</c>).</summary>
        public string WaitDevice { get; set; }
        /// <summary><c>wait_ms</c>: how long the step has waited on it.</summary>
        public ulong? WaitMs { get; set; }
        /// <summary><c>layer_device</c>: the device of the layer the step in flight computes.</summary>
        public string LayerDevice { get; set; }
        /// <summary>
        /// <c>wait_learnt_max_ms</c>: while a decode step waits on a device whose decode waits
        /// are learnt, the longest of them recently; null otherwise.
        /// </summary>
        public ulong? WaitLearntMaxMs { get; set; }
        /// <summary>
        /// <c>wait_threshold_ms</c>: the wait rule's threshold for that wait (waiting longer is
        /// a stall on the device); null when the wait is not judged by a history.
        /// </summary>
        public ulong? WaitThresholdMs { get; set; }
        /// <summary>
        /// Whether the engine watches its RPC peers' reads (segment format v1.3): then
        /// <c>unread_peer</c>, <c>unread_peer_ms</c> and <c>unread_peer_threshold_ms</c> are
        /// written, null while every peer keeps up; else they are left out.
        /// </summary>
        public bool HasPeerReads { get; set; }
        /// <summary>
        /// <c>unread_peer</c>: while the step is in flight, the RPC peer that has read nothing
        /// the longest of what the engine sent it (<c>RPC1 127.0.0.1:50053</c>).
        /// </summary>
        public string UnreadPeer { get; set; }
        /// <summary><c>unread_peer_ms</c>: how long that peer has read nothing.</summary>
        public ulong? UnreadPeerMs { get; set; }
        /// <summary>
        /// <c>unread_peer_threshold_ms</c>: the peer rule's threshold (a peer unread for longer
        /// stalls the slot); null without such a peer or without an expected step.
        /// </summary>
        public ulong? UnreadPeerThresholdMs { get; set; }

        /// <summary>
        /// One line of JSON, fields in the order above. Without an <see cref="EngineId"/> (a
        /// meta parsed from Hydra Core's fields alone) only those fifteen are written;
        /// otherwise the probe's fields follow, null ones left out except those the probe
        /// writes as null (ages, rate, ETA, phase start).
        /// </summary>
        public string ToJson()
        {
            var w = new JsonWriter(new StringBuilder(1024));
            w.Begin();
            w.Field("slot_id", (ulong)SlotId);
            w.Field("n_past", NPast);
            w.Field("state_size", StateSize);
            w.Field("is_processing", IsProcessing);
            w.Field("model_alias", ModelAlias);
            w.Field("tokenizer", Tokenizer);
            w.Field("model_name", ModelName);
            w.Field("model_quant", ModelQuant);
            w.Field("model_capabilities", ModelCapabilities);
            w.Field("model_path", ModelPath);
            w.Field("operation", Operation);
            w.Field("progress", Progress);
            w.Field("tokens_processed", TokensProcessed);
            w.Field("tokens_total", TokensTotal);
            w.Field("elapsed_ms", ElapsedMs);
            if (EngineId == null)
                return w.End(); // Hydra Core's fields only: not the probe's meta
            w.Field("engine_id", EngineId);
            if (EngineLiveness.HasValue)
                w.Field("engine_liveness", Names.Of(EngineLiveness.Value));
            if (Classification.HasValue)
                w.Field("classification", Names.Of(Classification.Value));
            if (Queued.HasValue)
                w.Field("queued", Queued.Value);
            w.Optional("pending", Pending);
            w.Optional("phase", Phase);
            w.Optional("task_id", TaskId);
            w.Optional("work_unit", WorkUnit);
            w.Optional("work_done", WorkDone);
            w.Optional("work_total", WorkTotal);
            w.Nullable("last_progress_age_ms", LastProgressAgeMs);
            w.Nullable("rate_per_s", RatePerS);
            w.Nullable("eta_s", EtaS);
            w.Nullable("eta_source", EtaSource);
            if (HasPredictions)
            {
                w.Nullable("step_expected_ms", StepExpectedMs);
                w.Nullable("prediction_error", PredictionError);
            }
            w.Optional("phase_start_ns", PhaseStartNs);
            w.Nullable("phase_start_unix_ms", PhaseStartUnixMs);
            w.Nullable("step_age_ms", StepAgeMs);
            w.Optional("step_size", StepSize);
            w.Optional("stall_threshold_ms", StallThresholdMs);
            w.Optional("finish_reason", FinishReason);
            w.Optional("error_code", ErrorCode);
            w.Optional("n_ctx", NCtx);
            w.Optional("tokens_cached", TokensCached);
            w.Optional("device", Device);
            w.Optional("heartbeat_age_ms", HeartbeatAgeMs);
            w.Optional("read_error", ReadError);
            if (HasSubsteps)
            {
                w.Nullable("substep_done", SubstepDone);
                w.Nullable("substep_total", SubstepTotal);
                w.Nullable("substep_age_ms", SubstepAgeMs);
            }
            w.Optional("stalled_at_layer", StalledAtLayer);
            if (HasDeviceWaits)
            {
                w.Nullable("wait_device", WaitDevice);
                w.Nullable("wait_ms", WaitMs);
            }
            w.Optional("layer_device", LayerDevice);
            if (HasDeviceWaits)
            {
                w.Nullable("wait_learnt_max_ms", WaitLearntMaxMs);
                w.Nullable("wait_threshold_ms", WaitThresholdMs);
            }
            if (HasPeerReads)
            {
                w.Nullable("unread_peer", UnreadPeer);
                w.Nullable("unread_peer_ms", UnreadPeerMs);
                w.Nullable("unread_peer_threshold_ms", UnreadPeerThresholdMs);
            }
            return w.End();
        }

        /// <summary>
        /// Parses a meta JSON object (what <see cref="ToJson"/>, <c>hydra-probe meta</c> or
        /// Hydra Core's engines answer). Unknown fields are skipped; the fifteen Hydra Core
        /// fields are required.
        /// </summary>
        /// <exception cref="System.FormatException">Not such an object.</exception>
        public static unsafe SlotMeta FromJson(string json)
        {
            if (json == null)
                throw new System.ArgumentNullException(nameof(json));
            byte[] bytes = Encoding.UTF8.GetBytes(json);
            fixed (byte* p = bytes)
                return MetaJson.Parse(p, bytes.Length);
        }

        /// <inheritdoc/>
        public override string ToString() => ToJson();
    }
}
