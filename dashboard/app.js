// The operator dashboard: polls the admin API every POLL_MS and draws the
// panes; the chat pane speaks the WebSocket protocol; admin actions (kill,
// dead letter retry and drop) go through the admin API. Every error the
// node answers is shown, in its pane or as a notice. The lists (agents,
// dead letters, notifications) are paged: a poll asks for the page on
// screen only, PAGE_ROWS rows, however many the node stores; the tree asks
// for each supervisor's first PAGE_ROWS children matching the filter.

import { api, token, setToken } from "./api.js";
import { h, morph } from "./dom.js";
import { Chat } from "./chat.js";
import * as panes from "./panes.js";

const POLL_MS = 1500;
const PAGE_ROWS = 50;

const $ = (id) => document.querySelector(`[data-testid="${id}"]`);

// -- notices -----------------------------------------------------------------

/** Shows an action's outcome; errors stay until dismissed. */
function notify(text, tone = "ok") {
  const box = $("notices");
  const el = h("div", { class: `notice ${tone}`, "data-testid": `notice-${tone}` },
               h("span", {}, text),
               h("button", { type: "button", class: "quiet", title: "dismiss", onclick: () => el.remove() }, "×"));
  box.prepend(el);
  while (box.childElementCount > 6) box.lastElementChild.remove();
  if (tone === "ok") setTimeout(() => el.remove(), 8000);
}

// -- the panes ---------------------------------------------------------------

let treeFilter = "";
const last = {}; // the last good answer per endpoint, redrawn on demand

// The page on screen of each paged list: its cursor (`after`, "" for the
// first page), the cursors of the pages before it (to go back) and the
// `next` of its last answer (null on the last page).
const pages = {};
for (const name of ["agents", "dlq", "notifications"]) pages[name] = { after: "", back: [], next: null };

/** The request for the page on screen of list `name` at `path`. */
function paged(name, path) {
  return () => {
    const after = pages[name].after;
    return `${path}?limit=${PAGE_ROWS}${after ? `&after=${encodeURIComponent(after)}` : ""}`;
  };
}

/** The tree request: each supervisor's first PAGE_ROWS children that match
 *  the filter (the node filters, so a large tree costs a page). */
function treePath() {
  return `/api/v1/tree?limit=${PAGE_ROWS}${treeFilter ? `&filter=${encodeURIComponent(treeFilter)}` : ""}`;
}

const endpoints = [
  { name: "status", path: "/api/v1/status", draw: drawStatus },
  { name: "tree", path: () => treePath(), draw: drawTree },
  { name: "providers", path: "/api/v1/providers", draw: (a) => morph($("providers"), panes.providers(a)) },
  { name: "agents", path: paged("agents", "/api/v1/agents"), draw: drawAgents },
  { name: "dlq", path: paged("dlq", "/api/v1/dlq"), draw: drawDeadLetters },
  { name: "notifications", path: paged("notifications", "/api/v1/notifications"), draw: drawNotifications },
];

const pathOf = (e) => (typeof e.path === "function" ? e.path() : e.path);

/** Draws the pager of list `name` from its answer's `next`. */
function drawPager(name, answer) {
  const p = pages[name];
  p.next = answer.next ?? null;
  morph($(`${name}-pager`), panes.pager(p, () => turnPage(name, -1), () => turnPage(name, 1)));
}

/** Shows the page before (-1) or after (1) the one on screen of `name`. */
function turnPage(name, direction) {
  const p = pages[name];
  if (direction > 0 && p.next !== null) {
    p.back.push(p.after);
    p.after = p.next;
  } else if (direction < 0 && p.back.length) {
    p.after = p.back.pop();
  } else {
    return;
  }
  poll();
}

function drawStatus(s) {
  $("node-name").textContent = s.node;
  $("node-version").textContent = `v${s.version}`;
  document.title = `Keel — ${s.node}`;
  morph($("status-tiles"), panes.statusTiles(s));
  const n = s.threads?.stored ?? 0;
  $("agents-count").textContent = `${n} thread${n === 1 ? "" : "s"} stored`;
}

function drawTree(answer) {
  morph($("tree"), panes.tree(answer, treeFilter, kill));
}

function drawAgents(answer) {
  morph($("agents"), panes.agents(answer, openThread));
  drawPager("agents", answer);
}

function drawDeadLetters(answer) {
  morph($("dlq-counts"), panes.dlqCounts(answer));
  morph($("dlq"), panes.deadLetters(answer, actOnLetter));
  drawPager("dlq", answer);
}

