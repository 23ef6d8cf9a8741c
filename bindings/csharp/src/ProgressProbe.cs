// ProgressProbe.cs: one engine's segment, opened read-only through libhydra_probe_ffi.

using System;
using System.Collections.Generic;
using System.IO;
using System.Text;
using System.Threading;
using System.Threading.Tasks;
using Hydra.Progress.Interop;

namespace Hydra.Progress
{
    /// <summary>
    /// An engine's progress segment, mapped read-only. Every read takes a fresh consistent
    /// copy straight from shared memory: no HTTP, no IPC to the engine, no locks.
    /// </summary>
    /// <remarks>
    /// Thread-safe: any number of threads may read one probe at once. <see cref="Dispose"/>
    /// closes it once the reads in flight are over; a later call throws
    /// <see cref="ObjectDisposedException"/>. A read allocates only the object it returns.
    /// </remarks>
    public sealed unsafe class ProgressProbe : IDisposable
    {
        const int InitialMetaBuffer = 4096;
        const int MetaSlack = 1024;

        readonly NativeApi api;
        readonly ProbeHandle handle;
        readonly EngineDescription description;
        // The device table last read (replaced when the engine publishes a new one); reads
        // of a slot name its devices from it, so a read allocates no label.
        volatile DeviceTable devices;
        Thresholds thresholds;

        // One growable buffer per thread for the meta JSON (never shared, never freed).
        [ThreadStatic] static byte[] metaBuffer;

        /// <summary>
        /// Where libhydra_probe_ffi.so was loaded from (loading it on first use): $HYDRA_PROBE_LIB,
        /// the file next to this assembly, or the system library path.
        /// </summary>
        /// <exception cref="ProbeLibraryException">It cannot be found or loaded, or speaks another ABI version.</exception>
        public static string NativeLibraryPath => NativeApi.Get().Path;

        /// <summary>The engine id or path this probe was opened with.</summary>
        public string Engine { get; }

        /// <summary>The engine's slot count.</summary>
        public int SlotCount { get; }

        /// <summary>
        /// Opens engine <paramref name="engine"/> (an engine id, or a path to a segment file
        /// when it contains '/') in <paramref name="dir"/> (null or "" = $HYDRA_PROGRESS_DIR,
        /// else /dev/shm/hydra-progress).
        /// </summary>
        /// <exception cref="EngineNotFoundException">No such engine.</exception>
        /// <exception cref="SegmentInvalidException">Not a readable segment (or refused: symlink, FIFO, ...).</exception>
        /// <exception cref="ProbeLibraryException">libhydra_probe_ffi.so is missing or of another ABI.</exception>
        public ProgressProbe(string engine, string dir = null, Thresholds thresholds = null)
        {
            if (engine == null)
                throw new ArgumentNullException(nameof(engine));
            api = NativeApi.Get();
            Engine = engine;
            handle = new ProbeHandle();
            byte[] d = Utf8z(dir ?? "");
            byte[] e = Utf8z(engine);
            IntPtr raw = IntPtr.Zero;
            int rc;
            fixed (byte* dp = d)
            fixed (byte* ep = e)
                rc = api.Open(dp, ep, &raw);
            if (rc != HydraProbeAbi.Ok)
            {
                handle.SetHandleAsInvalid();
                throw Errors.Failure(api, $"open engine {engine}", rc);
            }
            handle.Set(raw);
            uint count;
            rc = api.SlotCount(raw, &count);
            if (rc != HydraProbeAbi.Ok)
            {
                var failure = Errors.Failure(api, "hydra_probe_slot_count", rc);
                handle.Dispose();
                throw failure;
            }
            SlotCount = (int)Math.Min(count, int.MaxValue);
            // The engine's strings never change for a handle: read and decode them once.
            HydraProbeDescription desc = default(HydraProbeDescription);
            desc.Size = (uint)sizeof(HydraProbeDescription);
            rc = api.Describe(raw, &desc);
            if (rc != HydraProbeAbi.Ok)
            {
                var failure = Errors.Failure(api, "hydra_probe_describe", rc);
                handle.Dispose();
                throw failure;
            }
            description = new EngineDescription(ref desc);
            this.thresholds = Thresholds.Default;
            if (thresholds != null)
            {
                try { Thresholds = thresholds; }
                catch { handle.Dispose(); throw; }
            }
        }

        /// <summary>Same as the constructor.</summary>
        public static ProgressProbe Open(string engine, string dir = null, Thresholds thresholds = null) =>
            new ProgressProbe(engine, dir, thresholds);

