#!/usr/bin/env node
// Runs mock-llm (tests/npm/node_modules/@dwmkerr/mock-llm, unmodified) with
// Keel extensions which mock-llm 0.1.29 lacks. Two extend a rule's
// `response`:
//
//   response:
//     status: 429
//     headers: {Retry-After: "2"}       # sent as HTTP response headers
//     errorStatusWhenStreaming: true    # see below
//     content: '{"error": ...}'
//
// mock-llm answers a request with "stream": true whose rule has an error
// status with HTTP 200 and one SSE event `data: {"error": ...}` (an error in
// the middle of a stream); with errorStatusWhenStreaming it answers as a
// real provider refusing a stream before it starts: the rule's status and
// its JSON body.
//
// One extends the templates of `content`:
//
//   {{jmes-escaped request EXPR}}
//
// is the JMESPath result as text escaped for the inside of a JSON string
// (`"`, `\`, newlines and control characters escaped; a string as it is,
// another value as its JSON text, null as nothing), so that any text can be
// quoted:
//   "content": "said: {{jmes-escaped request body.messages[-1].content}}"
// mock-llm's own {{jmes request EXPR}} inserts text as it is, and answers 500
// when that breaks the JSON. EXPR ends at the first "}}" that no further "}"
// follows, so it may hold a literal with single braces
// (`headers."x-a" || '{"b": 1}'`).
//
// And one extends streaming: an answer whose message has `tool_calls` is
// streamed as OpenAI streams tool calls (mock-llm fails with 500 on it):
// its text first, if any, in chunks of `streaming.chunkSize` characters;
// then, for each call, a chunk with its index, id, type and name and empty
// arguments, followed by its arguments in chunks of `chunkSize`
// characters; then an empty delta with the message's finish_reason
// ("tool_calls" if none), and `data: [DONE]`. The first chunk carries role
// "assistant"; chunks go out `chunkIntervalMs` apart.
//
// Same command line as mock-llm's own `mock-llm` binary: `--config FILE`,
// HOST and PORT from the environment, and the same "server running on" line.
// Everything else (matching, sequences, templates, streaming of text) is
// mock-llm's own code. (keel::test::mock_llm runs a rule file through this
// wrapper when it has a `headers:` or `errorStatusWhenStreaming:` key.)
//
// How: mock-llm renders the winning rule's `content` with its exported
// renderTemplate(content, {request}) just before it answers, and
// `request.headers` is the request's own header object. The wrapper remembers
// each request's response by that object and sets the headers of the rule(s)
// whose content is being rendered; its streamResponse (also called through
// the module's exports) is wrapped likewise. Rules are told apart by their
// content text, so two rules with the same content must not differ in
// extensions.
'use strict';

const http = require('http');
const path = require('path');

const dist = path.join(__dirname, '..', 'npm', 'node_modules', '@dwmkerr',
                       'mock-llm', 'dist');
const template = require(path.join(dist, 'template.js'));
const streaming = require(path.join(dist, 'streaming.js'));
const { loadConfig, getConfigPath } = require(path.join(dist, 'config.js'));
const { createServer } = require(path.join(dist, 'server.js'));
const { printConfigSummary } = require(path.join(dist, 'config-logger.js'));
const pkg = require(path.join(dist, '..', 'package.json'));
const jmespath = require(path.join(__dirname, '..', 'npm', 'node_modules',
                                   'jmespath'));

const host = process.env.HOST || '0.0.0.0';
const port = parseInt(process.env.PORT || '6556', 10);
const at = process.argv.indexOf('--config');
const configPath = at !== -1 ? process.argv[at + 1] : getConfigPath();
const config = loadConfig(configPath);
printConfigSummary(config, `Loaded configuration from ${configPath}`);

// Rule content text -> the rule's extensions.
const extensionsByContent = new Map();
for (const rule of config.rules || []) {
  const r = rule.response || {};
  if (!r.headers && !r.errorStatusWhenStreaming)
    continue;
  const ext = { headers: r.headers || {},
                errorStatusWhenStreaming: !!r.errorStatusWhenStreaming };
  const known = extensionsByContent.get(r.content);
  if (known && JSON.stringify(known) !== JSON.stringify(ext)) {
    console.error(`${configPath}: two rules with the same content have `
                  + 'different headers or errorStatusWhenStreaming');
    process.exit(1);
  }
  extensionsByContent.set(r.content, ext);
}

