#include "keel/tools/chaos_scenario.hpp"

#include <algorithm>
#include <filesystem>
#include <optional>

#include <yaml-cpp/yaml.h>

#include "keel/config.hpp"
#include "keel/kill_point.hpp"
#include "keel/strict_yaml.hpp"
#include "keel/text.hpp"
#include "keel/tools/fault_llm_server.hpp"

namespace keel::chaos {

namespace {

using strict_yaml::indexed;
using strict_yaml::line_of;
using strict_yaml::map_reader;
using strict_yaml::no_limit;

constexpr const char* root_keys[] = {"name",      "seed",    "nodes",
                                     "providers", "traffic", "steps"};

constexpr const char* node_keys[]
  = {"count",          "initially",  "config", "overrides",
     "provider_delay", "slow_delay", "cluster"};

constexpr const char* cluster_keys[] = {"shards",          "heartbeat",
                                        "lease_ttl",       "route_timeout",
                                        "handoff_timeout", "rebalance_batch"};

constexpr const char* traffic_keys[]
  = {"connections", "threads",        "rate",        "message_bytes",
     "duration",    "answer_timeout", "ack_timeout", "slow_every"};

constexpr const char* step_keys[]
  = {"at",         "node",        "kill_actor",     "every",
     "until",      "kill_node",   "restart_node",   "pause_node",
     "for",        "disk_fault",  "provider_fault", "server",
     "kill_point", "probability", "link_fault",     "link",
     "delay",      "start_node",  "drain_node",     "restart_db"};

constexpr action all_actions[]
  = {action::kill_actor, action::kill_node,  action::restart_node,
     action::pause_node, action::disk_fault, action::provider_fault,
     action::kill_point, action::link_fault, action::start_node,
     action::drain_node, action::restart_db};

constexpr const char* link_modes[] = {"delay", "blackhole", "reset"};

constexpr const char* links[] = {"clients", "provider", "database", "peers"};

constexpr const char* db_modes[] = {"stop", "kill9"};

constexpr const char* disk_errors[] = {"eio", "enospc"};

/// Scenarios take no `${VAR}` from the environment: a run is what the file
/// says.
const env_lookup& no_env() {
  static const env_lookup env
    = [](const std::string&) -> std::optional<std::string> {
    return std::nullopt;
  };
  return env;
}

/// Reads a scenario document; every problem throws `strict_yaml::error`.
class scenario_reader : public strict_yaml::reader {
public:
  scenario_reader(const std::string& source, std::string base_dir)
    : reader(source, no_env()), base_dir_(std::move(base_dir)) {
    // nop
  }

