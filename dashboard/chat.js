// The chat pane: one WebSocket to /ws speaking the client protocol
// (docs/protocol.md). It shows what the node answers: the ack once the
// message is durable, the turn's status events, streamed deltas, the reply
// or the error outcome; history pages and subscriptions on request.

import { h } from "./dom.js";
import { api, token } from "./api.js";

const PROTOCOL = 1;

export class Chat {
  /** `els`: the pane's elements (state, log, thread, input, send...). */
  constructor(els) {
    this.els = els;
    this.ws = null;
    this.hello = null;
    this.queue = [];           // frames sent before the socket opened
    this.subscribed = new Set();
    this.pending = new Map();  // thread + "\n" + client id -> the message's meta element
    this.streams = new Map();  // thread + "\n" + reply_to -> {el, attempt}
    this.statuses = new Map(); // thread + "\n" + reply_to -> the turn's status line
    this.answered = new Set(); // thread + "\n" + reply_to of the turns that ended
    this.connNotices = [];     // notices about a connection problem, gone once one works
    this.retry = 1000;
    this.counter = 0;
    this.reconnectTimer = null;
    this.refusedShown = false;
    this.attempts = 0;         // connect() calls, the latest wins
  }

  /** Resolves with the WebSocket URL. A browser cannot send a header on a
   *  WebSocket, and a token in a URL ends up in proxy logs and the browser's
   *  history: with a token, the page trades it for a single-use ticket
   *  (POST /api/v1/ws-ticket, valid 30 s) and puts that in the URL. */
  async url() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const base = `${scheme}://${location.host}/ws`;
    if (!token()) return base;
    const { ticket } = await api("POST", "/api/v1/ws-ticket");
    return `${base}?ticket=${encodeURIComponent(ticket)}`;
  }

  /** (Re)connects; `fresh`: a new token, so a refusal is worth saying again. */
  connect(fresh = false) {
    clearTimeout(this.reconnectTimer);
    if (fresh) this.refusedShown = false;
    if (this.ws) {
      this.ws.onclose = null;
      this.ws.close(1000);
      this.ws = null;
    }
    this.hello = null;
    this.setState("connecting", "connecting…");
    // A later connect() (a new token) supersedes one still getting its ticket.
    const attempt = ++this.attempts;
    this.url().then((url) => {
      if (attempt !== this.attempts) return;
      const ws = new WebSocket(url);
      this.ws = ws;
      ws.onmessage = (ev) => this.onFrame(ev.data);
      ws.onclose = (ev) => this.onClose(ev);
      ws.onerror = () => {}; // the close event that follows says what happened
    }, (err) => {
      if (attempt !== this.attempts) return;
      this.onClose({ code: 0, reason: "", ticketError: err });
    });
  }

  onClose(ev) {
    const wasUp = this.hello !== null;
    this.ws = null;
    this.hello = null;
    if (wasUp) {
      this.connProblem(`connection closed (code ${ev.code}${ev.reason ? `: ${ev.reason}` : ""}); reconnecting`, "warn");
      this.retry = 1000;
    } else if (!this.refusedShown) {
      // Said once until a connection succeeds, not on every retry.
      this.refusedShown = true;
      this.connProblem(ev.ticketError
        ? `The WebSocket needs a ticket from the admin API, which refused the token: ${ev.ticketError}. ` +
          "Enter the admin token (gateway.admin_token) above."
        : token()
        ? "The WebSocket was refused with the ticket the admin API gave; try reconnecting."
        : "The WebSocket was refused: the node needs a token. Enter the admin token above.",
        "error");
    }
    this.setState("disconnected", `disconnected (code ${ev.code}), retrying in ${this.retry / 1000}s`);
    this.reconnectTimer = setTimeout(() => this.connect(), this.retry);
    this.retry = Math.min(this.retry * 2, 15000);
  }

  /** Whether a connect() is getting its ticket or its socket opening. */
  connecting() {
    return this.els.state.dataset.state === "connecting";
  }

  setState(tone, text) {
    this.els.state.className = `badge ${tone === "connected" ? "good" : tone === "connecting" ? "warn" : "bad"}`;
    this.els.state.textContent = text;
    this.els.state.dataset.state = tone;
  }

  sendFrame(frame) {
    if (this.ws && this.hello) this.ws.send(JSON.stringify(frame));
    else {
      this.queue.push(frame);
      if (!this.ws && !this.connecting()) this.connect();
    }
  }

  thread() {
    return this.els.thread.value.trim();
  }

  /** Sends the composer's text to the thread. */
  send() {
    const thread = this.thread();
    const text = this.els.input.value;
    if (!thread) return this.system("enter a thread id first", "error");
    if (!text.trim()) return;
    const id = `dash-${Date.now().toString(36)}-${++this.counter}`;
    const meta = h("span", { class: "meta", "data-testid": "chat-ack" }, `${id} · sending…`);
    this.add(h("div", { class: "msg user", "data-testid": "chat-user", "data-id": id },
               h("div", { class: "who" }, this.tag(thread), "you"),
               h("div", { class: "text" }, text), meta));
    this.pending.set(`${thread}\n${id}`, meta);
    this.subscribed.add(thread);
    this.els.input.value = "";
    this.sendFrame({ type: "send", thread, id, text });
  }

  history() {
    const thread = this.thread();
    if (!thread) return this.system("enter a thread id first", "error");
    this.sendFrame({ type: "history", thread, id: `h-${++this.counter}`, limit: 100 });
  }

  subscribe() {
    const thread = this.thread();
    if (!thread) return this.system("enter a thread id first", "error");
    const on = !this.subscribed.has(thread);
    if (on) this.subscribed.add(thread);
    else this.subscribed.delete(thread);
    this.sendFrame({ type: on ? "subscribe" : "unsubscribe", thread });
  }

  onFrame(data) {
    let f;
    try {
      f = JSON.parse(data);
    } catch {
      return this.system(`the node sent a frame that is not JSON: ${String(data).slice(0, 200)}`, "error");
    }
    const handler = Object.hasOwn(this.handlers, f.type) ? this.handlers[f.type] : undefined;
    if (handler) handler.call(this, f);
    // Unknown frame types are ignored, as the protocol asks.
  }

  handlers = {
    hello(f) {
      if (f.protocol !== PROTOCOL) {
        this.system(`the node speaks protocol ${f.protocol}; this page speaks ${PROTOCOL}`, "error");
        this.ws.close(1000);
        return;
      }
      this.hello = f;
      this.retry = 1000;
      this.refusedShown = false;
      // The problems said while connecting are over.
      for (const el of this.connNotices.splice(0)) el.remove();
      this.setState("connected", `connected to ${f.node}`);
      this.system(`connected to ${f.node} (protocol ${f.protocol})`);
      for (const thread of this.subscribed)
        this.ws.send(JSON.stringify({ type: "subscribe", thread }));
      const queued = this.queue.splice(0);
      for (const frame of queued) this.ws.send(JSON.stringify(frame));
    },
    ack(f) {
      const meta = this.pending.get(`${f.thread}\n${f.id}`);
      if (meta) meta.textContent = `${f.id} · seq ${f.seq} · stored${f.duplicate ? " (duplicate)" : ""}`;
      if (meta) meta.classList.add("acked");
    },
    status(f) {
      const words = [f.state, f.detail, f.text].filter(Boolean).join(" — ");
      const el = h("div", { class: "event", "data-testid": "chat-status", "data-thread": f.thread,
                            "data-reply-to": f.reply_to ?? "" }, this.tag(f.thread), words);
      // A turn's status (thinking, retrying...) stands until the next one
      // or the turn's outcome; history_reset and the like (reply_to 0)
      // belong to no turn and stay.
      if (!f.reply_to) return this.add(el);
      const key = `${f.thread}\n${f.reply_to}`;
      if (this.answered.has(key)) return; // late: the turn already ended
      this.statuses.get(key)?.remove();
      this.statuses.set(key, el);
      this.add(el);
    },
    delta(f) {
      const key = `${f.thread}\n${f.reply_to}`;
      let s = this.streams.get(key);
      if (!s || s.attempt !== f.attempt) {
        s?.el.remove();
        s = { attempt: f.attempt, el: h("div", { class: "text" }) };
        this.add(h("div", { class: "msg reply streaming" },
                   h("div", { class: "who" }, this.tag(f.thread), "streaming…"), s.el));
        this.streams.set(key, s);
      }
      s.el.textContent += f.text;
    },
    tool(f) {
      this.add(h("div", { class: "event tool" }, this.tag(f.thread),
                 h("b", {}, f.tool), " ", h("span", { class: "clip" }, f.text)));
    },
    reply(f) {
      this.dropStream(f);
      this.add(h("div", { class: "msg reply", "data-testid": "chat-reply", "data-thread": f.thread },
                 h("div", { class: "who" }, this.tag(f.thread), f.provider || "reply"),
                 h("div", { class: "text" }, f.text),
                 h("span", { class: "meta" }, `seq ${f.seq} · answers ${f.reply_to}`)));
    },
    error(f) {
      this.dropStream(f);
      const meta = f.id ? this.pending.get(`${f.thread}\n${f.id}`) : undefined;
      if (meta && f.reply_to === undefined) meta.textContent = `${f.id} · not stored`;
      this.add(h("div", { class: "msg error", "data-testid": "chat-error" },
                 h("div", { class: "who" }, f.thread ? this.tag(f.thread) : null, f.code),
                 h("div", { class: "text" }, f.message),
                 f.seq ? h("span", { class: "meta" }, `seq ${f.seq} · answers ${f.reply_to}`) : null));
    },
    history(f) {
      const rows = f.entries.map((e) => h("div", { class: `hist ${e.kind}` },
        h("span", { class: "seq" }, e.seq), h("span", { class: "kind" }, e.kind),
        h("span", { class: "text" },
          e.kind === "error" && e.code ? h("b", {}, `${e.code}: `) : null,
          e.kind === "tool" && e.tool ? h("b", {}, `${e.tool}: `) : null,
          e.text ?? "",
          e.kind === "user" && e.task ? h("span", { class: "task", title: "task state" }, ` ${e.task}`) : null)));
      this.add(h("div", { class: "history", "data-testid": "chat-history-page" },
                 h("div", { class: "who" }, this.tag(f.thread),
                   `history: ${f.entries.length} entr${f.entries.length === 1 ? "y" : "ies"}${f.more ? " (more)" : ""}`),
                 rows.length ? rows : h("div", { class: "muted" }, "empty")));
    },
    subscribed(f) {
      this.system(`${f.subscribed === false ? "unsubscribed from" : "subscribed to"} ${f.thread}`);
    },
    spawned(f) {
      this.system(`spawned ${f.child} under ${f.thread}${f.created ? "" : " (existed)"}`);
    },
    cancelled(f) {
      this.system(`cancelled ${(f.threads ?? []).join(", ")}`);
    },
  };

  /** The turn answering `f.reply_to` ended (a reply or an error outcome):
   *  its streamed text and its status line go. */
  dropStream(f) {
    if (f.reply_to === undefined || f.reply_to === null) return;
    const key = `${f.thread}\n${f.reply_to}`;
    this.streams.get(key)?.el.parentElement?.remove();
    this.streams.delete(key);
    this.statuses.get(key)?.remove();
    this.statuses.delete(key);
    this.answered.add(key);
    if (this.answered.size > 1000) this.answered.delete(this.answered.values().next().value);
  }

  /** A notice about the connection, taken away once a connection works. */
  connProblem(text, tone) {
    const el = h("div", { class: `event system ${tone}`, "data-testid": "chat-conn-problem" }, text);
    this.connNotices.push(el);
    this.add(el);
  }

  tag(thread) {
    return h("span", { class: "thread-tag" }, thread);
  }

  system(text, tone = "info") {
    this.add(h("div", { class: `event system ${tone}` }, text));
  }

  add(el) {
    const log = this.els.log;
    const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
    log.append(el);
    while (log.childElementCount > 500) log.firstElementChild.remove();
    if (atBottom) log.scrollTop = log.scrollHeight;
  }
}
