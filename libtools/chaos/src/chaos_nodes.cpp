#include "chaos_nodes.hpp"

#include <csignal>
#include <filesystem>
#include <stdexcept>

#include <yaml-cpp/yaml.h>

#include "keel/text.hpp"
#include "keel/tools/process.hpp"

namespace keel::chaos::detail {

namespace {

/// A node answering every message after `delay` with "answer to TEXT",
/// without a network; with a `slow` delay, messages containing
/// `slow_marker` are answered after it instead.
std::string builtin_config(std::chrono::milliseconds delay,
                           std::chrono::milliseconds slow) {
  auto step = [](const std::string& match, std::chrono::milliseconds after) {
    return std::string{"      - "}
           + (match.empty() ? "" : "match: \"" + match + "\"\n        ")
           + "reply: \"answer to {input}\"\n        delay: "
           + std::to_string(after.count()) + "ms\n";
  };
  return "node:\n  name: chaos\n"
         "gateway:\n  rate_limit:\n    per_second: 0\n"
         "providers:\n  - name: scripted\n    kind: scripted\n"
         "    script:\n"
         + (slow.count() > 0 ? step(slow_marker, slow) : std::string{})
         + step({}, delay)
         + "pools:\n  - name: default\n    chain: [scripted]\n";
}

/// Merges mapping `over` into `base`, key by key; other values replace.
void merge(YAML::Node base, const YAML::Node& over) {
  for (auto kv : over) {
    auto key = kv.first.Scalar();
    if (kv.second.IsMap() && base[key].IsMap())
      merge(base[key], kv.second);
    else
      base[key] = kv.second;
  }
}

YAML::Node load_base(const scenario& sc) {
  if (sc.nodes.config_file.empty())
    return YAML::Load(
      builtin_config(sc.nodes.provider_delay, sc.nodes.slow_delay));
  try {
    return YAML::LoadFile(sc.nodes.config_file);
  } catch (const YAML::Exception& ex) {
    throw std::runtime_error(sc.nodes.config_file + ": " + ex.what());
  }
}

/// Replaces the providers and pools of `root` with one OpenAI provider per
/// URL, chained in that order in pool `default`.
void use_fault_servers(YAML::Node root, const std::vector<std::string>& urls) {
  YAML::Node providers{YAML::NodeType::Sequence};
  YAML::Node chain{YAML::NodeType::Sequence};
  for (size_t i = 0; i < urls.size(); ++i) {
    YAML::Node p;
    p["name"] = i == 0 ? "primary" : "backup";
    p["kind"] = "openai";
    p["base_url"] = urls[i];
    p["model"] = "fault-llm";
    providers.push_back(p);
    chain.push_back(p["name"]);
  }
  YAML::Node pool;
  pool["name"] = "default";
  pool["chain"] = chain;
  root["providers"] = providers;
  root["pools"] = YAML::Node{YAML::NodeType::Sequence};
  root["pools"].push_back(pool);
  root["threads"]["pool"] = "default";
}

std::string as_millis(std::chrono::milliseconds x) {
  return std::to_string(x.count()) + "ms";
}

/// The scenario's cluster timings, which the overrides may still change.
void cluster_timings(YAML::Node root, const cluster_spec& c) {
  auto cl = root["cluster"];
  cl["shards"] = c.shards;
  cl["heartbeat"] = as_millis(c.heartbeat);
  cl["lease_ttl"] = as_millis(c.lease_ttl);
  cl["route_timeout"] = as_millis(c.route_timeout);
  cl["handoff_timeout"] = as_millis(c.handoff_timeout);
  cl["rebalance_batch"] = c.rebalance_batch;
  root["storage"]["postgres"]["statement_timeout"] = "5s";
}

/// What makes node `index` a member of the run's cluster (after the
/// overrides: the run depends on it).
void cluster_identity(YAML::Node root, size_t index, const node_wiring& w) {
  auto address = [](uint16_t port) {
    return "127.0.0.1:" + std::to_string(port);
  };
  root["storage"]["backend"] = "postgres";
  root["storage"]["postgres"]["url"] = w.database_url;
  auto cl = root["cluster"];
  cl["enabled"] = true;
  cl["node_id"] = node_id(index);
  cl["listen"] = address(w.listen_port);
  cl["advertise"] = address(w.advertise_port);
  cl["token"] = "keel-chaos-cluster-token";
  // Every node of a run is on loopback.
  cl["insecure_plaintext"] = true;
}

} // namespace

std::string node_yaml(const scenario& sc, size_t index, const std::string& dir,
                      const std::vector<std::string>& provider_urls,
                      uint16_t port, const node_wiring* wiring) {
  auto root = load_base(sc);
  if (wiring)
    cluster_timings(root, sc.nodes.cluster);
  if (!sc.nodes.overrides.empty())
    merge(root, YAML::Load(sc.nodes.overrides));
  if (!provider_urls.empty())
    use_fault_servers(root, provider_urls);
  auto name = root["node"]["name"] ? root["node"]["name"].as<std::string>()
                                   : std::string{"chaos"};
  if (sc.nodes.count > 1)
    root["node"]["name"] = name + "-" + std::to_string(index);
  root["node"]["data_dir"] = dir + "/data";
  root["gateway"]["port"] = port;
  if (wiring)
    cluster_identity(root, index, *wiring);
  if (sc.uses(action::kill_actor))
    root["chaos"]["kill"] = true;
  if (sc.uses(action::disk_fault))
    root["chaos"]["disk"] = true;
  YAML::Emitter out;
  out << root;
  return std::string{out.c_str()} + "\n";
}

node_set::node_set(const scenario& sc, const std::string& node_binary,
                   const std::string& work_dir,
                   const std::vector<std::string>& provider_urls,
                   std::vector<node_wiring> wiring)
  : node_binary_(node_binary), cluster_(!wiring.empty()) {
  bool proxied = sc.breaks_link("clients");
  for (size_t i = 0; i < sc.nodes.count; ++i) {
    auto dir = work_dir + "/node-" + std::to_string(i);
    std::filesystem::create_directories(dir);
    // A proxied node keeps its port across restarts: the proxy's target.
    uint16_t port = proxied ? free_port() : 0;
    yamls_.push_back(node_yaml(sc, i, dir, provider_urls, port,
                               cluster_ ? &wiring.at(i) : nullptr));
    homes_.push_back(dir);
    nodes_.emplace_back();
    dirs_.push_back(dir + "/data");
    addresses_.emplace_back();
    admin_addresses_.emplace_back();
    states_.push_back(node_state::idle);
    paused_.push_back(false);
    armed_.push_back(false);
    links_.push_back(proxied ? std::make_unique<fault_proxy>("127.0.0.1", port)
                             : nullptr);
  }
  for (size_t i = 0; i < sc.nodes.initially; ++i)
    launch(i);
}

void node_set::launch(size_t index) {
  if (!nodes_.at(index))
    nodes_[index] = std::make_unique<node_process>(homes_[index], yamls_[index],
                                                   node_binary_);
  else
    nodes_[index]->start();
  states_[index] = node_state::running;
  paused_[index] = false;
  refresh(index);
}

endpoint node_set::address(size_t index) const {
  std::lock_guard<std::mutex> guard{mtx_};
  return addresses_.at(index);
}

endpoint node_set::admin_address(size_t index) const {
  std::lock_guard<std::mutex> guard{mtx_};
  return admin_addresses_.at(index);
}

bool node_set::serving(size_t index) const {
  std::lock_guard<std::mutex> guard{mtx_};
  return states_.at(index) == node_state::running;
}

bool node_set::responsive(size_t index) const {
  std::lock_guard<std::mutex> guard{mtx_};
  return states_.at(index) == node_state::running && !paused_[index];
}

std::optional<size_t> node_set::another(size_t except) const {
  for (size_t k = 1; k <= size(); ++k) {
    auto i = (except + k) % size();
    if (i != except && responsive(i))
      return i;
  }
  return std::nullopt;
}

std::optional<size_t> node_set::first_responsive() const {
  for (size_t i = 0; i < size(); ++i)
    if (responsive(i))
      return i;
  return std::nullopt;
}

void node_set::refresh(size_t index) {
  addresses_[index] = nodes_[index]->address();
  if (auto& proxy = links_[index])
    addresses_[index].port = proxy->port();
  admin_addresses_[index] = nodes_[index]->admin_address();
}

fault_proxy* node_set::link(size_t index) const {
  std::lock_guard<std::mutex> guard{mtx_};
  return links_.at(index).get();
}

void node_set::kill9(size_t index) {
  std::lock_guard<std::mutex> guard{mtx_};
  states_.at(index) = node_state::killed;
  armed_[index] = false;
  paused_[index] = false;
  nodes_[index]->kill9();
}

namespace {

/// How often a kill point fired in `log` (keel-node's stderr, where each
/// firing writes "keel: kill point NAME fired (hit N)").
size_t kill_point_firings(const std::string& log) {
  size_t n = 0;
  for (auto pos = log.find(" fired (hit "); pos != std::string::npos;
       pos = log.find(" fired (hit ", pos + 1))
    ++n;
  return n;
}

} // namespace

bool node_set::arm(size_t index, const std::string& spec) {
  std::lock_guard<std::mutex> guard{mtx_};
  auto& node = *nodes_.at(index);
  node.kill9();
  auto fired_before = kill_point_firings(node.stderr_text());
  bool armed = true;
  try {
    node.start({"--kill-at", spec});
  } catch (const std::runtime_error&) {
    if (kill_point_firings(node.stderr_text()) == fired_before)
      throw;
    node.start(); // it died at the point during recovery
    armed = false;
  }
  armed_[index] = armed;
  paused_[index] = false;
  refresh(index);
  return armed;
}

void node_set::disarm_all() {
  std::lock_guard<std::mutex> guard{mtx_};
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!armed_[i])
      continue;
    nodes_[i]->kill9();
    nodes_[i]->start();
    armed_[i] = false;
    refresh(i);
  }
}

