// Tests.cs: the C# library against the real native library, a live engine, the hostile
// corpus and the C header. Run by scripts/test-csharp.sh; prints "N passed, N failed".
//
//   mono Hydra.Progress.Tests.exe [FILTER]       run the tests whose name contains FILTER
//   mono Hydra.Progress.Tests.exe --print-library   (child mode: where the library loads from)

using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.IO;
using System.Linq;
using System.Numerics;
using System.Reflection;
using System.Runtime.InteropServices;
using System.Text;
using System.Text.RegularExpressions;
using System.Threading;
using Hydra.Progress.Interop;

namespace Hydra.Progress.Tests
{
    internal static class Program
    {
        const string LibName = "libhydra_probe_ffi.so";

        static int Main(string[] args)
        {
            if (args.Length == 1 && args[0] == "--print-library")
                return PrintLibrary();
            var runner = new Runner(args.Length > 0 ? args[0] : null);
            runner.Run("layout: structs, enums and constants match include/hydra_probe.h", LayoutMatchesHeader);
            runner.Run("json: floats are written as serde_json writes them", FloatsAsRyu);
            runner.Run("json: FromJson/ToJson round trip, escapes, unknown fields, missing fields", JsonRoundTrip);
            runner.Run("load: HYDRA_PROBE_LIB, next to the assembly, system path, clear errors, ABI check", LibraryLoading);
            runner.Run("missing: engine, path and directory", MissingThings);
            runner.Run("corpus: every hostile file gives its typed exception; readable ones read", HostileCorpus);
            // Each live test gets its own engine (see LiveEngine).
            runner.Run("devices: an RPC split's table, its step's wait, the peer that reads nothing and the meta name the peer", RpcSplitDevices);
            runner.Run("stats: statistics and flight recorders, summed and per slot, absent, hostile", Statistics);
            runner.Run("live: engines are discovered", () => { using (var live = new LiveEngine()) live.Discovery(); });
            runner.Run("live: the CPU engine's one device, its layer map, and no wait", () => { using (var live = new LiveEngine()) live.Devices(); });
            runner.Run("live: ReadMeta agrees with hydra-probe meta during a long decode", () => { using (var live = new LiveEngine()) live.MetaDuringDecode(); });
            runner.Run("live: ReadMeta agrees with hydra-probe meta during a long chunked prefill", () => { using (var live = new LiveEngine()) live.MetaDuringPrefill(); });
            runner.Run("live: ReadMeta's JSON is the native meta JSON byte for byte (idle, decoding)", () => { using (var live = new LiveEngine()) live.MetaBytesMatch(); });
            runner.Run("live: tokens are monotonic within a task (ReadMeta and ReadSlot)", () => { using (var live = new LiveEngine()) live.MonotonicTokens(); });
            runner.Run("live: thresholds decide slow and stalled; IsStuck/Classify", () => { using (var live = new LiveEngine()) live.ThresholdVerdicts(); });
            runner.Run("live: 8 threads x 10,000 reads, no error", () => { using (var live = new LiveEngine()) live.ConcurrentReads(); });
            runner.Run("live: a read allocates only its result", () => { using (var live = new LiveEngine()) live.AllocationPerRead(); });
            runner.Run("live: GetStateMetaAsync answers without the network", () => { using (var live = new LiveEngine()) live.StateMetaAsync(); });
            runner.Run("live: Dispose twice is safe, use after Dispose throws ObjectDisposedException", () => { using (var live = new LiveEngine()) live.DisposeRules(); });
            runner.Run("live: after kill -9 the engine is dead, the slot orphaned, progress kept", () => { using (var live = new LiveEngine()) live.KilledEngine(); });
            return runner.Finish();
        }

        // ---------------------------------------------------------------- child mode

        static int PrintLibrary()
        {
            try
            {
                Console.WriteLine("loaded: " + ProgressProbe.NativeLibraryPath);
                return 0;
            }
            catch (ProbeLibraryException e)
            {
                Console.WriteLine("ProbeLibraryException: " + e.Message);
                return 3;
            }
        }

        // ---------------------------------------------------------------- layout

        static string Pascal(string snake) =>
            string.Concat(snake.ToLowerInvariant().Split('_').Select(w => w.Length == 0 ? "" : char.ToUpperInvariant(w[0]) + w.Substring(1)));

        /// <summary>The fields of `typedef struct NAME { ... } NAME;` in the header.</summary>
        static List<string> HeaderFields(string header, string name)
        {
            var m = Regex.Match(header, @"typedef struct " + name + @" \{(.*?)\} " + name + ";", RegexOptions.Singleline);
            Assert.True(m.Success, $"struct {name} in the header");
            var fields = new List<string>();
            foreach (string raw in m.Groups[1].Value.Split('\n'))
            {
                string line = raw.Trim();
                if (line.Length == 0 || line.StartsWith("//") || line.StartsWith("/*") || line.StartsWith("*"))
                    continue;
                var f = Regex.Match(line, @"(\w+)(\[\w+\])?;$");
                Assert.True(f.Success, $"field line '{line}' of {name}");
                fields.Add(f.Groups[1].Value);
            }
            return fields;
        }

        static void LayoutMatchesHeader()
        {
            string headerPath = Bins.Require("HYDRA_PROBE_HEADER");
            string header = File.ReadAllText(headerPath);
            StructsMatchHeader(header, headerPath);
            ConstantsMatchHeader(header);
        }

