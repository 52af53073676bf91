#!/usr/bin/env node
// WebSocket conformance cases (RFC 6455) for a keel-node gateway, numbered
// by section in the manner of the Autobahn test suite. Well-formed traffic
// goes through the `ws` client from npm (tests/npm); frames that `ws` will
// not send (unmasked, reserved bits, bad opcodes, bad close codes, invalid
// UTF-8) are written by hand over a raw TCP socket after a real handshake.
//
//   node tests/conformance/ws-conformance.mjs --url ws://127.0.0.1:PORT/ws \
//     --max-frame-bytes N [--json]
//
// Prints one row per case and a closing "N passed, N failed" line; exits 1
// when a case failed, 2 for bad usage. Cases marked `info` check behaviour
// RFC 6455 leaves open or that the server's WebSocket library decides;
// their outcome is printed but never fails the run.

import { createRequire } from "node:module";
import net from "node:net";
import crypto from "node:crypto";

const require = createRequire(new URL("../npm/package.json", import.meta.url));
const WebSocket = require("ws");

// -- options -------------------------------------------------------------------

function options(argv) {
  const opts = { url: "", maxFrameBytes: 0, json: false };
  for (let i = 0; i < argv.length; ++i) {
    if (argv[i] === "--url") opts.url = argv[++i] ?? "";
    else if (argv[i] === "--max-frame-bytes") opts.maxFrameBytes = Number(argv[++i]);
    else if (argv[i] === "--json") opts.json = true;
    else return null;
  }
  return opts.url && opts.maxFrameBytes >= 1024 ? opts : null;
}

const opts = options(process.argv.slice(2));
if (!opts) {
  console.error("usage: ws-conformance.mjs --url ws://HOST:PORT/ws --max-frame-bytes N [--json]");
  process.exit(2);
}
const target = new URL(opts.url);
const wait_ms = 3000;

// -- frames --------------------------------------------------------------------

const op = { cont: 0x0, text: 0x1, binary: 0x2, close: 0x8, ping: 0x9, pong: 0xa };

/// One client frame: masked unless `mask` is false.
function frame(opcode, payload = Buffer.alloc(0), { fin = true, rsv = 0, mask = true } = {}) {
  const data = Buffer.isBuffer(payload) ? payload : Buffer.from(payload);
  let header;
  if (data.length < 126) {
    header = Buffer.from([0, data.length]);
  } else if (data.length < 65536) {
    header = Buffer.alloc(4);
    header[1] = 126;
    header.writeUInt16BE(data.length, 2);
  } else {
    header = Buffer.alloc(10);
    header[1] = 127;
    header.writeBigUInt64BE(BigInt(data.length), 2);
  }
  header[0] = (fin ? 0x80 : 0) | (rsv << 4) | opcode;
  if (!mask) return Buffer.concat([header, data]);
  header[1] |= 0x80;
  const key = crypto.randomBytes(4);
  const body = Buffer.from(data.map((b, i) => b ^ key[i % 4]));
  return Buffer.concat([header, key, body]);
}

/// A close frame's payload: the code, then the reason.
function closePayload(code, reason = Buffer.alloc(0)) {
  const buf = Buffer.alloc(2);
  buf.writeUInt16BE(code);
  return Buffer.concat([buf, Buffer.isBuffer(reason) ? reason : Buffer.from(reason)]);
}

/// Splits server frames off `buf`; returns [frames, rest].
function parseFrames(buf) {
  const frames = [];
  for (;;) {
    if (buf.length < 2) break;
    let len = buf[1] & 0x7f;
    let pos = 2;
    if (len === 126) {
      if (buf.length < 4) break;
      len = buf.readUInt16BE(2);
      pos = 4;
    } else if (len === 127) {
      if (buf.length < 10) break;
      len = Number(buf.readBigUInt64BE(2));
      pos = 10;
    }
    if (buf.length < pos + len) break;
    frames.push({ fin: (buf[0] & 0x80) !== 0, opcode: buf[0] & 0x0f, payload: buf.subarray(pos, pos + len) });
    buf = buf.subarray(pos + len);
  }
  return [frames, buf];
}

