// typedlm playground: plain browser JavaScript, no build step. Talks only to this server's own API.
"use strict";
const $ = (id) => document.getElementById(id);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) k === "class" ? (e.className = v) : e.setAttribute(k, v);
  for (const k of kids) e.append(k);
  return e;
};
const fmt = (v) => (v === null || v === undefined ? "—" : typeof v === "object" ? JSON.stringify(v) : String(v));
const pct = (p) => (p === null || p === undefined ? "" : (100 * p).toFixed(1) + "%");

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h.Authorization = "Bearer " + key;
  return h;
}
async function api(path, body) {
  const r = await fetch(path, body === undefined ? { headers: headers() }
    : { method: "POST", headers: headers(), body: JSON.stringify(body) });
  const data = await r.json().catch(() => ({}));
  if (!r.ok) throw apiError(r.status, data);
  return data;
}
function apiError(status, data) {
  const e = (data && data.error) || {};
  const err = new Error(e.message || (data && data.detail ? JSON.stringify(data.detail) : "HTTP " + status));
  err.param = e.param; err.code = e.code; err.status = status;
  return err;
}
function showError(node, err) {
  node.textContent = err ? `${err.code ? err.code + ": " : ""}${err.message}` +
    (err.param ? `\nat ${err.param}` : "") : "";
}

// -- tabs ----------------------------------------------------------------------------------------
for (const b of document.querySelectorAll(".tab")) {
  b.addEventListener("click", () => {
    for (const t of document.querySelectorAll(".tab")) t.classList.toggle("active", t === b);
    for (const p of document.querySelectorAll(".panel")) p.classList.toggle("hidden", p.id !== b.dataset.tab);
  });
}
$("api-key").value = localStorage.getItem("typedlm-key") || "";
$("api-key").addEventListener("change", () => localStorage.setItem("typedlm-key", $("api-key").value));

// -- decide --------------------------------------------------------------------------------------
let presets = [];
let validated = null; // the last schema the server accepted (parsed), or null

async function loadPresets() {
  try {
    const cfg = await api("/v1/config");
    const e = cfg.engine, s = cfg.settings; // the loaded model's own name and device (null while loading)
    $("server-info").textContent = e ? `model ${e.model} · ${e.device}` : s ? `model ${s.model} · loading` : "";
  } catch (e) { /* informational only */ }
  presets = (await api("/v1/decide/presets")).presets;
  for (const p of presets) $("preset").append(el("option", { value: p.name }, `${p.name} — ${p.description}`));
  if (presets.length) { $("preset").value = presets[0].name; usePreset(presets[0]); }
}
function usePreset(p) {
  $("schema").value = JSON.stringify(p.schema, null, 2);
  $("contexts").value = p.examples.slice(0, 1).join("\n---\n");
  validateSoon(0);
}
$("preset").addEventListener("change", () => {
  const p = presets.find((x) => x.name === $("preset").value);
  if (p) usePreset(p);
});

let timer = null, seq = 0;
function validateSoon(ms = 250) { clearTimeout(timer); timer = setTimeout(validate, ms); }
$("schema").addEventListener("input", () => { $("preset").value = ""; validateSoon(); });
async function validate() {
  const st = $("schema-status"), mine = ++seq;
  let parsed;
  try { parsed = JSON.parse($("schema").value); } catch (e) {
    validated = null; st.className = "status bad"; st.textContent = "not JSON: " + e.message; return;
  }
  try {
    const r = await api("/v1/decide/validate", { schema: parsed });
    if (mine !== seq) return;
    if (r.valid) {
      validated = parsed; st.className = "status ok";
      st.textContent = `valid: ${r.fields} field(s)` + (r.rows ? `, rows ${JSON.stringify(r.rows)}` : "") +
        (r.warnings.length ? "\nwarning: " + r.warnings.join("\nwarning: ") : "");
    } else { validated = null; st.className = "status bad"; st.textContent = r.error; }
  } catch (e) { validated = null; st.className = "status bad"; showError(st, e); }
}

