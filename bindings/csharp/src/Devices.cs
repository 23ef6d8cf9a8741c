// Devices.cs: an engine's devices and layer map, and the device a slot's step waits on
// (segment format v1.3; ABI minor 4), as immutable values decoded from the native structs.

using System;
using System.Collections.Generic;
using System.Text;
using Hydra.Progress.Interop;

namespace Hydra.Progress
{
    /// <summary>What a reader knows of an engine's device table.</summary>
    public enum DeviceTableState
    {
        /// <summary>The engine publishes none (a writer before format v1.3, or no devices capability).</summary>
        Absent = 0,
        /// <summary>The engine publishes its devices but has not yet (it is loading its model).</summary>
        NotYetKnown = 1,
        /// <summary>The table is the engine's.</summary>
        Known = 2,
        /// <summary>No consistent copy could be read (its writer stopped mid-update).</summary>
        Unreadable = 3,
    }

    /// <summary>One device of an engine: a CPU, a GPU, or a ggml RPC peer.</summary>
    public sealed class Device
    {
        internal unsafe Device(ref HydraProbeDevice d, string kind)
        {
            Id = d.Id;
            Kind = kind;
            fixed (byte* name = d.Name)
                Name = Text(name, 64);
            fixed (byte* endpoint = d.Endpoint)
                Endpoint = Text(endpoint, 128);
            fixed (byte* label = d.Label)
                Label = Text(label, 192);
            NameTruncated = (d.Flags & 1) != 0;
            EndpointTruncated = (d.Flags & 2) != 0;
        }

        static unsafe string Text(byte* p, int cap)
        {
            int n = 0;
            while (n < cap && p[n] != 0)
                n++;
            return Encoding.UTF8.GetString(p, n);
        }

        /// <summary>Its id: position in the table + 1 (what waits and layer ranges name).</summary>
        public ulong Id { get; }
        /// <summary>"cpu", "gpu", "rpc", "accel", "unspecified", or "unknown" for a newer writer's kind.</summary>
        public string Kind { get; }
        /// <summary>Its name as its backend gives it (<c>CPU</c>, <c>CUDA0</c>, <c>RPC0</c>, <c>RPC[10.0.0.5:50052]</c>).</summary>
        public string Name { get; }
        /// <summary>For an RPC peer its <c>host:port</c>, else empty.</summary>
        public string Endpoint { get; }
        /// <summary>How the probe names it in verdicts and the meta: <c>RPC1 127.0.0.1:50053</c>.</summary>
        public string Label { get; }
        /// <summary>The writer cut the name to fit.</summary>
        public bool NameTruncated { get; }
        /// <summary>The writer cut the endpoint to fit.</summary>
        public bool EndpointTruncated { get; }

        /// <inheritdoc/>
        public override string ToString() => Label;
    }

    /// <summary>Layers <see cref="FirstLayer"/> to <see cref="LastLayer"/> (0-based, inclusive) run on <see cref="Device"/>.</summary>
    public struct LayerRange
    {
        /// <summary>First layer of the run.</summary>
        public ulong FirstLayer;
        /// <summary>Last layer of the run, inclusive.</summary>
        public ulong LastLayer;
        /// <summary>The device id.</summary>
        public ulong Device;
    }

    /// <summary>An engine's devices and layer map, from one consistent read. Immutable.</summary>
    public sealed class DeviceTable
    {
        static readonly IReadOnlyList<Device> NoDevices = new Device[0];
        static readonly IReadOnlyList<LayerRange> NoRanges = new LayerRange[0];

        internal DeviceTable(ref HydraProbeDeviceTable t, IReadOnlyList<Device> devices, IReadOnlyList<LayerRange> ranges)
        {
            State = (DeviceTableState)t.State;
            Seq = t.Seq;
            LayerCount = t.LayerCount;
            OutputDevice = t.OutputDevice;
            RangesIgnored = t.RangesIgnored;
            Devices = devices ?? NoDevices;
            Ranges = ranges ?? NoRanges;
        }

        /// <summary>Whether the table is known, absent, not yet published or unreadable.</summary>
        public DeviceTableState State { get; }
        /// <summary>Changes whenever the engine publishes its table again.</summary>
        public ulong Seq { get; }
        /// <summary>Transformer layers of the model (0 = unknown).</summary>
        public ulong LayerCount { get; }
        /// <summary>The id of the output head's device (0 = unknown).</summary>
        public ulong OutputDevice { get; }
        /// <summary>Layer ranges the writer published that were unusable and left out.</summary>
        public ulong RangesIgnored { get; }
        /// <summary>The devices, in id order (empty unless <see cref="State"/> is Known).</summary>
        public IReadOnlyList<Device> Devices { get; }
        /// <summary>The layer map: runs of layers and their device, sorted.</summary>
        public IReadOnlyList<LayerRange> Ranges { get; }

        /// <summary>The device with id <paramref name="id"/>; null when the table lacks it.</summary>
        public Device this[ulong id] => id >= 1 && id <= (ulong)Devices.Count ? Devices[(int)(id - 1)] : null;

        /// <summary>The device layer <paramref name="layer"/> (0-based) runs on; null when no range holds it.</summary>
        public Device DeviceOfLayer(ulong layer)
        {
            foreach (LayerRange r in Ranges)
                if (r.FirstLayer <= layer && layer <= r.LastLayer)
                    return this[r.Device];
            return null;
        }

        /// <summary>How the probe names device <paramref name="id"/>: its label, or <c>device #k</c> for an id the table lacks.</summary>
        public string Label(ulong id) => this[id]?.Label ?? $"device #{id}";
    }

    /// <summary>The device a slot's step in flight waits on now, and the device of the layer it computes.</summary>
    public sealed class DeviceWait
    {
        internal DeviceWait(ref HydraProbeWait w)
        {
            Published = w.Published != 0;
            if (w.Waiting != 0)
            {
                Device = w.Device;
                WaitAgeNs = w.WaitAgeNs;
            }
            LayerDevice = w.LayerDevice == 0 ? (ulong?)null : w.LayerDevice;
        }

        /// <summary>Whether the engine publishes device waits (format v1.3); false: a wait is unknown, not absent.</summary>
        public bool Published { get; }
        /// <summary>Whether the step in flight is blocked on a device now.</summary>
        public bool Waiting => Device.HasValue;
        /// <summary>The id of the device it waits on (see <see cref="DeviceTable"/>); null when none.</summary>
        public ulong? Device { get; }
        /// <summary>Nanoseconds it has waited; null when not waiting.</summary>
        public long? WaitAgeNs { get; }
        /// <summary>The id of the device of the layer being computed; null when unknown.</summary>
        public ulong? LayerDevice { get; }

        /// <inheritdoc/>
        public override string ToString() =>
            Waiting ? $"waiting on device #{Device} for {WaitAgeNs / 1000000} ms" : Published ? "no wait" : "unknown";
    }
}
