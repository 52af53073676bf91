// The panes drawn from the admin API's answers (shapes: docs/protocol.md,
// "HTTP endpoints"). Each takes the answer and the actions it may offer;
// a list's answer is one page of it.

import { h, badge, toneOf, duration, when, bytes, confirmButton } from "./dom.js";

const MAX_ROWS = 200;

// -- status ------------------------------------------------------------------

export function statusTiles(s) {
  const t = s.threads ?? {};
  const g = s.gateway ?? {};
  const st = s.store ?? {};
  const quarantined = Array.isArray(t.quarantined) ? t.quarantined.length : (t.quarantined ?? 0);
  const tile = (label, value, testid, sub, tone) =>
    h("div", { class: `tile ${tone ?? ""}`, "data-testid": testid },
      h("div", { class: "label" }, label), h("div", { class: "value" }, value),
      sub ? h("div", { class: "sub" }, sub) : null);
  const tiles = [
    tile("Uptime", duration(s.uptime_ms), "stat-uptime", `protocol ${s.protocol}`),
    tile("Live threads", t.active ?? 0, "stat-active", `${t.stored ?? 0} stored`),
    tile("Passivated", t.passivations ?? 0, "stat-passivations", `${t.evictions ?? 0} evicted`),
    tile("Quarantined", quarantined, "stat-quarantined", "threads", quarantined ? "bad" : ""),
    tile("Connections", g.connections_open ?? 0, "stat-connections", `${g.connections_total ?? 0} since start`),
    tile("Frames", `${g.frames_in ?? 0} in`, "stat-frames", `${g.frames_out ?? 0} out · ${g.bad_frames ?? 0} bad`),
    tile("Slow clients", g.slow_client_disconnects ?? 0, "stat-slow", `${g.rate_limited_frames ?? 0} rate-limited`),
    tile("Store", `${st.flushes ?? 0} flushes`, "stat-store", `${st.failed_flushes ?? 0} failed`,
         st.failed_flushes ? "bad" : ""),
    tile("Memory", bytes(s.rss_bytes), "stat-memory", `peak ${bytes(s.peak_rss_bytes)}`),
  ];
  if (s.cluster) {
    const c = s.cluster;
    tiles.push(c.error ? tile("Cluster", "error", "stat-cluster", c.error, "bad")
                       : tile("Cluster", c.state, "stat-cluster", `${c.held ?? 0}/${c.shards ?? 0} shards · ${(c.members ?? []).length} members`));
  }
  return tiles;
}

// -- supervision tree --------------------------------------------------------

/** The tree from GET /api/v1/tree. `kill(path)` kills an actor. Nodes are
 *  shown if their path contains `filter` or a descendant's does (the node
 *  answered those for the filter it was asked; this one may be newer). A
 *  supervisor's `children_total` counts the matches the node left out. */
export function tree(answer, filter, kill) {
  const more = (node, kids, shown) =>
    Math.max(kids.length, node.children_total ?? 0) - shown.length;
  const root = answer.tree;
  const matches = (node, path) =>
    !filter || path.includes(filter) || (node.children ?? []).some((c) => matches(c, `${path}/${c.id}`));
  const item = (node, path) => {
    const kids = (node.children ?? []).filter((c) => matches(c, `${path}/${c.id}`));
    const shown = kids.slice(0, MAX_ROWS);
    return h("li", {},
      h("div", { class: `node ${node.supervisor ? "sup" : "worker"}`, "data-testid": "tree-node", "data-path": path || "/" },
        h("span", { class: "id" }, node.id),
        node.supervisor ? h("span", { class: "kind", title: "supervisor" }, "sup") : null,
        badge(node.state),
        h("span", { class: `restarts ${node.restarts ? "some" : ""}`, "data-testid": "restarts",
                    "data-count": node.restarts, title: "restarts" }, `↻ ${node.restarts}`),
        h("span", { class: "uptime muted", title: "uptime" }, duration(node.uptime_ms)),
        node.last_exit ? h("span", { class: "last-exit", "data-testid": "last-exit", title: "last exit reason" }, node.last_exit) : null,
        path ? confirmButton(`kill ${path}`, "Kill", "Kill?", { class: "kill danger", "data-testid": "kill", title: `kill ${path}; its supervisor restarts it` },
                             () => kill(path)) : null),
      shown.length ? h("ul", {}, shown.map((c) => item(c, `${path}/${c.id}`))) : null,
      more(node, kids, shown) ? h("div", { class: "muted small more" }, `and ${more(node, kids, shown)} more: filter to find one`) : null);
  };
  return h("ul", { class: "tree" }, item(root, ""));
}

