"""The chat page served at GET /: one self-contained HTML document (no CDN, no build step).

It streams /v1/chat/completions and reads the `specgguf` field of each chunk: `spans` says
which characters came from accepted draft tokens (shown green), and the round's figures feed
the live numbers: tokens/s, acceptance, mean acceptance length and the draft length `auto`
chose for the last round. Every two seconds it reads /metrics for the whole server's live
aggregate: requests running, tokens/s over all of them and, with several slots, tokens and
sequences per shared pass since the last reading. `/?q=TEXT` sends TEXT as the first message.
"""

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>specgguf</title>
<style>
  :root { --fg: #1d1f21; --bg: #fafafa; --muted: #6b7280; --draft: #15803d; --line: #e5e7eb; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 15px/1.5 system-ui, sans-serif; color: var(--fg); background: var(--bg);
         display: flex; flex-direction: column; height: 100vh; }
  header { padding: 8px 16px; border-bottom: 1px solid var(--line); display: flex; gap: 16px;
           align-items: baseline; flex-wrap: wrap; }
  header h1 { font-size: 16px; margin: 0; }
  #stats { display: flex; gap: 14px; color: var(--muted); font-variant-numeric: tabular-nums; }
  #stats b { color: var(--fg); font-weight: 600; }
  #log { flex: 1; overflow-y: auto; padding: 16px; }
  .msg { max-width: 900px; margin: 0 auto 14px; white-space: pre-wrap; word-wrap: break-word; }
  .user { background: #eef2ff; padding: 8px 12px; border-radius: 8px; }
  .assistant { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 14px; }
  .drafted { color: var(--draft); background: #dcfce7; }
  .error { color: #b91c1c; }
  form { display: flex; gap: 8px; padding: 12px 16px; border-top: 1px solid var(--line); }
  textarea { flex: 1; font: inherit; padding: 8px; min-height: 44px; resize: vertical; }
  button { font: inherit; padding: 0 16px; }
  .legend { color: var(--muted); font-size: 13px; }
  #key { width: 120px; }
</style>
</head>
<body>
<header>
  <h1>specgguf</h1>
  <span class="legend"><span class="drafted">green</span>: tokens from accepted drafts</span>
  <div id="stats">
    <span>tokens/s <b id="tps">-</b></span>
    <span>acceptance <b id="acc">-</b></span>
    <span>mean acceptance length <b id="mal">-</b></span>
    <span>auto k <b id="autok">-</b></span>
    <span>drafted <b id="drafted">0</b></span>
    <span>server <b id="server">-</b></span>
  </div>
  <input id="key" type="password" placeholder="API key" autocomplete="off">
</header>
<div id="log"></div>
<form id="form">
  <textarea id="input" placeholder="Message (Enter to send, Shift+Enter for a new line)"></textarea>
  <button id="send" type="submit">Send</button>
</form>
<script>
"use strict";
const log = document.getElementById("log");
const input = document.getElementById("input");
const form = document.getElementById("form");
const keyBox = document.getElementById("key");
const messages = [];
keyBox.value = localStorage.getItem("specgguf-key") || "";
keyBox.addEventListener("change", () => localStorage.setItem("specgguf-key", keyBox.value));

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text || "";
  log.appendChild(div);
  log.scrollTop = log.scrollHeight;
  return div;
}

function show(id, value) { document.getElementById(id).textContent = value; }

function appendSpans(div, text, spans) {
  // spans: [[n code points, 1 if from accepted drafts], ...]
  const chars = Array.from(text);
  let at = 0;
  for (const [n, drafted] of (spans && spans.length ? spans : [[chars.length, 0]])) {
    const part = chars.slice(at, at + n).join("");
    at += n;
    if (!part) continue;
    if (drafted) {
      const span = document.createElement("span");
      span.className = "drafted";
      span.textContent = part;
      div.appendChild(span);
    } else {
      div.appendChild(document.createTextNode(part));
    }
  }
  if (at < chars.length) div.appendChild(document.createTextNode(chars.slice(at).join("")));
}

function updateStats(s) {
  if (s.predicted_ms > 0) show("tps", (1000 * s.predicted_n / s.predicted_ms).toFixed(1));
  if (s.drafted_total > 0) {
    show("acc", (100 * s.accepted_total / s.drafted_total).toFixed(1) + "%");
  }
  if (s.rounds > 0) show("mal", (1 + s.accepted_total / s.rounds).toFixed(2));
  if (s.auto_k !== null && s.auto_k !== undefined) show("autok", String(s.auto_k));
  else show("autok", "off");
  show("drafted", String(s.accepted_total));
}

async function send(text) {
  messages.push({role: "user", content: text});
  addMessage("user", text);
  const div = addMessage("assistant", "");
  document.getElementById("send").disabled = true;
  let answer = "";
  try {
    const headers = {"Content-Type": "application/json"};
    if (keyBox.value) headers["Authorization"] = "Bearer " + keyBox.value;
    const resp = await fetch("/v1/chat/completions", {
      method: "POST", headers,
      body: JSON.stringify({messages, stream: true}),
    });
    if (!resp.ok) {
      const err = await resp.json().catch(() => ({}));
      throw new Error((err.error && err.error.message) || resp.statusText);
    }
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += decoder.decode(value, {stream: true});
      let cut;
      while ((cut = buf.indexOf("\n\n")) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        if (!event.startsWith("data: ")) continue;
        const data = event.slice(6);
        if (data === "[DONE]") continue;
        const obj = JSON.parse(data);
        if (obj.error) throw new Error(obj.error.message);
        const choice = obj.choices && obj.choices[0];
        const delta = choice && choice.delta && choice.delta.content;
        if (delta) {
          answer += delta;
          appendSpans(div, delta, obj.specgguf && obj.specgguf.spans);
          log.scrollTop = log.scrollHeight;
        }
        if (obj.specgguf && obj.specgguf.predicted_n !== undefined) updateStats(obj.specgguf);
        if (obj.specgguf && obj.specgguf.auto) show("autok", String(obj.specgguf.auto.k));
        if (obj.timings) {
          show("tps", obj.timings.predicted_per_second.toFixed(1));
          div.dataset.done = "1";
        }
      }
    }
  } catch (e) {
    const span = document.createElement("div");
    span.className = "error";
    span.textContent = "error: " + e.message;
    div.appendChild(span);
  } finally {
    messages.push({role: "assistant", content: answer});
    document.getElementById("send").disabled = false;
    div.dataset.done = "1";
  }
}

// the server's live aggregate, from the /metrics counters between two readings
let last = null;
async function poll() {
  try {
    const headers = keyBox.value ? {"Authorization": "Bearer " + keyBox.value} : {};
    const resp = await fetch("/metrics", {headers});
    if (!resp.ok) return;
    const m = {};
    for (const line of (await resp.text()).split("\n")) {
      const hit = /^llamacpp:(\w+) ([\d.e+-]+)$/.exec(line);
      if (hit) m[hit[1]] = Number(hit[2]);
    }
    const now = performance.now();
    if (last) {
      const dt = (now - last.t) / 1000;
      const tps = (m.tokens_generated_total - last.m.tokens_generated_total) / dt;
      let text = m.requests_processing + " running, " + tps.toFixed(1) + " t/s";
      const steps = m.batch_steps_total - last.m.batch_steps_total;
      if (steps > 0) {
        text += ", " + ((m.batch_tokens_total - last.m.batch_tokens_total) / steps).toFixed(1)
          + " tok/pass, " + ((m.batch_seqs_total - last.m.batch_seqs_total) / steps).toFixed(1)
          + " seq/pass";
      }
      show("server", text);
    }
    last = {t: now, m};
  } catch (e) { /* the server is restarting: try again at the next tick */ }
}
poll();
setInterval(poll, 2000);

form.addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = input.value.trim();
  if (!text) return;
  input.value = "";
  send(text);
});
// /?q=TEXT sends TEXT once the page has loaded (links, and the headless-browser test)
const first = new URLSearchParams(location.search).get("q");
if (first) send(first);
input.addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); form.requestSubmit(); }
});
</script>
</body>
</html>
"""
