#include "keel/tools/data_dir.hpp"

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>

#include "keel/json_codec.hpp"
#include "keel/pg_store.hpp"
#include "keel/text.hpp"

namespace keel {

namespace {

using json = nlohmann::json;

std::string plural(uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

// Prints the agent tree depth first, each agent once.
class tree_printer {
public:
  explicit tree_printer(const std::vector<agent_info>& agents) {
    for (auto& x : agents)
      by_thread_.emplace(x.thread, &x);
  }

  std::string run(const std::vector<agent_info>& agents) {
    size_t roots = 0;
    for (auto& x : agents)
      if (x.parent.empty() || by_thread_.count(x.parent) == 0) {
        ++roots;
        print(x, "", true, true);
      }
    // Left over: agents in a parent cycle, unreachable from any root.
    for (auto& x : agents)
      if (printed_.count(x.thread) == 0)
        print(x, "", true, true);
    out_ += plural(agents.size(), "agent", "agents") + ", "
            + plural(roots, "root", "roots") + "\n";
    return std::move(out_);
  }

private:
  void line(const std::string& prefix, const std::string& name,
            const std::string& rest) {
    auto head = prefix + name;
    if (head.size() < 32)
      head.resize(32, ' ');
    out_ += head + " " + rest + "\n";
  }

  void print(const agent_info& x, const std::string& prefix, bool last,
             bool root) {
    printed_.insert(x.thread);
    auto branch = root ? "" : prefix + (last ? "`-- " : "|-- ");
    char state[16];
    std::snprintf(state, sizeof(state), "%-10s", x.state.c_str());
    std::string rest = state;
    rest += "agent=" + (x.agent.empty() ? std::string{"default"} : x.agent);
    rest += " pool=" + x.pool;
    if (!x.model.empty())
      rest += "/" + x.model;
    if (!x.provider.empty())
      rest += " via " + x.provider;
    for (size_t i = 0; i < x.tool_failures.size(); ++i)
      rest += (i == 0 ? " [tool failures: " : ", ") + x.tool_failures[i].tool
              + " " + std::to_string(x.tool_failures[i].failures)
              + (i + 1 == x.tool_failures.size() ? "]" : "");
    if (x.paused_at != 0)
      rest += " [paused]";
    if (root && !x.parent.empty())
      rest += by_thread_.count(x.parent) == 0
                ? " (parent " + x.parent + " has no session)"
                : " (in a parent cycle)";
    line(branch, x.thread, rest);
    auto child_prefix = root ? "" : prefix + (last ? "    " : "|   ");
    for (size_t k = 0; k < x.children.size(); ++k) {
      const auto& id = x.children[k];
      bool child_last = k + 1 == x.children.size();
      auto i = by_thread_.find(id);
      if (i == by_thread_.end())
        line(child_prefix + (child_last ? "`-- " : "|-- "), id, "(no session)");
      else if (printed_.count(id) > 0)
        line(child_prefix + (child_last ? "`-- " : "|-- "), id,
             "(shown above)");
      else
        print(*i->second, child_prefix, child_last, false);
    }
  }

  std::map<std::string, const agent_info*> by_thread_;
  std::set<std::string> printed_;
  std::string out_;
};

} // namespace

caf::expected<std::unique_ptr<store>> open_data_dir(const std::string& dir,
                                                    bool writable) {
  namespace fs = std::filesystem;
  std::error_code err;
  if (!fs::is_directory(dir, err))
    return caf::make_error(ec::storage_open_failed, "cannot open data folder "
                                                      + dir
                                                      + ": no such folder");
  // RocksDB's CURRENT file marks a database folder.
  for (auto candidate : {fs::path{dir} / "db", fs::path{dir}})
    if (fs::exists(candidate / "CURRENT", err)) {
      store_options opts;
      opts.read_only = !writable;
      opts.create_if_missing = false;
      return store::open(candidate.string(), opts);
    }
  return caf::make_error(ec::storage_open_failed, "no database in " + dir
                                                    + " (looked in " + dir
                                                    + "/db and " + dir + ")");
}

caf::expected<std::unique_ptr<store>> open_data_source(const data_source& src) {
  if (src.pg_url.empty())
    return open_data_dir(src.data_dir);
  pg_store_options opts;
  opts.url = src.pg_url;
  opts.connections = 1;
  opts.read_only = true;
  return open_pg_store(opts);
}

std::string render_agent_tree(const std::vector<agent_info>& agents) {
  if (agents.empty())
    return "no agents\n";
  return tree_printer{agents}.run(agents);
}

std::string format_utc(millis at) {
  auto secs = static_cast<std::time_t>(at / 1000);
  std::tm utc{};
  gmtime_r(&secs, &utc);
  char buf[64];
  auto n = std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &utc);
  std::snprintf(buf + n, sizeof(buf) - n, ".%03d UTC",
                static_cast<int>(at % 1000));
  return buf;
}

std::string render_recovery_report(const recovery_report& x) {
  std::string out
    = "recovery at " + format_utc(x.started_at) + ", took "
      + human_duration(std::chrono::milliseconds{x.finished_at - x.started_at})
      + "\n";
  for (auto& step : x.steps) {
    char buf[128];
    std::snprintf(buf, sizeof(buf), "  %-20s %8llu %10.2f ms\n",
                  step.name.c_str(),
                  static_cast<unsigned long long>(step.count),
                  static_cast<double>(step.micros) / 1000.0);
    out += buf;
  }
  auto row = [&](const char* label, const std::string& value) {
    char head[24];
    std::snprintf(head, sizeof(head), "%-18s", label);
    out += head + value + "\n";
  };
  row("sessions", std::to_string(x.sessions) + " ("
                    + plural(x.roots, "root", "roots") + "), "
                    + plural(x.links, "link", "links"));
  row("suspended", std::to_string(x.suspended) + " (found ACTIVE)");
  row("inbox", plural(x.inbox_messages, "message", "messages") + " in "
                 + plural(x.inbox_threads, "thread", "threads"));
  row("outbox", plural(x.outbox_messages, "message", "messages") + " re-sent");
  row("resumed", plural(x.roots_resumed, "root", "roots") + ", "
                   + plural(x.children_resumed, "child", "children"));
  row("cancels finished", std::to_string(x.cancels_finished));
  row("problems",
      x.problems.empty() ? "none" : std::to_string(x.problems.size()));
  for (auto& problem : x.problems)
    out += "  - " + problem + "\n";
  return out;
}

json to_json(const verify_report& x) {
  auto violations = json::array();
  for (auto& v : x.violations)
    violations.push_back(
      json{{"rule", v.rule}, {"where", v.where}, {"what", v.what}});
  auto quarantined = json::array();
  for (auto& q : x.quarantined)
    quarantined.push_back(json{{"thread", q.thread},
                               {"column_family", q.column_family},
                               {"key", q.key},
                               {"bytes", q.bytes}});
  return json{{"ok", x.ok()},
              {"sessions", x.sessions},
              {"links", x.links},
              {"user_messages", x.user_messages},
              {"answered", x.answered},
              {"pending", x.pending},
              {"outbox", x.outbox},
              {"quarantined_messages", x.quarantined_messages},
              {"quarantined", std::move(quarantined)},
              {"violations", std::move(violations)}};
}

std::string render_verify_report(const verify_report& x) {
  std::string out = plural(x.sessions, "session", "sessions") + ", "
                    + plural(x.links, "link", "links") + ", "
                    + plural(x.user_messages, "message", "messages") + " ("
                    + std::to_string(x.answered) + " answered, "
                    + std::to_string(x.pending) + " pending), "
                    + std::to_string(x.outbox) + " in outboxes\n";
  if (!x.quarantined.empty()) {
    out += plural(x.quarantined.size(), "record", "records")
           + " in quarantine (unreadable, moved aside; their threads started "
             "fresh";
    if (x.quarantined_messages > 0)
      out += ", " + plural(x.quarantined_messages, "message", "messages")
             + " among them unanswered";
    out += "):\n";
    for (auto& q : x.quarantined)
      out += "  " + q.column_family + " " + q.key + " ("
             + std::to_string(q.bytes) + " bytes)\n";
  }
  if (x.ok())
    return out + "every invariant holds\n";
  out += plural(x.violations.size(), "violation:", "violations:") + "\n";
  for (auto& v : x.violations)
    out += v.rule + " " + v.where + ": " + v.what + "\n";
  return out;
}

} // namespace keel
