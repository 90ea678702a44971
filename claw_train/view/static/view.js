// claw-view's page: curves drawn by uPlot, the turn list by Tabulator (remote pagination and filtering: the server
// holds the index), one turn in full with its prompt, votes, hint and token credit, and the before/after check.
// It polls /api/runs every POLL_MS and redraws what a run wrote since.
"use strict";

const POLL_MS = 2000;
const PALETTE = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#bf8700", "#1b7c83", "#e16f24", "#57606a"];
const CREDIT_RGB = { neg: [207, 34, 46], pos: [26, 127, 55] };
const view = { runs: [], generations: {}, charts: {}, table: null, tab: "curves", improveLoaded: false };
window.clawView = view; // the tests read the charts' data and the colour rule from here

async function api(path) {
  const response = await fetch(path, { credentials: "same-origin" });
  const body = await response.json().catch(() => ({ error: `HTTP ${response.status}` }));
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "style") node.style.cssText = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function fmt(value, digits = 3) {
  return value === null || value === undefined ? "–" : typeof value === "number" ? value.toFixed(digits) : String(value);
}

function showProblem(text) {
  const node = document.getElementById("problem");
  node.hidden = !text;
  node.textContent = text || "";
}

// -- runs and live polling ---------------------------------------------------------------------------------------

async function poll() {
  try {
    view.runs = await api("/api/runs");
    showProblem("");
  } catch (err) {
    showProblem(`claw-view cannot be reached: ${err.message} (retrying)`);
    return;
  }
  renderRuns();
  const changed = view.runs.some((r) => view.generations[r.run] !== r.generation);
  view.runs.forEach((r) => (view.generations[r.run] = r.generation));
  if (changed) {
    await refreshCurves();
    if (view.table && view.tab === "turns" && view.table.getPage() === 1) view.table.setPage(1);
    if (view.tab === "improve") loadImprove();
    else view.improveLoaded = false;
  }
}

function renderRuns() {
  const box = document.getElementById("runs");
  box.replaceChildren(
    ...view.runs.map((r) => {
      const c = r.counts;
      const status = r.live ? "live" : r.status;
      return el("div", { class: "run", style: `--colour: ${PALETTE[r.run % PALETTE.length]}`, "data-run": r.run },
        el("strong", {}, r.label), ` ${r.env || "?"} · ${r.method || "?"} · ${r.model || "?"}`,
        el("span", { class: `badge${r.live ? " live" : ""}` }, status),
        el("div", { class: "counts" },
          `update ${r.updates}${r.target_updates ? "/" + r.target_updates : ""} · episodes ${c.episodes} · turns ${c.turns}` +
          ` · judged ${c.judged} · samples ${c.accepted} accepted, ${c.trained} trained`),
        [...r.problems, ...r.incomplete_last_line.map((f) => `${f}: last line still being written (or cut off)`)]
          .map((p) => el("div", { class: "problem" }, p)));
    }));
  fillSelect("run", [["all", "all"], ...view.runs.map((r) => [String(r.run), r.label])]);
  const families = [...new Set(view.runs.map((r) => r.env).filter(Boolean))];
  fillSelect("family", [["", "any"], ...families.map((f) => [f, f])]);
  const reasons = [...new Set(view.runs.flatMap((r) => r.decisions))];
  fillSelect("reason", [["", "any"], ...reasons.map((d) => [d, d])]);
}

function fillSelect(name, options) {
  const select = document.querySelector(`#filters [name=${name}]`);
  const wanted = options.map(([v]) => v).join("\n");
  if (select.dataset.options === wanted) return;
  const current = select.value;
  select.replaceChildren(...options.map(([v, label]) => el("option", { value: v }, label)));
  select.dataset.options = wanted;
  if (options.some(([v]) => v === current)) select.value = current;
}

// -- curves -------------------------------------------------------------------------------------------------------

const UPDATE_METRICS = {
  kl: ["kl", "train/kl"],
  "clip (region)": ["clip_ratio/region_mean"],
  "clip (low)": ["clip_ratio/low_mean"],
  "clip (high)": ["clip_ratio/high_mean"],
  entropy: ["entropy"],
};

function metric(update, names) {
  const name = names.find((n) => update[n] !== undefined);
  return name === undefined ? null : update[name];
}

