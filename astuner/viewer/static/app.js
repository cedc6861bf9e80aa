// astuner view: run curves -> a step's episodes -> one episode token by token. Plain DOM, no build step.
// Everything the run wrote (prompts, answers, tool results) goes into the page as text, never as markup.
"use strict";

const app = document.getElementById("app");
let refreshTimer = null;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  return node;
}

async function getJSON(url) {
  const response = await fetch(url, { cache: "no-store" });
  if (!response.ok) throw new Error(`${url}: ${response.status}`);
  return response.json();
}

function fmt(value, digits = 3) {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : value.toFixed(digits);
  if (typeof value === "boolean") return value ? "yes" : "";
  if (Array.isArray(value)) return value.join(", ");
  return String(value);
}

function go(params) {
  const query = new URLSearchParams();
  if (params.step !== undefined) query.set("step", params.step);
  if (params.episode) query.set("episode", params.episode);
  const url = query.toString() ? `/?${query}` : "/";
  history.pushState(null, "", url);
  route();
}

function link(text, params) {
  const query = new URLSearchParams();
  if (params.step !== undefined) query.set("step", params.step);
  if (params.episode) query.set("episode", params.episode);
  return el("a", { href: `/?${query}`, onclick: (e) => { e.preventDefault(); go(params); } }, text);
}

function crumbs(parts) {
  const box = document.getElementById("crumbs");
  box.replaceChildren(...parts.flatMap((p, i) => (i ? [" / ", p] : [p])));
}

// ---------- run page ----------
// a rate, a success or a reward that stays in [0, 1] is drawn on 0..1, so 0.81-0.98 does not fill the chart
const UNIT_SCALE = /reward|success|_rate|pass@/;

function curve(name, rows, trajectorySteps) {
  const points = rows.filter((r) => typeof r[name] === "number").map((r) => [r.step, r[name]]);
  const box = el("div", { class: "curve", "data-curve": name }, el("h3", { text: name }));
  if (!points.length) return box;
  const W = 320, H = 130, L = 40, R = 8, T = 8, B = 18;
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs);
  let y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (UNIT_SCALE.test(name) && y0 >= 0 && y1 <= 1) { y0 = 0; y1 = 1; }
  else if (y1 === y0) { y0 -= 0.5; y1 += 0.5; }
  const sx = (x) => L + (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5) * (W - L - R);
  const sy = (y) => H - B - (y - y0) / (y1 - y0) * (H - B - T);
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart" });
  const label = (x, y, text, anchor, cls) => {
    const t = svg("text", { x, y, "font-size": 9, fill: "#6a737d", "text-anchor": anchor, class: cls });
    t.textContent = text;
    chart.append(t);
  };
  for (const v of [y0, (y0 + y1) / 2, y1]) {  // the y axis: three ticks with grid lines
    chart.append(svg("line", { x1: L, x2: W - R, y1: sy(v), y2: sy(v), class: "grid" }));
    label(L - 4, sy(v) + 3, v.toFixed(Math.abs(y1 - y0) < 0.1 ? 4 : 2), "end", "ytick");
  }
  label(L, H - 4, `step ${x0}`, "start", "xtick");
  if (x1 > x0) label(W - R, H - 4, `step ${x1}`, "end", "xtick");
  chart.append(svg("polyline", { points: points.map((p) => `${sx(p[0])},${sy(p[1])}`).join(" ") }));
  for (const [x, y] of points) {
    const has = trajectorySteps.has(x);
    const dot = svg("circle", { cx: sx(x), cy: sy(y), r: has ? 3 : 2, class: has ? "traj" : "plain", "data-step": x });
    const title = svg("title", {});
    title.textContent = `step ${x}: ${fmt(y, 4)}`;
    dot.append(title);
    if (has) dot.addEventListener("click", () => go({ step: x }));
    chart.append(dot);
  }
  box.append(chart);
  return box;
}

