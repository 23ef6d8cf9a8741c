// EngineProcess.cs: a `hydra-engine serve --builtin` child on an ephemeral loopback port with
// a private progress directory, its HTTP API, and `hydra-probe meta`. Shared by the tests and
// the benchmark.

using System;
using System.Diagnostics;
using System.IO;
using System.Net;
using System.Text;
using System.Threading;

namespace Hydra.Progress.Tests
{
    /// <summary>Paths of the binaries, from the environment that scripts/test-csharp.sh sets.</summary>
    internal static class Bins
    {
        public static string Require(string variable)
        {
            string v = Environment.GetEnvironmentVariable(variable);
            if (string.IsNullOrEmpty(v) || !(File.Exists(v) || Directory.Exists(v)))
                throw new InvalidOperationException(
                    $"${variable} must name an existing path (scripts/test-csharp.sh sets it); got '{v}'");
            return v;
        }

        public static string Engine => Require("HYDRA_ENGINE_BIN");
        public static string Probe => Require("HYDRA_PROBE_BIN");

        /// <summary>A new private temporary directory.</summary>
        public static string TempDir(string prefix)
        {
            string d = Path.Combine(Path.GetTempPath(), prefix + Guid.NewGuid().ToString("N").Substring(0, 12));
            Directory.CreateDirectory(d);
            return d;
        }

        /// <summary>Runs a program to completion (bounded); returns its exit code, stdout and stderr.</summary>
        public static int Run(string program, string arguments, out string stdout, out string stderr,
            int timeoutMs = 60000, Action<ProcessStartInfo> configure = null)
        {
            var psi = new ProcessStartInfo(program, arguments)
            {
                UseShellExecute = false,
                RedirectStandardOutput = true,
                RedirectStandardError = true,
                RedirectStandardInput = true,
            };
            configure?.Invoke(psi);
            using (var p = Process.Start(psi))
            {
                p.StandardInput.Close();
                var err = p.StandardError.ReadToEndAsync();
                var output = p.StandardOutput.ReadToEndAsync();
                if (!p.WaitForExit(timeoutMs))
                {
                    try { p.Kill(); } catch (InvalidOperationException) { }
                    p.WaitForExit();
                    throw new TimeoutException($"{program} {arguments} did not finish in {timeoutMs} ms");
                }
                p.WaitForExit(); // flushes the redirected streams
                stdout = output.Result;
                stderr = err.Result;
                return p.ExitCode;
            }
        }
    }

    /// <summary>A running `hydra-engine serve --builtin`, killed (SIGKILL) and reaped on Dispose.</summary>
    internal sealed class EngineProcess : IDisposable
    {
        readonly Process process;

        public string Dir { get; }
        public string Id { get; }
        public string BaseUrl { get; }
        public string Segment => Path.Combine(Dir, Id + ".hps");
        public int Pid => process.Id;

        public EngineProcess(string dir, string id, string extraArgs)
        {
            Dir = dir;
            Id = id;
            var psi = new ProcessStartInfo(Bins.Engine,
                $"serve --builtin --listen 127.0.0.1:0 --engine-id {id} --threads 1 --progress-dir {dir} {extraArgs}")
            {
                UseShellExecute = false,
                RedirectStandardOutput = true,
                RedirectStandardInput = true,
            };
            psi.EnvironmentVariables["HYDRA_LOG"] = "warn";
            var listening = new ManualResetEventSlim();
            string address = null;
            process = new Process { StartInfo = psi };
            // Drains stdout for the child's whole life, so that it never blocks on the pipe.
            process.OutputDataReceived += (s, e) =>
            {
                const string prefix = "listening on ";
                if (e.Data != null && e.Data.StartsWith(prefix, StringComparison.Ordinal) && address == null)
                {
                    address = e.Data.Substring(prefix.Length).Trim();
                    listening.Set();
                }
            };
            process.Start();
            process.BeginOutputReadLine();
            if (!listening.Wait(TimeSpan.FromSeconds(60)))
            {
                Kill();
                throw new TimeoutException("hydra-engine did not report its address within 60 s");
            }
            BaseUrl = address;
        }

