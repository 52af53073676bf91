#!/usr/bin/env node
// The official OpenAI and Anthropic SDKs (tests/npm) as clients of a
// keel-node's compatible API: each case drives the SDK as an application
// would, with only its base URL pointed at the node.
//
//   node tests/conformance/sdk-clients.mjs --url http://127.0.0.1:PORT \
//     --token TOKEN
//
// Prints one row per case and a closing "N passed, N failed" line; exits 1
// when a case failed, 2 for bad usage.

import { createRequire } from "node:module";

const require = createRequire(new URL("../npm/package.json", import.meta.url));
const OpenAI = require("openai").default;
const Anthropic = require("@anthropic-ai/sdk").default;

function options(argv) {
  const opts = { url: "", token: "" };
  for (let i = 0; i < argv.length; ++i) {
    if (argv[i] === "--url") opts.url = argv[++i] ?? "";
    else if (argv[i] === "--token") opts.token = argv[++i] ?? "";
  }
  return opts;
}

function expect(what, actual, expected) {
  if (actual !== expected)
    throw new Error(`${what}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`);
}

/// The error `call` throws (it must throw one).
async function failure(call) {
  try {
    await call();
  } catch (err) {
    return err;
  }
  throw new Error("expected an error, the call succeeded");
}

function cases(url, token) {
  const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: token });
  const anthropic = new Anthropic({ baseURL: url, apiKey: token });
  const keyed = (thread, key) => ({ headers: { "Keel-Thread": thread, "Idempotency-Key": key } });
  const user = (text) => [{ role: "system", content: "be brief" }, { role: "user", content: text }];
  return [
    ["openai: a chat completion", async () => {
      const c = await openai.chat.completions.create(
        { model: "default", messages: user("hello") }, keyed("sdk-1", "k-1"));
      expect("content", c.choices[0].message.content, "echo: hello");
      expect("finish_reason", c.choices[0].finish_reason, "stop");
      expect("has usage", c.usage.total_tokens > 0, true);
      const again = await openai.chat.completions.create(
        { model: "default", messages: user("hello") }, keyed("sdk-1", "k-1"));
      expect("the resend's id", again.id, c.id);
    }],
    ["openai: a streamed chat completion with usage", async () => {
      const stream = openai.chat.completions.stream(
        { model: "default", messages: user("stream this"), stream_options: { include_usage: true } },
        keyed("sdk-2", "k-2"));
      let text = "";
      for await (const chunk of stream)
        text += chunk.choices[0]?.delta?.content ?? "";
      const final = await stream.finalChatCompletion();
      expect("streamed text", text, "echo: stream this");
      expect("accumulated text", final.choices[0].message.content, "echo: stream this");
      expect("has usage", final.usage.completion_tokens > 0, true);
    }],
    ["openai: a key reused for another message is 422, not retried", async () => {
      await openai.chat.completions.create({ model: "default", messages: user("first") }, keyed("sdk-3", "k-3"));
      const err = await failure(() => openai.chat.completions.create(
        { model: "default", messages: user("second") }, keyed("sdk-3", "k-3")));
      expect("status", err.status, 422);
      expect("code", err.code, "idempotency_key_reused");
    }],
    ["openai: an unknown model is 404 model_not_found", async () => {
      const err = await failure(() => openai.chat.completions.create(
        { model: "no-such-agent", messages: user("x") }, keyed("sdk-4", "k-4")));
      expect("class", err instanceof OpenAI.NotFoundError, true);
      expect("code", err.code, "model_not_found");
    }],
    ["openai: a wrong key is an authentication error", async () => {
      const wrong = new OpenAI({ baseURL: `${url}/v1`, apiKey: "wrong", maxRetries: 0 });
      const err = await failure(() => wrong.chat.completions.create({ model: "default", messages: user("x") }));
      expect("class", err instanceof OpenAI.AuthenticationError, true);
    }],
    ["openai: the models are the agents", async () => {
      const ids = [];
      for await (const model of openai.models.list())
        ids.push(model.id);
      expect("models", ids.sort().join(","), "default,slow");
      const one = await openai.models.retrieve("slow");
      expect("retrieved", one.id, "slow");
    }],
    ["anthropic: a message, plain and streamed", async () => {
      const m = await anthropic.messages.create(
        { model: "default", max_tokens: 256, messages: [{ role: "user", content: "hi claude" }] },
        keyed("sdk-5", "k-5"));
      expect("text", m.content[0].text, "echo: hi claude");
      expect("stop_reason", m.stop_reason, "end_turn");
      const stream = anthropic.messages.stream(
        { model: "default", max_tokens: 256, messages: [{ role: "user", content: "and streamed" }] },
        keyed("sdk-5", "k-6"));
      const final = await stream.finalMessage();
      expect("streamed text", final.content[0].text, "echo: and streamed");
    }],
    ["anthropic: a wrong key is an authentication error", async () => {
      const wrong = new Anthropic({ baseURL: url, apiKey: "wrong", maxRetries: 0 });
      const err = await failure(() => wrong.messages.create(
        { model: "default", max_tokens: 16, messages: [{ role: "user", content: "x" }] }));
      expect("class", err instanceof Anthropic.AuthenticationError, true);
    }],
  ];
}

const opts = options(process.argv.slice(2));
if (!opts.url || !opts.token) {
  console.error("usage: sdk-clients.mjs --url http://HOST:PORT --token TOKEN");
  process.exit(2);
}
let passed = 0;
let failed = 0;
for (const [name, run] of cases(opts.url, opts.token)) {
  try {
    await run();
    ++passed;
    console.log(`pass  ${name}`);
  } catch (err) {
    ++failed;
    console.log(`FAIL  ${name}: ${err?.message ?? err}`);
  }
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 ? 0 : 1);