async function runPage() {
  const run = await getJSON("/api/run");
  document.getElementById("run-name").textContent = run.name;
  document.getElementById("live").hidden = !run.live;
  crumbs([]);
  const steps = new Set(run.steps);
  const last = run.metrics.length ? run.metrics[run.metrics.length - 1] : null;
  app.replaceChildren(
    el("p", { class: "muted" }, `${run.metrics.length} steps recorded` + (last ? `, last step ${last.step}` : "") +
      `; ${run.steps.length} with trajectories (click a dot to open its step).`),
    el("div", { class: "curves", id: "curves" }, run.curves.map((name) => curve(name, run.metrics, steps))),
    ...(run.eval ? [evalTable(run.eval)] : []),
    el("h2", { text: run.eval ? "models' episodes" : "steps with trajectories" }),
    el("div", { class: "steps", id: "steps" }, run.steps.map((s) => link(stepName(run, s), { step: s }))));
  clearTimeout(refreshTimer);
  if (run.live) refreshTimer = setTimeout(() => { if (!location.search) route(); }, 5000);  // a live run grows
}

// an `astuner eval` folder: model i's episodes are step i; its figures from eval.json
const stepName = (run, s) => (run.labels && run.labels[String(s)]) || `step ${s}`;
const interval = (v) => v ? `${fmt(v.mean)} [${fmt(v.ci95[0])}, ${fmt(v.ci95[1])}]` : "";

function evalTable(ev) {
  const ks = ev.models.length ? Object.keys(ev.models[0]["pass@k"] || {}) : [];
  const head = el("tr", {}, ["model", "reward [95% CI]", "success [95% CI]", ...ks.map((k) => `pass@${k}`),
    "calls/ep", "failed"].map((h) => el("th", { text: h })));
  const rows = ev.models.map((m) => el("tr", {}, [link(m.label, { step: m.step }), interval(m.reward),
    interval(m.success), ...ks.map((k) => fmt(m["pass@k"][k])), fmt(m.per_episode && m.per_episode.calls),
    fmt(m.failed)].map((c) => el("td", {}, c))));
  const diffs = (ev.differences || []).map((d) => el("li", {},
    `${d.b} − ${d.a}: reward ${interval(d.reward)}` + (d.reward && d.reward.excludes_0 ? "" : " (includes 0)")));
  return el("div", { id: "eval" }, el("h2", { text: `evaluation: ${ev.tasks} ${ev.split} tasks × ${ev.k} episodes` }),
    el("table", {}, el("thead", {}, head), el("tbody", {}, rows)), el("ul", {}, diffs));
}

// ---------- step page ----------
const COLUMNS = [
  ["task_id", "task", "text"], ["repeat_index", "repeat"], ["reward", "reward"], ["advantage", "advantage"],
  ["is_success", "success"], ["failed", "failed"], ["madness", "madness", "text"], ["truncated", "truncated"],
  ["calls", "calls"], ["tool_errors", "tool errors"], ["tokens", "tokens"], ["attempts", "runs"],
  ["group_dropped", "group dropped"], ["policy_version", "version"],
];
const FLAGS = { failed: (e) => e.failed, mad: (e) => (e.madness || []).length > 0, truncated: (e) => e.truncated,
  success: (e) => e.is_success, ok: (e) => !e.failed, retried: (e) => e.attempts > 1, dropped: (e) => e.group_dropped };
const FIELDS = { reward: "reward", advantage: "advantage", adv: "advantage", calls: "calls", tokens: "tokens",
  repeat: "repeat_index", tool_errors: "tool_errors", attempts: "attempts", runs: "attempts",
  version: "policy_version" };