        // Every size and offset of the header's structs, printed by a C program generated from
        // the header's own field lists, equals the C# struct's.
        static void StructsMatchHeader(string header, string headerPath)
        {
            var structs = new[] { "HydraProbeSlot", "HydraProbeThresholds", "HydraProbeMeta", "HydraProbeDescription", "HydraProbeStr", "HydraProbeLayer", "HydraProbePrediction", "HydraProbeWait", "HydraProbeDeviceTable", "HydraProbeDevice", "HydraProbeLayerRange", "HydraProbeHistogram", "HydraProbeStats", "HydraProbeHistory", "HydraProbeStep" };
            // A C program, generated from the header's own field lists, prints every size and offset.
            var c = new StringBuilder("#include <stdio.h>\n#include <stddef.h>\n#include \"hydra_probe.h\"\nint main(void) {\n");
            foreach (string s in structs)
            {
                c.Append($"  printf(\"{s} . %zu\\n\", sizeof({s}));\n");
                foreach (string f in HeaderFields(header, s))
                    c.Append($"  printf(\"{s} {f} %zu %zu\\n\", offsetof({s}, {f}), sizeof((({s} *)0)->{f}));\n");
            }
            c.Append("  return 0;\n}\n");
            string dir = Bins.TempDir("hydra-cs-layout.");
            File.WriteAllText(Path.Combine(dir, "layout.c"), c.ToString());
            string cc = Environment.GetEnvironmentVariable("CC") ?? "cc";
            string o, e;
            int rc = Bins.Run(cc, $"-std=c11 -Wall -Werror -I {Path.GetDirectoryName(headerPath)} -o {dir}/layout {dir}/layout.c", out o, out e);
            Assert.Equal(0, rc, $"{cc} layout.c: {e}");
            rc = Bins.Run(Path.Combine(dir, "layout"), "", out o, out e);
            Assert.Equal(0, rc, "layout program");
            int checkedFields = 0;
            foreach (string line in o.Split(new[] { '\n' }, StringSplitOptions.RemoveEmptyEntries))
            {
                string[] w = line.Split(' ');
                Type t = typeof(HydraProbeSlot).Assembly.GetType("Hydra.Progress.Interop." + w[0], true);
                if (w[1] == ".")
                {
                    Assert.Equal(int.Parse(w[2]), Marshal.SizeOf(t), $"sizeof({w[0]})");
                    int csFields = t.GetFields(BindingFlags.Public | BindingFlags.Instance).Length;
                    Assert.Equal(HeaderFields(header, w[0]).Count, csFields, $"field count of {w[0]}");
                    continue;
                }
                string name = Pascal(w[1]);
                FieldInfo fi = t.GetField(name);
                Assert.True(fi != null, $"C# {w[0]} has no field {name} (C {w[1]})");
                Assert.Equal(int.Parse(w[2]), (int)Marshal.OffsetOf(t, name), $"offsetof({w[0]}, {w[1]})");
                Type ft = fi.FieldType.IsEnum ? Enum.GetUnderlyingType(fi.FieldType) : fi.FieldType;
                Assert.Equal(int.Parse(w[3]), Marshal.SizeOf(ft), $"sizeof({w[0]}.{w[1]})");
                checkedFields++;
            }
            Assert.True(checkedFields >= 37 + 17 + 9 + 2, $"only {checkedFields} fields checked");
            Directory.Delete(dir, true);
        }