  scenario run(const YAML::Node& root) {
    scenario result;
    result.source = source();
    if (!root.IsDefined() || root.IsNull())
      fail(1, "steps",
           "the scenario is empty (expected nodes, traffic and "
           "steps)");
    map_reader m{*this, root, "", line_of(root),
                 strict_yaml::strings(root_keys)};
    result.name = m.get("name")
                    ? read_name(*m.get("name"), "name")
                    : std::filesystem::path{source()}.stem().string();
    if (auto x = m.get("seed"))
      result.seed = static_cast<uint64_t>(read_int(*x, "seed", 0, no_limit));
    if (auto s = section(m, "nodes", strict_yaml::strings(node_keys)))
      read_nodes(*s, result.nodes);
    if (auto s = section(m, "providers", {"fault_servers"}))
      if (auto x = s->get("fault_servers"))
        result.providers.fault_servers
          = static_cast<size_t>(read_int(*x, s->path("fault_servers"), 0, 2));
    if (auto s = section(m, "traffic", strict_yaml::strings(traffic_keys)))
      read_traffic(*s, result.traffic);
    check_slow_turns(result);
    auto steps = read_list(required(m, "steps", "a list of steps"), "steps",
                           "a list of steps");
    for (size_t i = 0; i < steps.size(); ++i) {
      result.steps.push_back(read_step(steps[i], indexed("steps", i), result));
      result.steps.back().index = i;
    }
    std::stable_sort(result.steps.begin(), result.steps.end(),
                     [](const step& x, const step& y) { return x.at < y.at; });
    check_node_states(result);
    return result;
  }

private:
  void read_nodes(const map_reader& m, node_spec& out) {
    if (auto x = m.get("count"))
      out.count = static_cast<size_t>(read_int(*x, m.path("count"), 1, 8));
    if (auto x = m.get("config")) {
      auto path = std::filesystem::path{read_string(*x, m.path("config"))};
      if (path.is_relative())
        path = std::filesystem::path{base_dir_} / path;
      out.config_file = path.lexically_normal().string();
    }
    if (auto x = m.get("overrides")) {
      if (!x->IsMap())
        fail(line_of(*x), m.path("overrides"),
             "expected a mapping of node config keys, got "
               + strict_yaml::describe(*x));
      YAML::Emitter out_yaml;
      out_yaml << *x;
      out.overrides = out_yaml.c_str();
    }
    if (auto x = m.get("provider_delay"))
      out.provider_delay = read_millis(*x, m.path("provider_delay"), false);
    if (auto x = m.get("slow_delay"))
      out.slow_delay = read_millis(*x, m.path("slow_delay"), true);
    if (auto x = m.get("cluster"))
      read_cluster(*x, m.path("cluster"), out.cluster);
    out.initially = out.count;
    if (auto x = m.get("initially")) {
      out.initially = static_cast<size_t>(
        read_int(*x, m.path("initially"), 1, static_cast<int64_t>(out.count)));
      if (out.initially < out.count && !out.cluster.enabled)
        fail(m.line("initially"), m.path("initially"),
             "nodes that are not running at first join a cluster with "
             "start_node: set nodes.cluster");
    }
  }

  /// `cluster: true`, or a mapping of the cluster's timings (which also
  /// switches it on).
  void read_cluster(const YAML::Node& node, const std::string& path,
                    cluster_spec& out) {
    if (!node.IsMap()) {
      out.enabled = read_bool(node, path);
      return;
    }
    out.enabled = true;
    map_reader c{*this, node, path, line_of(node),
                 strict_yaml::strings(cluster_keys)};
    if (auto x = c.get("shards"))
      out.shards
        = static_cast<uint32_t>(read_int(*x, c.path("shards"), 1, 65536));
    if (auto x = c.get("rebalance_batch"))
      out.rebalance_batch = static_cast<size_t>(
        read_int(*x, c.path("rebalance_batch"), 1, 65536));
    read_cluster_timings(c, out);
  }

  void read_cluster_timings(const map_reader& c, cluster_spec& out) {
    auto at_least = [&](const char* key, std::chrono::milliseconds& field,
                        std::chrono::milliseconds lo) {
      auto x = c.get(key);
      if (!x)
        return;
      field = read_millis(*x, c.path(key), lo.count() > 0);
      if (field < lo)
        fail(c.line(key), c.path(key), "at least " + human_duration(lo));
    };
    using std::chrono::milliseconds;
    at_least("heartbeat", out.heartbeat, milliseconds{10});
    at_least("lease_ttl", out.lease_ttl, milliseconds{1});
    at_least("route_timeout", out.route_timeout, milliseconds{100});
    at_least("handoff_timeout", out.handoff_timeout, milliseconds{0});
    if (out.lease_ttl < 3 * out.heartbeat)
      fail(c.line("lease_ttl"), c.path("lease_ttl"),
           "at least 3 heartbeats (" + human_duration(3 * out.heartbeat) + ")");
  }