        /// <summary>
        /// The engines publishing in <paramref name="dir"/> (null or "" = $HYDRA_PROGRESS_DIR,
        /// else /dev/shm/hydra-progress), sorted by id; none in an empty directory.
        /// </summary>
        /// <exception cref="DirectoryNotFoundException">The directory does not exist (engines create it when they start).</exception>
        /// <exception cref="HydraProbeException">It cannot be read (<c>HYDRA_PROBE_E_IO</c>: not a directory, permission denied).</exception>
        public static IReadOnlyList<string> Engines(string dir = null)
        {
            var api = NativeApi.Get();
            byte[] d = Utf8z(dir ?? "");
            int capacity = 16;
            for (int attempt = 0; attempt < 8; attempt++)
            {
                var ids = new byte[capacity * HydraProbeAbi.EngineIdLen];
                UIntPtr count;
                int rc;
                fixed (byte* dp = d)
                fixed (byte* ip = ids)
                    rc = api.List(dp, ip, (UIntPtr)capacity, &count);
                int n = (int)count.ToUInt64();
                if (rc == HydraProbeAbi.EBufferTooSmall)
                {
                    capacity = n + 16; // engines may appear between the two calls
                    continue;
                }
                if (rc == HydraProbeAbi.ENotFound)
                    throw new DirectoryNotFoundException(Errors.Failure(api, "list engines", rc).Message);
                if (rc != HydraProbeAbi.Ok)
                    throw Errors.Failure(api, "list engines", rc);
                var result = new List<string>(n);
                for (int i = 0; i < n; i++)
                {
                    int start = i * HydraProbeAbi.EngineIdLen, len = 0;
                    while (len < HydraProbeAbi.EngineIdLen && ids[start + len] != 0)
                        len++;
                    result.Add(Encoding.UTF8.GetString(ids, start, len));
                }
                return result;
            }
            throw new HydraProbeException("list engines", HydraProbeAbi.EBufferTooSmall,
                "HYDRA_PROBE_E_BUFFER_TOO_SMALL", "the engine count kept growing between calls");
        }

        /// <summary>
        /// The thresholds later reads classify with (default: <see cref="Thresholds.Default"/>).
        /// </summary>
        /// <exception cref="ArgumentException">The native library refuses them (negative time, factor not &gt; 0).</exception>
        public Thresholds Thresholds
        {
            get => thresholds;
            set
            {
                if (value == null)
                    throw new ArgumentNullException(nameof(value));
                HydraProbeThresholds t = value.ToNative();
                IntPtr h = AddRef();
                try
                {
                    int rc = api.SetThresholds(h, &t);
                    if (rc == HydraProbeAbi.EInvalidArgument)
                        throw new ArgumentException(Errors.Failure(api, "set thresholds", rc).NativeMessage, nameof(value));
                    if (rc != HydraProbeAbi.Ok)
                        throw Errors.Failure(api, "set thresholds", rc);
                    thresholds = value;
                }
                finally
                {
                    handle.DangerousRelease();
                }
            }
        }

        /// <summary>Slot <paramref name="slot"/> now: one consistent read, classified.</summary>
        /// <exception cref="SlotOutOfRangeException">No such slot.</exception>
        /// <exception cref="ObjectDisposedException">The probe is disposed.</exception>
        public SlotSnapshot ReadSlot(int slot)
        {
            uint index = SlotIndex(slot);
            HydraProbeSlot s;
            Release(api.ReadSlot(AddRef(), index, &s), "read slot", slot);
            return new SlotSnapshot(ref s);
        }

        /// <summary>
        /// Where slot <paramref name="slot"/>'s step in flight is now: layer k of N of its
        /// forward (engines writing segment format v1.1), with how long the layer has run and,
        /// for a stalled slot, the layer it stopped at.
        /// </summary>
        /// <exception cref="SlotOutOfRangeException">No such slot.</exception>
        /// <exception cref="ObjectDisposedException">The probe is disposed.</exception>
        public LayerPosition ReadLayer(int slot)
        {
            uint index = SlotIndex(slot);
            HydraProbeLayer l;
            Release(api.ReadLayer(AddRef(), index, &l), "read layer of slot", slot);
            return new LayerPosition(ref l);
        }

        /// <summary>The verdict on slot <paramref name="slot"/> now, with this probe's <see cref="Thresholds"/>.</summary>
        public Classification Classify(int slot) => ReadSlot(slot).Classification;

        /// <summary>Whether slot <paramref name="slot"/> is stuck now (see <see cref="Classification.IsStuck"/>).</summary>
        public bool IsStuck(int slot) => Classify(slot).IsStuck;