        // The enumerators, return codes and other constants of the header equal the C# ones.
        static void ConstantsMatchHeader(string header)
        {
            // Enums: every enumerator of the header, and no other, with the same value.
            foreach (var pair in new[] { Tuple.Create("HYDRA_PROBE_SLOT_CLASS_", typeof(SlotClass)), Tuple.Create("HYDRA_PROBE_ENGINE_HEALTH_", typeof(EngineHealth)) })
            {
                var ms = Regex.Matches(header, "#define " + pair.Item1 + @"(\w+) (-?\d+)");
                Assert.Equal(Enum.GetValues(pair.Item2).Length, ms.Count, $"enumerators of {pair.Item2.Name}");
                foreach (Match m in ms)
                    Assert.Equal(int.Parse(m.Groups[2].Value), (int)Enum.Parse(pair.Item2, Pascal(m.Groups[1].Value)), $"{pair.Item1}{m.Groups[1].Value}");
            }
            // Phases (the header's raw values; SlotPhase adds Unknown).
            var phases = Regex.Matches(header, @"#define HYDRA_PROBE_PHASE_(\w+) (\d+)");
            Assert.Equal(Enum.GetValues(typeof(SlotPhase)).Length - 1, phases.Count, "phases");
            foreach (Match m in phases)
                Assert.Equal(int.Parse(m.Groups[2].Value), (int)Enum.Parse(typeof(SlotPhase), Pascal(m.Groups[1].Value)), "phase " + m.Groups[1].Value);
            // Return codes and the other constants.
            var codes = Regex.Matches(header, @"#define HYDRA_PROBE_(OK|E_\w+) (-?\d+)");
            Assert.True(codes.Count >= 11, "return codes in the header");
            foreach (Match m in codes)
            {
                string name = m.Groups[1].Value == "OK" ? "Ok" : "E" + Pascal(m.Groups[1].Value.Substring(2));
                FieldInfo f = typeof(HydraProbeAbi).GetField(name);
                Assert.True(f != null, $"HydraProbeAbi.{name} for HYDRA_PROBE_{m.Groups[1].Value}");
                Assert.Equal(int.Parse(m.Groups[2].Value), (int)f.GetValue(null), $"HYDRA_PROBE_{m.Groups[1].Value}");
            }
            Assert.Equal(uint.Parse(Regex.Match(header, @"#define HYDRA_PROBE_ABI_VERSION (\d+)").Groups[1].Value), HydraProbeAbi.AbiVersion, "ABI version");
            Assert.Equal(uint.Parse(Regex.Match(header, @"#define HYDRA_PROBE_ABI_MINOR (\d+)").Groups[1].Value), HydraProbeAbi.AbiMinor, "ABI minor");
            var kinds = Regex.Matches(header, @"#define HYDRA_PROBE_VALUE_(\w+) (\d+)");
            Assert.Equal(10, kinds.Count, "value kinds");
            foreach (Match m in kinds)
                Assert.Equal(uint.Parse(m.Groups[2].Value), (uint)typeof(HydraProbeAbi).GetField("Value" + Pascal(m.Groups[1].Value)).GetValue(null), "HYDRA_PROBE_VALUE_" + m.Groups[1].Value);
            Assert.Equal(int.Parse(Regex.Match(header, @"#define HYDRA_PROBE_ENGINE_ID_LEN (\d+)").Groups[1].Value), HydraProbeAbi.EngineIdLen, "engine id length");
            var states = Regex.Matches(header, @"#define HYDRA_PROBE_DEVICES_(\w+) (\d+)");
            Assert.Equal(4, states.Count, "device table states");
            foreach (Match m in states)
                Assert.Equal(uint.Parse(m.Groups[2].Value), (uint)typeof(HydraProbeAbi).GetField("Devices" + Pascal(m.Groups[1].Value)).GetValue(null), "HYDRA_PROBE_DEVICES_" + m.Groups[1].Value);
            Assert.Equal(int.Parse(Regex.Match(header, @"#define HYDRA_PROBE_MAX_DEVICES (\d+)").Groups[1].Value), HydraProbeAbi.MaxDevices, "max devices");
            Assert.Equal(int.Parse(Regex.Match(header, @"#define HYDRA_PROBE_MAX_LAYER_RANGES (\d+)").Groups[1].Value), HydraProbeAbi.MaxLayerRanges, "max layer ranges");
            var statsStates = Regex.Matches(header, @"#define HYDRA_PROBE_STATS_(\w+) (\d+)");
            Assert.Equal(2, statsStates.Count, "statistics states");
            foreach (Match m in statsStates)
                Assert.Equal(uint.Parse(m.Groups[2].Value), (uint)typeof(HydraProbeAbi).GetField("Stats" + Pascal(m.Groups[1].Value)).GetValue(null), "HYDRA_PROBE_STATS_" + m.Groups[1].Value);
            foreach (var pair in new[] { Tuple.Create("HISTOGRAMS", HydraProbeAbi.Histograms), Tuple.Create("HISTOGRAM_BUCKETS", HydraProbeAbi.HistogramBuckets), Tuple.Create("CAUSES", HydraProbeAbi.Causes), Tuple.Create("PHASES", HydraProbeAbi.Phases) })
                Assert.Equal(int.Parse(Regex.Match(header, @"#define HYDRA_PROBE_" + pair.Item1 + @" (\d+)").Groups[1].Value), pair.Item2, "HYDRA_PROBE_" + pair.Item1);
            Assert.Equal(uint.Parse(Regex.Match(header, @"#define HYDRA_PROBE_HISTOGRAM_RATIO_PREFILL (\d+)").Groups[1].Value), HydraProbeAbi.HistogramRatioPrefill, "the first ratio histogram");
        }

        // ---------------------------------------------------------------- JSON

