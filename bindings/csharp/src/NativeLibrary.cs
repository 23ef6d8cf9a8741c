// NativeLibrary.cs: finds and loads libhydra_probe_ffi.so, binds its functions, and checks
// its ABI version once, at first use.
//
// Search order: the HYDRA_PROBE_LIB environment variable (a path to the library), the
// directory of this assembly, then the system's library path (LD_LIBRARY_PATH, ld.so.cache).
// The library is loaded with dlopen and its functions bound with dlsym, so this works the
// same on Mono, .NET Framework-style runtimes and .NET (Core) with netstandard2.0 only.

using System;
using System.IO;
using System.Runtime.InteropServices;
using System.Text;
using Hydra.Progress.Interop;

namespace Hydra.Progress
{
    /// <summary>The bound functions of libhydra_probe_ffi (see include/hydra_probe.h).</summary>
    internal sealed unsafe class NativeApi
    {
        /// <summary>The library's file name.</summary>
        public const string FileName = "libhydra_probe_ffi.so";

        /// <summary>The environment variable naming the library's path.</summary>
        public const string EnvVar = "HYDRA_PROBE_LIB";

        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate uint AbiVersionFn();
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate uint AbiMinorFn();
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate IntPtr ErrorNameFn(int code);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate IntPtr ValueNameFn(uint kind, ulong raw);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int LastErrorFn(byte* buf, UIntPtr cap, UIntPtr* needed);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int ThresholdsDefaultFn(HydraProbeThresholds* output);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int ListFn(byte* dir, byte* ids, UIntPtr capacity, UIntPtr* count);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int OpenFn(byte* dir, byte* engine, IntPtr* output);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int CloseFn(IntPtr probe);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int SetThresholdsFn(IntPtr probe, HydraProbeThresholds* thresholds);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int SlotCountFn(IntPtr probe, uint* count);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int ReadSlotFn(IntPtr probe, uint slot, HydraProbeSlot* output);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int MetaJsonFn(IntPtr probe, uint slot, byte* buf, UIntPtr cap, UIntPtr* needed);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int DescribeFn(IntPtr probe, HydraProbeDescription* output);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int ReadMetaFn(IntPtr probe, uint slot, HydraProbeMeta* output);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int ReadLayerFn(IntPtr probe, uint slot, HydraProbeLayer* output);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int ReadWaitFn(IntPtr probe, uint slot, HydraProbeWait* output);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int ReadDevicesFn(IntPtr probe, HydraProbeDeviceTable* table, HydraProbeDevice* devices,
            UIntPtr deviceCap, HydraProbeLayerRange* ranges, UIntPtr rangeCap);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int ReadStatsFn(IntPtr probe, long slot, HydraProbeStats* output);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate ulong HistogramBoundFn(uint histogram, uint k);
        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        public delegate int ReadHistoryFn(IntPtr probe, uint slot, HydraProbeHistory* history,
            HydraProbeStep* steps, UIntPtr cap);

        // Names of raw values below this are kept once fetched (per kind).
        const int CachedNames = 64;

        public readonly string Path;
        public readonly AbiVersionFn AbiVersion;
        public readonly ErrorNameFn ErrorName;
        public readonly LastErrorFn LastError;
        public readonly ThresholdsDefaultFn ThresholdsDefault;
        public readonly ListFn List;
        public readonly OpenFn Open;
        public readonly CloseFn Close;
        public readonly SetThresholdsFn SetThresholds;
        public readonly SlotCountFn SlotCount;
        public readonly ReadSlotFn ReadSlot;
        public readonly MetaJsonFn MetaJson;
        public readonly DescribeFn Describe;
        public readonly ReadMetaFn ReadMeta;
        public readonly ReadLayerFn ReadLayer;
        public readonly ReadWaitFn ReadWait;
        public readonly ReadDevicesFn ReadDevices;
        public readonly ReadStatsFn ReadStats;
        public readonly HistogramBoundFn HistogramBound;
        public readonly ReadHistoryFn ReadHistory;
        readonly ValueNameFn valueName;
        readonly string[][] names = new string[HydraProbeAbi.ValueHistogram + 1][];

        static readonly Lazy<NativeApi> Instance =
            new Lazy<NativeApi>(Load, System.Threading.LazyThreadSafetyMode.ExecutionAndPublication);

        /// <summary>The loaded library; throws <see cref="ProbeLibraryException"/> when it cannot be.</summary>
        public static NativeApi Get() => Instance.Value;

