#!/usr/bin/env node
// The operator dashboard in a real browser (CTest: browser.dashboard).
//
//   node tests/browser/dashboard.mjs [KEEL_NODE_BINARY]
//
// Starts a keel-node of its own (temporary data folder, an admin and a
// client token, chaos.kill on, the offline echo provider), opens
// http://127.0.0.1:PORT/ in headless Chromium (/usr/bin/chromium, or
// $KEEL_CHROMIUM) driven by playwright-core from tests/npm, and checks:
//   1. the page loads and shows the admin API's 401 until a token is given,
//      and the chat pane says that the WebSocket was refused;
//   2. with the admin token entered, the panes fill and the chat's
//      WebSocket connects with a single-use ticket (POST /api/v1/ws-ticket)
//      in its URL, never a token; the refusal notice is gone;
//   3. a message sent in the chat pane is acknowledged and answered there;
//      the turn's status line (thinking) is shown and gone once the reply
//      is there;
//   4. the thread's conversation appears in the supervision tree; the UI's
//      kill action kills it and the tree shows a higher restart count and
//      the kill as its last exit;
//   5. a reply to a thread bound to a webhook nobody listens on becomes a
//      dead letter, shown in the dead-letter pane (a page of the list) with
//      its counts, and the owner's notice about the channel shows in the
//      notification pane.
// Screenshots (01-load, 02-reply, 03-restart, 04-dead-letter) and the node's log go to
// $KEEL_ARTIFACTS (default: a temporary folder, printed). The node is always
// stopped and the temporary folder removed. Exits 1 naming the failed step.

import { createRequire } from "node:module";
import { spawn } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const require = createRequire(new URL("../npm/package.json", import.meta.url));

const TOTAL_MS = 55_000;   // the whole test, cleanup aside
const STEP_MS = 10_000;    // one wait in the page
const START_MS = 15_000;   // the node's start
const STOP_MS = 5_000;     // SIGTERM to SIGKILL

const started = Date.now();
const log = (msg) => console.log(`[${((Date.now() - started) / 1000).toFixed(1).padStart(5)}s] ${msg}`);

class Failure extends Error {}

const fail = (msg) => {
  throw new Failure(msg);
};

// -- setup -----------------------------------------------------------------

const nodeBinary = process.argv[2] || process.env.KEEL_NODE_BINARY;
const chromiumPath = process.env.KEEL_CHROMIUM || "/usr/bin/chromium";
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "keel-browser-"));
const artifacts = process.env.KEEL_ARTIFACTS || path.join(tmp, "artifacts");
const keepArtifacts = !!process.env.KEEL_ARTIFACTS;

const adminToken = crypto.randomBytes(16).toString("hex");
const clientToken = crypto.randomBytes(16).toString("hex");
const nodeName = "keel-browser";
const thread = `browser-${crypto.randomBytes(3).toString("hex")}`;
const text = "hello from Chromium";
const lostThread = `lost-${crypto.randomBytes(3).toString("hex")}`;
// Nothing listens there: a TCP port of this host, bound and closed.
const deadUrl = "http://127.0.0.1:9/hook";

let node = null;      // the keel-node child process
let nodeExited = null; // a promise of its exit
let context = null;   // the browser

function writeConfig() {
  const file = path.join(tmp, "node.yaml");
  fs.writeFileSync(file, `# written by tests/browser/dashboard.mjs
node:
  name: ${nodeName}
  data_dir: ${JSON.stringify(path.join(tmp, "data"))}
gateway:
  host: 127.0.0.1
  port: 0
  token: "${clientToken}"
  admin_token: "${adminToken}"
  # no allow_query_token: the chat pane opens its WebSocket with a ticket
providers:
  - name: echo
    kind: echo
pools:
  - name: default
    chain: [echo]
owner:
  contact: ops@example.com
  channel: owner
delivery:
  channels:
    - name: hook
      kind: webhook
      url: ${deadUrl}
      threads: ["lost-*"]
      retry: {max_attempts: 1, base_delay: 10ms, max_delay: 10ms}
      timeout: 2s
    - name: owner
      kind: webhook
      url: ${deadUrl}
      retry: {max_attempts: 1, base_delay: 10ms, max_delay: 10ms}
      timeout: 2s
chaos:
  kill: true
logging:
  level: info
`);
  return file;
}