        static void FloatsAsRyu()
        {
            // Expected texts are serde_json's (1.0.154, zmij 1.0.23) for these doubles.
            var cases = new Dictionary<double, string>
            {
                { 0.0, "0.0" }, { 1.0, "1.0" }, { 0.25, "0.25" }, { 0.1 + 0.2, "0.30000000000000004" },
                { 2.0 / 3, "0.6666666666666666" }, { 100.0, "100.0" }, { 1e15, "1000000000000000.0" },
                { 1e16, "1e+16" }, { 1.5e16, "1.5e+16" }, { 123456789012345680.0, "1.2345678901234568e+17" },
                { 0.001, "0.001" }, { 0.0001234, "0.0001234" }, { 1e-5, "0.00001" }, { 1e-7, "1e-7" }, { 2.9802322387695312e-08, "2.9802322387695312e-8" }, { 5.444310685350916e+14, "544431068535091.6" }, { 1.25e-7, "1.25e-7" },
                { 5e-324, "5e-324" }, { double.MaxValue, "1.7976931348623157e+308" }, { 3.439070283483335e+35, "3.439070283483335e+35" }, { 12.5, "12.5" },
                { 1234.5678, "1234.5678" }, { -3.5, "-3.5" },
            };
            foreach (var kv in cases)
                Assert.Equal(kv.Value, FloatFormat.Shortest(kv.Key), $"text of {kv.Key:R}");
            // Decimal texts of 15 to 19 significant digits read as the nearest double (ties to
            // even), checked in exact rational arithmetic.
            var rand = new Random(11);
            for (int i = 0; i < 5000; i++)
            {
                int digits = rand.Next(15, 20);
                var sb = new StringBuilder();
                sb.Append((char)('1' + rand.Next(9)));
                for (int k = 1; k < digits; k++)
                    sb.Append((char)('0' + rand.Next(10)));
                int point = rand.Next(0, digits + 1);
                string text = point == 0 ? "0." + sb : point == digits ? sb + ".0" : sb.ToString().Insert(point, ".");
                if (rand.Next(3) == 0)
                    text += "e" + rand.Next(-40, 40);
                double got = SlotMeta.FromJson(MinimalJson(0).Replace("\"progress\":0.0", "\"progress\":" + text)).Progress;
                Assert.True(IsNearest(text, got), $"{text} read as {got:R}, not the nearest double");
            }
            // Every text reads back as the same double, through the library's own parser.
            var rng = new Random(7);
            for (int i = 0; i < 2000; i++)
            {
                double d = rng.NextDouble() * Math.Pow(10, rng.Next(-8, 12));
                var m = SlotMeta.FromJson(MinimalJson(d));
                Assert.Equal(d, m.Progress, $"read back of {FloatFormat.Shortest(d)}");
            }
        }

        /// <summary>Whether <paramref name="d"/> is the double nearest to the decimal <paramref name="text"/>.</summary>
        static bool IsNearest(string text, double d)
        {
            // text = num / den exactly.
            var m = Regex.Match(text, @"^(\d*)\.?(\d*)(?:e(-?\d+))?$");
            BigInteger num = BigInteger.Parse(m.Groups[1].Value + m.Groups[2].Value);
            int exp = (m.Groups[3].Success ? int.Parse(m.Groups[3].Value) : 0) - m.Groups[2].Value.Length;
            BigInteger den = 1;
            if (exp >= 0) num *= BigInteger.Pow(10, exp); else den = BigInteger.Pow(10, -exp);
            long bits = BitConverter.DoubleToInt64Bits(d);
            // |x - d| <= |x - neighbour| for both neighbours, ties only towards an even mantissa.
            foreach (long nb in new[] { bits - 1, bits + 1 })
            {
                double n = BitConverter.Int64BitsToDouble(nb);
                int c = (Distance(num, den, d)).CompareTo(Distance(num, den, n));
                if (c > 0 || (c == 0 && (bits & 1) != 0))
                    return false;
            }
            return true;
        }

        /// <summary>|num/den - x| x den x 2^1100, an exact integer for any finite double x.</summary>
        static BigInteger Distance(BigInteger num, BigInteger den, double x)
        {
            long bits = BitConverter.DoubleToInt64Bits(x);
            int biased = (int)((bits >> 52) & 0x7ff);
            long fraction = bits & ((1L << 52) - 1);
            BigInteger mant = biased == 0 ? fraction : fraction | (1L << 52);
            int e = (biased == 0 ? -1074 : biased - 1075) + 1100; // >= 26
            return BigInteger.Abs(num * BigInteger.Pow(2, 1100) - mant * BigInteger.Pow(2, e) * den);
        }

        static string MinimalJson(double progress) =>
            "{\"slot_id\":0,\"n_past\":0,\"state_size\":0,\"is_processing\":false,\"model_alias\":\"\"," +
            "\"tokenizer\":\"\",\"model_name\":\"\",\"model_quant\":\"\",\"model_capabilities\":0," +
            "\"model_path\":\"\",\"operation\":\"idle\",\"progress\":" + FloatFormat.Shortest(progress) +
            ",\"tokens_processed\":0,\"tokens_total\":0,\"elapsed_ms\":0}";

        static void JsonRoundTrip()
        {
            // Hydra Core's fifteen fields alone (an older engine's answer) parse and write back.
            string hydra = MinimalJson(0.5);
            Assert.Equal(hydra, SlotMeta.FromJson(hydra).ToJson(), "Hydra-only JSON round trip");
            var m = new SlotMeta
            {
                SlotId = 3, NPast = ulong.MaxValue, ModelName = "q\"uo\\te\n\t\u001b\u00e9\u4e2d\ud83d\ude00",
                Operation = "decode", Progress = 0.125, EngineId = "e-1", EngineLiveness = EngineHealth.Dead,
                Classification = SlotClass.Orphaned, Queued = false, Pending = 0, Phase = "decode",
                RatePerS = null, EtaS = 2.5, LastProgressAgeMs = null, ReadError = "torn: odd sequence",
            };
            string json = m.ToJson();
            Assert.True(json.Contains("\"model_name\":\"q\\\"uo\\\\te\\n\\t\\u001b\u00e9\u4e2d\ud83d\ude00\""), "serde_json escapes: " + json);
            Assert.True(json.Contains("\"n_past\":18446744073709551615"), "u64 max");
            Assert.True(json.Contains("\"rate_per_s\":null,\"eta_s\":2.5"), "null and float fields: " + json);
            Assert.True(json.EndsWith(",\"read_error\":\"torn: odd sequence\"}"), "read_error last");
            Assert.True(!json.Contains("\"task_id\""), "unset extras are left out");
            var back = SlotMeta.FromJson(json);
            Assert.Equal(json, back.ToJson(), "round trip");
            Assert.Equal(m.ModelName, back.ModelName, "escaped string");
            // Unknown fields (a newer probe) are skipped, whatever their shape.
            string newer = hydra.Insert(hydra.Length - 1, ",\"substep_done\":3,\"x\":{\"a\":[1,\"]\",{\"b\":null}]},\"y\":-1.5e-3");
            Assert.Equal(hydra, SlotMeta.FromJson(newer).ToJson(), "unknown fields skipped");
            // Bad JSON is a FormatException, never a crash.
            foreach (string bad in new[] { "", "{", "[]", hydra.Replace("\"slot_id\":0,", ""), hydra + "x",
                         hydra.Replace("\"n_past\":0", "\"n_past\":-1"), hydra.Replace("\"n_past\":0", "\"n_past\":1.5"),
                         hydra.Replace("\"n_past\":0", "\"n_past\":99999999999999999999"), "{\"slot_id\":\"\\q\"}",
                         hydra.Replace("\"progress\":0.5", "\"progress\":1e999") })
                Assert.Throws<FormatException>(() => SlotMeta.FromJson(bad), "bad JSON: " + bad);
        }

