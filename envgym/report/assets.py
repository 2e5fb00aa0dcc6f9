"""The viewer's page, style and script, inlined into index.html (no CDN, no network)."""

from __future__ import annotations

CSS = """
:root { --ok: #1a7f37; --bad: #cf222e; --err: #9a6700; --mute: #57606a; --line: #d0d7de; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; padding: 16px 24px; color: #1f2328; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 20px 0 8px; }
.meta { color: var(--mute); font-size: 12px; word-break: break-all; }
table { border-collapse: collapse; margin: 4px 0; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.bar { display: inline-block; height: 8px; background: var(--ok); vertical-align: middle; }
.filters { display: flex; gap: 12px; align-items: center; margin: 8px 0; flex-wrap: wrap; }
.badge { display: inline-block; padding: 0 6px; border-radius: 8px; color: #fff; font-size: 12px; }
.passed { background: var(--ok); } .failed { background: var(--bad); } .errored { background: var(--err); }
details.trajectory { border: 1px solid var(--line); border-radius: 6px; margin: 6px 0; padding: 4px 8px; }
details.trajectory > summary { cursor: pointer; }
.msg { border-left: 3px solid var(--line); margin: 6px 0; padding: 2px 8px; white-space: pre-wrap; word-break: break-word; }
.msg .head { font-size: 12px; color: var(--mute); }
.msg .role { font-weight: 600; text-transform: uppercase; }
code.callid { font-family: ui-monospace, monospace; text-transform: none; }
pre.prompt { white-space: pre-wrap; word-break: break-word; background: #f6f8fa; border: 1px solid var(--line); padding: 6px; font-size: 12px; max-height: 480px; overflow: auto; }
details.view > summary { cursor: pointer; font-size: 12px; color: var(--mute); }
.tool-name { font-family: ui-monospace, monospace; font-weight: 600; }
.role-user { border-color: #0969da; } .role-assistant { border-color: #8250df; }
.role-tool { border-color: #bf8700; } .role-system { border-color: #6e7781; }
.reasoning { color: #6639ba; font-style: italic; background: #fbf8ff; padding: 2px 4px; }
.dropped { outline: 1px dashed var(--bad); }
.dropnote { color: var(--bad); font-size: 12px; }
.call { font-family: ui-monospace, monospace; font-size: 12px; background: #f6f8fa; padding: 2px 4px; margin: 2px 0; }
.errormsg { color: var(--err); font-weight: 600; white-space: pre-wrap; }
.small { font-size: 12px; color: var(--mute); }
"""