        /// <summary>SIGKILL (Mono's Process.Kill) and reap.</summary>
        public void Kill()
        {
            try
            {
                if (!process.HasExited)
                    process.Kill();
            }
            catch (InvalidOperationException) { }
            process.WaitForExit(30000);
        }

        public void Dispose()
        {
            Kill();
            process.Dispose();
        }

        /// <summary>POSTs JSON; returns the status code and the body.</summary>
        public int Post(string path, string json, out string body) => Http("POST", path, json, out body);

        public int Get(string path, out string body) => Http("GET", path, null, out body);

        int Http(string method, string path, string json, out string body)
        {
            var req = (HttpWebRequest)WebRequest.Create(BaseUrl + path);
            req.Method = method;
            req.Proxy = null;
            req.Timeout = 300000;
            req.ReadWriteTimeout = 300000;
            if (json != null)
            {
                byte[] bytes = Encoding.UTF8.GetBytes(json);
                req.ContentType = "application/json";
                req.ContentLength = bytes.Length;
                using (var s = req.GetRequestStream())
                    s.Write(bytes, 0, bytes.Length);
            }
            HttpWebResponse resp;
            try
            {
                resp = (HttpWebResponse)req.GetResponse();
            }
            catch (WebException e) when (e.Response != null)
            {
                resp = (HttpWebResponse)e.Response;
            }
            using (resp)
            using (var r = new StreamReader(resp.GetResponseStream(), Encoding.UTF8))
            {
                body = r.ReadToEnd();
                return (int)resp.StatusCode;
            }
        }

        /// <summary>Erases the slot and prefills <paramref name="prompt"/>; throws unless 200.</summary>
        public void Prefill(int slot, string prompt)
        {
            string body;
            int code = Post($"/slots/{slot}?action=erase", "", out body);
            if (code != 200)
                throw new InvalidOperationException($"erase: {code} {body}");
            code = Post($"/slots/{slot}/prefill", "{\"prompt\":\"" + prompt + "\"}", out body);
            if (code != 200)
                throw new InvalidOperationException($"prefill: {code} {body}");
        }

        /// <summary>A decode of <paramref name="n"/> tokens past any EOS, in a background thread.</summary>
        public Thread StartDecode(int slot, int n)
        {
            var t = new Thread(() =>
            {
                string body;
                try { Post($"/slots/{slot}/decode", $"{{\"n_predict\":{n},\"ignore_eos\":true}}", out body); }
                catch (WebException) { } // the engine may be killed mid-decode
                catch (IOException) { }
            }) { IsBackground = true };
            t.Start();
            return t;
        }

        /// <summary>A prefill of <paramref name="prompt"/> (after an erase), in a background thread.</summary>
        public Thread StartPrefill(int slot, string prompt)
        {
            string body;
            int code = Post($"/slots/{slot}?action=erase", "", out body);
            if (code != 200)
                throw new InvalidOperationException($"erase: {code} {body}");
            var t = new Thread(() =>
            {
                string b;
                try { Post($"/slots/{slot}/prefill", "{\"prompt\":\"" + prompt + "\"}", out b); }
                catch (WebException) { }
                catch (IOException) { }
            }) { IsBackground = true };
            t.Start();
            return t;
        }

        /// <summary>`hydra-probe --dir DIR meta ID SLOT`: its one line of JSON.</summary>
        public string ProbeMeta(int slot)
        {
            string stdout, stderr;
            int rc = Bins.Run(Bins.Probe, $"--dir {Dir} meta {Id} {slot}", out stdout, out stderr);
            if (rc != 0)
                throw new InvalidOperationException($"hydra-probe meta failed ({rc}): {stderr}");
            return stdout.TrimEnd('\n');
        }
    }
}