        // ---------------------------------------------------------------- loading

        static string RunChild(string exeDir, Action<ProcessStartInfo> env, out int rc)
        {
            string o, e;
            rc = Bins.Run("mono", Path.Combine(exeDir, "Hydra.Progress.Tests.exe") + " --print-library", out o, out e,
                60000, psi => { psi.EnvironmentVariables.Remove("HYDRA_PROBE_LIB"); psi.EnvironmentVariables.Remove("LD_LIBRARY_PATH"); env(psi); });
            return (o + e).Trim();
        }

        static void LibraryLoading()
        {
            string lib = Bins.Require("HYDRA_PROBE_LIB");
            string here = Path.GetDirectoryName(typeof(Program).Assembly.Location);
            // Copies of the test program and the library without the native library beside them.
            string bare = Bins.TempDir("hydra-cs-load.");
            foreach (string f in new[] { "Hydra.Progress.dll", "Hydra.Progress.Tests.exe" })
                File.Copy(Path.Combine(here, f), Path.Combine(bare, f));
            string beside = Bins.TempDir("hydra-cs-load.");
            foreach (string f in new[] { "Hydra.Progress.dll", "Hydra.Progress.Tests.exe" })
                File.Copy(Path.Combine(here, f), Path.Combine(beside, f));
            File.Copy(lib, Path.Combine(beside, LibName));
            int rc;
            string s;

            s = RunChild(beside, psi => psi.EnvironmentVariables["HYDRA_PROBE_LIB"] = lib, out rc);
            Assert.Equal("loaded: " + lib, s, "1. HYDRA_PROBE_LIB wins over the copy next to the assembly");
            s = RunChild(beside, psi => { }, out rc);
            Assert.Equal("loaded: " + Path.Combine(beside, LibName), s, "2. next to the assembly");
            s = RunChild(bare, psi => psi.EnvironmentVariables["LD_LIBRARY_PATH"] = Path.GetDirectoryName(lib), out rc);
            Assert.Equal("loaded: libhydra_probe_ffi.so (system library path)", s, "3. the system library path");
            s = RunChild(bare, psi => { }, out rc);
            Assert.Equal(3, rc, "nowhere: exit code");
            Assert.True(s.Contains("cannot find libhydra_probe_ffi.so") && s.Contains("HYDRA_PROBE_LIB: not set") &&
                        s.Contains("next to the assembly: no " + Path.Combine(bare, LibName)) &&
                        s.Contains("the system library path:"), "nowhere: the message lists what was tried: " + s);
            s = RunChild(beside, psi => psi.EnvironmentVariables["HYDRA_PROBE_LIB"] = "/nonexistent/libx.so", out rc);
            Assert.True(rc == 3 && s.Contains("HYDRA_PROBE_LIB=/nonexistent/libx.so: no such file"), "a missing explicit path is an error, not a fallback: " + s);
            string notLib = Path.Combine(bare, "not-a-library.so");
            File.WriteAllText(notLib, "not an ELF file\n");
            s = RunChild(beside, psi => psi.EnvironmentVariables["HYDRA_PROBE_LIB"] = notLib, out rc);
            Assert.True(rc == 3 && s.Contains("cannot load it"), "a file that is not a library: " + s);

            // A library of another ABI version is refused at load.
            string cc = Environment.GetEnvironmentVariable("CC") ?? "cc";
            File.WriteAllText(Path.Combine(bare, "abi2.c"), "unsigned hydra_probe_abi_version(void) { return 2; }\n");
            string o, e;
            Assert.Equal(0, Bins.Run(cc, $"-shared -fPIC -o {bare}/libabi2.so {bare}/abi2.c", out o, out e), "cc abi2: " + e);
            s = RunChild(beside, psi => psi.EnvironmentVariables["HYDRA_PROBE_LIB"] = bare + "/libabi2.so", out rc);
            Assert.True(rc == 3 && s.Contains("ABI version 2") && s.Contains("needs version 1"), "ABI mismatch: " + s);
            Directory.Delete(bare, true);
            Directory.Delete(beside, true);
        }