JS = r"""
(function () {
  "use strict";
  const R = window.ENVGYM_REPORT;
  const $ = (sel) => document.querySelector(sel);
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function fmt(x, d) { return (x === null || x === undefined || Number.isNaN(x)) ? "–" : Number(x).toFixed(d === undefined ? 3 : d); }
  function outcome(ep) { return ep.error ? "errored" : (ep.passed ? "passed" : "failed"); }
  function row(cells, head) {
    const tr = el("tr");
    cells.forEach((c) => { const td = el(head ? "th" : "td", typeof c === "number" ? "num" : "", typeof c === "number" ? fmt(c) : c); tr.appendChild(td); });
    return tr;
  }

  function header() {
    const m = R.summary.meta || {};
    $("#title").textContent = "envgym eval · " + (m.bundle || "") + " · " + (m.model || "");
    $("#meta").textContent = "key " + (m.key || "") + " · bundle " + (m.bundle_hash || "") + " · model " + (m.model_hash || "") + " · n = " + (m.samples || "") + " samples per task · generated " + R.generated;
  }

  function summaryTable() {
    const s = R.summary, t = $("#summary");
    t.appendChild(row(["metric", "value", "95% CI", "interval"], true));
    const how = (iv) => iv.method === "bootstrap" ? "bootstrap over tasks" : (iv.n_eff === null || iv.n_eff === undefined ? "" : "Wilson, clustered by task: n_eff " + Number(iv.n_eff.toPrecision(4)));
    const add = (name, iv) => t.appendChild(row([name, fmt(iv.value), "[" + fmt(iv.low) + ", " + fmt(iv.high) + "]", how(iv)]));
    Object.entries(s.pass_at_k).forEach(([k, iv]) => add("pass@" + k, iv));
    Object.entries(s.pass_hat_k).forEach(([k, iv]) => add("pass^" + k, iv));
    add("mean reward", s.mean_reward);
    t.appendChild(row(["tokens / episode", fmt(s.tokens_per_episode, 1), "", ""]));
    t.appendChild(row(["turns / episode", fmt(s.turns_per_episode, 2), "", ""]));
    t.appendChild(row(["tool calls / episode", fmt(s.tool_calls_per_episode, 2), "", ""]));
    t.appendChild(row(["episodes", String(s.episodes), "", ""]));
    const errs = Object.entries(s.errors_by_kind).map(([k, v]) => k + ": " + v).join(", ");
    t.appendChild(row(["errored", String(s.errored) + (errs ? " (" + errs + ")" : ""), "", ""]));
    const cuts = Object.entries(s.truncations || {}).map(([k, v]) => k + ": " + v).join(", ");
    if (cuts) t.appendChild(row(["truncated", cuts, "", ""]));
    const c = (s.meta || {}).config || {};
    t.appendChild(row(["context", (c.context || "") + (c.context_window ? " + " + (c.overflow || "no overflow strategy") + ", window " + c.context_window + " tokens" : ", no context window known"), "", ""]));
  }

  function toolList() {
    const box = $("#tools");
    if (!R.tools) { box.appendChild(el("div", "small", "The tool list was not recorded for this report.")); return; }
    const v = R.tools_view || {};
    const how = {native: "passed natively to the model's chat template with every prompt",
      prompt: "written into the system prompt as text with every prompt (not passed natively)",
      "native-unverified": "passed natively with every prompt; whether the server's chat template showed them to the model was not verified"}[v.view];
    box.appendChild(el("div", "small", R.tools.length + " tools, " + (how || "given with every prompt (how they were shown was not recorded)") + (v.reason ? " (" + v.reason + ")" : "") + ":"));
    R.tools.forEach((t) => {
      const f = t.function || t;
      const d = el("details", "tool");
      const s = el("summary"); s.appendChild(el("span", "tool-name", f.name)); s.appendChild(document.createTextNode(" — " + (f.description || "")));
      d.appendChild(s);
      d.appendChild(el("pre", "prompt", JSON.stringify(f.parameters || {}, null, 2)));
      box.appendChild(d);
    });
  }

  function modelView(ep, body) {
    if (ep.prompt_text === null || ep.prompt_text === undefined) {
      body.appendChild(el("div", "small", R.decoded ? "No token ids from this backend: its server rendered the prompt from the messages and tools." : "The exact prompt text needs the model's tokenizer (token-level backends only)."));
      return;
    }
    const first = el("details", "view"); first.appendChild(el("summary", "", "prompt of the first turn, exactly as the model read it (decoded from its token ids)"));
    first.appendChild(el("pre", "prompt prompt-text", ep.prompt_text)); body.appendChild(first);
    (ep.model_view || []).forEach((text, i) => {
      const d = el("details", "view"); d.appendChild(el("summary", "", "segment " + (i + 1) + " of " + ep.model_view.length + ": the whole context as the model read and wrote it"));
      d.appendChild(el("pre", "prompt", text)); body.appendChild(d);
    });
  }

  function taskTable() {
    const t = $("#tasks"), ks = Object.keys(R.summary.pass_at_k);
    t.appendChild(row(["task", "passed / n", "pass rate (Wilson 95%)", ...ks.map((k) => "pass@" + k), "errors"], true));
    R.summary.per_task.forEach((task) => {
      const tr = el("tr", "task-row");
      tr.dataset.task = task.task_id;
      const name = el("td"); const a = el("a", "", task.task_id); a.href = "#task=" + encodeURIComponent(task.task_id);
      name.appendChild(a); tr.appendChild(name);
      tr.appendChild(el("td", "num", task.c + " / " + task.n));
      const rate = el("td"); const bar = el("span", "bar"); bar.style.width = (task.n ? 80 * task.c / task.n : 0) + "px";
      rate.appendChild(bar); rate.appendChild(document.createTextNode(" " + (task.n ? fmt(task.c / task.n, 2) : "–") + " [" + fmt(task.pass_rate_ci[0], 2) + ", " + fmt(task.pass_rate_ci[1], 2) + "]"));
      tr.appendChild(rate);
      ks.forEach((k) => tr.appendChild(el("td", "num", fmt(task.pass_at_k[k]))));
      tr.appendChild(el("td", "num", String(task.errors)));
      t.appendChild(tr);
    });
  }

  function options(select, values) {
    values.forEach((v) => { const o = el("option", "", v); o.value = v; select.appendChild(o); });
  }

  function renderMessages(ep, box) {
    const dropped = {};
    (ep.context_dropped || []).forEach((d) => { dropped[d.index] = d; });
    (ep.context_compactions || []).forEach((d) => { dropped[d.index] = Object.assign({ compacted: true }, d); });
    ep.messages.forEach((m, i) => {
      const div = el("div", "msg role-" + (m.role || "unknown"));
      div.dataset.index = i;
      // The call id sits outside the upper-cased role label: ids are case-sensitive.
      const head = el("div", "head"); head.appendChild(el("span", "role", m.role));
      if (m.name) head.appendChild(document.createTextNode(" · " + m.name));
      if (m.tool_call_id) { head.appendChild(document.createTextNode(" · ")); head.appendChild(el("code", "callid", m.tool_call_id)); }
      div.appendChild(head);
      const d = dropped[i];
      if (m.reasoning_content) {
        const r = el("div", "reasoning" + (d && d.what === "reasoning" ? " dropped" : ""), m.reasoning_content);
        div.appendChild(r);
      }
      if (d) {
        div.appendChild(el("div", "dropnote", (d.compacted ? "compacted: " : "context policy dropped ") + d.what + (d.turn !== undefined ? " (from turn " + d.turn + ")" : "") + ": " + d.reason));
      }
      if (m.content) div.appendChild(el("div", "content", typeof m.content === "string" ? m.content : JSON.stringify(m.content)));
      (m.tool_calls || []).forEach((c) => {
        const f = c.function || {};
        const call = el("div", "call", "→ " + f.name + "(" + (typeof f.arguments === "string" ? f.arguments : JSON.stringify(f.arguments)) + ")");
        if (c.id) { call.appendChild(document.createTextNode(" · ")); call.appendChild(el("code", "callid", c.id)); }
        div.appendChild(call);
      });
      box.appendChild(div);
    });
  }

  function trajectory(ep) {
    const d = el("details", "trajectory");
    const o = outcome(ep);
    d.dataset.task = ep.task_id; d.dataset.outcome = o; d.dataset.error = ep.error || "";
    const s = el("summary");
    s.appendChild(el("span", "badge " + o, o));
    s.appendChild(document.createTextNode(" " + ep.task_id + " #" + ep.sample + " · reward " + fmt(ep.reward, 2) + " · " + ep.turns + " turns · " + ep.tool_calls + " tool calls · " + ep.sampled_tokens + " tokens" + (ep.truncated_by ? " · truncated: " + ep.truncated_by : "")));
    d.appendChild(s);
    const body = el("div", "body");
    d.appendChild(body);
    let filled = false;
    const fill = () => {
      if (filled) return; filled = true;
      if (ep.error) body.appendChild(el("div", "errormsg", "error (" + ep.error + "): " + ep.error_message));
      const comps = Object.entries(ep.reward_components || {});
      if (comps.length) {
        const t = el("table", "components"); t.appendChild(row(["reward component", "value"], true));
        comps.forEach(([k, v]) => t.appendChild(row([k, v])));
        body.appendChild(t);
      }
      const nd = (ep.context_dropped || []).length, nc = (ep.context_compactions || []).length;
      body.appendChild(el("div", "small", "context: " + nd + " dropped by the policy, " + nc + " compacted · " + fmt(ep.duration_s, 1) + " s"));
      modelView(ep, body);
      renderMessages(ep, body);
    };
    d.addEventListener("toggle", () => { if (d.open) fill(); });
    d.fill = fill;
    return d;
  }

  function readHash() {
    const p = new URLSearchParams(location.hash.slice(1));
    return { task: p.get("task") || "", outcome: p.get("outcome") || "", error: p.get("error") || "", expand: p.get("expand") === "all" };
  }

  function apply() {
    const f = { task: $("#f-task").value, outcome: $("#f-outcome").value, error: $("#f-error").value };
    let shown = 0;
    document.querySelectorAll("details.trajectory").forEach((d) => {
      const ok = (!f.task || d.dataset.task === f.task) && (!f.outcome || d.dataset.outcome === f.outcome) && (!f.error || d.dataset.error === f.error);
      d.hidden = !ok; if (ok) shown += 1;
    });
    document.querySelectorAll("tr.task-row").forEach((tr) => { tr.classList.toggle("selected", tr.dataset.task === f.task); });
    $("#shown").textContent = "showing " + shown + " of " + R.episodes.length + " trajectories";
    const p = new URLSearchParams();
    Object.entries(f).forEach(([k, v]) => { if (v) p.set(k, v); });
    history.replaceState(null, "", "#" + p.toString());
  }

  function main() {
    header(); summaryTable(); toolList(); taskTable();
    const tasks = [...new Set(R.episodes.map((e) => e.task_id))].sort();
    const errors = [...new Set(R.episodes.map((e) => e.error).filter(Boolean))].sort();
    options($("#f-task"), tasks); options($("#f-error"), errors);
    const list = $("#trajectories");
    R.episodes.forEach((ep) => list.appendChild(trajectory(ep)));
    const h = readHash();
    $("#f-task").value = h.task; $("#f-outcome").value = h.outcome; $("#f-error").value = h.error;
    ["#f-task", "#f-outcome", "#f-error"].forEach((s) => $(s).addEventListener("change", apply));
    window.addEventListener("hashchange", () => { const x = readHash(); $("#f-task").value = x.task; $("#f-outcome").value = x.outcome; $("#f-error").value = x.error; apply(); });
    apply();
    if (h.expand) document.querySelectorAll("details.trajectory:not([hidden])").forEach((d) => { d.fill(); d.open = true; });
    document.body.dataset.ready = "1";
  }
  main();
})();
"""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>envgym eval report</title>
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'self' 'unsafe-inline' file:; style-src 'unsafe-inline'; img-src data:">
<style>{css}</style>
</head>
<body>
<h1 id="title">envgym eval</h1>
<div class="meta" id="meta"></div>
<h2>Summary</h2>
<table id="summary"></table>
<h2>Tools</h2>
<div id="tools"></div>
<h2>Tasks</h2>
<table id="tasks"></table>
<h2>Trajectories</h2>
<div class="filters">
  <label>task <select id="f-task"><option value="">all</option></select></label>
  <label>outcome <select id="f-outcome"><option value="">all</option><option value="passed">passed</option><option value="failed">failed</option><option value="errored">errored</option></select></label>
  <label>error kind <select id="f-error"><option value="">all</option></select></label>
  <span id="shown" class="small"></span>
</div>
<div id="trajectories"></div>
<noscript>The trajectory view needs JavaScript; the data is in report.json.</noscript>
<script src="data.js"></script>
<script>{js}</script>
</body>
</html>
"""