const CHARTS = [
  { id: "score", x: "update", title: (cs) => `held-out ${cs.map((c) => c.evals.find((e) => e.score_name)?.score_name).find(Boolean) || "score"} per evaluation`,
    series: (c) => [
      { name: "score", pts: c.evals.map((e) => [e.update, e.score]) },
      { name: "valid", dash: [6, 4], pts: c.evals.filter((e) => "valid_rate" in e).map((e) => [e.update, e.valid_rate]) },
      { name: "correct", dash: [2, 3], pts: c.evals.filter((e) => "correct_rate" in e).map((e) => [e.update, e.correct_rate]) },
      { name: "accepted", dash: [8, 2, 2, 2], pts: c.evals.filter((e) => "accepted_rate" in e).map((e) => [e.update, e.accepted_rate]) },
    ] },
  { id: "judge", x: "policy version", title: () => "judge votes per version (share of scored turns)",
    series: (c) => ["+1", "0", "-1"].map((k, i) => ({ name: k, dash: [[], [2, 3], [6, 4]][i],
      pts: c.per_version.versions.map((v, j) => [v, c.per_version.judge[k]?.[j] ?? null]) })) },
  { id: "masked", x: "policy version", title: () => "decision per version (share of turns: accepted, or masked by reason)",
    series: (c) => Object.entries(c.per_version.decisions).map(([k, rates], i) => ({ name: k, dash: i ? [4 + i, 3] : [],
      pts: c.per_version.versions.map((v, j) => [v, rates[j]]) })) },
  { id: "loss", x: "update", title: () => "loss per update",
    series: (c) => [{ name: "loss", pts: c.updates.map((u) => [u.update, u.loss ?? null]) }] },
  { id: "kl", x: "update", title: () => "KL, clip fractions, entropy per update",
    series: (c) => Object.entries(UPDATE_METRICS).map(([k, names], i) => ({ name: k, dash: i ? [3 + i, 3] : [],
      pts: c.updates.map((u) => [u.update, metric(u, names)]) })) },
  { id: "replies", x: "update", title: () => "trained replies per update: mean length in tokens",
    series: (c) => [{ name: "tokens", pts: c.updates.map((u) => [u.update, u["claw/reply_tokens_mean"] ?? null]) }] },
  { id: "degeneration", x: "update",
    title: () => "trained replies per update: repetition (share of 4-grams repeated), behaviour NLL per token (entropy)",
    series: (c) => [
      { name: "repetition", pts: c.updates.map((u) => [u.update, u["claw/repetition"] ?? null]) },
      { name: "NLL", dash: [6, 4], pts: c.updates.map((u) => [u.update, u["claw/behaviour_nll"] ?? null]) },
    ] },
  { id: "staleness", x: "update", title: () => "staleness (versions behind) per update",
    series: (c) => [{ name: "staleness", pts: c.updates.map((u) => [u.update, u.staleness ?? null]) }] },
  { id: "speed", x: "update", title: () => "samples/s and update time (s) per update",
    series: (c) => [
      { name: "samples/s", pts: c.updates.map((u) => [u.update, u.samples_per_s ?? null]) },
      { name: "update s", dash: [6, 4], pts: c.updates.map((u) => [u.update, u.update_seconds ?? null]) },
    ] },
];

async function refreshCurves() {
  let curves;
  try {
    curves = await api("/api/curves");
  } catch (err) {
    showProblem(`curves: ${err.message}`);
    return;
  }
  const box = document.getElementById("charts");
  for (const spec of CHARTS) drawChart(box, spec, curves);
}