        NativeApi(string path, IntPtr lib)
        {
            Path = path;
            AbiVersion = Bind<AbiVersionFn>(lib, "hydra_probe_abi_version");
            uint abi = AbiVersion();
            if (abi != HydraProbeAbi.AbiVersion)
                throw new ProbeLibraryException(
                    $"{path} speaks hydra_probe ABI version {abi}; Hydra.Progress needs version " +
                    $"{HydraProbeAbi.AbiVersion}: use the libhydra_probe_ffi.so built from the same " +
                    "hydra-progress release as this assembly");
            uint minor = Bind<AbiMinorFn>(lib, "hydra_probe_abi_minor")();
            if (minor < HydraProbeAbi.AbiMinor)
                throw new ProbeLibraryException(
                    $"{path} speaks hydra_probe ABI {abi}.{minor}; Hydra.Progress needs {abi}.{HydraProbeAbi.AbiMinor} " +
                    "or later: use the libhydra_probe_ffi.so built from the same hydra-progress release as this assembly");
            ErrorName = Bind<ErrorNameFn>(lib, "hydra_probe_error_name");
            valueName = Bind<ValueNameFn>(lib, "hydra_probe_value_name");
            for (int k = 0; k < names.Length; k++)
                names[k] = new string[CachedNames];
            LastError = Bind<LastErrorFn>(lib, "hydra_probe_last_error");
            ThresholdsDefault = Bind<ThresholdsDefaultFn>(lib, "hydra_probe_thresholds_default");
            List = Bind<ListFn>(lib, "hydra_probe_list");
            Open = Bind<OpenFn>(lib, "hydra_probe_open");
            Close = Bind<CloseFn>(lib, "hydra_probe_close");
            SetThresholds = Bind<SetThresholdsFn>(lib, "hydra_probe_set_thresholds");
            SlotCount = Bind<SlotCountFn>(lib, "hydra_probe_slot_count");
            ReadSlot = Bind<ReadSlotFn>(lib, "hydra_probe_read_slot");
            MetaJson = Bind<MetaJsonFn>(lib, "hydra_probe_meta_json");
            Describe = Bind<DescribeFn>(lib, "hydra_probe_describe");
            ReadMeta = Bind<ReadMetaFn>(lib, "hydra_probe_read_meta");
            ReadLayer = Bind<ReadLayerFn>(lib, "hydra_probe_read_layer");
            ReadWait = Bind<ReadWaitFn>(lib, "hydra_probe_read_wait");
            ReadDevices = Bind<ReadDevicesFn>(lib, "hydra_probe_read_devices");
            ReadStats = Bind<ReadStatsFn>(lib, "hydra_probe_read_stats");
            HistogramBound = Bind<HistogramBoundFn>(lib, "hydra_probe_histogram_bound");
            ReadHistory = Bind<ReadHistoryFn>(lib, "hydra_probe_read_history");
        }

        /// <summary>
        /// The meta JSON's name of raw value <paramref name="raw"/> of kind <paramref name="kind"/>
        /// (<c>HydraProbeAbi.Value*</c>), from the native library: "decode", "tokens", ...,
        /// "unknown". Interned, and kept for small values, so a read allocates no name.
        /// </summary>
        public string ValueName(uint kind, ulong raw)
        {
            string[] table = names[kind];
            if (raw >= (ulong)table.Length)
                return FetchName(kind, raw);
            // Racing threads store the same interned string.
            return table[raw] ?? (table[raw] = FetchName(kind, raw));
        }

        string FetchName(uint kind, ulong raw)
        {
            IntPtr p = valueName(kind, raw);
            if (p == IntPtr.Zero)
                throw new ArgumentOutOfRangeException(nameof(kind), $"hydra_probe_value_name knows no kind {kind}");
            return string.Intern(Marshal.PtrToStringAnsi(p));
        }

        T Bind<T>(IntPtr lib, string symbol) where T : class
        {
            IntPtr f = Dl.Sym(lib, symbol);
            if (f == IntPtr.Zero)
                throw new ProbeLibraryException(
                    $"{Path} has no symbol {symbol} ({Dl.Error()}): not a libhydra_probe_ffi.so of this release");
            return (T)(object)Marshal.GetDelegateForFunctionPointer(f, typeof(T));
        }

        static NativeApi Load()
        {
            var tried = new StringBuilder();
            string env = Environment.GetEnvironmentVariable(EnvVar);
            if (!string.IsNullOrEmpty(env))
            {
                // An explicit choice is never silently replaced by another copy.
                if (!File.Exists(env))
                    throw new ProbeLibraryException($"{EnvVar}={env}: no such file");
                IntPtr h = Dl.Open(env);
                if (h == IntPtr.Zero)
                    throw new ProbeLibraryException($"{EnvVar}={env}: cannot load it: {Dl.Error()}");
                return new NativeApi(env, h);
            }
            tried.Append($"\n  - ${EnvVar}: not set");

            string here = AssemblyDirectory();
            if (here != null)
            {
                string path = System.IO.Path.Combine(here, FileName);
                if (File.Exists(path))
                {
                    IntPtr h = Dl.Open(path);
                    if (h == IntPtr.Zero)
                        throw new ProbeLibraryException($"{path}: cannot load it: {Dl.Error()}");
                    return new NativeApi(path, h);
                }
                tried.Append($"\n  - next to the assembly: no {path}");
            }
            else
            {
                tried.Append("\n  - next to the assembly: the assembly has no file location");
            }

            IntPtr sys = Dl.Open(FileName);
            if (sys != IntPtr.Zero)
                return new NativeApi(FileName + " (system library path)", sys);
            tried.Append($"\n  - the system library path: {Dl.Error()}");
            throw new ProbeLibraryException(
                $"cannot find {FileName} (build it with `cargo build --release -p hydra-probe-capi`, " +
                $"then set {EnvVar} to its path or put it next to Hydra.Progress.dll). Tried:{tried}");
        }

        static string AssemblyDirectory()
        {
            string location = typeof(NativeApi).Assembly.Location;
            return string.IsNullOrEmpty(location) ? null : System.IO.Path.GetDirectoryName(location);
        }
    }

    /// <summary>
    /// dlopen/dlsym through libdl.so.2 (glibc; from 2.34 on the functions live in libc and
    /// libdl.so.2 stays as its compatibility name).
    /// </summary>
    internal static class Dl
    {
        const int RTLD_NOW = 2;

        [DllImport("libdl.so.2", EntryPoint = "dlopen")]
        static extern IntPtr DlOpen(string file, int mode);
        [DllImport("libdl.so.2", EntryPoint = "dlsym")]
        public static extern IntPtr Sym(IntPtr handle, string name);
        [DllImport("libdl.so.2", EntryPoint = "dlerror")]
        static extern IntPtr DlError();

        public static IntPtr Open(string file) => DlOpen(file, RTLD_NOW);

        public static string Error()
        {
            IntPtr e = DlError();
            return e == IntPtr.Zero ? "unknown dlopen error" : Marshal.PtrToStringAnsi(e);
        }
    }
}