// -- raw connections -----------------------------------------------------------

/// Opens a raw connection, completes the handshake and waits for the
/// server's `hello` frame. Resolves to { socket, frames, closed() }.
function rawConnect() {
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(target.port), target.hostname);
    const key = crypto.randomBytes(16).toString("base64");
    let buf = Buffer.alloc(0);
    let upgraded = false;
    const state = { socket, frames: [], ended: false, waiters: [] };
    const timer = setTimeout(() => reject(new Error("handshake timed out")), wait_ms);
    socket.on("connect", () => {
      socket.write(`GET ${target.pathname} HTTP/1.1\r\nHost: ${target.host}\r\n` +
        `Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: ${key}\r\n` +
        `Sec-WebSocket-Version: 13\r\n\r\n`);
    });
    const notify = () => state.waiters.splice(0).forEach((w) => w());
    socket.on("data", (chunk) => {
      buf = Buffer.concat([buf, chunk]);
      if (!upgraded) {
        const end = buf.indexOf("\r\n\r\n");
        if (end < 0) return;
        const head = buf.subarray(0, end).toString();
        if (!head.startsWith("HTTP/1.1 101")) return reject(new Error(`no upgrade: ${head.split("\r\n")[0]}`));
        upgraded = true;
        buf = buf.subarray(end + 4);
      }
      const [frames, rest] = parseFrames(buf);
      buf = rest;
      for (const f of frames) {
        if (!state.hello && f.opcode === op.text && f.payload.toString().includes('"hello"')) {
          state.hello = true;
          clearTimeout(timer);
          resolve(state);
        } else {
          state.frames.push(f);
        }
      }
      notify();
    });
    socket.on("error", () => {});
    socket.on("close", () => {
      state.ended = true;
      notify();
      reject(new Error("closed during the handshake"));
    });
  });
}

/// Waits until `pred(state)` holds, the socket ends or the time is up.
function until(state, pred, ms = wait_ms) {
  return new Promise((resolve) => {
    const deadline = Date.now() + ms;
    const check = () => {
      if (pred(state) || state.ended || Date.now() >= deadline) return resolve();
      state.waiters.push(check);
      setTimeout(check, Math.max(0, Math.min(100, deadline - Date.now())));
    };
    check();
  });
}

const closeFrame = (state) => state.frames.find((f) => f.opcode === op.close);
const closeCode = (f) => (f && f.payload.length >= 2 ? f.payload.readUInt16BE(0) : null);

/// Sends `frames` on a fresh raw connection and reports what came back:
/// { close: code or "none" (an empty close) or null, frames, ended }.
async function rawExchange(frames, { waitFor = (s) => closeFrame(s) } = {}) {
  const state = await rawConnect();
  for (const f of frames) state.socket.write(f);
  await until(state, waitFor);
  const cf = closeFrame(state);
  state.socket.destroy();
  return { close: cf ? (closeCode(cf) ?? "none") : null, frames: state.frames, ended: state.ended };
}

const jsonFrames = (r) => r.frames.filter((f) => f.opcode === op.text).map((f) => JSON.parse(f.payload.toString()));
const gotPong = (id) => (s) => s.frames.some((f) => f.opcode === op.text && f.payload.toString().includes(`"pong"`) && f.payload.toString().includes(`"${id}"`));

// -- expectations ----------------------------------------------------------------

/// The server fails the connection with one of `codes`.
const closesWith = (...codes) => (r) =>
  codes.includes(r.close) ? [true, `close ${r.close}`] : [false, `expected close ${codes.join(" or ")}, got ${describe(r)}`];

/// The server answers a JSON ping `id` with a JSON pong and stays open.
const pongs = (id) => (r) => {
  const ok = jsonFrames(r).some((j) => j.type === "pong" && j.id === id) && r.close === null;
  return [ok, ok ? `pong ${id}` : `expected pong ${id}, got ${describe(r)}`];
};