// -- providers ---------------------------------------------------------------

export function providers(answer) {
  const pools = answer.pools ?? [];
  if (!pools.length) return h("p", { class: "muted" }, "no pools");
  return pools.map((pool) => h("div", { class: "pool", "data-testid": "pool", "data-pool": pool.pool },
    h("h3", {}, `pool ${pool.pool}`),
    pool.error ? h("div", { class: "pane-error" }, `the pool's router did not answer: ${pool.error}`)
      : table(["provider", "status", "breaker", "failures in a row", "calls", "cooldown", "last success"],
        (pool.providers ?? []).flatMap((p) => withSub(
          h("tr", { "data-testid": "provider", "data-provider": p.provider },
            h("td", { class: "strong" }, p.provider),
            h("td", {}, badge(p.status)),
            h("td", {}, badge(p.breaker)),
            h("td", { class: "num" }, p.consecutive_failures ?? 0),
            h("td", { class: "num" }, `${p.calls ?? 0}`, p.failures ? h("span", { class: "bad-text" }, ` · ${p.failures} failed`) : null),
            h("td", {}, p.cooldown_remaining_ms ? h("span", { class: "warn-text" }, `${duration(p.cooldown_remaining_ms)} left`) : h("span", { class: "muted" }, "—")),
            h("td", {}, when(p.last_success))),
          p.last_error ? [h("span", { class: "sub-label" }, "last error"),
                          p.last_error_class ? h("b", {}, `${p.last_error_class}: `) : null,
                          h("span", { "data-testid": "provider-error" }, p.last_error)] : null, 7)))));
}

/** A table row and, when `sub` is given, a second row under it spanning
 *  `span` columns (long texts: errors, reasons). */
function withSub(row, sub, span) {
  if (!sub) return [row];
  row.classList.add("has-sub");
  return [row, h("tr", { class: "sub" }, h("td", { colspan: span }, sub))];
}

// -- agents ------------------------------------------------------------------

/** A page of the agent tree from GET /api/v1/agents; `open(thread)` shows a
 *  thread in the chat pane. A child on another page is not drawn under its
 *  parent: it is on its own page, as a root. */
export function agents(answer, open) {
  const list = answer.agents ?? [];
  if (!list.length) return h("p", { class: "muted" }, "no threads yet: send a message in the chat pane");
  const byThread = new Map(list.map((a) => [a.thread, a]));
  const roots = list.filter((a) => !a.parent || !byThread.has(a.parent));
  let rows = 0;
  const row = (a, depth, seen) => {
    if (rows++ >= MAX_ROWS || seen.has(a.thread)) return [];
    seen.add(a.thread);
    const kids = (a.children ?? []).map((c) => byThread.get(c)).filter(Boolean);
    return [h("tr", { "data-testid": "agent", "data-thread": a.thread },
        h("td", { class: `depth-${Math.min(depth, 8)}` },
          depth ? h("span", { class: "muted" }, "└ ") : null,
          h("button", { type: "button", class: "link", title: "open in the chat pane", onclick: () => open(a.thread) }, a.thread)),
        h("td", {}, badge(a.state), a.paused_at ? [" ", badge("paused", "warn")] : null),
        h("td", { "data-testid": "agent-name" }, a.agent || "default"),
        h("td", {}, a.pool, a.model ? h("span", { class: "muted" }, ` · ${a.model}`) : null),
        h("td", {}, a.provider || h("span", { class: "muted" }, "—")),
        h("td", {}, when(a.created_at))),
      ...kids.flatMap((k) => row(k, depth + 1, seen))];
  };
  const seen = new Set();
  const body = roots.flatMap((r) => row(r, 0, seen));
  return [table(["thread", "state", "agent", "pool · model", "provider", "created"], body),
          list.length > MAX_ROWS ? h("div", { class: "muted small more" }, `showing ${MAX_ROWS} of ${list.length}`) : null];
}