  void read_traffic(const map_reader& m, traffic_spec& out) {
    auto count = [&](const char* key, size_t& field, int64_t hi) {
      if (auto x = m.get(key))
        field = static_cast<size_t>(read_int(*x, m.path(key), 1, hi));
    };
    count("connections", out.connections, 1000);
    count("threads", out.threads, 100000);
    count("slow_every", out.slow_every, 1000000);
    if (auto x = m.get("rate"))
      out.rate = read_number(*x, m.path("rate"), 0.1, 100000);
    if (auto x = m.get("message_bytes"))
      out.message_bytes = read_size(*x, m.path("message_bytes"), 1);
    if (auto x = m.get("duration"))
      out.duration = read_millis(*x, m.path("duration"), true);
    if (auto x = m.get("answer_timeout"))
      out.answer_timeout = read_millis(*x, m.path("answer_timeout"), true);
    if (auto x = m.get("ack_timeout"))
      out.ack_timeout = read_millis(*x, m.path("ack_timeout"), true);
    if (out.threads < out.connections)
      fail(m.line("threads"), m.path("threads"),
           "fewer threads (" + std::to_string(out.threads)
             + ") than connections (" + std::to_string(out.connections)
             + "): every connection sends to threads of its own");
  }

  /// Slow messages need the built-in provider's slow answer, and the other
  /// way round.
  void check_slow_turns(const scenario& sc) {
    auto& n = sc.nodes;
    auto every = sc.traffic.slow_every > 0;
    auto delay = n.slow_delay.count() > 0;
    if (every && !delay)
      fail(line("traffic.slow_every"), "traffic.slow_every",
           "slow messages need nodes.slow_delay (how long the built-in "
           "provider takes to answer them)");
    if (delay && !every)
      fail(line("nodes.slow_delay"), "nodes.slow_delay",
           "no message is slow: set traffic.slow_every");
    if (delay && (!n.config_file.empty() || sc.providers.fault_servers > 0))
      fail(line("nodes.slow_delay"), "nodes.slow_delay",
           "only the built-in provider answers slowly (no nodes.config, no "
           "providers.fault_servers)");
  }

  step read_step(const YAML::Node& node, const std::string& path,
                 const scenario& sc) {
    map_reader m{*this, node, path, line_of(node),
                 strict_yaml::strings(step_keys)};
    step result;
    result.line = m.line();
    result.at = read_millis(required(m, "at", "a time from the start, e.g. 2s"),
                            m.path("at"), false);
    if (result.at > sc.traffic.duration)
      fail(m.line("at"), m.path("at"),
           "after the end of the traffic (traffic.duration is "
             + human_duration(sc.traffic.duration) + ")");
    result.what = read_action(m);
    result.node = read_node_index(m, sc);
    read_options(m, result, sc);
    return result;
  }

  /// The one action key of a step.
  action read_action(const map_reader& m) {
    std::vector<action> found;
    for (auto x : all_actions)
      if (m.has(to_string(x)))
        found.push_back(x);
    if (found.size() != 1) {
      std::vector<std::string> names;
      for (auto x : all_actions)
        names.emplace_back(to_string(x));
      fail(m.line(), m.path(found.empty() ? "at" : to_string(found[1])),
           found.empty()
             ? "a step needs one action: " + strict_yaml::one_of(names)
             : std::string{"a step has one action, not "} + to_string(found[0])
                 + " and " + to_string(found[1]));
    }
    return found[0];
  }

  /// The node a step acts on: `node:` or the value of a node action.
  size_t read_node_index(const map_reader& m, const scenario& sc) {
    auto hi = static_cast<int64_t>(sc.nodes.count) - 1;
    auto key = std::string{"node"};
    for (auto x : {action::kill_node, action::restart_node, action::pause_node,
                   action::start_node, action::drain_node})
      if (m.has(to_string(x)))
        key = to_string(x);
    auto value = m.get(key);
    if (!value)
      return 0;
    if (key != "node" && m.has("node"))
      fail(m.line("node"), m.path("node"),
           "give the node as the value of " + key);
    return static_cast<size_t>(read_int(*value, m.path(key), 0, hi));
  }

