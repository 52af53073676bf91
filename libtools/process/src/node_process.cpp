#include "keel/tools/node_process.hpp"

#include <csignal>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

namespace keel {

std::string node_binary() {
  if (auto path = std::getenv("KEEL_NODE_BINARY"))
    return path;
  throw std::runtime_error("KEEL_NODE_BINARY is not set (run through ctest)");
}

std::string tool_binary(const std::string& name) {
  return sibling_path(node_binary(), name);
}

namespace {

// The value of the first key `key` (e.g. "token:") in `yaml` (unquoted),
// or "": the key must start its line after indentation, so `token:` does
// not find `admin_token:`.
std::string value_in(const std::string& yaml, const std::string& key) {
  for (size_t pos = yaml.find(key); pos != std::string::npos;
       pos = yaml.find(key, pos + 1)) {
    auto line_start = yaml.rfind('\n', pos);
    line_start = line_start == std::string::npos ? 0 : line_start + 1;
    if (yaml.find_first_not_of(' ', line_start) != pos)
      continue;
    auto end = yaml.find('\n', pos);
    auto line = yaml.substr(pos + key.size(), end == std::string::npos
                                                ? std::string::npos
                                                : end - pos - key.size());
    line.erase(0, line.find_first_not_of(" \"'"));
    line.erase(line.find_last_not_of(" \"'") + 1);
    return line;
  }
  return {};
}

} // namespace

node_process::node_process(std::string dir, std::string yaml,
                           std::string binary)
  : binary_(std::move(binary)),
    config_path_(dir + "/node.yaml"),
    stderr_path_(dir + "/node.stderr"),
    token_(value_in(yaml, "token:")),
    admin_token_(value_in(yaml, "admin_token:")) {
  std::ofstream{config_path_} << yaml;
  start();
}

node_process::~node_process() {
  kill9();
}

void node_process::start(const std::vector<std::string>& extra_args) {
  launch(extra_args);
  await_listening();
}

void node_process::launch(const std::vector<std::string>& extra_args) {
  child_options opts;
  opts.argv = {binary_, "--config", config_path_};
  opts.argv.insert(opts.argv.end(), extra_args.begin(), extra_args.end());
  opts.log_path = stderr_path_;
  opts.capture_stdout = true;
  child_ = std::make_unique<child_process>(std::move(opts));
}

void node_process::await_listening() {
  if (!child_)
    throw std::runtime_error("await_listening: no node was launched");
  // The node writes one line to stdout, once its gateway listens:
  // "listening on HOST:PORT".
  auto line = child_->read_stdout_line("listening on ",
                                       std::chrono::seconds{60});
  if (!line || line->rfind(':') == std::string::npos) {
    kill9();
    throw std::runtime_error("keel-node did not start: " + stderr_text());
  }
  port_ = static_cast<uint16_t>(std::stoi(line->substr(line->rfind(':') + 1)));
}

void node_process::kill9() {
  if (child_)
    child_->kill();
}

int node_process::stop() {
  if (!child_)
    return -1;
  if (!child_->running())
    return child_->exit_code().value_or(-1);
  auto code = child_->terminate(std::chrono::seconds{30},
                                std::chrono::milliseconds{50});
  return code == 128 + SIGKILL ? -1 : code;
}

int node_process::drain_stop(std::chrono::milliseconds wait) {
  if (!child_)
    return -1;
  if (!child_->running())
    return child_->exit_code().value_or(-1);
  auto code = child_->terminate(wait);
  return code == 128 + SIGKILL ? -1 : code;
}

bool node_process::running() {
  return child_ && child_->running();
}

pid_t node_process::pid() const {
  return child_ ? child_->pid() : -1;
}

endpoint node_process::address() const {
  endpoint ep;
  ep.host = "127.0.0.1";
  ep.port = port_;
  ep.token = token_;
  return ep;
}

endpoint node_process::admin_address() const {
  auto ep = address();
  if (!admin_token_.empty())
    ep.token = admin_token_;
  return ep;
}

std::string node_process::stderr_text() const {
  return read_text_file(stderr_path_);
}

} // namespace keel
