// Small DOM and formatting helpers.

/** Creates an element: h("div", {class: "x", "data-testid": "y",
 *  onclick: f}, child, [children], "text"). null/false children are left out. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs ?? {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function")
      el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else if (key in el && typeof value !== "string") el[key] = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else el.append(child instanceof Node ? child : String(child));
  }
}

/** A coloured word: state, status, breaker, severity. */
export function badge(text, tone) {
  return h("span", { class: `badge ${tone ?? toneOf(text)}` }, text);
}

const tones = {
  good: ["running", "healthy", "closed", "ACTIVE", "delivered", "sent", "ok", "connected"],
  warn: ["degraded", "half_open", "SUSPENDED", "pending", "medium", "restarting", "logged", "connecting"],
  bad: ["unhealthy", "down", "open", "failed", "abandoned", "high", "dead", "disconnected", "stopped"],
};

export function toneOf(word) {
  for (const [tone, words] of Object.entries(tones))
    if (words.includes(word)) return tone;
  return "neutral";
}

/** 93000 -> "1m 33s". */
export function duration(ms) {
  if (!Number.isFinite(ms) || ms < 0) return "—";
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  const hours = Math.floor(m / 60);
  if (hours < 48) return `${hours}h ${m % 60}m`;
  return `${Math.floor(hours / 24)}d ${hours % 24}h`;
}

/** Epoch ms -> "12s ago" (or "in 12s"); the full time is in `title`. */
export function when(ms) {
  if (!ms) return h("span", { class: "muted" }, "—");
  const diff = Date.now() - ms;
  const text = diff >= 0 ? `${duration(diff)} ago` : `in ${duration(-diff)}`;
  return h("time", { datetime: new Date(ms).toISOString(), title: new Date(ms).toLocaleString() }, text);
}

export function bytes(n) {
  if (!Number.isFinite(n)) return "—";
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; ++i; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

// Confirm buttons armed by a first click, by key, with the time they disarm:
// the panes are drawn again on every poll, and an armed button must stay armed.
const armed = new Map();

/** A button that acts on a second click within 4 s of the first. `key`
 *  names it across redraws. */
export function confirmButton(key, label, confirmLabel, attrs, action) {
  const isArmed = () => (armed.get(key) ?? 0) > Date.now();
  const button = h("button", { ...attrs, type: "button" });
  const show = () => {
    button.textContent = isArmed() ? confirmLabel : label;
    button.classList.toggle("armed", isArmed());
  };
  button.addEventListener("click", () => {
    if (!isArmed()) {
      armed.set(key, Date.now() + 4000);
      setTimeout(show, 4050);
    } else {
      armed.delete(key);
      action(button);
    }
    show();
  });
  show();
  return button;
}

// -- redrawing in place --------------------------------------------------------

// What identifies an element across redraws: elements match only when these
// agree (and the tag does), so a kept element's listeners act on the same
// actor, thread or letter as before.
const keyOf = (el) => el.dataset.path ?? el.dataset.id ?? el.dataset.thread ??
                      el.dataset.provider ?? el.dataset.pool ?? el.dataset.testid ?? "";

/** Makes `parent`'s children look like `nodes` (freshly drawn), keeping the
 *  elements that match: the panes are drawn again on every poll, and this
 *  keeps hover, focus, open <details> and a click in progress intact. */
export function morph(parent, nodes) {
  const want = [];
  for (const n of [nodes].flat(Infinity))
    if (n !== null && n !== undefined && n !== false)
      want.push(n instanceof Node ? n : document.createTextNode(String(n)));
  want.forEach((next, i) => {
    const have = parent.childNodes[i];
    if (!have) parent.append(next);
    else if (matches(have, next)) patch(have, next);
    else parent.replaceChild(next, have);
  });
  while (parent.childNodes.length > want.length) parent.lastChild.remove();
}

function matches(a, b) {
  if (a.nodeType !== b.nodeType || a.nodeName !== b.nodeName) return false;
  return a.nodeType !== Node.ELEMENT_NODE || keyOf(a) === keyOf(b);
}

function patch(have, next) {
  if (have.nodeType !== Node.ELEMENT_NODE) {
    if (have.nodeValue !== next.nodeValue) have.nodeValue = next.nodeValue;
    return;
  }
  for (const { name } of [...have.attributes])
    if (!next.hasAttribute(name) && !(name === "open" && have.nodeName === "DETAILS"))
      have.removeAttribute(name);
  for (const { name, value } of [...next.attributes])
    if (have.getAttribute(name) !== value) have.setAttribute(name, value);
  if ("disabled" in have && have.disabled !== next.disabled) have.disabled = next.disabled;
  morph(have, [...next.childNodes]);
}