  void read_options(const map_reader& m, step& out, const scenario& sc) {
    check_option_owners(m, out);
    switch (out.what) {
      case action::kill_actor: read_kill_actor(m, out, sc); break;
      case action::disk_fault:
        if (sc.cluster())
          fail(m.line("disk_fault"), m.path("disk_fault"),
               "cluster nodes keep their data in PostgreSQL, not on their "
               "disk (break the node's link to the database instead: "
               "link_fault with link: database)");
        out.disk_error = read_enum(*m.get("disk_fault"), m.path("disk_fault"),
                                   disk_errors);
        break;
      case action::provider_fault: read_provider_fault(m, out, sc); break;
      case action::kill_point: read_kill_point(m, out); break;
      case action::link_fault: read_link_fault(m, out, sc); break;
      case action::start_node:
      case action::drain_node: need_cluster(m, to_string(out.what), sc); break;
      case action::restart_db: read_restart_db(m, out, sc); break;
      default: break;
    }
    if (lasts(out.what))
      out.lasting = read_millis(required(m, "for", "how long the fault lasts"),
                                m.path("for"), true);
  }

  /// Options only some actions take.
  void check_option_owners(const map_reader& m, const step& out) {
    auto only_with = [&](const char* key, action owner) {
      if (m.has(key) && out.what != owner)
        fail(m.line(key), m.path(key),
             std::string{"only a "} + to_string(owner) + " step takes " + key);
    };
    only_with("every", action::kill_actor);
    only_with("until", action::kill_actor);
    if (m.has("server") && out.what != action::provider_fault
        && out.what != action::link_fault)
      fail(m.line("server"), m.path("server"),
           "only a provider_fault or link_fault step takes server");
    only_with("link", action::link_fault);
    only_with("delay", action::link_fault);
    only_with("probability", action::kill_point);
    if (m.has("for") && !lasts(out.what))
      fail(m.line("for"), m.path("for"),
           std::string{"a "} + to_string(out.what) + " step takes no for");
  }

  /// Whether a step's fault lasts `for` and then ends.
  static bool lasts(action x) {
    return x == action::pause_node || x == action::disk_fault
           || x == action::provider_fault || x == action::link_fault
           || x == action::restart_db;
  }

  void need_cluster(const map_reader& m, const std::string& key,
                    const scenario& sc) {
    if (!sc.cluster())
      fail(m.line(key), m.path(key), "needs a cluster (set nodes.cluster)");
  }

  void read_restart_db(const map_reader& m, step& out, const scenario& sc) {
    need_cluster(m, "restart_db", sc);
    out.db_mode = read_enum(*m.get("restart_db"), m.path("restart_db"),
                            db_modes);
    if (m.has("node"))
      fail(m.line("node"), m.path("node"),
           "restart_db acts on the database every node shares, not on a "
           "node");
  }

  void read_link_fault(const map_reader& m, step& out, const scenario& sc) {
    out.link_mode = read_enum(*m.get("link_fault"), m.path("link_fault"),
                              link_modes);
    if (auto x = m.get("link"))
      out.link = read_enum(*x, m.path("link"), links);
    if (out.link_mode == "delay")
      out.link_delay = read_millis(
        required(m, "delay", "the delay added to each chunk, e.g. 200ms"),
        m.path("delay"), true);
    else if (m.has("delay"))
      fail(m.line("delay"), m.path("delay"),
           "only a link_fault: delay step takes delay");
    if (out.link != "provider" && m.has("server"))
      fail(m.line("server"), m.path("server"),
           "a link to " + out.link + " is chosen by node, not server");
    if (out.link == "database" || out.link == "peers")
      need_cluster(m, "link", sc);
    if (out.link == "provider") {
      if (sc.providers.fault_servers == 0)
        fail(m.line("link"), m.path("link"),
             "a provider link needs fault servers (set "
             "providers.fault_servers to 1 or 2)");
      read_server(m, out, sc);
    }
  }

