// Bench.cs: per-call cost of ProgressProbe.ReadMeta and ReadSlot in C#, next to the Rust
// probe library's own per-call cost through its C ABI (native_bench, no managed runtime:
// hydra_probe_read_slot, hydra_probe_read_meta that ReadMeta calls, hydra_probe_meta_json),
// on the same live segment in the same run, rounds interleaved. Run by bench/run.sh.
//
//   mono Hydra.Progress.Bench.exe NATIVE_BENCH [CALLS_PER_ROUND] [ROUNDS]

using System;
using System.Collections.Generic;
using System.Diagnostics;
using System.Globalization;
using System.IO;
using System.Linq;
using Hydra.Progress.Tests;

namespace Hydra.Progress.Bench
{
    internal static class Program
    {
        static int Main(string[] args)
        {
            if (args.Length < 1)
            {
                Console.Error.WriteLine("usage: Hydra.Progress.Bench.exe NATIVE_BENCH [CALLS_PER_ROUND] [ROUNDS]");
                return 2;
            }
            string native = args[0];
            int calls = args.Length > 1 ? int.Parse(args[1]) : 20000;
            int rounds = args.Length > 2 ? int.Parse(args[2]) : 7;
            string dir = Bins.TempDir("hydra-cs-bench.");
            try
            {
                using (var engine = new EngineProcess(dir, "cs-bench", "--slots 4 --ctx 2048"))
                using (var probe = new ProgressProbe(engine.Id, dir))
                {
                    // Slot 0 holds a finished task (every field populated); the engine stays live.
                    engine.Prefill(0, "Benchmark: ");
                    var t = engine.StartDecode(0, 64);
                    if (!t.Join(TimeSpan.FromSeconds(300)))
                        throw new TimeoutException("decode");
                    Console.WriteLine("slot 0: " + probe.ReadMeta(0).ToJson());
                    Console.WriteLine($"calls per round: {calls}, rounds: {rounds} (C# and native interleaved); " +
                                      $"runtime: Mono {Type.GetType("Mono.Runtime") != null}, {Environment.ProcessorCount} CPUs");

                    var results = new Dictionary<string, List<double>>();
                    Action<string, double> add = (k, v) =>
                    {
                        if (!results.ContainsKey(k)) results[k] = new List<double>();
                        results[k].Add(v);
                    };
                    // Warm-up: JIT, the per-thread buffer, the string cache.
                    Time(() => probe.ReadSlot(0), calls / 10);
                    Time(() => probe.ReadMeta(0), calls / 10);
                    Time(() => null, calls / 10);
                    for (int r = 0; r < rounds; r++)
                    {
                        add("timer (empty call)", Time(() => null, calls));
                        add("C# ReadSlot", Time(() => probe.ReadSlot(0), calls));
                        add("C# ReadMeta", Time(() => probe.ReadMeta(0), calls));
                        foreach (var kv in Native(native, dir, engine.Id, calls))
                            add(kv.Key, kv.Value);
                    }
                    Console.WriteLine("median per call, ns (median over rounds of each round's median; min..max of the rounds):");
                    foreach (var kv in results)
                    {
                        var v = kv.Value.OrderBy(x => x).ToList();
                        Console.WriteLine($"  {kv.Key,-34} {Median(v),8:F0}   ({v.First():F0}..{v.Last():F0})");
                    }
                    double meta = Median(results["C# ReadMeta"]), slot = Median(results["C# ReadSlot"]);
                    double nMeta = Median(results[NativeName("read_meta")]);
                    double nSlot = Median(results[NativeName("read_slot")]);
                    double nJson = Median(results[NativeName("meta_json")]);
                    Console.WriteLine($"ratio C#/Rust: ReadSlot {slot / nSlot:F2} (vs read_slot), " +
                                      $"ReadMeta {meta / nMeta:F2} (vs read_meta), {meta / nJson:F2} (vs meta_json)");
                    Console.WriteLine($"ReadMeta median {meta / 1000:F2} us: target < 5 us {(meta < 5000 ? "met" : "NOT met")}");
                }
            }
            finally
            {
                Directory.Delete(dir, true);
            }
            return 0;
        }

        static double Median(List<double> v)
        {
            var s = v.OrderBy(x => x).ToList();
            return s.Count % 2 == 1 ? s[s.Count / 2] : (s[s.Count / 2 - 1] + s[s.Count / 2]) / 2;
        }

        /// <summary>The median of <paramref name="n"/> individually timed calls, in ns.</summary>
        static double Time(Func<object> f, int n)
        {
            var t = new long[n];
            object keep = null;
            for (int i = 0; i < n; i++)
            {
                long t0 = Stopwatch.GetTimestamp();
                keep = f();
                t[i] = Stopwatch.GetTimestamp() - t0;
            }
            GC.KeepAlive(keep);
            Array.Sort(t);
            return t[n / 2] * (1e9 / Stopwatch.Frequency);
        }

        static string NativeName(string call) => $"Rust {call} (C ABI, no C#)";

        /// <summary>One round of native_bench: its medians, ns.</summary>
        static Dictionary<string, double> Native(string exe, string dir, string id, int calls)
        {
            string o, e;
            int rc = Bins.Run(exe, $"{dir} {id} 0 {calls}", out o, out e, 120000);
            if (rc != 0)
                throw new InvalidOperationException($"native_bench failed ({rc}): {e}");
            var r = new Dictionary<string, double>();
            foreach (string line in o.Split('\n'))
            {
                string[] w = line.Split(' ');
                if (w.Length >= 4 && w[0] == "native")
                    r[NativeName(w[1])] = double.Parse(w[3], CultureInfo.InvariantCulture);
            }
            if (r.Count != 3)
                throw new InvalidOperationException("native_bench printed: " + o);
            return r;
        }
    }
}
