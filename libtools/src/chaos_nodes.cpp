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
/// without a network.
std::string builtin_config(std::chrono::milliseconds delay) {
  return "node:\n  name: chaos\n"
         "gateway:\n  rate_limit:\n    per_second: 0\n"
         "providers:\n  - name: scripted\n    kind: scripted\n"
         "    script:\n      - reply: \"answer to {input}\"\n"
         "        delay: "
         + std::to_string(delay.count())
         + "ms\n"
           "pools:\n  - name: default\n    chain: [scripted]\n";
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
    return YAML::Load(builtin_config(sc.nodes.provider_delay));
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

} // namespace

std::string node_yaml(const scenario& sc, size_t index, const std::string& dir,
                      const std::vector<std::string>& provider_urls,
                      uint16_t port) {
  auto root = load_base(sc);
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
                   const std::vector<std::string>& provider_urls) {
  bool proxied = sc.breaks_link("clients");
  for (size_t i = 0; i < sc.nodes.count; ++i) {
    auto dir = work_dir + "/node-" + std::to_string(i);
    std::filesystem::create_directories(dir);
    // A proxied node keeps its port across restarts: the proxy's target.
    uint16_t port = proxied ? free_port() : 0;
    nodes_.push_back(std::make_unique<node_process>(
      dir, node_yaml(sc, i, dir, provider_urls, port), node_binary));
    dirs_.push_back(dir + "/data");
    addresses_.emplace_back();
    admin_addresses_.emplace_back();
    down_.push_back(false);
    armed_.push_back(false);
    links_.push_back(proxied ? std::make_unique<fault_proxy>("127.0.0.1", port)
                             : nullptr);
    refresh(i);
  }
}

endpoint node_set::address(size_t index) const {
  std::lock_guard<std::mutex> guard{mtx_};
  return addresses_.at(index);
}

endpoint node_set::admin_address(size_t index) const {
  std::lock_guard<std::mutex> guard{mtx_};
  return admin_addresses_.at(index);
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
  down_.at(index) = true;
  armed_[index] = false;
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
  nodes_.at(index)->start();
  down_[index] = false;
  refresh(index);
}

void node_set::pause(size_t index) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (auto pid = nodes_.at(index)->pid(); pid > 0)
    ::kill(pid, SIGSTOP);
}

void node_set::resume(size_t index) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (auto pid = nodes_.at(index)->pid(); pid > 0)
    ::kill(pid, SIGCONT);
}

uint64_t node_set::restart_exited(uint64_t& armed_deaths) {
  std::lock_guard<std::mutex> guard{mtx_};
  uint64_t result = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (down_[i] || nodes_[i]->running())
      continue;
    (armed_[i] ? armed_deaths : result) += 1;
    armed_[i] = false;
    nodes_[i]->start();
    refresh(i);
  }
  return result;
}

void node_set::restart_killed() {
  std::lock_guard<std::mutex> guard{mtx_};
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!down_[i])
      continue;
    nodes_[i]->start();
    down_[i] = false;
    refresh(i);
  }
}

bool node_set::stop_all() {
  std::lock_guard<std::mutex> guard{mtx_};
  bool clean = true;
  for (auto& node : nodes_)
    clean &= node->stop() == 0;
  return clean;
}

std::vector<std::string> node_set::data_dirs() const {
  return dirs_;
}

} // namespace keel::chaos::detail