/** Starts keel-node; resolves with its port once it says it listens. */
function startNode(config) {
  const logFile = path.join(artifacts, "keel-node.log");
  const logStream = fs.createWriteStream(logFile);
  node = spawn(nodeBinary, ["-c", config], { stdio: ["ignore", "pipe", "pipe"] });
  let stderrTail = "";
  node.stderr.on("data", (d) => {
    logStream.write(d);
    stderrTail = (stderrTail + d).slice(-2000);
  });
  nodeExited = new Promise((resolve) => node.on("exit", (code, signal) => {
    logStream.end();
    resolve({ code, signal });
  }));
  return new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Failure(
      `keel-node did not say 'keel-node: listening on HOST:PORT' within ${START_MS / 1000}s; its log:\n${stderrTail}`)), START_MS);
    node.stdout.on("data", (d) => {
      logStream.write(d);
      out += d;
      const m = /keel-node: listening on ([^\s:]+|\[[^\]]+\]):(\d+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[2]));
      }
    });
    node.on("error", (err) => {
      clearTimeout(timer);
      reject(new Failure(`cannot start ${nodeBinary}: ${err.message}`));
    });
    nodeExited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Failure(`keel-node exited (${signal ?? `status ${code}`}) before listening; its log:\n${stderrTail}`));
    });
  });
}

async function stopNode() {
  if (!node || node.exitCode !== null || node.signalCode !== null) return;
  node.kill("SIGTERM");
  const timer = new Promise((resolve) => setTimeout(() => resolve("timeout"), STOP_MS));
  if (await Promise.race([nodeExited, timer]) === "timeout") {
    log(`keel-node did not stop within ${STOP_MS / 1000}s of SIGTERM: SIGKILL`);
    node.kill("SIGKILL");
    await nodeExited;
  }
}

