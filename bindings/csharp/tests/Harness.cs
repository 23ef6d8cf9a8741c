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
