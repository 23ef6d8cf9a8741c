// hydra-progress live page. Polls page/state about four times a second and updates the
// DOM in place (nodes are kept per engine and per slot, so focus and scroll survive an
// update). Every figure is set with textContent: nothing read from a segment is parsed
// as HTML.
"use strict";

const POLL_MS = 250;
const STALE_AFTER_MS = 2000;
const state = { lastOk: 0, failing: false, problemsOnly: false, data: null };

function el(tag, cls, parent) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (parent) parent.appendChild(e);
  return e;
}

function setText(e, text) {
  if (e.textContent !== text) e.textContent = text;
}

function secs(s) {
  if (s === null || s === undefined || !isFinite(s)) return "?";
  if (s < 1) return (s * 1000).toFixed(s < 0.01 ? 1 : 0) + " ms";
  if (s < 120) return s.toFixed(s < 10 ? 2 : 1) + " s";
  if (s < 7200) return (s / 60).toFixed(1) + " min";
  return (s / 3600).toFixed(1) + " h";
}

function ms(v) {
  return v === null || v === undefined ? "?" : secs(v / 1000);
}

function count(n) {
  return n === null || n === undefined ? "?" : Number(n).toLocaleString("en-US");
}

// One child per key, created on first sight and removed when its key goes away.
function keyed(parent, keys, create) {
  const have = new Map();
  for (const c of Array.from(parent.children)) have.set(c.dataset.key, c);
  const out = [];
  keys.forEach((k, i) => {
    let c = have.get(k);
    if (!c) { c = create(k); c.dataset.key = k; }
    have.delete(k);
    if (parent.children[i] !== c) parent.insertBefore(c, parent.children[i] || null);
    out.push(c);
  });
  for (const c of have.values()) c.remove();
  return out;
}

function engineNode(key) {
  const s = el("section", "engine");
  s.tabIndex = 0;
  const head = el("div", "engine-head", s);
  const h = el("h2", "", head);
  h.id = "engine-" + key.replace(/[^A-Za-z0-9_-]/g, "_");
  s.setAttribute("aria-labelledby", h.id);
  el("span", "badge", head);
  el("span", "facts", head);
  el("ul", "findings", s);
  el("div", "latency", s);
  el("div", "slots", s);
  return s;
}

function renderEngine(node, e) {
  const [head, findings, latency, slots] = node.children;
  const liveness = e.liveness || "unreadable";
  node.className = "engine " + liveness;
  node.dataset.liveness = liveness;
  setText(head.children[0], e.engine_id);
  const badge = head.children[1];
  badge.className = "badge " + liveness;
  setText(badge, liveness);
  const facts = e.error
    ? e.error.message
    : [e.model, (e.devices && e.devices.length ? e.devices.join(", ") : e.device),
       "pid " + e.pid, e.busy_slots + " of " + e.slots + " slots busy",
       "heartbeat " + ms(e.heartbeat_age_ms) + " ago"].join(" \u00b7 ");
  setText(head.children[2], facts);
  renderFindings(findings, e.findings || []);
  renderLatency(latency, e.latency || []);
  const list = (e.slot_states || []).filter(s => !state.problemsOnly || s.reason);
  keyed(slots, list.map(s => String(s.slot_id)), slotNode)
    .forEach((n, i) => renderSlot(n, list[i], e.flight_recorder ? null : e.engine_id));
}

function renderFindings(ul, findings) {
  const engineWide = findings.filter(f => f.slot === null || f.slot === undefined);
  keyed(ul, engineWide.map((f, i) => String(i)), () => el("li"))
    .forEach((li, i) => {
      li.className = engineWide[i].severity;
      setText(li, engineWide[i].message);
    });
}

function renderLatency(div, hists) {
  const names = { time_to_first_token: "TTFT", inter_token_latency: "ITL", queue_wait: "queue wait" };
  const shown = hists.filter(h => h.count > 0);
  keyed(div, shown.map(h => h.name), () => {
    const d = el("div");
    el("span", "", d);
    const chart = el("span", "chart", d);
    chart.setAttribute("aria-hidden", "true");
    for (let i = 0; i < 3; i++) el("span", "", chart);
    return d;
  }).forEach((d, i) => {
    const h = shown[i];
    setText(d.children[0], (names[h.name] || h.name) + ": p50 " + secs(h.p50) + ", p90 " +
      secs(h.p90) + ", p99 " + secs(h.p99) + " (" + count(h.count) + ")");
    const top = Math.max(h.p99 || 0, 1e-9);
    [h.p50, h.p90, h.p99].forEach((q, j) => {
      d.children[1].children[j].style.height = Math.max(8, 100 * (q || 0) / top) + "%";
    });
  });
}