        // ---------------------------------------------------------------- errors and corpus

        static void MissingThings()
        {
            string dir = Bins.TempDir("hydra-cs-empty.");
            var e = Assert.Throws<EngineNotFoundException>(() => new ProgressProbe("no-such-engine", dir), "missing engine");
            Assert.Equal(HydraProbeAbi.ENotFound, e.Code, "code");
            Assert.Equal("HYDRA_PROBE_E_NOT_FOUND", e.CodeName, "code name");
            Assert.True(e.NativeMessage.Length > 0 && e.Message.Contains(e.NativeMessage), "message: " + e.Message);
            Assert.Throws<EngineNotFoundException>(() => ProgressProbe.Open(Path.Combine(dir, "gone.hps")), "missing path");
            Assert.Equal(0, ProgressProbe.Engines(dir).Count, "no engines in an empty directory");
            string missing = Path.Combine(dir, "missing");
            var gone = Assert.Throws<DirectoryNotFoundException>(() => ProgressProbe.Engines(missing), "a missing directory");
            Assert.True(gone.Message.Contains(missing) && gone.Message.Contains("HYDRA_PROBE_E_NOT_FOUND"), "names the directory: " + gone.Message);
            string file = Path.Combine(dir, "a-file");
            File.WriteAllText(file, "x");
            var unreadable = Assert.Throws<HydraProbeException>(() => ProgressProbe.Engines(file), "a file as the directory");
            Assert.Equal(HydraProbeAbi.EIo, unreadable.Code, "code of an unreadable directory");
            Assert.True(unreadable.Message.Contains(file), "names the directory: " + unreadable.Message);
            var bad = Assert.Throws<EngineNotFoundException>(() => new ProgressProbe("bad id", dir), "an id that names no segment");
            Console.WriteLine("     " + bad.Message);
            Assert.Throws<ArgumentNullException>(() => new ProgressProbe(null), "null engine");
            Directory.Delete(dir, true);
        }

        /// <summary>The corpus's engine split across two RPC peers, slot 0 waiting on the second.</summary>
        static void RpcSplitDevices()
        {
            string root = Bins.Require("HYDRA_CORPUS_DIR");
            using (var p = new ProgressProbe(Path.Combine(root, "segments", "devices-rpc-split.hps")))
            {
                DeviceTable t = p.ReadDevices();
                Assert.Equal(DeviceTableState.Known, t.State, "state");
                Assert.Equal(2, t.Devices.Count, "devices");
                Assert.Equal("rpc", t.Devices[1].Kind, "kind");
                Assert.Equal("RPC1", t.Devices[1].Name, "name");
                Assert.Equal("127.0.0.1:50053", t.Devices[1].Endpoint, "endpoint");
                Assert.Equal("RPC1 127.0.0.1:50053", t.Devices[1].Label, "label");
                Assert.Equal("RPC0[127.0.0.1:50052]", t.Devices[0].Label, "a name holding its endpoint is the label");
                Assert.Equal((ulong)30, t.LayerCount, "layers");
                Assert.Equal(2, t.Ranges.Count, "ranges");
                Assert.True(t.DeviceOfLayer(15) == t.Devices[0] && t.DeviceOfLayer(16) == t.Devices[1], "the split at layer 16");
                Assert.Equal("device #7", t.Label(7), "an id the table lacks");
                DeviceWait w = p.ReadWait(0);
                Assert.True(w.Published && w.Waiting, "slot 0 waits: " + w);
                Assert.Equal((ulong?)2, w.Device, "on the second peer");
                Assert.True(w.WaitAgeNs >= 5000000000L, "for 5 s or more: " + w.WaitAgeNs);
                Assert.Equal((ulong?)2, w.LayerDevice, "layer 16 runs on the second peer");
                DeviceWait idle = p.ReadWait(1);
                Assert.True(idle.Published && !idle.Waiting && idle.LayerDevice == null, "slot 1: no wait");
                SlotMeta m = p.ReadMeta(0);
                Assert.Equal("RPC1 127.0.0.1:50053", m.WaitDevice, "meta wait_device");
                Assert.Equal("RPC1 127.0.0.1:50053", m.LayerDevice, "meta layer_device");
                Assert.True(m.WaitMs >= 5000, "meta wait_ms " + m.WaitMs);
                string json = p.ReadMetaJson(0);
                Assert.True(json.Contains("\"wait_device\":\"RPC1 127.0.0.1:50053\""), "native JSON: " + json);
                Assert.Equal(json, SlotMeta.FromJson(json).ToJson(), "C# JSON of the native JSON");
                SlotMeta idleMeta = p.ReadMeta(1);
                Assert.True(idleMeta.HasDeviceWaits && idleMeta.WaitDevice == null, "slot 1 meta: published, no wait");
                Assert.True(p.ReadMetaJson(1).Contains("\"wait_device\":null"), "null, not absent");
                Assert.True(m.WaitThresholdMs == null && m.WaitLearntMaxMs == null, "a prefill wait is not judged by a history");
                Assert.True(json.Contains("\"wait_threshold_ms\":null"), "null, not absent: " + json);
            }
            using (var p = new ProgressProbe(Path.Combine(root, "segments", "devices-rpc-split-decoding.hps")))
            {
                SlotMeta m = p.ReadMeta(0);
                Assert.Equal("RPC1 127.0.0.1:50053", m.WaitDevice, "decoding: meta wait_device");
                Assert.Equal((ulong?)1000, m.WaitThresholdMs, "the wait rule's threshold, its 1 s floor");
                Assert.True(m.WaitLearntMaxMs >= 2 && m.WaitLearntMaxMs < 100, "decode waits of ~2 ms: " + m.WaitLearntMaxMs);
                string json = p.ReadMetaJson(0);
                Assert.True(json.Contains("\"wait_threshold_ms\":1000"), "native JSON: " + json);
                Assert.Equal(json, SlotMeta.FromJson(json).ToJson(), "C# JSON of the native JSON");
                Assert.True(!m.HasPeerReads && !json.Contains("unread_peer"), "peers not watched: absent");
            }
            using (var p = new ProgressProbe(Path.Combine(root, "segments", "devices-rpc-split-unread.hps")))
            {
                SlotMeta m = p.ReadMeta(0);
                Assert.True(m.HasPeerReads, "peers watched");
                Assert.Equal("RPC1 127.0.0.1:50053", m.UnreadPeer, "the peer that reads nothing");
                Assert.True(m.UnreadPeerMs >= 5000, "for 5 s or more: " + m.UnreadPeerMs);
                Assert.Equal((ulong?)4000, m.UnreadPeerThresholdMs, "two steps of 2 s");
                string json = p.ReadMetaJson(0);
                Assert.True(json.Contains("\"unread_peer\":\"RPC1 127.0.0.1:50053\""), "native JSON: " + json);
                Assert.Equal(json, SlotMeta.FromJson(json).ToJson(), "C# JSON of the native JSON");
                SlotMeta parsed = SlotMeta.FromJson(json);
                Assert.True(parsed.HasPeerReads && parsed.UnreadPeerThresholdMs == 4000, "parsed back");
                SlotMeta idle = p.ReadMeta(1);
                Assert.True(idle.HasPeerReads && idle.UnreadPeer == null && idle.UnreadPeerMs == null, "slot 1: none");
                Assert.True(p.ReadMetaJson(1).Contains("\"unread_peer\":null"), "null, not absent");
            }
        }