function drawNotifications(answer) {
  morph($("notifications"), panes.notifications(answer));
  drawPager("notifications", answer);
}

function showError(name, err) {
  const box = $(`error-${name}`);
  if (!err) {
    box.hidden = true;
    box.textContent = "";
    return;
  }
  box.hidden = false;
  box.textContent = `${last[name] ? "showing the last answer; " : ""}GET ${pathOf(endpoints.find((e) => e.name === name))}: ${err}`;
  if (err.status === 401 || err.status === 403)
    box.append(h("div", { class: "small" }, "Enter the admin token (gateway.admin_token) at the top right."));
}

let polling = false;
let pollAgain = false; // asked for while a poll was under way (a new page)

async function poll() {
  if (polling) {
    pollAgain = true;
    return;
  }
  polling = true;
  const results = await Promise.allSettled(endpoints.map((e) => api("GET", pathOf(e))));
  let failed = 0;
  results.forEach((r, i) => {
    const e = endpoints[i];
    if (r.status === "fulfilled") {
      last[e.name] = r.value;
      showError(e.name, null);
      try {
        e.draw(r.value);
      } catch (err) {
        ++failed;
        showError(e.name, `cannot draw the answer: ${err.message}`);
        console.error(err);
      }
    } else {
      ++failed;
      showError(e.name, r.reason);
    }
  });
  const state = $("poll-state");
  const time = new Date().toLocaleTimeString();
  state.className = `badge ${failed === 0 ? "good" : failed === endpoints.length ? "bad" : "warn"}`;
  const unreachable = results.every((r) => r.status === "rejected" && r.reason?.status === 0);
  state.textContent = failed === 0 ? `live · ${time}`
    : unreachable ? `node unreachable · ${time}`
    : `${failed} of ${endpoints.length} requests failed · ${time}`;
  polling = false;
  if (pollAgain) {
    pollAgain = false;
    poll();
  }
}

// -- admin actions -----------------------------------------------------------

async function kill(path) {
  try {
    await api("POST", "/api/v1/kill", { path, reason: "killed from the dashboard" });
    notify(`killed ${path}; its supervisor restarts it`);
  } catch (err) {
    notify(`kill ${path} failed: ${err}`, "error");
  }
  poll();
}

async function actOnLetter(letter, action, button) {
  if (button) button.disabled = true;
  try {
    const path = `/api/v1/dlq/${encodeURIComponent(letter.from)}/${letter.seq}/${action}`;
    const body = action === "drop" ? { reason: "dropped from the dashboard" } : {};
    const x = await api("POST", path, body);
    notify(`${action} ${letter.id}: now ${x.status}`);
  } catch (err) {
    notify(`${action} ${letter.id} failed: ${err}`, "error");
  }
  poll();
}

// -- the token ---------------------------------------------------------------

function showToken() {
  $("token-state").textContent = token() ? "set for this tab" : "none";
}

// -- the chat ----------------------------------------------------------------

let chat;

function openThread(thread) {
  $("chat-thread").value = thread;
  sessionStorage.setItem("keel.chatThread", thread);
  chat.history();
}

function start() {
  chat = new Chat({ state: $("ws-state"), log: $("chat-log"), thread: $("chat-thread"), input: $("chat-input") });
  $("chat-thread").value = sessionStorage.getItem("keel.chatThread")
    ?? `dash-${Math.random().toString(36).slice(2, 8)}`;
  $("chat-thread").addEventListener("change", () => sessionStorage.setItem("keel.chatThread", $("chat-thread").value.trim()));
  $("chat-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    chat.send();
  });
  $("chat-input").addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      chat.send();
    }
  });
  $("chat-history").addEventListener("click", () => chat.history());
  $("chat-subscribe").addEventListener("click", () => chat.subscribe());
  $("chat-clear").addEventListener("click", () => $("chat-log").replaceChildren());
  $("ws-reconnect").addEventListener("click", () => chat.connect(true));

  $("token-input").value = token();
  showToken();
  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    setToken($("token-input").value.trim());
    showToken();
    chat.connect(true);
    poll();
  });
  $("token-clear").addEventListener("click", () => {
    setToken("");
    $("token-input").value = "";
    showToken();
    chat.connect(true);
    poll();
  });
  $("tree-filter").addEventListener("input", (ev) => {
    treeFilter = ev.target.value.trim();
    if (last.tree) drawTree(last.tree);
    poll();
  });

  chat.connect();
  poll();
  setInterval(() => {
    if (!document.hidden) poll();
  }, POLL_MS);
}

start();