function drawChart(box, spec, curves) {
  const series = [];
  for (const c of curves) {
    for (const s of spec.series(c)) {
      const pts = s.pts.filter(([, y]) => y !== null && y !== undefined && Number.isFinite(Number(y)));
      const colour = PALETTE[(curves.length > 1 ? c.run : series.length) % PALETTE.length];
      if (pts.length) series.push({ ...s, pts, colour, label: curves.length > 1 ? `${c.label}: ${s.name}` : s.name });
    }
  }
  let holder = document.getElementById(`chart-${spec.id}`);
  if (!holder) {
    holder = el("div", { class: "chart", id: `chart-${spec.id}` }, el("h3"), el("div", { class: "plot" }));
    box.append(holder);
  }
  holder.querySelector("h3").textContent = spec.title(curves);
  const plot = holder.querySelector(".plot");
  const xs = [...new Set(series.flatMap((s) => s.pts.map(([x]) => x)))].sort((a, b) => a - b);
  const data = [xs, ...series.map((s) => { const m = new Map(s.pts); return xs.map((x) => (m.has(x) ? Number(m.get(x)) : null)); })];
  const key = series.map((s) => s.label).join("|");
  const old = view.charts[spec.id];
  if (!series.length) {
    if (old) { old.destroy(); delete view.charts[spec.id]; }
    plot.replaceChildren(el("p", { class: "empty" }, "no data yet"));
    return;
  }
  if (old && old.key === key) {
    old.setData(data);
    return;
  }
  if (old) old.destroy();
  plot.replaceChildren();
  const opts = {
    width: Math.max(420, holder.clientWidth || 460), height: 220,
    scales: { x: { time: false } },
    axes: [{ label: spec.x }, {}],
    series: [{ label: spec.x }, ...series.map((s) => ({
      label: s.label, stroke: s.colour, dash: s.dash || [], width: 2, spanGaps: true,
      points: { show: true, size: 5 } }))],
  };
  const chart = new uPlot(opts, data, plot);
  chart.key = key;
  view.charts[spec.id] = chart;
}

// -- turns --------------------------------------------------------------------------------------------------------

function filterParams() {
  const form = new FormData(document.getElementById("filters"));
  return Object.fromEntries([...form.entries()].filter(([, v]) => v !== ""));
}

function buildTable() {
  const score = (cell) => { const v = cell.getValue(); return v === null || v === undefined ? "" : v > 0 ? "+1" : v < 0 ? "−1" : "0"; };
  view.table = new Tabulator("#turn-table", {
    ajaxURL: "/api/turns",
    ajaxParams: filterParams,
    pagination: true,
    paginationMode: "remote",
    paginationSize: 50,
    paginationSizeSelector: [25, 50, 100, 200],
    paginationCounter: "rows",
    filterMode: "remote",
    sortMode: "remote",
    layout: "fitColumns",
    height: "430px",
    index: "id",
    placeholder: "no turn matches",
    headerSort: false,
    columns: [
      { title: "run", field: "run", width: 60, formatter: (c) => view.runs[c.getValue()]?.label ?? c.getValue() },
      { title: "v", field: "version", width: 50 },
      { title: "task", field: "task", width: 150 },
      { title: "step", field: "step", width: 55 },
      { title: "reply", field: "action", minWidth: 220 },
      { title: "next state", field: "next_state", minWidth: 200 },
      { title: "judge", field: "score", width: 65, formatter: score },
      { title: "hint", field: "hint", width: 55, formatter: (c) => (c.getValue() ? "✓" : "") },
      { title: "decision", field: "decision", width: 130 },
      { title: "credit", field: "credit", width: 65, formatter: (c) => (c.getValue() ? "●" : "") },
    ],
    ajaxResponse: (url, params, response) => {
      document.getElementById("match-count").textContent = `${response.last_row} turn(s)`;
      document.getElementById("turns-error").hidden = true;
      return response;
    },
  });
  view.table.on("dataLoadError", async (error) => {
    const box = document.getElementById("turns-error");
    const body = error && error.json ? await error.json().catch(() => ({})) : {};
    box.textContent = body.error || String(error);
    box.hidden = false;
  });
  view.table.on("rowClick", (e, row) => openTurn(row.getData().run, row.getData().n));
  let timer = null;
  document.getElementById("filters").addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(() => view.table.setData(), 250);
  });
  document.getElementById("filters").addEventListener("submit", (e) => e.preventDefault());
}