void node_set::restart(size_t index) {
  std::lock_guard<std::mutex> guard{mtx_};
  launch(index);
}

void node_set::start(size_t index) {
  std::lock_guard<std::mutex> guard{mtx_};
  launch(index);
}

int node_set::stop(size_t index) {
  std::lock_guard<std::mutex> guard{mtx_};
  states_.at(index) = node_state::idle;
  paused_[index] = false;
  armed_[index] = false;
  return nodes_[index] ? nodes_[index]->stop() : 0;
}

void node_set::pause(size_t index) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (auto pid = nodes_.at(index)->pid(); pid > 0) {
    ::kill(pid, SIGSTOP);
    paused_[index] = true;
  }
}

void node_set::resume(size_t index) {
  std::lock_guard<std::mutex> guard{mtx_};
  paused_.at(index) = false;
  if (auto pid = nodes_.at(index)->pid(); pid > 0)
    ::kill(pid, SIGCONT);
}

void node_set::restart_exited(exits& out) {
  std::lock_guard<std::mutex> guard{mtx_};
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (states_[i] != node_state::running || nodes_[i]->running())
      continue;
    // stop() on an exited node only reads its exit code.
    auto code = nodes_[i]->stop();
    if (armed_[i])
      ++out.armed;
    else if (code == 75)
      ++out.declared_dead;
    else
      ++out.unplanned;
    armed_[i] = false;
    paused_[i] = false;
    nodes_[i]->start();
    refresh(i);
  }
}

void node_set::restart_killed() {
  std::lock_guard<std::mutex> guard{mtx_};
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (states_[i] == node_state::killed)
      launch(i);
  }
}

bool node_set::stop_all() {
  std::lock_guard<std::mutex> guard{mtx_};
  bool clean = true;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (states_[i] == node_state::running)
      clean &= nodes_[i]->stop() == 0;
  return clean;
}

std::vector<std::string> node_set::data_dirs() const {
  return dirs_;
}

} // namespace keel::chaos::detail