        /// <summary>
        /// Slot <paramref name="slot"/>'s Hydra meta now: Hydra Core's <c>SlotMeta</c> fields
        /// plus the probe's; its <see cref="SlotMeta.ToJson"/> is what <c>hydra-probe meta</c> prints.
        /// </summary>
        /// <exception cref="SlotOutOfRangeException">No such slot.</exception>
        /// <exception cref="ObjectDisposedException">The probe is disposed.</exception>
        public SlotMeta ReadMeta(int slot)
        {
            uint index = SlotIndex(slot);
            HydraProbeMeta m;
            m.Size = (uint)sizeof(HydraProbeMeta);
            Release(api.ReadMeta(AddRef(), index, &m), "read meta of slot", slot);
            // A torn slot's meta carries the reason as text, which only the JSON has (a rare
            // case: its writer died or stalled in the middle of an update).
            if (m.Slot.SlotClass == SlotClass.Torn)
                return ReadMetaFromJson(slot);
            SlotMeta meta = description.Meta(ref m, api);
            if (m.Wait.Waiting != 0 || m.Wait.LayerDevice != 0 || m.Peer.Unread != 0)
            {
                DeviceTable table = CurrentDevices();
                if (m.Wait.Waiting != 0)
                    meta.WaitDevice = table.Label(m.Wait.Device);
                if (m.Wait.LayerDevice != 0)
                    meta.LayerDevice = table.Label(m.Wait.LayerDevice);
                if (m.Peer.Unread != 0)
                    meta.UnreadPeer = table.Label(m.Peer.Device);
            }
            return meta;
        }

        /// <summary>
        /// The device slot <paramref name="slot"/>'s step in flight waits on now, and the
        /// device of the layer it computes (engines writing segment format v1.3); name the
        /// ids with <see cref="ReadDevices"/>.
        /// </summary>
        /// <exception cref="SlotOutOfRangeException">No such slot.</exception>
        /// <exception cref="ObjectDisposedException">The probe is disposed.</exception>
        public DeviceWait ReadWait(int slot)
        {
            uint index = SlotIndex(slot);
            HydraProbeWait w;
            Release(api.ReadWait(AddRef(), index, &w), "read device wait of slot", slot);
            return new DeviceWait(ref w);
        }

        /// <summary>
        /// The engine's devices (CPU, GPUs, ggml RPC peers with their endpoints) and which
        /// layers run on each, read now in one consistent copy. An engine that publishes
        /// none reads as <see cref="DeviceTableState.Absent"/>, not as an error.
        /// </summary>
        /// <exception cref="HydraProbeException">The segment could not be read.</exception>
        /// <exception cref="ObjectDisposedException">The probe is disposed.</exception>
        public DeviceTable ReadDevices()
        {
            var t = new HydraProbeDeviceTable { Size = (uint)sizeof(HydraProbeDeviceTable) };
            var raw = new HydraProbeDevice[HydraProbeAbi.MaxDevices];
            var rawRanges = new HydraProbeLayerRange[HydraProbeAbi.MaxLayerRanges];
            IntPtr h = AddRef();
            try
            {
                int rc;
                fixed (HydraProbeDevice* d = raw)
                fixed (HydraProbeLayerRange* r = rawRanges)
                    rc = api.ReadDevices(h, &t, d, (UIntPtr)raw.Length, r, (UIntPtr)rawRanges.Length);
                if (rc != HydraProbeAbi.Ok)
                    throw Errors.Failure(api, $"read the devices of engine {Engine}", rc);
            }
            finally
            {
                handle.DangerousRelease();
            }
            var list = new Device[(int)Math.Min(t.DeviceCount, (ulong)raw.Length)];
            for (int i = 0; i < list.Length; i++)
                list[i] = new Device(ref raw[i], api.ValueName(HydraProbeAbi.ValueDeviceKind, raw[i].Kind));
            var ranges = new LayerRange[(int)Math.Min(t.RangeCount, (ulong)rawRanges.Length)];
            for (int i = 0; i < ranges.Length; i++)
                ranges[i] = new LayerRange { FirstLayer = rawRanges[i].FirstLayer, LastLayer = rawRanges[i].LastLayer, Device = rawRanges[i].Device };
            return devices = new DeviceTable(ref t, list, ranges);
        }