function slotNode() {
  const a = el("article", "slot");
  a.tabIndex = 0;
  const head = el("div", "slot-head", a);
  el("strong", "", head);
  el("span", "badge", head);
  const bar = el("div", "progress", a);
  bar.setAttribute("role", "progressbar");
  bar.setAttribute("aria-valuemin", "0");
  bar.setAttribute("aria-valuemax", "100");
  el("div", "", bar);
  el("div", "line work", a);
  el("div", "line step", a);
  el("div", "line eta", a);
  el("div", "reason", a);
  const tl = el("div", "timeline", a);
  tl.setAttribute("aria-hidden", "true");
  return a;
}

function phaseText(s) {
  if (s.queued && s.operation === "idle") return "queued (" + s.pending + " waiting)";
  return s.operation + (s.task_id ? " \u00b7 task " + s.task_id : "");
}

function workText(s) {
  if (s.operation === "idle") return s.finish_reason ? "last task: " + s.finish_reason : "";
  const total = s.work_total ? count(s.work_total) : "?";
  return count(s.work_done) + " / " + total + " " + s.work_unit +
    (s.rate_per_s ? " \u00b7 " + s.rate_per_s.toFixed(s.rate_per_s < 10 ? 2 : 0) + " " + s.work_unit + "/s" : "");
}

function stepText(s) {
  const parts = [];
  if (s.step_age_ms !== null && s.step_age_ms !== undefined) {
    let t = "step of " + count(s.step_size) + " for " + ms(s.step_age_ms);
    if (s.step_expected_ms) t += " (predicted " + ms(s.step_expected_ms) + ")";
    parts.push(t);
  }
  if (s.substep_total) parts.push("layer " + s.substep_done + " of " + s.substep_total);
  if (s.wait_device) parts.push("waiting on " + s.wait_device + " for " + ms(s.wait_ms));
  if (s.unread_peer) parts.push(s.unread_peer + " has read nothing for " + ms(s.unread_peer_ms));
  return parts.join(" \u00b7 ");
}

function etaText(s) {
  if (s.operation === "idle" || s.eta_s === null || s.eta_s === undefined) return "";
  return "ETA " + secs(s.eta_s) + (s.eta_source ? " (" + (s.eta_source === "model" ? "cost model" : "observed rate") + ")" : "");
}

// Steps seen by this page, for a writer without a flight recorder: each change of a
// slot's work counter closes one bar, as long as the time since the last change.
const sampled = new Map();
const SAMPLED_STEPS = 32;

function sampledSteps(engineId, s) {
  const key = engineId + "/" + s.slot_id;
  const now = Date.now();
  let h = sampled.get(key);
  if (!h) { h = { task: s.task_id, done: s.work_done, at: now, steps: [] }; sampled.set(key, h); }
  if (s.task_id !== h.task || s.work_done !== h.done) {
    if (s.task_id === h.task && s.operation !== "idle") {
      h.steps.push({ kind: s.operation, result: "advanced", duration_s: (now - h.at) / 1000,
        predicted_s: null, layers: null, marked: s.classification === "stalled", sampled: true });
      if (h.steps.length > SAMPLED_STEPS) h.steps.shift();
    }
    h.task = s.task_id; h.done = s.work_done; h.at = now;
  }
  return h.steps;
}