function bars(probs, top) {
  const box = el("div", { class: "bars" });
  for (const [k, p] of Object.entries(probs).sort((a, b) => b[1] - a[1])) {
    const fill = el("div", { class: "fill" }); fill.style.width = (100 * p).toFixed(1) + "%";
    box.append(el("div", { class: "bar" + (k === top ? " top" : ""), "data-choice": k },
      el("span", { class: "label", title: k }, k), el("div", { class: "track" }, fill), el("span", { class: "p" }, pct(p))));
  }
  return box;
}
function runnerUp(f) {
  const ranked = Object.entries(f.probabilities).sort((a, b) => b[1] - a[1]);
  return ranked.length > 1 ? ranked[1] : null;
}
function renderOne(d) {
  const out = el("div");
  for (const [name, f] of Object.entries(d.fields)) {
    const multi = Array.isArray(f.value);
    const top = multi ? null : Object.entries(f.probabilities).sort((a, b) => b[1] - a[1])[0][0];
    const ru = multi ? null : runnerUp(f);
    const head = el("h3", {}, `${name}: `, el("span", { class: "value" }, fmt(f.value)));
    if (f.reason) head.append(el("span", { class: "reason" }, f.reason === "abstain" ? "abstained" : "none of the above"));
    const meta = el("div", { class: "muted" },
      (f.probability !== null ? `p ${pct(f.probability)} · ` : "") +
      (ru ? `runner-up ${ru[0]} ${pct(ru[1])} · ` : "") + `margin ${pct(f.margin)} · legal mass ${f.legal_mass.toPrecision(2)}` +
      (multi ? " · bars: P(yes) per option" : ""));
    out.append(el("div", { class: "field", "data-field": name }, head, bars(f.probabilities, top), meta));
  }
  out.append(el("div", { class: "muted timings" }, timingLine(d)));
  return out;
}
function timingLine(d) {
  const t = d.timings, u = d.usage, ms = (s) => (1000 * s).toFixed(0) + " ms";
  return `prefill ${ms(t.prefill)} · scoring ${ms(t.scoring)} · total ${ms(t.total)} · ` +
    `${u.prompt_tokens} prompt tokens · ${u.rows} rows in ${u.passes} pass(es) · ${d.model}`;
}
function renderMany(texts, ds) {
  const fields = Object.keys(ds[0].fields);
  const table = el("table", { class: "many" });
  table.append(el("tr", {}, el("th", {}, "text"), ...fields.map((f) => el("th", {}, f)), el("th", {}, "timings")));
  ds.forEach((d, i) => {
    const cells = fields.map((n) => {
      const f = d.fields[n];
      return el("td", {}, el("b", {}, fmt(f.value)), f.reason ? el("span", { class: "reason" }, f.reason) : "",
        el("div", { class: "muted" }, (f.probability !== null ? pct(f.probability) + " · " : "") + "margin " + pct(f.margin)));
    });
    table.append(el("tr", {}, el("td", {}, texts[i].slice(0, 120)), ...cells,
      el("td", { class: "muted" }, timingLine(d))));
  });
  return table;
}
$("run-decide").addEventListener("click", async () => {
  const btn = $("run-decide"), res = $("decide-results");
  showError($("decide-error"), null);
  await validate();
  if (!validated) { showError($("decide-error"), new Error("fix the schema first")); return; }
  const texts = $("contexts").value.split(/^\s*---\s*$/m).map((t) => t.trim()).filter(Boolean);
  if (!texts.length) { showError($("decide-error"), new Error("paste a text to decide about")); return; }
  const abstain = $("abstain").value === "" ? null : Number($("abstain").value);
  btn.disabled = true; res.textContent = "deciding…";
  try {
    // one text: `context` -> a Decision; several: `contexts: [...]` -> a list (decide_many: one shared plan)
    const opts = { schema: validated, allow_none_of_above: $("nota").checked, abstain_below_margin: abstain };
    if (texts.length === 1) res.replaceChildren(renderOne(await api("/v1/decide", { ...opts, context: texts[0] })));
    else res.replaceChildren(renderMany(texts, await api("/v1/decide", { ...opts, contexts: texts })));
  } catch (e) { res.textContent = ""; showError($("decide-error"), e); }
  finally { btn.disabled = false; }
});

// -- generate ------------------------------------------------------------------------------------
function structured() {
  const kind = $("ckind").value, text = $("constraint").value;
  if (kind === "none") return { body: {}, schema: null };
  if (kind === "json_schema") {
    let schema;
    try { schema = JSON.parse(text); } catch (e) { throw new Error("the JSON Schema is not JSON: " + e.message); }
    return { body: { response_format: { type: "json_schema", json_schema: { name: "playground", schema, strict: true } } }, schema };
  }
  if (kind === "choice") return { body: { structured_outputs: { choice: text.split("\n").map((s) => s.trim()).filter(Boolean) } }, schema: null };
  return { body: { structured_outputs: { [kind]: text } }, schema: null };
}
function badge(id, text, cls) { const b = $(id); b.textContent = text; b.className = "badge " + (cls || ""); }
$("run-generate").addEventListener("click", async () => {
  const btn = $("run-generate"), out = $("output");
  showError($("generate-error"), null); badge("badge-finish", ""); badge("badge-valid", "");
  out.textContent = ""; $("generate-stats").textContent = "";
  let c;
  try { c = structured(); } catch (e) { showError($("generate-error"), e); return; }
  const messages = [];
  if ($("system").value.trim()) messages.push({ role: "system", content: $("system").value });
  messages.push({ role: "user", content: $("user").value });
  const body = { model: "default", messages, stream: true, stream_options: { include_usage: true },
    max_tokens: Number($("max-tokens").value), temperature: Number($("temperature").value), ...c.body };
  btn.disabled = true;
  const t0 = performance.now();
  let finish = null, usage = null, chunks = 0;
  try {
    const cfg = await api("/v1/models");
    body.model = cfg.data[0].id;
    const r = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify(body) });
    if (!r.ok) throw apiError(r.status, await r.json().catch(() => ({})));
    const reader = r.body.getReader(), dec = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const line = buf.slice(0, i).trim(); buf = buf.slice(i + 2);
        if (!line.startsWith("data:")) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") continue;
        const ev = JSON.parse(data);
        if (ev.usage) usage = ev.usage;
        for (const ch of ev.choices || []) {
          if (ch.delta && ch.delta.content) { out.textContent += ch.delta.content; chunks++; out.dataset.chunks = chunks; }
          if (ch.finish_reason) finish = ch.finish_reason;
        }
      }
    }
    badge("badge-finish", "finish_reason: " + finish, finish === "stop" ? "good" : "warn");
    if (c.schema) {
      const v = await api("/v1/schema/check", { schema: c.schema, text: out.textContent });
      badge("badge-valid", "schema_valid: " + v.schema_valid, v.schema_valid ? "good" : "bad");
      if (!v.schema_valid) $("generate-stats").textContent = v.errors.join("\n");
    }
    const secs = (performance.now() - t0) / 1000;
    $("generate-stats").textContent += (usage ? ` ${usage.prompt_tokens}+${usage.completion_tokens} tokens` : "") +
      ` in ${secs.toFixed(2)} s`;
  } catch (e) { showError($("generate-error"), e); }
  finally { btn.disabled = false; }
});

loadPresets().catch((e) => showError($("decide-error"), e));