        /// <summary>
        /// The statistics the engine keeps (segment format v1.3): of slot
        /// <paramref name="slot"/>, or of every slot summed when it is null. An engine that
        /// keeps none reads as <see cref="EngineStats.Published"/> false, not as an error.
        /// </summary>
        /// <exception cref="SlotOutOfRangeException">No such slot.</exception>
        /// <exception cref="HydraProbeException">The segment could not be read.</exception>
        /// <exception cref="ObjectDisposedException">The probe is disposed.</exception>
        public EngineStats ReadStats(int? slot = null)
        {
            long index = slot.HasValue ? (long)SlotIndex(slot.Value) : -1L;
            var s = new HydraProbeStats { Size = (uint)sizeof(HydraProbeStats) };
            Release(api.ReadStats(AddRef(), index, &s), "read the statistics of slot", slot ?? -1);
            return new EngineStats(&s, api, BoundsOf);
        }

        /// <summary>
        /// Slot <paramref name="slot"/>'s flight recorder (segment format v1.3): its last
        /// finished steps, oldest first, a dead engine's kept segment included. An engine
        /// without one reads as <see cref="SlotHistory.Published"/> false.
        /// </summary>
        /// <exception cref="SlotOutOfRangeException">No such slot.</exception>
        /// <exception cref="HydraProbeException">The segment (or the slot's ring) could not be read.</exception>
        /// <exception cref="ObjectDisposedException">The probe is disposed.</exception>
        public SlotHistory ReadHistory(int slot)
        {
            uint index = SlotIndex(slot);
            var head = new HydraProbeHistory { Size = (uint)sizeof(HydraProbeHistory) };
            // The reference writer keeps 64 steps; a longer ring is read again at its size.
            var raw = new HydraProbeStep[64];
            int rc;
            while (true)
            {
                fixed (HydraProbeStep* p = raw)
                    rc = api.ReadHistory(AddRef(), index, &head, p, (UIntPtr)raw.Length);
                if (rc != HydraProbeAbi.EBufferTooSmall || head.Count <= (ulong)raw.Length)
                    break;
                handle.DangerousRelease();
                raw = new HydraProbeStep[(int)Math.Min(head.Count, 65536UL)];
            }
            Release(rc, "read the flight recorder of slot", slot);
            var steps = new FlightStep[(int)Math.Min(head.Count, (ulong)raw.Length)];
            for (int i = 0; i < steps.Length; i++)
                steps[i] = new FlightStep(ref raw[i], api.ValueName(HydraProbeAbi.ValuePhase, raw[i].Kind),
                    api.ValueName(HydraProbeAbi.ValueStepResult, raw[i].Result));
            return new SlotHistory(head.State == HydraProbeAbi.StatsKnown, steps, (int)Math.Min(head.Torn, int.MaxValue));
        }

        static readonly double[][] Bounds = new double[HydraProbeAbi.Histograms][];

        /// <summary>The upper bounds of histogram <paramref name="index"/>'s buckets in seconds (or the plain ratio), the last +Infinity; fetched once.</summary>
        double[] BoundsOf(int index)
        {
            double[] known = Bounds[index];
            if (known != null)
                return known;
            bool ratio = index >= HydraProbeAbi.HistogramRatioPrefill;
            var bounds = new double[HydraProbeAbi.HistogramBuckets];
            int n = 0;
            while (n < bounds.Length)
            {
                ulong b = api.HistogramBound((uint)index, (uint)n);
                bounds[n++] = b == ulong.MaxValue ? double.PositiveInfinity : ratio ? b / (double)(1UL << 20) : b / 1e9;
                if (b == ulong.MaxValue)
                    break;
            }
            Array.Resize(ref bounds, n);
            return Bounds[index] = bounds;
        }

        /// <summary>
        /// The device table as of now: the one last read while its sequence word is
        /// unchanged (a head-only read, which allocates nothing), else read anew.
        /// </summary>
        DeviceTable CurrentDevices()
        {
            DeviceTable known = devices;
            if (known != null && known.State == DeviceTableState.Known)
            {
                var t = new HydraProbeDeviceTable { Size = (uint)sizeof(HydraProbeDeviceTable) };
                IntPtr h = AddRef();
                try
                {
                    // Room for no device: the head comes back with its counts and sequence.
                    api.ReadDevices(h, &t, null, UIntPtr.Zero, null, UIntPtr.Zero);
                }
                finally
                {
                    handle.DangerousRelease();
                }
                if (t.State == HydraProbeAbi.DevicesKnown && t.Seq == known.Seq)
                    return known;
            }
            return ReadDevices();
        }