function renderSlot(node, s, samplingEngine) {
  if (samplingEngine !== null) s = Object.assign({}, s, { steps: sampledSteps(samplingEngine, s) });
  const verdict = s.classification;
  node.className = "slot " + verdict;
  // For scripts and tests that read the DOM: the figures shown, as numbers.
  node.dataset.slot = String(s.slot_id);
  if (node.dataset.verdict !== verdict) {
    // When (the state's taken_unix_ms) this page first showed the verdict it shows.
    node.dataset.verdictTaken = String(state.data ? state.data.taken_unix_ms : 0);
  }
  node.dataset.verdict = verdict;
  node.dataset.operation = s.operation;
  node.dataset.done = String(s.work_done);
  node.dataset.layer = s.substep_total ? s.substep_done + "/" + s.substep_total : "";
  const [head, bar, work, step, eta, reason, timeline] = node.children;
  setText(head.children[0], "slot " + s.slot_id + " \u00b7 " + phaseText(s));
  head.children[1].className = "badge " + verdict;
  setText(head.children[1], verdict);
  const pct = Math.max(0, Math.min(100, 100 * (s.progress || 0)));
  bar.firstChild.style.width = pct.toFixed(1) + "%";
  bar.setAttribute("aria-valuenow", pct.toFixed(0));
  setText(work, workText(s));
  setText(step, stepText(s));
  setText(eta, etaText(s));
  setText(reason, s.reason || "");
  node.setAttribute("aria-label", "slot " + s.slot_id + ", " + verdict + ", " + phaseText(s) +
    (s.reason ? ", " + s.reason : ""));
  renderTimeline(timeline, s);
}

// One bar per finished step, its width its duration, then the step in flight; a step that
// ran past its stall bound, or did not advance, is marked.
function renderTimeline(div, s) {
  const steps = (s.steps || []).map(st => ({
    cls: st.kind + (st.marked ? " marked" : ""),
    d: st.duration_s,
    title: (st.sampled ? "seen by this page: " : "") + st.kind + " " + secs(st.duration_s) +
      (st.predicted_s ? " (predicted " + secs(st.predicted_s) + ")" : "") +
      (st.layers ? ", layers " + st.layers[0] + "/" + st.layers[1] : "") +
      (st.result !== "advanced" ? ", " + st.result : ""),
  }));
  if (s.step_age_ms !== null && s.step_age_ms !== undefined) {
    const stalled = s.classification === "stalled";
    steps.push({ cls: "inflight" + (stalled ? " marked" : ""), d: s.step_age_ms / 1000,
      title: "in flight for " + ms(s.step_age_ms) });
  }
  while (div.children.length > steps.length) div.lastChild.remove();
  while (div.children.length < steps.length) el("span", "", div);
  steps.forEach((st, i) => {
    const b = div.children[i];
    b.className = st.cls;
    b.style.flexGrow = String(Math.max(st.d, 1e-6));
    b.title = st.title;
  });
}

function render(data) {
  setText(document.getElementById("dir"), data.dir);
  const main = document.getElementById("engines");
  main.setAttribute("aria-busy", "false");
  if (data.error) {
    setStatus(data.error, true);
  }
  keyed(main, data.engines.map(e => e.engine_id), engineNode)
    .forEach((n, i) => renderEngine(n, data.engines[i]));
  if (!data.engines.length) {
    setStatus("no engines in " + data.dir, false);
  }
  document.body.dataset.engines = String(data.engines.length);
  document.body.dataset.taken = String(data.taken_unix_ms);
}

function setStatus(text, bad) {
  const s = document.getElementById("status");
  setText(s, text);
  s.className = bad ? "stale" : "";
}

async function poll() {
  try {
    const r = await fetch("page/state", { cache: "no-store" });
    if (!r.ok) throw new Error("HTTP " + r.status);
    const data = await r.json();
    state.data = data;
    state.lastOk = Date.now();
    document.getElementById("engines").classList.remove("stale");
    render(data);
    if (!data.error && data.engines.length) {
      const busy = data.engines.reduce((n, e) => n + (e.busy_slots || 0), 0);
      setStatus(data.engines.length + " engine(s), " + busy + " busy slot(s) \u00b7 updated " +
        new Date(data.taken_unix_ms).toLocaleTimeString(), false);
    }
  } catch (e) {
    if (Date.now() - state.lastOk > STALE_AFTER_MS) {
      document.getElementById("engines").classList.add("stale");
      setStatus("the exporter does not answer (" + e.message + "): figures below are from " +
        (state.lastOk ? new Date(state.lastOk).toLocaleTimeString() : "never"), true);
    }
  } finally {
    setTimeout(poll, POLL_MS);
  }
}

document.addEventListener("DOMContentLoaded", () => {
  const box = document.getElementById("problems-only");
  box.addEventListener("change", () => {
    state.problemsOnly = box.checked;
    if (state.data) render(state.data);
  });
  poll();
});
