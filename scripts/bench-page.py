#!/usr/bin/env python3
"""CPU the exporter spends on its live page, with 1 and with 10 pages open.

    scripts/bench-page.py [ROUNDS] [SECONDS]      (defaults: 3 rounds of 10 s per side)

An engine (`hydra-engine demo` on the embedded model, 4 slots kept busy for the whole run)
writes its segment into a scratch directory, and one `hydra-exporter` (release) serves
that directory. A "page" is what an open browser tab costs the exporter: its poll of
`/page/state` every 250 ms (the page's script does exactly this; the document and its two
files load once). Each round measures, side by side, the exporter's CPU time (utime +
stime from /proc/PID/stat) over SECONDS with 0, 1 and 10 pages polling, in an order that
alternates between rounds, so that drift in machine load falls on every side alike.
Prints the CPU share of one core per side (median over rounds), the per-poll cost, and
the load average. Needs `cargo build --workspace --release` first.
"""

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASE = os.path.join(ROOT, "target", "release")
TICK = os.sysconf("SC_CLK_TCK")
POLL_S = 0.25


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def start_exporter(seg_dir):
    proc = subprocess.Popen(
        [os.path.join(RELEASE, "hydra-exporter"), "--listen", "127.0.0.1:0", "--dir", seg_dir],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline().strip()
    if not line.startswith("listening on "):
        sys.exit(f"bench-page: the exporter printed {line!r}")
    return proc, line[len("listening on "):]


def poller(url, stop, counts, i):
    while not stop.is_set():
        started = time.monotonic()
        with urllib.request.urlopen(url, timeout=5) as r:
            r.read()
        counts[i] += 1
        stop.wait(max(0.0, POLL_S - (time.monotonic() - started)))


def measure(pid, url, pages, seconds):
    stop = threading.Event()
    counts = [0] * pages
    threads = [threading.Thread(target=poller, args=(url, stop, counts, i), daemon=True)
               for i in range(pages)]
    before = cpu_seconds(pid)
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    return cpu_seconds(pid) - before, sum(counts)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 10.0
    with tempfile.TemporaryDirectory(prefix="hydra-bench-page.") as tmp:
        seg_dir = os.path.join(tmp, "segs")
        os.mkdir(seg_dir)
        demo = subprocess.Popen(
            [os.path.join(RELEASE, "hydra-engine"), "demo", "--rounds", "1000",
             "--progress-dir", seg_dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        exporter, base = start_exporter(seg_dir)
        try:
            url = base + "/page/state"
            deadline = time.monotonic() + 60
            while True:
                state = json.load(urllib.request.urlopen(url, timeout=5))
                if any(e.get("busy_slots") for e in state["engines"]):
                    break
                if time.monotonic() > deadline:
                    sys.exit("bench-page: the demo engine never got busy")
                time.sleep(0.2)
            size = len(urllib.request.urlopen(url, timeout=5).read())
            results = {0: [], 1: [], 10: []}
            polls = {0: [], 1: [], 10: []}
            for r in range(rounds):
                order = [0, 1, 10] if r % 2 == 0 else [10, 1, 0]
                for pages in order:
                    cpu, n = measure(exporter.pid, url, pages, seconds)
                    results[pages].append(cpu / seconds)
                    polls[pages].append((cpu, n))
            if demo.poll() is not None:
                sys.exit("bench-page: the demo engine ended during the run")
        finally:
            exporter.terminate()
            demo.terminate()
            demo.wait()
    med = {k: sorted(v)[len(v) // 2] for k, v in results.items()}
    print(f"bench-page: {rounds} rounds of {seconds:.0f} s per side; /page/state of the demo "
          f"engine (4 slots) is {size} bytes")
    for pages in (0, 1, 10):
        print(f"  {pages:2d} page(s): exporter CPU {100 * med[pages]:.2f}% of one core "
              f"(rounds: {', '.join(f'{100 * x:.2f}' for x in results[pages])})")
    for pages in (1, 10):
        cost = [(cpu - med[0] * seconds) / n * 1000 for cpu, n in polls[pages] if n]
        cost.sort()
        print(f"  per poll with {pages} page(s): {cost[len(cost) // 2]:.2f} ms of CPU (median)")
    print(f"  ratio 10 pages / 1 page (over the idle exporter): "
          f"{(med[10] - med[0]) / max(med[1] - med[0], 1e-9):.1f}")
    print(f"  load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