        static void Statistics()
        {
            string root = Bins.Require("HYDRA_CORPUS_DIR");
            Func<string, string> Seg = id => Path.Combine(root, "segments", id + ".hps");
            using (var p = new ProgressProbe(Seg("stats-served")))
            {
                EngineStats all = p.ReadStats();
                Assert.True(all.Published && all.SlotsSummed == 3 && all.SlotsLeftOut == 0, "three slots summed");
                // Three requests served (2 + 3 + 4 tokens), one failed with a compute error.
                Assert.Equal((long?)4, all.TasksBegun, "tasks begun");
                Assert.Equal((long?)9, all.TokensGenerated, "tokens generated");
                Assert.Equal((ulong)3, all.TasksByCause["length"], "ended by length");
                Assert.Equal((ulong)1, all.ErrorsByCode["compute"], "a compute error");
                Assert.True(!all.TasksByCause.ContainsKey("eos"), "nonzero causes only");
                Assert.Equal((ulong)9, all.Steps["decode"], "decode steps");
                Assert.True(Math.Abs(all.BusySeconds["decode"] - 0.090) < 1e-9, "busy decoding " + all.BusySeconds["decode"]);
                Assert.Equal(12, all.Histograms.Count, "every histogram");
                Histogram itl = all.Histograms["inter_token_latency"];
                Assert.True(!itl.IsRatio && itl.Count == 9 && Math.Abs(itl.Sum - 0.090) < 1e-12, "ITL " + itl);
                Assert.Equal(54, itl.Buckets.Count, "time buckets");
                Assert.True(double.IsPositiveInfinity(itl.UpperBounds[53]) && itl.UpperBounds[0] == 0.000128, "bounds");
                int k = Enumerable.Range(0, 54).First(i => itl.Buckets[i] > 0);
                Assert.True(itl.Buckets[k] == 9 && Math.Abs(itl.UpperBounds[k] - 0.012288) < 1e-12, "10 ms in (8.192, 12.288] ms");
                Histogram ratio = all.Histograms["ratio_prefill"];
                Assert.True(ratio.IsRatio && ratio.Count == 3 && Math.Abs(ratio.Mean.Value - 2.0) < 1e-9, "prefill took twice its prediction: " + ratio);
                Assert.Equal(50, ratio.UpperBounds.Count, "ratio buckets");
                Assert.True(Math.Abs(all.Histograms["time_to_first_token"].Mean.Value - 0.045) < 1e-9, "TTFT 45 ms");

                EngineStats one = p.ReadStats(2);
                Assert.True(one.SlotsSummed == 1 && one.TokensGenerated == 4, "slot 2 alone");
                Assert.Throws<SlotOutOfRangeException>(() => p.ReadStats(3), "slot 3");
                SlotHistory h = p.ReadHistory(1);
                Assert.True(h.Published && h.Torn == 0, "slot 1's ring");
                Assert.Equal(5, h.Steps.Count, "a prefill, 3 decode steps, the failed prefill");
                Assert.Equal("prefill", h.Steps[0].Kind, "oldest first");
                Assert.Equal((ulong?)20000000, h.Steps[0].PredictedNs, "its prediction");
                Assert.True(h.Steps[1].Kind == "decode" && h.Steps[1].Result == "advanced" && h.Steps[1].DurationNs == 10000000, "a decode step");
                Assert.True(h.Steps.Select(s => s.Ordinal).SequenceEqual(new ulong[] { 1, 2, 3, 4, 5 }), "ordinals");
            }
            using (var p = new ProgressProbe(Seg("stats-v1.2")))
            {
                EngineStats none = p.ReadStats();
                Assert.True(!none.Published && none.TasksBegun == null && none.TasksByCause == null && none.Histograms.Count == 0, "absent, not zero");
                SlotHistory h = p.ReadHistory(0);
                Assert.True(!h.Published && h.Steps.Count == 0, "no flight recorder");
            }
            using (var p = new ProgressProbe(Seg("stats-buckets-backwards")))
            {
                EngineStats s = p.ReadStats();
                Assert.True(s.Published && s.SlotsSummed == 2 && s.SlotsLeftOut == 1, "the faulty slot is left out");
                Assert.Equal((long?)6, s.TokensGenerated, "slots 0 and 2: 2 + 4 tokens");
            }
            using (var p = new ProgressProbe(Seg("stats-rings-hostile")))
            {
                Assert.Equal(3, p.ReadHistory(0).Steps.Count, "a lying head is only a hint");
                Assert.Throws<HydraProbeException>(() => p.ReadHistory(1), "a ring of capacity 2^64-1");
                SlotHistory h = p.ReadHistory(2);
                Assert.True(h.Steps.Count < 5 && h.Steps.Count + h.Torn >= 4, "an entry of all ones is never shown");
            }
        }

