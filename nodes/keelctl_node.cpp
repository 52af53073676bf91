// keelctl status, tree, kill and providers: the subcommands that ask a
// node's HTTP API (`tree --agents --data-dir` reads a data folder instead).

#include <cstdio>
#include <iostream>
#include <vector>

#include "keel/agent_tree.hpp"
#include "keel/text.hpp"
#include "keel/tools/data_dir.hpp"
#include "keel/tools/ws_client.hpp"
#include "keelctl.hpp"

namespace keelctl {

namespace {

// -- status
// ---------------------------------------------------------------------

/// One row of the status table: the label in a column of 13.
void status_row(const char* label, const std::string& value) {
  char head[24];
  std::snprintf(head, sizeof(head), "%-13s", label);
  std::cout << head << value << '\n';
}

/// The threads with records in quarantine, as "t1, t2 (records moved
/// aside: keelctl verify lists them)", or empty.
std::string quarantined_threads(const nlohmann::json& s) {
  auto threads = s.find("threads");
  if (threads == s.end() || !threads->is_object())
    return {};
  auto list = threads->find("quarantined");
  if (list == threads->end() || !list->is_array() || list->empty())
    return {};
  std::string result;
  for (auto& t : *list)
    if (t.is_string())
      result += (result.empty() ? "" : ", ") + t.get<std::string>();
  return result
         + " (unreadable records moved aside; keelctl verify lists "
           "them)";
}

int run_status(const keel::endpoint& ep, bool as_json) {
  auto status = keel::api_call(ep, "GET", "/api/v1/status");
  if (!status)
    return fail(ep, status.error());
  const auto& s = *status;
  if (as_json) {
    std::cout << s.dump(2) << '\n';
    return exit_ok;
  }
  auto n = [&](std::initializer_list<const char*> path) {
    return std::to_string(json_number(s, path));
  };
  std::string protocol = s.contains("protocol") ? s["protocol"].dump() : "?";
  status_row("node", json_string(s, "node") + " (version "
                       + json_string(s, "version") + ", protocol " + protocol
                       + ")");
  status_row("address", keel::to_string(ep));
  status_row("uptime", keel::human_duration(millis_at(s, {"uptime_ms"})));
  status_row("threads", n({"threads", "active"}) + " active, "
                          + n({"threads", "stored"}) + " stored");
  if (auto q = quarantined_threads(s); !q.empty())
    status_row("quarantined", q);
  status_row("connections", n({"gateway", "connections_open"}) + " open, "
                              + n({"gateway", "connections_total"}) + " total");
  status_row("frames", n({"gateway", "frames_in"}) + " in, "
                         + n({"gateway", "frames_out"}) + " out, "
                         + n({"gateway", "bad_frames"}) + " bad");
  status_row("store", n({"store", "flushes"}) + " flushes, "
                        + n({"store", "staged_operations"})
                        + " staged operations, "
                        + n({"store", "failed_flushes"}) + " failed flushes");
  status_row("memory", keel::human_bytes(json_number(s, {"rss_bytes"}))
                         + " RSS, "
                         + keel::human_bytes(json_number(s, {"peak_rss_bytes"}))
                         + " peak");
  status_row("data dir", json_string(s, "data_dir"));
  return exit_ok;
}

// -- tree
// -----------------------------------------------------------------------

/// Prints one node of the supervision tree and, indented, its children.
void print_tree(const json& node, const std::string& prefix, bool last,
                bool root) {
  std::string line = root ? "" : prefix + (last ? "`-- " : "|-- ");
  line += json_string(node, "id");
  if (line.size() < 32)
    line.resize(32, ' ');
  char cols[160];
  std::snprintf(
    cols, sizeof(cols), " %-10s restarts %-4llu up %s",
    json_string(node, "state").c_str(),
    static_cast<unsigned long long>(json_number(node, {"restarts"})),
    keel::human_duration(millis_at(node, {"uptime_ms"})).c_str());
  std::cout << line << cols;
  auto exit = json_string(node, "last_exit");
  if (!exit.empty())
    std::cout << "  last exit: " << exit;
  std::cout << '\n';
  auto i = node.find("children");
  if (i == node.end() || !i->is_array())
    return;
  auto child_prefix = root ? "" : prefix + (last ? "    " : "|   ");
  for (size_t k = 0; k < i->size(); ++k)
    print_tree((*i)[k], child_prefix, k + 1 == i->size(), false);
  // The node answers a page of a supervisor's children (GET /api/v1/tree).
  auto total = static_cast<size_t>(json_number(node, {"children_total"}));
  if (total > i->size())
    std::cout << child_prefix << "    ... and " << total - i->size()
              << " more\n";
}

int run_tree(const keel::endpoint& ep, bool as_json) {
  auto tree = keel::api_call(ep, "GET", "/api/v1/tree?limit=1000");
  if (!tree)
    return fail(ep, tree.error());
  if (as_json)
    std::cout << tree->dump(2) << '\n';
  else if (auto i = tree->find("tree"); i != tree->end())
    print_tree(*i, "", true, true);
  return exit_ok;
}

int print_agents(const std::vector<keel::agent_info>& agents, bool as_json) {
  if (as_json)
    std::cout << keel::agents_to_json(agents).dump(2) << '\n';
  else
    std::cout << keel::render_agent_tree(agents);
  return exit_ok;
}

int run_agents(const keel::endpoint& ep, const keel::data_source& src,
               bool as_json) {
  if (!src.data_dir.empty() || !src.pg_url.empty())
    return with_data(src, [&](keel::store& db) {
      auto agents = keel::read_agents(db);
      if (!agents)
        return fail(keel::error_message(agents.error()), exit_usage);
      return print_agents(*agents, as_json);
    });
  auto res = api_list(ep, "/api/v1/agents", "agents");
  if (!res)
    return fail(ep, res.error());
  if (as_json) {
    std::cout << res->dump(2) << '\n';
    return exit_ok;
  }
  auto agents = keel::agents_from_json(*res);
  if (!agents)
    return fail(keel::error_message(agents.error()));
  return print_agents(*agents, as_json);
}

// -- kill
// -----------------------------------------------------------------------

int run_kill(const keel::endpoint& ep, const std::string& path,
             const std::string& reason) {
  json body{{"path", path}};
  if (!reason.empty())
    body["reason"] = reason;
  auto res = keel::api_call(ep, "POST", "/api/v1/kill", body.dump());
  if (!res)
    return fail(ep, res.error());
  std::cout << "killed " << json_string(*res, "path") << " ("
            << json_string(*res, "reason") << ")\n";
  return exit_ok;
}

// -- pause and resume
// -----------------------------------------------------------------------

int run_pause(const keel::endpoint& ep, const std::string& thread,
              bool paused) {
  auto res = keel::api_call(
    ep, "POST", "/api/v1/agents/" + thread + (paused ? "/pause" : "/resume"),
    {});
  if (!res)
    return fail(ep, res.error());
  std::cout << json_string(*res, "thread")
            << (paused ? " is paused: its messages are answered with the "
                         "offline text\n"
                       : " is resumed\n");
  return exit_ok;
}

// -- task
// -----------------------------------------------------------------------

int run_task(const keel::endpoint& ep, const std::string& thread,
             keel::seq_t seq, bool as_json) {
  auto res = keel::api_call(
    ep, "GET", "/api/v1/tasks/" + thread + "/" + std::to_string(seq));
  if (!res)
    return fail(ep, res.error());
  if (as_json) {
    std::cout << res->dump(2) << '\n';
    return exit_ok;
  }
  auto updated = millis_at(*res, {"updated_at"}).count();
  std::cout << thread << "/" << seq << ": " << json_string(*res, "state")
            << ", attempts " << json_number(*res, {"attempts"})
            << (updated > 0 ? ", updated " + keel::format_utc(updated) : "")
            << "\n  " << json_string(*res, "text") << '\n';
  return exit_ok;
}

// -- providers
// ------------------------------------------------------------------

/// Prints one provider's health on one line.
void print_provider(const json& p) {
  char cols[200];
  std::snprintf(cols, sizeof(cols),
                "  %-20s %-9s breaker %-9s calls %-6llu failures %-6llu",
                json_string(p, "provider").c_str(),
                json_string(p, "status").c_str(),
                json_string(p, "breaker").c_str(),
                static_cast<unsigned long long>(json_number(p, {"calls"})),
                static_cast<unsigned long long>(json_number(p, {"failures"})));
  std::cout << cols;
  auto remaining = millis_at(p, {"cooldown_remaining_ms"});
  if (remaining.count() > 0)
    std::cout << " cooldown " << keel::human_duration(remaining);
  auto cls = json_string(p, "last_error_class");
  auto at = json_string(p, "last_failure_at");
  if (!cls.empty())
    std::cout << "\n    last error (" << cls << ")"
              << (at.empty() ? "" : " at " + at) << ": "
              << json_string(p, "last_error");
  std::cout << '\n';
}

int run_providers(const keel::endpoint& ep, bool as_json) {
  auto res = keel::api_call(ep, "GET", "/api/v1/providers");
  if (!res)
    return fail(ep, res.error());
  if (as_json) {
    std::cout << res->dump(2) << '\n';
    return exit_ok;
  }
  auto pools = res->find("pools");
  if (pools == res->end() || !pools->is_array())
    return exit_ok;
  for (auto& pool : *pools) {
    std::cout << "pool " << json_string(pool, "pool");
    if (auto err = json_string(pool, "error"); !err.empty()) {
      std::cout << ": unavailable (" << err << ")\n";
      continue;
    }
    std::cout << '\n';
    if (auto i = pool.find("providers"); i != pool.end() && i->is_array())
      for (auto& p : *i)
        print_provider(p);
  }
  return exit_ok;
}

/// The options of a subcommand that only prints: --json.
struct print_args {
  bool json = false;
};

} // namespace

command add_status_command(CLI::App& app, const node_args& node) {
  auto args = std::make_shared<print_args>();
  auto cmd = add_node_command(app, "status", "Prints the node's status");
  cmd->add_flag("--json", args->json, "Print the raw JSON");
  return node_command(
    cmd, node,
    [args](const keel::endpoint& ep) { return run_status(ep, args->json); },
    true);
}

command add_tree_command(CLI::App& app, const node_args& node) {
  struct tree_args {
    bool json = false;
    bool agents = false;
    keel::data_source source;
  };
  auto args = std::make_shared<tree_args>();
  auto cmd = add_node_command(
    app, "tree",
    "Prints the live supervision tree: each actor's state, restart count, "
    "uptime and last exit reason; with --agents the agent tree instead");
  cmd->add_flag("--json", args->json, "Print the raw JSON");
  cmd->add_flag("--agents", args->agents,
                "Print the agent tree: every root agent with its children "
                "and their session states");
  auto agents = cmd->get_option("--agents");
  add_data_options(cmd, args->source, false)->needs(agents);
  cmd->get_option("--pg")->needs(agents);
  return node_command(
    cmd, node,
    [args](const keel::endpoint& ep) {
      return args->agents ? run_agents(ep, args->source, args->json)
                          : run_tree(ep, args->json);
    },
    true);
}

command add_kill_command(CLI::App& app, const node_args& node) {
  struct kill_args {
    std::string path;
    std::string reason;
  };
  auto args = std::make_shared<kill_args>();
  auto cmd = add_node_command(
    app, "kill",
    "Kills the actor at PATH (e.g. /persistence, /orchestrator, "
    "/providers/default, /conversations/t42); its supervisor restarts it");
  cmd->add_option("PATH", args->path, "The actor's path in the tree")
    ->type_name("")
    ->required();
  cmd->add_option("--reason", args->reason,
                  "The exit reason to use (default: killed)");
  return node_command(
    cmd, node,
    [args](const keel::endpoint& ep) {
      return run_kill(ep, args->path, args->reason);
    },
    true);
}

command add_pause_command(CLI::App& app, const node_args& node, bool paused) {
  auto thread = std::make_shared<std::string>();
  auto cmd = add_node_command(
    app, paused ? "pause" : "resume",
    paused ? "Pauses the agent of THREAD: each message it gets is stored and "
             "answered with the offline text (code agent_paused) until it "
             "is resumed"
           : "Resumes the agent of THREAD after a pause");
  cmd->add_option("THREAD", *thread, "The thread id")
    ->type_name("")
    ->required();
  return node_command(
    cmd, node,
    [thread, paused](const keel::endpoint& ep) {
      return run_pause(ep, *thread, paused);
    },
    true);
}

command add_task_command(CLI::App& app, const node_args& node) {
  struct task_args {
    std::string thread;
    keel::seq_t seq = 0;
    bool json = false;
  };
  auto args = std::make_shared<task_args>();
  auto cmd = add_node_command(
    app, "task",
    "Where message SEQ of THREAD stands as a task: queued, dispatched, "
    "in_progress, retried, succeeded or dead_lettered, with its attempts");
  cmd->add_option("THREAD", args->thread, "The thread id")
    ->type_name("")
    ->required();
  cmd->add_option("SEQ", args->seq, "The message's seq in the thread")
    ->type_name("")
    ->required();
  cmd->add_flag("--json", args->json, "Print the raw JSON");
  return node_command(
    cmd, node,
    [args](const keel::endpoint& ep) {
      return run_task(ep, args->thread, args->seq, args->json);
    },
    true);
}

command add_providers_command(CLI::App& app, const node_args& node) {
  auto args = std::make_shared<print_args>();
  auto cmd = add_node_command(
    app, "providers",
    "Prints the health of every provider of every pool: status, breaker, "
    "cooldown, calls and the last error");
  cmd->add_flag("--json", args->json, "Print the raw JSON");
  return node_command(
    cmd, node,
    [args](const keel::endpoint& ep) { return run_providers(ep, args->json); },
    true);
}

} // namespace keelctl