async function openTurn(run, n) {
  const box = document.getElementById("turn-detail");
  box.hidden = false;
  box.replaceChildren(el("p", {}, "loading…"));
  let d;
  try {
    d = await api(`/api/turn?run=${run}&n=${n}`);
  } catch (err) {
    box.replaceChildren(el("p", { class: "error" }, err.message));
    return;
  }
  box.dataset.run = run;
  box.dataset.n = n;
  if (d.missing) { box.replaceChildren(el("p", { class: "error" }, d.missing)); return; }
  const r = d.record, ns = r.next_state || {}, j = r.judgement || null;
  const parts = [el("h2", {}, `${view.runs[run]?.label ?? run} · version ${r.version} · ${r.task || r.session || ""} · step ${r.step ?? "–"} · ${r.decision || r.kind}${r.reason ? " (" + r.reason + ")" : ""}`)];
  parts.push(el("h3", {}, "prompt as the policy saw it"), promptView(d.prompt, r));
  parts.push(el("h3", {}, `reply (${r.tokens ?? "?"} tokens, ${r.finish_reason || "?"})`), el("pre", { class: "reply" }, r.action || ""));
  if (r.next_state) {
    parts.push(el("h3", {}, `next state (${ns.role || "?"}, evaluative ${fmt(ns.evaluative, 1)}${ns.outcome !== null && ns.outcome !== undefined ? ", outcome " + fmt(ns.outcome) : ""})`),
      el("pre", { class: "next-state" }, ns.text || ""), ns.directive ? el("p", {}, "directive: ", el("em", {}, ns.directive)) : null,
      typeof ns.image === "string" && ns.image.startsWith("images/")
        ? el("img", { class: "screenshot", alt: "the screen after this turn", src: `/api/image?run=${run}&path=${encodeURIComponent(ns.image)}` }) : null);
  }
  if (j) {
    parts.push(el("h3", {}, `judge: ${fmt(j.score, 0)}${j.available === false ? " (unavailable)" : ""}`), votesTable(j.votes || [], "PRM vote"));
    if ((j.hint_votes || []).length) parts.push(votesTable(j.hint_votes, "hint vote"));
    parts.push(el("p", { class: "hint" }, r.hint_accepted ? "accepted hint: " : "no hint accepted", r.hint_accepted ? el("strong", { class: "accepted-hint" }, j.hint) : null));
  }
  if (r.credit) parts.push(el("h3", {}, `token credit (${r.credit.method})`), creditView(r.credit, j && r.hint_accepted ? j.hint : null));
  else if (r.advantage) parts.push(el("p", {}, `advantage mean ${fmt(r.advantage.mean)} (min ${fmt(r.advantage.min)}, max ${fmt(r.advantage.max)}); per-token values not logged by this run`));
  for (const key of ["judge_error", "teacher_error"]) if (r[key]) parts.push(el("p", { class: "error" }, `${key}: ${r[key]}`));
  if (d.episode.length > 1) {
    parts.push(el("h3", {}, "the episode"), el("ol", { class: "episode" }, d.episode.map((t) =>
      el("li", {}, t.n === n ? el("strong", {}, `step ${t.step} (this turn)`) :
        el("a", { href: "#", onclick: (e) => { e.preventDefault(); openTurn(run, t.n); } }, `step ${t.step}`),
        ` · version ${t.version} · ${t.decision}`))));
  }
  box.replaceChildren(...parts.filter((p) => p !== null && p !== undefined));
  box.scrollIntoView({ block: "nearest" });
}

function promptView(prompt, record) {
  if (!prompt) {
    const messages = record.messages || [];
    return el("pre", { class: "prompt" }, messages.length ? messages.map((m) => `[${m.role}] ${m.content}`).join("\n\n") : "(this run did not log prompts)");
  }
  return el("pre", { class: "prompt" }, prompt.parts.map((p) =>
    p.gap ? el("span", { class: "gap" }, `[… ${p.gap} tokens not in the logs …]`) : p.text));
}

function votesTable(votes, what) {
  return el("table", { class: "plain votes" },
    el("tr", {}, el("th", {}, what), el("th", {}, "score"), el("th", {}, "reasoning"), el("th", {}, "hint")),
    votes.map((v, i) => el("tr", {}, el("td", {}, i + 1), el("td", {}, fmt(v.score, 0)),
      el("td", {}, v.error ? `error: ${v.error}` : v.text || ""), el("td", {}, v.hint || ""))));
}

// Colour of a credit value: green above 0, red below, opacity sqrt(|value| / scale) (scale: the row's largest
// |value|; the square root keeps small credit visible beside one large value).
function creditColour(value, scale) {
  if (!value || !scale) return "transparent";
  const [r, g, b] = value > 0 ? CREDIT_RGB.pos : CREDIT_RGB.neg;
  const alpha = Math.sqrt(Math.min(1, Math.abs(value) / scale));
  return `rgba(${r}, ${g}, ${b}, ${Math.round(alpha * 1000) / 1000})`;
}
view.creditColour = creditColour;

