// Harness.cs: a minimal test runner: named tests, assertions that throw, a summary line
// "N passed, N failed" and a non-zero exit code on any failure.

using System;
using System.Collections.Generic;
using System.Diagnostics;

namespace Hydra.Progress.Tests
{
    internal sealed class AssertionException : Exception
    {
        public AssertionException(string message) : base(message) { }
    }

    internal static class Assert
    {
        public static void True(bool condition, string message)
        {
            if (!condition)
                throw new AssertionException(message);
        }

        public static void Equal<T>(T expected, T actual, string what)
        {
            if (!EqualityComparer<T>.Default.Equals(expected, actual))
                throw new AssertionException($"{what}: expected <{expected}>, got <{actual}>");
        }

        /// <summary>Runs <paramref name="action"/> and returns the exception of type T it must throw.</summary>
        public static T Throws<T>(Action action, string what) where T : Exception
        {
            try
            {
                action();
            }
            catch (T e)
            {
                return e;
            }
            catch (Exception e)
            {
                throw new AssertionException($"{what}: expected {typeof(T).Name}, got {e.GetType().Name}: {e.Message}");
            }
            throw new AssertionException($"{what}: expected {typeof(T).Name}, nothing was thrown");
        }
    }

    internal sealed class Runner
    {
        int passed, failed;
        readonly List<string> failures = new List<string>();
        readonly string filter;

        public Runner(string filter) { this.filter = filter; }

        public void Run(string name, Action test)
        {
            if (filter != null && name.IndexOf(filter, StringComparison.Ordinal) < 0)
                return;
            var sw = Stopwatch.StartNew();
            try
            {
                test();
                passed++;
                Console.WriteLine($"ok   {name} ({sw.ElapsedMilliseconds} ms)");
            }
            catch (Exception e)
            {
                failed++;
                failures.Add(name);
                Console.WriteLine($"FAIL {name} ({sw.ElapsedMilliseconds} ms): {e}");
            }
        }

        public int Finish()
        {
            foreach (var f in failures)
                Console.WriteLine($"failed: {f}");
            Console.WriteLine($"{passed} passed, {failed} failed");
            return failed == 0 && passed > 0 ? 0 : 1;
        }
    }
}

namespace Hydra.Progress.Tests
{
    internal static class MetaBytes
    {
        /// <summary>
        /// Checks that ReadMeta's JSON is the native library's meta JSON byte for byte: reads
        /// (ReadMeta, native JSON, ReadMeta) until the two ReadMeta agree (nothing moved
        /// between them, not even a millisecond of an age), then the native JSON read between
        /// them must be the same text. Returns how many such moments were checked, up to
        /// <paramref name="want"/>, within <paramref name="tries"/> attempts.
        /// </summary>
        public static int Check(ProgressProbe p, int slot, int want, int tries, string what)
        {
            int done = 0;
            string a = null, b = null;
            for (int i = 0; i < tries && done < want; i++)
            {
                a = p.ReadMeta(slot).ToJson();
                string native = p.ReadMetaJson(slot);
                b = p.ReadMeta(slot).ToJson();
                if (a != b)
                    continue;
                Assert.Equal(native, a, $"{what}: ReadMeta's JSON vs the native meta JSON of the same moment");
                done++;
            }
            if (done < want)
                Console.WriteLine($"     {what}: {done} of {want} moments without change; the last two reads:\n     {a}\n     {b}");
            return done;
        }

        /// <summary>
        /// ReadMeta, then the native meta JSON: after taking the native read's four clock
        /// ages (each at least ReadMeta's, null in both or neither), every byte of
        /// ReadMeta's JSON must be the native JSON's. For segments where only the clock moves.
        /// </summary>
        public static void CheckAligned(ProgressProbe p, int slot, string what)
        {
            SlotMeta a = p.ReadMeta(slot);
            string native = p.ReadMetaJson(slot);
            SlotMeta n = SlotMeta.FromJson(native);
            Assert.True(a.ElapsedMs <= n.ElapsedMs, $"{what}: elapsed_ms went back");
            a.ElapsedMs = n.ElapsedMs;
            a.LastProgressAgeMs = Later(a.LastProgressAgeMs, n.LastProgressAgeMs, what + ": last_progress_age_ms");
            a.StepAgeMs = Later(a.StepAgeMs, n.StepAgeMs, what + ": step_age_ms");
            a.HeartbeatAgeMs = Later(a.HeartbeatAgeMs, n.HeartbeatAgeMs, what + ": heartbeat_age_ms");
            a.SubstepAgeMs = Later(a.SubstepAgeMs, n.SubstepAgeMs, what + ": substep_age_ms");
            // The device wait's age is a clock figure too (format v1.3): it was left out, and a
            // millisecond boundary between the two reads failed the comparison once.
            a.WaitMs = Later(a.WaitMs, n.WaitMs, what + ": wait_ms");
            a.UnreadPeerMs = Later(a.UnreadPeerMs, n.UnreadPeerMs, what + ": unread_peer_ms");
            if (a.EtaSource == "model")
            {
                // The writer's predicted end stays put, so a model ETA is a clock figure too: it
                // counts down between the two reads.
                Assert.True(a.EtaS.HasValue && n.EtaS.HasValue && n.EtaS <= a.EtaS, $"{what}: eta_s {a.EtaS} then {n.EtaS}");
                a.EtaS = n.EtaS;
            }
            Assert.Equal(native, a.ToJson(), $"{what}: ReadMeta's JSON vs the native meta JSON, ages aligned");
        }

        static ulong? Later(ulong? first, ulong? then, string what)
        {
            Assert.True(first.HasValue == then.HasValue && (!first.HasValue || first <= then), $"{what}: {first} then {then}");
            return then;
        }
    }
}