// "failed", "mad", "!success", "reward < 0.5", "calls>=2", "task=train-3": every term must hold
function parseFilter(text) {
  const tests = [];
  const re = /(!?)([a-z_]+)\s*(<=|>=|!=|=|<|>)?\s*([^\s]*)/gi;
  let m;
  while ((m = re.exec(text.trim()))) {
    if (!m[0]) break;
    const [, not, word, op, raw] = m;
    const key = word.toLowerCase();
    if (op && key === "task") tests.push((e) => (op === "!=") !== (String(e.task_id) === raw));
    else if (op && FIELDS[key]) {
      const field = FIELDS[key], value = Number(raw);
      const cmp = { "<": (a) => a < value, ">": (a) => a > value, "<=": (a) => a <= value, ">=": (a) => a >= value,
        "=": (a) => a === value, "!=": (a) => a !== value }[op];
      tests.push((e) => typeof e[field] === "number" && cmp(e[field]));
    } else if (FLAGS[key]) tests.push(not ? (e) => !FLAGS[key](e) : (e) => Boolean(FLAGS[key](e)));
    else tests.push(() => false);  // an unknown word matches nothing: the count says so
  }
  return (e) => tests.every((t) => t(e));
}

function stepTable(data, state) {
  const keep = parseFilter(state.filter);
  let rows = data.episodes.filter(keep);
  const [key, dir] = state.sort;
  const value = (e) => (Array.isArray(e[key]) ? e[key].length : e[key]);
  rows = rows.slice().sort((a, b) => {
    if (state.group && a.task_id !== b.task_id) return String(a.task_id).localeCompare(String(b.task_id), undefined, { numeric: true });
    const x = value(a), y = value(b);
    if (x === y) return 0;
    if (x === null || x === undefined) return 1;
    if (y === null || y === undefined) return -1;
    return (x < y ? -1 : 1) * dir;
  });
  const head = el("tr", {}, COLUMNS.map(([k, label, cls]) => el("th", {
    class: cls, "data-sort": k, onclick: () => { state.sort = [k, state.sort[0] === k ? -state.sort[1] : -1]; state.render(); },
  }, label + (state.sort[0] === k ? (state.sort[1] > 0 ? " ▲" : " ▼") : ""))));
  const body = [];
  let task = null;
  for (const e of rows) {
    if (state.group && e.task_id !== task) {
      task = e.task_id;
      const g = data.groups[String(task)] || {};
      body.push(el("tr", { class: "group", "data-task": task }, el("td", { colspan: COLUMNS.length },
        `group ${task}: ${g.n} episodes, reward mean ${fmt(g.mean)} std ${fmt(g.std)}`)));
    }
    body.push(el("tr", { class: e.failed || !e.is_success ? "episode bad" : "episode", "data-episode": e.episode_uuid },
      COLUMNS.map(([k, , cls]) => el("td", { class: cls },
        k === "task_id" ? link(String(e.task_id), { step: data.step, episode: e.episode_uuid }) : fmt(e[k])))));
  }
  return { table: el("table", { id: "episodes" }, el("thead", {}, head), el("tbody", {}, body)), shown: rows.length };
}

async function stepPage(step) {
  const data = await getJSON(`/api/step/${step}`);
  crumbs([link(`step ${step}`, { step })]);
  const state = { filter: "", sort: ["task_id", 1], group: true };
  const filter = el("input", { id: "filter", placeholder: "filter: failed · mad · truncated · !success · reward < 0.5 · calls >= 2 · task=ID" });
  const group = el("input", { type: "checkbox", id: "group", checked: true });
  const count = el("span", { class: "muted", id: "count" });
  const holder = el("div");
  state.render = () => {
    const { table, shown } = stepTable(data, state);
    holder.replaceChildren(table);
    count.textContent = `${shown} of ${data.episodes.length} episodes`;
  };
  filter.addEventListener("input", () => { state.filter = filter.value; state.render(); });
  group.addEventListener("change", () => { state.group = group.checked; state.render(); });
  app.replaceChildren(el("h2", { text: data.label || `step ${step}` }),
    el("p", {}, filter, " ", el("label", {}, group, " group by task (GRPO groups)"), " ", count), holder);
  state.render();
}

// ---------- episode page ----------
function message(m) {
  const parts = [el("div", { class: "role", text: m.role + (m.name ? ` · ${m.name}` : "") })];
  if (m.content) parts.push(typeof m.content === "string" ? m.content : JSON.stringify(m.content, null, 1));
  for (const call of m.tool_calls || []) {
    const f = call.function || call;
    const args = typeof f.arguments === "string" ? f.arguments : JSON.stringify(f.arguments);
    parts.push(el("div", { class: "toolcall" }, `→ ${f.name}(${args})`));
  }
  return el("div", { class: `msg ${m.role}` }, parts);
}