function creditRows(c) {
  const adv = c.advantage || [];
  const gap = (c.teacher || []).map((t, i) => t - (c.old || [])[i]);
  if (c.method === "opd") return [["teacher − behaviour log-prob", gap, "opd"]];
  if (c.method === "binary") return [["score, broadcast to every token", adv, "binary"]];
  return [
    [`w_rl·score = ${fmt(c.w_rl, 2)}·${fmt(c.score, 2)}`, adv.map(() => (c.w_rl ?? 1) * (c.score ?? 0)), "rl"],
    [`w_opd·(teacher − behaviour) (w_opd ${fmt(c.w_opd, 2)})`, gap.length ? gap.map((g) => (c.w_opd ?? 1) * g) : adv.map(() => 0), "opd"],
    ["sum: the advantage trained on", adv, "sum"],
  ];
}

function creditView(c, hint) {
  const pieces = c.pieces || [];
  const rows = creditRows(c).map(([label, values, part]) => {
    const scale = Math.max(1e-9, ...values.map((v) => Math.abs(v)));
    return el("div", { class: "credit-row", "data-part": part },
      el("div", { class: "legend" }, `${label} — colour scale ±${fmt(scale)}`),
      el("div", { class: "tokens" }, pieces.map((p, i) => el("span", {
        class: "tok", "data-i": i, "data-value": values[i], title: `token ${i}: ${fmt(values[i], 4)}`,
        style: `background: ${creditColour(values[i], scale)}` }, p === "" ? "·" : p))));
  });
  return el("div", { class: "credit" }, hint ? el("p", { class: "hint" }, "hint: ", hint) : null, rows);
}

// -- did it improve? ------------------------------------------------------------------------------------------------

async function loadImprove() {
  const box = document.getElementById("improve");
  view.improveLoaded = true;
  const blocks = [];
  for (const r of view.runs) {
    let d;
    try {
      d = await api(`/api/improve?run=${r.run}`);
    } catch (err) {
      blocks.push(el("p", { class: "error" }, `${r.label}: ${err.message}`));
      continue;
    }
    blocks.push(el("h2", {}, r.label));
    if (d.sessions) blocks.push(sessionsView(d.sessions));
    if (d.message) blocks.push(el("p", {}, d.message));
    if (!d.pairs) continue;
    blocks.push(el("p", {}, `${d.score_name || "held-out score"}: ${fmt(d.score_first)} at update ${d.first} → ${fmt(d.score_last)} at update ${d.last}`));
    blocks.push(el("table", { class: "plain pairs" },
      el("tr", {}, el("th", {}, "held-out prompt"), el("th", {}, `update ${d.first}`), el("th", {}, `update ${d.last}`)),
      d.pairs.map((p) => {
        const a = p.before?.outcome, b = p.after?.outcome;
        const cls = a === null || b === null || a === undefined || b === undefined || a === b ? "" : b > a ? "better" : "worse";
        return el("tr", {}, el("td", {}, p.prompt),
          el("td", {}, replyCell(p.before)), el("td", { class: cls }, replyCell(p.after)));
      })));
  }
  box.replaceChildren(...blocks);
}

function replyCell(reply) {
  if (!reply) return "–";
  const met = reply.met ? Object.entries(reply.met).map(([k, v]) => `${v ? "✓" : "✗"} ${k}`).join("  ") : "";
  return [el("div", {}, `score ${fmt(reply.outcome)}`), el("pre", {}, reply.reply || ""), met ? el("div", { class: "met" }, met) : null];
}

function sessionsView(s) {
  return el("div", { class: "sessions" },
    el("p", {}, `claw-eval --sessions (judge ${s.judge}): share of replies to ${s.prompts} held-out first messages that break an earlier hint of the same user`),
    el("table", { class: "plain" }, el("tr", {}, el("th", {}, "version"), el("th", {}, "broken"), el("th", {}, "replies")),
      (s.versions || []).map((v) => el("tr", {}, el("td", {}, v.label), el("td", {}, `${(100 * v.broken_rate).toFixed(1)}%`), el("td", {}, v.replies)))));
}

// -- tabs and start -------------------------------------------------------------------------------------------------

function showTab(name) {
  view.tab = name;
  for (const button of document.querySelectorAll("nav button")) button.setAttribute("aria-selected", String(button.dataset.tab === name));
  for (const section of document.querySelectorAll("section.tab")) section.hidden = section.id !== name;
  if (name === "turns" && !view.table) buildTable();
  if (name === "improve" && !view.improveLoaded) loadImprove();
}

document.querySelectorAll("nav button").forEach((b) => b.addEventListener("click", () => showTab(b.dataset.tab)));
poll().then(() => setInterval(poll, POLL_MS));
