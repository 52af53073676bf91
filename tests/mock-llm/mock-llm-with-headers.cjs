#!/usr/bin/env node
// Runs mock-llm (tests/npm/node_modules/@dwmkerr/mock-llm, unmodified) with
// two Keel extensions of a rule's `response`, which mock-llm 0.1.29 lacks:
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
// Same command line as mock-llm's own `mock-llm` binary: `--config FILE`,
// HOST and PORT from the environment, and the same "server running on" line.
// Everything else (matching, sequences, templates, streaming) is mock-llm's
// own code.
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

const render = template.renderTemplate;
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
  return render(content, context);
};

const stream = streaming.streamResponse;
streaming.streamResponse = (res, json, status, streamingConfig) => {
  if (status >= 400 && statusWhenStreaming.has(res))
    return res.status(status).json(json);
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