// Request header object -> the response being answered.
const responses = new WeakMap();
// Responses whose rule wants errorStatusWhenStreaming.
const statusWhenStreaming = new WeakSet();

// {{jmes-escaped KEY EXPR}}; see the top of the file.
const escapedTag = /\{\{jmes-escaped\s+(\w+)\s+(.+?)\}\}(?!\})/g;

function escaped(value) {
  if (value === null || value === undefined)
    return '';
  const text = typeof value === 'string' ? value : JSON.stringify(value);
  return JSON.stringify(text).slice(1, -1);
}

// mock-llm's renderTemplate between the {{jmes-escaped}} tags, so that it
// never sees (and expands) what they inserted.
const render = template.renderTemplate;
function renderExtended(content, context) {
  let out = '';
  let last = 0;
  for (const m of content.matchAll(escapedTag)) {
    out += render(content.slice(last, m.index), context);
    out += escaped(jmespath.search(context[m[1]], m[2]));
    last = m.index + m[0].length;
  }
  return out + render(content.slice(last), context);
}

template.renderTemplate = (content, context) => {
  const ext = extensionsByContent.get(content);
  const res = context && context.request
              && responses.get(context.request.headers);
  if (ext && res && !res.headersSent) {
    for (const [name, value] of Object.entries(ext.headers))
      res.setHeader(name, String(value));
    if (ext.errorStatusWhenStreaming)
      statusWhenStreaming.add(res);
  }
  return renderExtended(content, context);
};

// The chunks of a streamed answer with tool calls; see the top of the file.
function toolCallChunks(json, message, chunkSize) {
  const split = (text) => {
    const parts = [];
    for (let i = 0; i < text.length; i += chunkSize)
      parts.push(text.slice(i, i + chunkSize));
    return parts;
  };
  const deltas = [];
  if (typeof message.content === 'string')
    for (const part of split(message.content))
      deltas.push({ content: part });
  message.tool_calls.forEach((call, index) => {
    const fn = call.function || {};
    deltas.push({ tool_calls: [{ index, id: call.id, type: 'function',
                                 function: { name: fn.name,
                                             arguments: '' } }] });
    for (const part of split(String(fn.arguments || '')))
      deltas.push({ tool_calls: [{ index,
                                   function: { arguments: part } }] });
  });
  deltas.push({});
  deltas[0] = { role: 'assistant',
                ...(deltas[0].content === undefined ? { content: null } : {}),
                ...deltas[0] };
  const finish = json.choices[0].finish_reason || 'tool_calls';
  return deltas.map((delta, i) => ({
    id: json.id, object: 'chat.completion.chunk', created: json.created,
    model: json.model,
    choices: [{ index: 0, delta,
                finish_reason: i === deltas.length - 1 ? finish : null }],
  }));
}

function streamToolCalls(res, json, status, config) {
  const chunks = toolCallChunks(json, json.choices[0].message,
                                Math.max(1, config.chunkSize));
  res.setHeader('Content-Type', 'text/event-stream');
  res.setHeader('Cache-Control', 'no-cache');
  res.setHeader('Connection', 'keep-alive');
  res.status(status);
  let next = 0;
  const interval = setInterval(() => {
    if (next < chunks.length) {
      res.write(`data: ${JSON.stringify(chunks[next++])}\n\n`);
      return;
    }
    res.write('data: [DONE]\n\n');
    res.end();
    clearInterval(interval);
  }, config.chunkIntervalMs);
}

function hasToolCalls(json) {
  const choice = json && Array.isArray(json.choices) && json.choices[0];
  const message = choice && choice.message;
  return !!message && Array.isArray(message.tool_calls)
         && message.tool_calls.length > 0;
}

const stream = streaming.streamResponse;
streaming.streamResponse = (res, json, status, streamingConfig) => {
  if (status >= 400 && statusWhenStreaming.has(res))
    return res.status(status).json(json);
  if (status < 400 && !json.error && hasToolCalls(json))
    return streamToolCalls(res, json, status, streamingConfig);
  return stream(res, json, status, streamingConfig);
};

const app = createServer(config, host, port);
http.createServer((req, res) => {
  responses.set(req.headers, res);
  app(req, res);
}).listen(port, host, function () {
  const bound = this.address().port;
  console.log(`${pkg.name} v${pkg.version} (with Keel's rule extensions) server `
              + `running on ${host}:${bound}`);
}).on('error', (err) => {
  console.error(err);
  process.exit(1);
});