function describe(r) {
  const parts = r.frames.map((f) => (f.opcode === op.close ? `close ${closeCode(f) ?? "(empty)"}` : f.opcode === op.text ? `text ${f.payload.toString().slice(0, 60)}` : `opcode ${f.opcode} (${f.payload.length} bytes)`));
  if (r.ended) parts.push("socket closed");
  return parts.length ? parts.join(", ") : "nothing";
}

const ping = (id, extra = "") => `{"type":"ping","id":"${id}"${extra}}`;

// -- the cases -------------------------------------------------------------------

const cases = [];
const add = (id, name, run, { info = false } = {}) => cases.push({ id, name, run, info });
const raw = (frames, expect, waitFor) => async () => expect(await rawExchange(frames, waitFor ? { waitFor } : {}));

// 1 Framing
add("1.1", "text frame through ws: JSON ping answered", async () => {
  const ws = new WebSocket(opts.url);
  const got = await new Promise((resolve) => {
    const t = setTimeout(() => resolve(null), wait_ms);
    ws.on("message", (data, binary) => {
      const j = JSON.parse(data.toString());
      if (j.type === "hello") ws.send(ping("w1"));
      else { clearTimeout(t); resolve({ j, binary }); }
    });
    ws.on("error", () => resolve(null));
  });
  ws.terminate();
  const ok = got && !got.binary && got.j.type === "pong" && got.j.id === "w1";
  return [ok, ok ? "pong w1" : `got ${JSON.stringify(got)}`];
});
add("1.2", "binary frame through ws: error frame binary_frame, stays open", async () => {
  const ws = new WebSocket(opts.url);
  const got = await new Promise((resolve) => {
    const t = setTimeout(() => resolve(null), wait_ms);
    const seen = [];
    ws.on("message", (data) => {
      const j = JSON.parse(data.toString());
      seen.push(j);
      if (j.type === "hello") ws.send(Buffer.from([1, 2, 3]), { binary: true });
      else if (j.type === "error") ws.send(ping("w2"));
      else if (j.type === "pong") { clearTimeout(t); resolve(seen); }
    });
    ws.on("error", () => resolve(null));
  });
  ws.terminate();
  const ok = got && got.some((j) => j.type === "error" && j.code === "binary_frame");
  return [ok, ok ? "error binary_frame, then pong" : `got ${JSON.stringify(got)}`];
});
add("1.3", "masked text frame: answered", raw([frame(op.text, ping("r1"))], pongs("r1"), gotPong("r1")));
add("1.4", "unmasked client frame: 1002", raw([frame(op.text, ping("r2"), { mask: false })], closesWith(1002)));
for (const [i, rsv, name] of [[5, 4, "RSV1"], [6, 2, "RSV2"], [7, 1, "RSV3"]])
  add(`1.${i}`, `reserved bit ${name} set: 1002`, raw([frame(op.text, ping("r3"), { rsv })], closesWith(1002)));
for (const [i, code] of [[8, 3], [9, 7], [10, 0xb], [11, 0xf]])
  add(`1.${i}`, `reserved opcode ${code}: 1002`, raw([frame(code, "x")], closesWith(1002)));

// 2 Fragmentation
const msg = ping("f1");
add("2.1", "text in three fragments: reassembled", raw([
  frame(op.text, msg.slice(0, 5), { fin: false }), frame(op.cont, msg.slice(5, 12), { fin: false }), frame(op.cont, msg.slice(12)),
], pongs("f1"), gotPong("f1")));
add("2.2", "ping between fragments: ponged at once, message reassembled", raw([
  frame(op.text, msg.slice(0, 5), { fin: false }), frame(op.ping, "mid"), frame(op.cont, msg.slice(5)),
], (r) => {
  const pong = r.frames.find((f) => f.opcode === op.pong);
  const [ok, what] = pongs("f1")(r);
  return pong && pong.payload.toString() === "mid" && ok ? [true, "pong 'mid', pong f1"] : [false, `got ${describe(r)}`];
}, gotPong("f1")));
add("2.3", "continuation without a start: 1002", raw([frame(op.cont, msg)], closesWith(1002)));
add("2.4", "new text frame inside a fragmented message: 1002", raw([
  frame(op.text, msg.slice(0, 5), { fin: false }), frame(op.text, msg),
], closesWith(1002)));
add("2.5", "binary frame inside a fragmented text message: 1002", raw([
  frame(op.text, msg.slice(0, 5), { fin: false }), frame(op.binary, "x"),
], closesWith(1002)));