        SlotMeta ReadMetaFromJson(int slot)
        {
            int len;
            byte[] buf = ReadMetaBytes(slot, out len);
            fixed (byte* p = buf)
            {
                try
                {
                    return MetaJson.Parse(p, len);
                }
                catch (FormatException e)
                {
                    // The native library wrote it: unreadable JSON is a bug, not bad input.
                    throw new HydraProbeException($"read meta of slot {slot}", HydraProbeAbi.EInternal,
                        "HYDRA_PROBE_E_INTERNAL", "the meta JSON of libhydra_probe_ffi is unreadable: " + e.Message);
                }
            }
        }

        /// <summary>Slot <paramref name="slot"/>'s meta JSON exactly as the native library wrote it.</summary>
        public string ReadMetaJson(int slot)
        {
            int len;
            byte[] buf = ReadMetaBytes(slot, out len);
            return Encoding.UTF8.GetString(buf, 0, len);
        }

        /// <summary>
        /// Hydra Core's <c>GetStateMetaAsync</c>, answered from shared memory instead of the
        /// network: completes at once with the slot's meta, or with null when the slot cannot
        /// be read (no such slot, the segment became unreadable), which is when Hydra Core's
        /// scheduler falls back to its estimated-tokens timeout. A dead engine still answers:
        /// its slots read as orphaned.
        /// </summary>
        /// <exception cref="ObjectDisposedException">The probe is disposed.</exception>
        public Task<SlotMeta> GetStateMetaAsync(int slot, CancellationToken cancellationToken = default(CancellationToken))
        {
            if (cancellationToken.IsCancellationRequested)
                return Task.FromCanceled<SlotMeta>(cancellationToken);
            try
            {
                return Task.FromResult(ReadMeta(slot));
            }
            catch (HydraProbeException)
            {
                return Task.FromResult<SlotMeta>(null);
            }
        }

        /// <summary>Closes the segment (once; later calls do nothing).</summary>
        public void Dispose() => handle.Dispose();

        /// <summary>Whether <see cref="Dispose"/> was called.</summary>
        public bool IsDisposed => handle.IsClosed;

        byte[] ReadMetaBytes(int slot, out int length)
        {
            uint index = SlotIndex(slot);
            byte[] buf = metaBuffer ?? (metaBuffer = new byte[InitialMetaBuffer]);
            IntPtr h = AddRef();
            try
            {
                for (int attempt = 0; ; attempt++)
                {
                    UIntPtr needed;
                    int rc;
                    fixed (byte* p = buf)
                        rc = api.MetaJson(h, index, p, (UIntPtr)buf.Length, &needed);
                    if (rc == HydraProbeAbi.Ok)
                    {
                        length = (int)needed.ToUInt64() - 1; // without the NUL
                        return buf;
                    }
                    if (rc != HydraProbeAbi.EBufferTooSmall || attempt >= 4)
                        throw Errors.Failure(api, $"read meta of slot {slot}", rc);
                    // Each call reads anew: leave room for a slightly longer answer.
                    buf = metaBuffer = new byte[(int)needed.ToUInt64() + MetaSlack];
                }
            }
            finally
            {
                handle.DangerousRelease();
            }
        }

        uint SlotIndex(int slot)
        {
            if (slot < 0)
                throw new SlotOutOfRangeException($"read slot {slot}", HydraProbeAbi.ESlotOutOfRange,
                    "HYDRA_PROBE_E_SLOT_OUT_OF_RANGE", $"slot {slot} is negative");
            return (uint)slot;
        }

        /// <summary>
        /// Ends a native call made on <see cref="AddRef"/>'s handle: releases the handle, and
        /// throws the call's failure, its message read first (the release may close the
        /// handle, and any native call clears this thread's message). The operation's text
        /// is built only on failure, so a read allocates nothing here.
        /// </summary>
        void Release(int rc, string operation, int slot)
        {
            try
            {
                if (rc != HydraProbeAbi.Ok)
                    throw Errors.Failure(api, $"{operation} {slot}", rc);
            }
            finally
            {
                handle.DangerousRelease();
            }
        }

        IntPtr AddRef()
        {
            bool added = false;
            try
            {
                handle.DangerousAddRef(ref added);
            }
            catch (ObjectDisposedException)
            {
                throw new ObjectDisposedException(nameof(ProgressProbe), $"the probe of engine {Engine} is disposed");
            }
            if (!added)
                throw new ObjectDisposedException(nameof(ProgressProbe), $"the probe of engine {Engine} is disposed");
            return handle.DangerousGetHandle();
        }

        static byte[] Utf8z(string s)
        {
            var bytes = new byte[Encoding.UTF8.GetByteCount(s) + 1];
            Encoding.UTF8.GetBytes(s, 0, s.Length, bytes, 0);
            return bytes;
        }
    }
}