// -- dead letters ------------------------------------------------------------

/** GET /api/v1/dlq; `act(letter, "retry"|"drop")` acts on one. */
export function deadLetters(answer, act) {
  const list = answer.dead_letters ?? [];
  if (!list.length) return h("p", { class: "muted" }, "no dead letters");
  const open = (x) => x.status === "pending" || x.status === "abandoned";
  return table(["letter", "status", "from → to", "retries", "next retry", ""],
    list.slice(0, MAX_ROWS).flatMap((x) => withSub(
      h("tr", { "data-testid": "dead-letter", "data-id": x.id },
        h("td", { class: "strong mono" }, x.id),
        h("td", {}, badge(x.status)),
        h("td", { class: "mono" }, x.from, " → ", x.to || (x.channels ? `channels ${x.channels.join(", ")}` : "—")),
        h("td", { class: "num" }, x.retries ?? 0),
        h("td", {}, x.next_retry_at ? when(x.next_retry_at) : h("span", { class: "muted" }, "—")),
        h("td", { class: "actions" },
          h("button", { type: "button", "data-testid": "dlq-retry", disabled: !open(x), title: "deliver it again now",
                        onclick: (ev) => act(x, "retry", ev.currentTarget) }, "Retry"),
          confirmButton(`drop ${x.id}`, "Drop", "Drop?", { class: "danger", "data-testid": "dlq-drop", disabled: !open(x), title: "drop it for good" },
                        (b) => act(x, "drop", b)))),
      [h("div", { class: "letter-text", title: x.text }, x.text),
       h("div", { class: "reason" }, h("span", { class: "sub-label" }, "reason"), x.reason, " · ", when(x.at)),
       x.events?.length ? h("details", {}, h("summary", {}, `${x.events.length} event${x.events.length > 1 ? "s" : ""}`),
         h("ol", {}, x.events.map((e) => h("li", {}, when(e.at), ` ${e.action}: ${e.outcome}`)))) : null], 6)));
}

export function dlqCounts(answer) {
  const counts = Object.entries(answer.counts ?? {});
  return counts.length ? counts.map(([k, v]) => [badge(`${v} ${k}`, toneOf(k)), " "]) : null;
}

// -- notifications -----------------------------------------------------------

export function notifications(answer) {
  const list = answer.notifications ?? [];
  if (!list.length) return h("p", { class: "muted" }, "nothing was reported to the owner");
  return h("ul", { class: "notes" }, list.slice(0, MAX_ROWS).map((n) =>
    h("li", { class: `note ${n.severity}`, "data-testid": "notification" },
      h("div", { class: "head" }, badge(n.severity), h("b", {}, n.kind), h("span", { class: "muted" }, n.subject),
        h("span", { class: "right" }, badge(n.status), " ", when(n.at))),
      h("div", { class: "text" }, n.text),
      n.error ? h("div", { class: "bad-text small" }, `not delivered: ${n.error}`) : null,
      n.suppressed ? h("div", { class: "muted small" }, `${n.suppressed} repeat${n.suppressed > 1 ? "s" : ""} suppressed, last `, when(n.last_suppressed_at)) : null)));
}

// -- paging ------------------------------------------------------------------

/** The pager of a paged list: its page number and buttons to the page
 *  before and after (`p`: the list's cursors, see app.js). */
export function pager(p, before, after) {
  if (!p.back.length && p.next === null) return null;
  return [h("button", { type: "button", class: "quiet", "data-testid": "page-before", disabled: !p.back.length,
                        title: "the page before", onclick: before }, "‹"),
          h("span", { class: "muted small", "data-testid": "page-number" }, ` page ${p.back.length + 1} `),
          h("button", { type: "button", class: "quiet", "data-testid": "page-after", disabled: p.next === null,
                        title: "the page after", onclick: after }, "›")];
}

function table(heads, rows) {
  return h("table", {}, h("thead", {}, h("tr", {}, heads.map((x) => h("th", {}, x)))), h("tbody", {}, rows));
}