// 3 UTF-8
const utf8 = Buffer.from(ping("u1", ',"note":"κόσμε 😀"'));
add("3.1", "valid multi-byte text: answered", raw([frame(op.text, utf8)], pongs("u1"), gotPong("u1")));
const cut = utf8.indexOf(Buffer.from("😀")) + 2;
add("3.2", "a code point split across fragments: answered", raw([
  frame(op.text, utf8.subarray(0, cut), { fin: false }), frame(op.cont, utf8.subarray(cut)),
], pongs("u1"), gotPong("u1")));
const bad = Buffer.concat([Buffer.from('{"type":"ping","id":"u2","note":"'), Buffer.from([0xce, 0xba, 0xe1, 0xbd, 0xb9, 0xcf, 0x83, 0xce, 0xbc, 0xce, 0xb5, 0xed, 0xa0, 0x80, 0x65, 0x64, 0x69, 0x74, 0x65, 0x64]), Buffer.from('"}')]);
add("3.3", "invalid UTF-8 (a surrogate) in one frame: 1007", raw([frame(op.text, bad)], closesWith(1007)));
add("3.4", "invalid UTF-8 split across fragments: 1007", raw([
  frame(op.text, bad.subarray(0, 40), { fin: false }), frame(op.cont, bad.subarray(40)),
], closesWith(1007)));
add("3.5", "invalid byte 0xff in a fragment, message unfinished: 1007", raw([
  frame(op.text, Buffer.from([0x7b, 0xff]), { fin: false }),
], closesWith(1007)));

// 4 Pings and pongs
add("4.1", "ping with payload: pong with the same payload", raw([frame(op.ping, "hello ping")], (r) => {
  const p = r.frames.find((f) => f.opcode === op.pong);
  return p && p.payload.toString() === "hello ping" ? [true, "pong echoed"] : [false, `got ${describe(r)}`];
}, (s) => s.frames.some((f) => f.opcode === op.pong)));
add("4.2", "ping with 125 bytes: pong with the same 125 bytes", raw([frame(op.ping, Buffer.alloc(125, 0x61))], (r) => {
  const p = r.frames.find((f) => f.opcode === op.pong);
  return p && p.payload.equals(Buffer.alloc(125, 0x61)) ? [true, "pong echoed"] : [false, `got ${describe(r)}`];
}, (s) => s.frames.some((f) => f.opcode === op.pong)));
add("4.3", "ping with 126 bytes: 1002", raw([frame(op.ping, Buffer.alloc(126, 0x61))], closesWith(1002)));
add("4.4", "fragmented ping: 1002", raw([frame(op.ping, "ab", { fin: false })], closesWith(1002)));
add("4.5", "unsolicited pong: ignored", raw([frame(op.pong, "x"), frame(op.text, ping("p1"))], pongs("p1"), gotPong("p1")));
add("4.6", "close frame with FIN clear: 1002", raw([frame(op.close, closePayload(1000), { fin: false })], closesWith(1002)));

// 5 Close handling
add("5.1", "close 1000 with a reason: answered with close 1000", raw([frame(op.close, closePayload(1000, "bye"))], closesWith(1000)));
add("5.2", "close without payload: answered with a close", raw([frame(op.close)], (r) =>
  r.close !== null ? [true, `close ${r.close}`] : [false, `got ${describe(r)}`]));
for (const [i, code] of [[3, 1001], [4, 1003], [5, 1007], [6, 1011], [7, 3000], [8, 4999]])
  add(`5.${i}`, `close with valid code ${code}: answered`, raw([frame(op.close, closePayload(code))], closesWith(code)));