  void read_provider_fault(const map_reader& m, step& out, const scenario& sc) {
    auto key = m.path("provider_fault");
    out.fault_spec = read_string(*m.get("provider_fault"), key);
    std::string why;
    if (!fault_llm::parse_fault(out.fault_spec, &why))
      fail(m.line("provider_fault"), key, why);
    if (sc.providers.fault_servers == 0)
      fail(m.line("provider_fault"), key,
           "needs fault servers (set providers.fault_servers to 1 or 2)");
    read_server(m, out, sc);
  }

  void read_server(const map_reader& m, step& out, const scenario& sc) {
    if (auto x = m.get("server"))
      out.server = static_cast<size_t>(
        read_int(*x, m.path("server"), 0,
                 static_cast<int64_t>(sc.providers.fault_servers) - 1));
  }

  void read_kill_point(const map_reader& m, step& out) {
    auto key = m.path("kill_point");
    out.kill_point_name = read_string(*m.get("kill_point"), key);
    if (auto p = parse_kill_point(out.kill_point_name); !p)
      fail(m.line("kill_point"), key, error_message(p.error()));
    if (auto x = m.get("probability"))
      out.probability = read_number(*x, m.path("probability"), 0.001, 1);
  }

  void read_kill_actor(const map_reader& m, step& out, const scenario& sc) {
    out.path = read_string(*m.get("kill_actor"), m.path("kill_actor"));
    if (out.path.empty() || out.path.front() != '/')
      fail(m.line("kill_actor"), m.path("kill_actor"),
           "expected an actor path such as /persistence, got "
             + strict_yaml::quote(out.path));
    if (auto x = m.get("every"))
      out.every = read_millis(*x, m.path("every"), true);
    if (auto x = m.get("until")) {
      if (out.every.count() == 0)
        fail(m.line("until"), m.path("until"), "until needs every");
      out.until = read_millis(*x, m.path("until"), true);
      if (out.until <= out.at || out.until > sc.traffic.duration)
        fail(m.line("until"), m.path("until"),
             "expected a time after at and within traffic.duration");
    }
  }

  /// Whether step `x` acts on its node (which must then run).
  static bool acts_on_node(const step& x) {
    return x.what != action::provider_fault && x.what != action::restart_db
           && !(x.what == action::link_fault && x.link == "provider");
  }

  /// A node is killed only while it runs and restarted only after it was
  /// killed; started only while it does not run (not started yet, or
  /// drained) and drained only while it runs beside another one. So the
  /// steps' effect does not depend on timing.
  void check_node_states(const scenario& sc) {
    std::vector<node_phase> phase(sc.nodes.count, node_phase::running);
    for (size_t i = sc.nodes.initially; i < sc.nodes.count; ++i)
      phase[i] = node_phase::idle;
    for (auto& x : sc.steps) {
      auto path = indexed("steps", x.index) + "." + to_string(x.what);
      auto& now = phase[x.node];
      auto expected = x.what == action::restart_node ? node_phase::killed
                      : x.what == action::start_node ? node_phase::idle
                                                     : node_phase::running;
      if (acts_on_node(x) && now != expected)
        fail(x.line, path,
             "node " + std::to_string(x.node) + " " + why(now, x));
      if (x.what == action::drain_node
          && std::count(phase.begin(), phase.end(), node_phase::running) < 2)
        fail(x.line, path,
             "node " + std::to_string(x.node)
               + " is the last running node then: nobody would take its "
                 "shards");
      if (x.what == action::kill_node)
        now = node_phase::killed;
      else if (x.what == action::drain_node)
        now = node_phase::idle;
      else if (x.what == action::restart_node || x.what == action::start_node)
        now = node_phase::running;
    }
  }

  /// Where a node is, for check_node_states.
  enum class node_phase { running, killed, idle };

  /// Why step `x` cannot act on a node in `now`.
  static std::string why(node_phase now, const step& x) {
    if (x.what == action::restart_node)
      return now == node_phase::running
               ? "is not down then (restart_node follows a kill_node of it)"
               : "is not running then (not started yet, or drained: "
                 "start_node starts it)";
    if (x.what == action::start_node)
      return now == node_phase::running
               ? "is already running then (start_node starts a node "
                 "beyond nodes.initially, or a drained one)"
               : "is down then (killed: restart_node starts it again)";
    if (x.what == action::kill_node && now == node_phase::killed)
      return "is already down then";
    return now == node_phase::killed
             ? "is down then (killed and not restarted)"
             : "is not running then (not started yet, or drained)";
  }