        static void HostileCorpus()
        {
            string root = Bins.Require("HYDRA_CORPUS_DIR");
            string segments = Path.Combine(root, "segments");
            int refused = 0, readable = 0;
            foreach (string line in File.ReadAllLines(Path.Combine(root, "manifest.tsv")))
            {
                string[] f = line.Split('\t');
                string id = f[0], expect = f[1], what = f[3];
                string path = Path.Combine(segments, id + ".hps");
                if (expect == "refused")
                {
                    var allowed = f[2].Split(',').Select(int.Parse).ToList();
                    foreach (Func<ProgressProbe> open in new Func<ProgressProbe>[] { () => new ProgressProbe(path), () => new ProgressProbe(id, segments) })
                    {
                        HydraProbeException e = null;
                        try
                        {
                            open().Dispose();
                        }
                        catch (HydraProbeException x)
                        {
                            e = x;
                        }
                        Assert.True(e != null, $"{id} ({what}) was opened");
                        Assert.True(allowed.Contains(e.Code), $"{id} ({what}): code {e.Code} {e.CodeName} not in {f[2]}: {e.Message}");
                        bool typed = (e.Code == HydraProbeAbi.ENotFound && e is EngineNotFoundException) ||
                                     (e is SegmentInvalidException && (e.Code == HydraProbeAbi.ENotASegment ||
                                      e.Code == HydraProbeAbi.EUnsupportedVersion || e.Code == HydraProbeAbi.ERefused));
                        Assert.True(typed, $"{id}: {e.GetType().Name} for {e.CodeName}");
                    }
                    refused++;
                }
                else
                {
                    using (var p = new ProgressProbe(path))
                    {
                        Assert.True(p.SlotCount > 0, $"{id}: slots");
                        for (int s = 0; s < p.SlotCount; s++)
                        {
                            var snap = p.ReadSlot(s);
                            Assert.Equal(s, snap.Slot, $"{id}: slot index");
                            Assert.True(!snap.Progress.HasValue || (snap.Progress >= 0 && snap.Progress <= 1), $"{id}: progress {snap.Progress}");
                            Assert.True(!snap.RatePerS.HasValue || !double.IsNaN(snap.RatePerS.Value), $"{id}: rate");
                            var meta = p.ReadMeta(s);
                            Assert.Equal(s, meta.SlotId, $"{id}: meta slot");
                            string json = p.ReadMetaJson(s);
                            Assert.Equal(json, SlotMeta.FromJson(json).ToJson(), $"{id} slot {s}: C# JSON of the native JSON");
                            MetaBytes.CheckAligned(p, s, $"{id} slot {s}");
                        }
                        Assert.Throws<SlotOutOfRangeException>(() => p.ReadSlot(p.SlotCount), $"{id}: slot past the end");
                        DeviceTable table = p.ReadDevices();
                        for (int d = 0; d < table.Devices.Count; d++)
                            Assert.Equal((ulong)d + 1, table.Devices[d].Id, $"{id}: device ids");
                        for (int s = 0; s < p.SlotCount; s++)
                        {
                            DeviceWait w = p.ReadWait(s);
                            Assert.True(!w.Waiting || w.WaitAgeNs >= 0, $"{id}: wait age");
                        }
                    }
                    readable++;
                }
            }
            Assert.True(refused >= 50 && readable >= 3, $"corpus too small: {refused} refused, {readable} readable");
            Console.WriteLine($"     corpus: {refused} refused with their typed exception, {readable} read");
        }
    }
}