const invalid = [0, 999, 1004, 1005, 1006, 1016, 1100, 2000, 2999];
invalid.forEach((code, k) =>
  add(`5.${9 + k}`, `close with invalid code ${code}: 1002`, raw([frame(op.close, closePayload(code))], closesWith(1002))));
let n = 9 + invalid.length;
// Codes above 4999 are in no range RFC 6455 defines; Autobahn scores them
// as informational (7.13.x). Beast 1.74 accepts and echoes them.
for (const code of [5000, 65535])
  add(`5.${n++}`, `close with undefined code ${code}: 1002`, raw([frame(op.close, closePayload(code))], closesWith(1002)), { info: true });
add(`5.${n++}`, "close payload of 1 byte: 1002", raw([frame(op.close, Buffer.from([0x03]))], closesWith(1002)));
add(`5.${n++}`, "close reason with invalid UTF-8: 1007 (or 1002)", raw([
  frame(op.close, closePayload(1000, Buffer.from([0xce, 0xba, 0xed, 0xa0, 0x80]))),
], closesWith(1007, 1002)));
add(`5.${n++}`, "close payload over 125 bytes: 1002", raw([frame(op.close, closePayload(1000, "x".repeat(124)))], closesWith(1002)));
add(`5.${n++}`, "data after the close: ignored, the close answered", raw([
  frame(op.close, closePayload(1000)), frame(op.text, ping("z")),
], (r) => (r.close === 1000 && !jsonFrames(r).some((j) => j.id === "z") ? [true, "close 1000"] : [false, `got ${describe(r)}`])));

// 6 Message size (gateway.max_frame_bytes)
const limit = opts.maxFrameBytes;
const padded = (id, size) => { const head = `{"type":"ping","id":"${id}","pad":"`; return head + "x".repeat(size - head.length - 2) + '"}'; };
add("6.1", `message of exactly max_frame_bytes (${limit}): answered`, raw([frame(op.text, padded("s1", limit))], pongs("s1"), gotPong("s1")));
add("6.2", "one frame over max_frame_bytes: 1009", raw([frame(op.text, padded("s2", limit + 1))], closesWith(1009)));
add("6.3", "fragments adding up to over max_frame_bytes: 1009", raw([
  frame(op.text, padded("s3", limit + 10).slice(0, limit - 100), { fin: false }), frame(op.cont, padded("s3", limit + 10).slice(limit - 100)),
], closesWith(1009)));
add("6.4", "a frame header announcing 2^40 bytes: 1009", async () => {
  const head = Buffer.from([0x81, 0xff, 0, 0, 1, 0, 0, 0, 0, 0, 1, 2, 3, 4]);
  return closesWith(1009)(await rawExchange([head]));
});

// -- run ---------------------------------------------------------------------------

const results = [];
for (const c of cases) {
  let ok = false, detail = "";
  try {
    [ok, detail] = await c.run();
  } catch (e) {
    detail = `error: ${e.message}`;
  }
  const verdict = ok ? "pass" : c.info ? "info" : "FAIL";
  results.push({ id: c.id, name: c.name, verdict, detail });
}

if (opts.json) {
  console.log(JSON.stringify(results, null, 2));
} else {
  const w = Math.max(...results.map((r) => r.name.length));
  for (const r of results) console.log(`${r.id.padEnd(5)} ${r.name.padEnd(w)}  ${r.verdict.padEnd(4)}  ${r.detail}`);
}
const failed = results.filter((r) => r.verdict === "FAIL");
const info = results.filter((r) => r.verdict === "info").length;
if (failed.length) console.log(`failing cases: ${failed.map((r) => r.id).join(", ")}`);
console.log(`ws-conformance: ${results.length} cases, ${info} informational outcomes differ from the RFC's strictest reading`);
console.log(`${results.length - failed.length - info} passed, ${failed.length} failed`);
process.exit(failed.length ? 1 : 0);