  std::string base_dir_;
};

} // namespace

const char* to_string(action x) {
  switch (x) {
    case action::kill_actor: return "kill_actor";
    case action::kill_node: return "kill_node";
    case action::restart_node: return "restart_node";
    case action::pause_node: return "pause_node";
    case action::disk_fault: return "disk_fault";
    case action::provider_fault: return "provider_fault";
    case action::kill_point: return "kill_point";
    case action::link_fault: return "link_fault";
    case action::start_node: return "start_node";
    case action::drain_node: return "drain_node";
    default: return "restart_db";
  }
}

std::string node_id(size_t index) {
  return "n" + std::to_string(index + 1);
}

namespace {

/// The link a link_fault step breaks, in words.
std::string link_words(const step& x) {
  auto node = std::to_string(x.node);
  if (x.link == "clients")
    return "the link from the clients to node " + node;
  if (x.link == "database")
    return "the link from node " + node + " to the database";
  if (x.link == "peers")
    return "the links from the other nodes to node " + node;
  return "the link to fault server " + std::to_string(x.server);
}

} // namespace

std::string to_string(const step& x) {
  auto result = std::string{to_string(x.what)} + " ";
  switch (x.what) {
    case action::kill_actor:
      result += x.path;
      if (x.every.count() > 0)
        result += " every " + human_duration(x.every);
      if (x.until.count() > 0)
        result += " until " + human_duration(x.until);
      return result + " on node " + std::to_string(x.node);
    case action::disk_fault:
      return result + x.disk_error + " for " + human_duration(x.lasting)
             + " on node " + std::to_string(x.node);
    case action::pause_node:
      return result + std::to_string(x.node) + " for "
             + human_duration(x.lasting);
    case action::provider_fault:
      return result + x.fault_spec + " for " + human_duration(x.lasting)
             + " on fault server " + std::to_string(x.server);
    case action::kill_point:
      return result + x.kill_point_name + " (probability "
             + fixed(x.probability, 3) + ") on node " + std::to_string(x.node);
    case action::link_fault:
      return result + x.link_mode
             + (x.link_mode == "delay" ? " " + human_duration(x.link_delay)
                                       : std::string{})
             + " for " + human_duration(x.lasting) + " on " + link_words(x);
    case action::restart_db:
      return result + x.db_mode + " for " + human_duration(x.lasting);
    default: return result + std::to_string(x.node);
  }
}

bool scenario::breaks_link(const std::string& link) const {
  return std::any_of(steps.begin(), steps.end(), [&link](const step& s) {
    return s.what == action::link_fault && s.link == link;
  });
}

bool scenario::uses(action x) const {
  return std::any_of(steps.begin(), steps.end(),
                     [x](const step& s) { return s.what == x; });
}

caf::expected<scenario> parse_scenario(const std::string& yaml,
                                       const std::string& source,
                                       const std::string& base_dir) {
  auto root = strict_yaml::load_document(yaml, source);
  if (!root)
    return std::move(root.error());
  try {
    scenario_reader p{source, base_dir};
    return p.run(*root);
  } catch (const strict_yaml::error& err) {
    return caf::make_error(ec::config_invalid, err.message);
  } catch (const std::exception& ex) {
    return caf::make_error(ec::config_invalid,
                           source + ": cannot read the scenario: " + ex.what());
  }
}

caf::expected<scenario> load_scenario(const std::string& path) {
  auto text = strict_yaml::read_file(path);
  if (!text)
    return std::move(text.error());
  auto dir = std::filesystem::path{path}.parent_path().string();
  return parse_scenario(*text, path, dir.empty() ? "." : dir);
}

} // namespace keel::chaos