function tokenView(sample, threshold) {
  const tokens = sample.input_ids.map((id, i) => {
    const mask = sample.loss_mask[i];
    const lp = sample.rollout_logprobs ? sample.rollout_logprobs[i] : null;
    const tlp = sample.trainer_logprobs ? sample.trainer_logprobs[i] : null;
    const diff = lp !== null && tlp !== null ? Math.abs(lp - tlp) : null;
    const attrs = { class: "tok", "data-i": i, "data-id": id, "data-loss-mask": mask };
    if (lp !== null) { attrs["data-logprob"] = lp; attrs.style = `--conf:${(0.15 + 0.5 * Math.exp(lp)).toFixed(2)}`; }
    if (tlp !== null) attrs["data-trainer-logprob"] = tlp;
    if (diff !== null) attrs["data-diff"] = diff.toFixed(5);
    if (diff !== null && diff > threshold) attrs.class = "tok over";
    return el("span", attrs, sample.pieces[i]);
  });
  // the prompt (system prompt, tool schemas: the same in every episode) folded away; the response part —
  // generated tokens and the tool results between them — shown
  const n = sample.prompt_length;
  const prompt = el("details", { class: "prompt" }, el("summary", {}, `prompt: ${n} tokens (context)`), tokens.slice(0, n));
  return el("div", { class: "tokens", "data-sample": sample.sample }, n ? prompt : [], tokens.slice(n));
}

function showTip(event) {
  const t = event.target.closest(".tok");
  let tip = document.getElementById("tip");
  if (!t) { if (tip) tip.hidden = true; return; }
  if (!tip) { tip = el("div", { id: "tip" }); document.body.append(tip); }
  const d = t.dataset;
  const lines = [`token ${d.i} · id ${d.id} · ${d.lossMask === "1" ? "trained (mask 1)" : "context (mask 0)"}`];
  if (d.logprob !== undefined) lines.push(`rollout log-prob ${Number(d.logprob).toFixed(4)} (p ${Math.exp(d.logprob).toFixed(3)})`);
  if (d.trainerLogprob !== undefined) lines.push(`trainer log-prob ${Number(d.trainerLogprob).toFixed(4)}`);
  if (d.diff !== undefined) lines.push(`|difference| ${Number(d.diff).toFixed(4)}`);
  tip.textContent = lines.join("\n");
  tip.hidden = false;
  tip.style.left = `${event.clientX + 12}px`;
  tip.style.top = `${event.clientY + 12}px`;
}

// each agent with the policy that served it and its own reward (runs with astuner.policies, per-agent rewards)
function agentsFact(e) {
  const mapping = (v) => (v && typeof v === "object" && !Array.isArray(v) ? v : {});
  const policies = mapping(e.policies), rewards = mapping(e.rewards);
  return (Array.isArray(e.agents) ? e.agents : []).map((agent) => {
    const policy = policies[agent];
    const reward = agent in rewards ? rewards[agent] : policy in rewards ? rewards[policy] : undefined;
    const parts = [];
    if (policy !== undefined && policy !== "default") parts.push(`policy ${policy}`);
    if (reward !== undefined) parts.push(`reward ${fmt(reward)}`);
    return String(agent) + (parts.length ? ` (${parts.join(", ")})` : "");
  }).join(", ");
}