// Chromium may still be writing its profile as it exits: retry a little.
function removeTree(dir) {
  fs.rmSync(dir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
}

// -- the test --------------------------------------------------------------

const testid = (id) => `[data-testid="${id}"]`;

async function screenshot(page, name) {
  const file = path.join(artifacts, `${name}.png`);
  await page.mouse.move(0, 0); // no hover highlight in the picture
  await page.screenshot({ path: file, fullPage: true });
  log(`screenshot ${file}`);
}

/** Runs `what`, turning a timeout into a failure that names the step. */
async function step(name, what) {
  log(name);
  try {
    return await what();
  } catch (err) {
    if (err instanceof Failure) throw err;
    throw new Failure(`${name}: ${err.message.split("\n")[0]}`);
  }
}

async function run() {
  if (!nodeBinary)
    fail("no keel-node: pass its path as the first argument or set KEEL_NODE_BINARY");
  if (!fs.existsSync(chromiumPath))
    fail(`no Chromium at ${chromiumPath} (scripts/setup installs Debian's chromium; KEEL_CHROMIUM names another)`);
  let chromium;
  try {
    ({ chromium } = require("playwright-core"));
  } catch (err) {
    fail(`cannot load playwright-core from tests/npm (run scripts/setup): ${err.message}`);
  }
  fs.mkdirSync(artifacts, { recursive: true });
  for (const name of ["01-load.png", "02-reply.png", "03-restart.png", "04-dead-letter.png", "failure.png", "keel-node.log"])
    fs.rmSync(path.join(artifacts, name), { force: true });

  const port = await step("start keel-node", () => startNode(writeConfig()));
  const base = `http://127.0.0.1:${port}`;
  log(`keel-node listens on port ${port}`);

  await step("GET / serves the dashboard", async () => {
    const res = await fetch(`${base}/`);
    const body = await res.text();
    if (res.status !== 200 || !/text\/html/.test(res.headers.get("content-type") ?? "") || !body.includes("data-testid"))
      fail(`GET / answered ${res.status} (${res.headers.get("content-type")}): ${body.slice(0, 200)}; the node does not serve dashboard/index.html`);
  });

  context = await step("launch Chromium", () => chromium.launchPersistentContext(path.join(tmp, "chromium-profile"), {
    executablePath: chromiumPath,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--disable-dev-shm-usage"],
    viewport: { width: 1440, height: 1000 },
    timeout: STEP_MS * 2,
  }));
  const page = context.pages()[0] ?? await context.newPage();
  page.setDefaultTimeout(STEP_MS);
  const pageErrors = [];
  page.on("pageerror", (err) => pageErrors.push(err.message));
  const wsUrls = []; // every WebSocket the page opens
  page.on("websocket", (ws) => wsUrls.push(ws.url()));
  const consoleSeen = new Set();
  page.on("console", (msg) => {
    // Each distinct message once (the API's 401s repeat on every poll).
    // A Content-Security-Policy the node sends must not break the page.
    if (/Content Security Policy/i.test(msg.text())) pageErrors.push(msg.text());
    if (msg.type() === "error" && !consoleSeen.has(msg.text())) {
      consoleSeen.add(msg.text());
      log(`page console: ${msg.text()}`);
    }
  });

  await step("load the page; without a token the panes show the API's 401", async () => {
    await page.goto(`${base}/`, { waitUntil: "load" });
    await page.locator(`${testid("error-tree")}:not([hidden])`).filter({ hasText: "401" }).waitFor();
    await page.locator(testid("chat-conn-problem")).filter({ hasText: "refused" }).waitFor();
  });
  await screenshot(page, "01-load");

  await step("enter the admin token: the panes fill, the chat connects", async () => {
    await page.fill(testid("token-input"), adminToken);
    await page.click(testid("token-save"));
    await page.locator(testid("node-name")).filter({ hasText: nodeName }).waitFor();
    await page.locator(`${testid("tree-node")}[data-path="/conversations"]`).waitFor();
    await page.locator(`${testid("error-tree")}[hidden]`).waitFor({ state: "attached" });
    await page.locator(`${testid("ws-state")}[data-state="connected"]`).waitFor();
    // A notice about a connection problem goes once a connection works.
    await page.waitForFunction((sel) => document.querySelectorAll(sel).length === 0,
                               testid("chat-conn-problem"), { timeout: STEP_MS });
    // The connection that works carries a ticket; no URL carries a token.
    const leaked = wsUrls.filter((u) => u.includes(adminToken) || u.includes(clientToken) || /[?&]token=/.test(u));
    if (leaked.length)
      fail(`a WebSocket URL carries a token: ${leaked.join(", ")}`);
    if (!wsUrls.some((u) => /\/ws\?ticket=[0-9a-f]{64}$/.test(u)))
      fail(`no WebSocket was opened with a ticket (URLs: ${JSON.stringify(wsUrls)})`);
  });

  await step(`send '${text}' to thread ${thread} in the chat pane; the reply appears`, async () => {
    await page.fill(testid("chat-thread"), thread);
    await page.fill(testid("chat-input"), text);
    // Records the status lines of the thread as they are added (they may
    // come and go between two polls of the page).
    await page.evaluate(([sel, t]) => {
      window.statusesSeen = [];
      new MutationObserver((records) => {
        for (const r of records)
          for (const n of r.addedNodes)
            if (n.nodeType === 1 && n.matches(sel) && n.dataset.thread === t)
              window.statusesSeen.push(`${n.dataset.replyTo}: ${n.textContent}`);
      }).observe(document.querySelector('[data-testid="chat-log"]'), { childList: true });
    }, [testid("chat-status"), thread]);
    await page.click(testid("chat-send"));
    await page.locator(testid("chat-ack")).filter({ hasText: "seq 1" }).waitFor();
    await page.locator(`${testid("chat-reply")}[data-thread="${thread}"]`).filter({ hasText: `echo: ${text}` }).waitFor();
    // The turn's status (thinking) was shown, and went with the reply.
    const seen = await page.evaluate(() => window.statusesSeen);
    if (!seen.some((s) => s.startsWith("1: ")))
      fail(`no status line of message 1 of ${thread} was shown (seen: ${JSON.stringify(seen)})`);
    const left = await page.locator(`${testid("chat-status")}[data-thread="${thread}"]`).allInnerTexts();
    if (left.length)
      fail(`status lines stay after the reply: ${JSON.stringify(left)}`);
    // The thread shows up among the agents too, bound to the default agent.
    const row = page.locator(`${testid("agent")}[data-thread="${thread}"]`);
    await row.waitFor();
    const agent = await row.locator(testid("agent-name")).innerText();
    if (agent !== "default")
      fail(`the thread's agent shows as ${JSON.stringify(agent)}, not "default"`);
  });
  await screenshot(page, "02-reply");

  const convPath = `/conversations/${thread}`;
  const convNode = `${testid("tree-node")}[data-path="${convPath}"]`;
  const before = await step(`find ${convPath} in the supervision tree`, async () => {
    await page.locator(convNode).waitFor();
    return Number(await page.locator(`${convNode} ${testid("restarts")}`).getAttribute("data-count"));
  });
  log(`${convPath} has restarted ${before} times`);

  await step(`kill ${convPath} with the kill action; the restart count rises`, async () => {
    const kill = page.locator(`${convNode} ${testid("kill")}`);
    await kill.click();                        // arms the button
    await page.locator(`${convNode} ${testid("kill")}.armed`).click(); // confirms
    await page.locator(testid("notice-ok")).filter({ hasText: `killed ${convPath}` }).waitFor();
    await page.waitForFunction(([sel, n]) => {
      const el = document.querySelector(sel);
      return el !== null && Number(el.dataset.count) > n;
    }, [`${convNode} ${testid("restarts")}`, before], { timeout: STEP_MS });
    await page.locator(`${convNode} ${testid("last-exit")}`).filter({ hasText: "killed" }).waitFor();
  });
  const after = Number(await page.locator(`${convNode} ${testid("restarts")}`).getAttribute("data-count"));
  log(`${convPath} has restarted ${after} times`);
  await screenshot(page, "03-restart");

  await step(`a reply to ${lostThread} nobody takes shows as a dead letter and an owner notice`, async () => {
    await page.fill(testid("chat-thread"), lostThread);
    await page.fill(testid("chat-input"), "for a webhook that is down");
    await page.click(testid("chat-send"));
    await page.locator(`${testid("chat-reply")}[data-thread="${lostThread}"]`).waitFor();
    const letter = page.locator(`${testid("dead-letter")}[data-id^="${lostThread}/"]`);
    await letter.waitFor();
    const row = await letter.innerText();
    if (!row.includes(lostThread) || !/channels hook/.test(row))
      fail(`the dead letter row does not name its thread and channel: ${JSON.stringify(row)}`);
    await page.locator(testid("dlq-counts")).filter({ hasText: /\d+ (pending|abandoned)/ }).waitFor();
    const notice = page.locator(testid("notification")).filter({ hasText: "channel_unhealthy" });
    await notice.waitFor();
    const noticeText = await notice.innerText();
    if (!noticeText.includes("Channel hook did not take reply") || !noticeText.includes(lostThread))
      fail(`the owner notice does not say what happened: ${JSON.stringify(noticeText)}`);
  });
  await screenshot(page, "04-dead-letter");

  if (await page.locator(testid("notice-error")).count())
    fail(`the page shows an error notice: ${await page.locator(testid("notice-error")).first().innerText()}`);
  if (pageErrors.length)
    fail(`the page threw: ${pageErrors.join("; ")}`);
}

// -- main ------------------------------------------------------------------

// Killed from outside (CTest's timeout, ^C): take the node and the
// temporary folder along.
const abandon = async (signal) => {
  console.error(`browser.dashboard: ${signal}: stopping`);
  node?.kill("SIGKILL");
  const bounded = (p) => Promise.race([p, new Promise((resolve) => setTimeout(resolve, 3000))]);
  await bounded(context?.close().catch(() => {}));
  await bounded(nodeExited);
  try {
    removeTree(tmp);
  } catch (err) {
    console.error(`browser.dashboard: cannot remove ${tmp}: ${err.message}`);
  }
  process.exit(1);
};
process.on("SIGTERM", () => abandon("SIGTERM"));
process.on("SIGINT", () => abandon("SIGINT"));
process.on("exit", () => {
  if (node && node.exitCode === null && node.signalCode === null) node.kill("SIGKILL");
});

let status = 0;
let watchdog;
try {
  await Promise.race([
    run(),
    new Promise((_, reject) => {
      watchdog = setTimeout(() => reject(new Failure(`the test took longer than ${TOTAL_MS / 1000}s`)), TOTAL_MS);
    }),
  ]);
  log("browser.dashboard: ok");
} catch (err) {
  status = 1;
  console.error(`browser.dashboard: FAILED: ${err instanceof Failure ? err.message : err.stack}`);
  if (context) {
    try {
      const page = context.pages()[0];
      if (page) await page.screenshot({ path: path.join(artifacts, "failure.png"), fullPage: true, timeout: 5000 });
      console.error(`browser.dashboard: the page at the failure: ${path.join(artifacts, "failure.png")}`);
    } catch { /* the browser is gone */ }
  }
} finally {
  clearTimeout(watchdog);
  try {
    await context?.close();
  } catch (err) {
    log(`closing Chromium: ${err.message}`);
  }
  await stopNode();
  try {
    if (keepArtifacts || status === 0) {
      removeTree(tmp);
    } else {
      // The artifacts are inside the temporary folder: keep only them.
      for (const entry of fs.readdirSync(tmp))
        if (entry !== "artifacts") removeTree(path.join(tmp, entry));
      console.error(`browser.dashboard: screenshots and the node's log are in ${artifacts}`);
    }
  } catch (err) {
    console.error(`browser.dashboard: cannot remove ${tmp}: ${err.message}`);
    status = 1;
  }
}
process.exit(status);