// the episode's conversation: each agent's turns under its name (a multi-agent episode records each agent's
// whole context as `conversations`), else the last call's messages and its reply
function conversationOf(e) {
  const turns = (messages, response, agent) => {
    const out = (Array.isArray(messages) ? messages : []).filter((m) => m && typeof m === "object").map(message);
    if (response !== null && response !== undefined) out.push(message({ role: "assistant", name: agent, content: response }));
    return out;
  };
  const parts = Array.isArray(e.conversations) ? e.conversations.filter((c) => c && typeof c === "object") : [];
  if (!parts.length) return turns(e.messages, e.response);
  return parts.map((c) => {
    const policy = c.policy !== undefined && c.policy !== "default" && c.policy !== c.agent ? ` (policy ${c.policy})` : "";
    return el("div", { class: "agent-turns", "data-agent": c.agent },
      el("h3", { class: "agent", text: `agent ${c.agent}${policy}` }), turns(c.messages, c.response, c.agent));
  });
}

async function episodePage(step, uuid) {
  const data = await getJSON(`/api/episode/${step}/${encodeURIComponent(uuid)}`);
  const e = data.episode;
  crumbs([link(`step ${step}`, { step }), `task ${e.task_id} · repeat ${e.repeat_index}`]);
  const facts = [["query", e.query], ["expected answer", e.expected], ["reward", e.reward], ["advantage", e.advantage], ["success", e.is_success], ["failed", e.failed],
    ["madness", e.madness], ["truncated", e.truncated], ["model calls", e.calls],
    ["tool calls that did not parse", e.tool_parse_failures], ["agents", agentsFact(e)],
    ["runs (1 + retries)", e.attempts], ["group dropped (short of episodes)", e.group_dropped],
    ["policy version", e.policy_version],
    ...Object.entries(e.metrics || {}).map(([k, v]) => [k, v]), ["uuid", e.episode_uuid]];
  const conversation = conversationOf(e);
  const threshold = el("input", { id: "threshold", type: "number", step: "0.01", min: "0", value: "0.1", style: "width:5em" });
  const samples = el("div", { id: "samples" });
  const draw = () => {
    const t = Number(threshold.value) || 0;
    samples.replaceChildren(...(data.samples.length ? data.samples.map((s) => el("div", {},
      el("h2", {}, `sample ${s.sample}` + (s.agent ? ` · agent ${s.agent}` : "") + ` · advantage ${fmt(s.advantage, 4)} · ${s.input_ids.length} tokens, `,
        `${s.loss_mask.filter((m) => m).length} trained` + (s.trainer_logprobs ? "" : " · not trained (no trainer log-probs)")),
      tokenView(s, t))) : [el("p", { class: "muted", text: "no training samples recorded for this episode" })]));
  };
  threshold.addEventListener("input", draw);
  app.replaceChildren(
    el("table", { class: "facts" }, facts.map(([k, v]) => el("tr", {}, el("th", { class: "text" }, k), el("td", { class: "text" }, fmt(v))))),
    e.error ? [el("h2", { text: "error" }), el("pre", { class: "error", id: "error", text: e.error })] : [],
    el("h2", { text: "conversation" }), el("div", { class: "conversation" }, conversation),
    el("h2", { text: "training samples" }),
    el("p", { class: "legend" }, el("span", { class: "tok", "data-loss-mask": "1" }, "trained token (mask 1, shade = rollout probability)"),
      el("span", { class: "tok", "data-loss-mask": "0" }, "context (mask 0: prompt, tool results)"),
      el("span", { class: "tok over" }, "rollout vs trainer log-prob differ by more than"), threshold),
    samples);
  draw();
  app.onmousemove = showTip;
}

async function route() {
  clearTimeout(refreshTimer);
  app.onmousemove = null;
  const query = new URLSearchParams(location.search);
  const step = query.get("step"), episode = query.get("episode");
  try {
    if (!document.getElementById("run-name").textContent) {
      getJSON("/api/run").then((r) => { document.getElementById("run-name").textContent = r.name; });
    }
    if (step !== null && episode) await episodePage(Number(step), episode);
    else if (step !== null) await stepPage(Number(step));
    else await runPage();
    document.body.dataset.ready = "1";
  } catch (err) {
    app.replaceChildren(el("p", { class: "error", id: "failure", text: `could not load: ${err.message}` }));
    document.body.dataset.ready = "1";
  }
}

window.addEventListener("popstate", route);
route();
