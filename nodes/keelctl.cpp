// keelctl: talks to a running node. One subcommand per task; each takes
// --node HOST:PORT (env KEEL_NODE) and --token (env KEEL_TOKEN). `verify`,
// and `recovery` and `tree --agents` with --data-dir, read a node's data
// folder instead (read-only: the node may be stopped or running).
//
// Exit codes: 0 success, 1 the request failed (error frame, timeout) or
// `verify` found a violated invariant, 2 bad arguments or a data folder
// that cannot be read, 3 the node cannot be reached or refuses the token.

#include <chrono>
#include <cstdio>
#include <initializer_list>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "cli.hpp"
#include "keel/tools/bench.hpp"
#include "keel/json_codec.hpp"
#include "keel/tools/data_dir.hpp"
#include "keel/protocol.hpp"
#include "keel/text.hpp"
#include "keel/types.hpp"
#include "keel/tools/verify.hpp"
#include "keel/tools/ws_client.hpp"

namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

constexpr int exit_ok = 0;
constexpr int exit_failed = 1;
constexpr int exit_usage = 2;
constexpr int exit_unreachable = 3;

constexpr milliseconds connect_timeout{5000};

/// Prints `keelctl: MESSAGE` and returns the exit code for `err`.
int fail(const keel::endpoint& ep, const caf::error& err) {
  auto described = keel::describe_node_error(ep, err);
  auto msg = keel::error_message(described);
  std::cerr << "keelctl: " << (msg.empty() ? keel::render(described) : msg)
            << '\n';
  return described == keel::ec::connection_failed
             || described == keel::ec::unauthorized
           ? exit_unreachable
           : exit_failed;
}

/// Prints `keelctl: MESSAGE` and returns `code`.
int fail(const std::string& msg, int code = exit_failed) {
  std::cerr << "keelctl: " << msg << '\n';
  return code;
}

/// Connects; a timeout while connecting counts as an unreachable node.
caf::expected<std::unique_ptr<keel::ws_client>>
connect(const keel::endpoint& ep) {
  auto ws = keel::ws_client::connect(ep, keel::protocol::ws_path,
                                     connect_timeout);
  if (!ws && ws.error() == keel::ec::timeout)
    return caf::make_error(keel::ec::connection_failed,
                           keel::error_message(ws.error()));
  return ws;
}

std::string field(const json& body, const char* key) {
  auto i = body.find(key);
  return i != body.end() && i->is_string() ? i->get<std::string>()
                                           : std::string{};
}

/// Prints an error frame's code and message.
int print_error_frame(const json& body) {
  auto code = field(body, "code");
  auto message = field(body, "message");
  std::cerr << "keelctl: error " << (code.empty() ? "(no code)" : code)
            << (message.empty() ? "" : ": " + message) << '\n';
  return exit_failed;
}

/// Indents continuation lines of `text` by `indent` spaces.
std::string indent_lines(const std::string& text, size_t indent) {
  return keel::replace_all(text, "\n", "\n" + std::string(indent, ' '));
}

/// Receives decoded text frames until a shared deadline.
class frame_reader {
public:
  frame_reader(keel::endpoint ep, keel::ws_client& ws, milliseconds timeout)
    : ep_(std::move(ep)),
      ws_(ws),
      timeout_(timeout),
      deadline_(steady::now() + timeout) {
    // nop
  }

  /// Receives the next decoded frame. On failure prints why and stores the
  /// exit code in `code`.
  std::optional<keel::protocol::server_frame> next(int& code,
                                                   const std::string& what) {
    for (;;) {
      auto left = std::chrono::duration_cast<milliseconds>(deadline_
                                                           - steady::now());
      if (left.count() <= 0) {
        code = fail(too_late(what));
        return std::nullopt;
      }
      auto msg = ws_.receive(left);
      if (!msg) {
        const auto& err = msg.error();
        if (err == keel::ec::timeout)
          code = fail(too_late(what));
        else if (err == keel::ec::unavailable)
          code = fail("the node closed the connection before the " + what
                        + ": " + keel::error_message(err),
                      exit_unreachable);
        else
          code = fail(ep_, err);
        return std::nullopt;
      }
      if (!msg->text)
        continue;
      if (auto frame = keel::protocol::decode_server_frame(msg->payload))
        return std::move(*frame);
      // A frame we cannot read is not ours to answer; keep waiting.
    }
  }

private:
  std::string too_late(const std::string& what) const {
    return "no " + what + " within "
           + keel::human_duration(timeout_);
  }

  keel::endpoint ep_;
  keel::ws_client& ws_;
  milliseconds timeout_;
  steady::time_point deadline_;
};

// -- send -----------------------------------------------------------------------

struct send_args {
  std::string thread;
  std::string text;
  std::string id;
  milliseconds timeout{30000};
};

/// Looks for the outcome of message `seq` in a history page; true if found
/// (and printed, with the exit code in `code`).
bool outcome_in_page(const json& body, keel::seq_t seq, int& code) {
  auto entries = body.find("entries");
  if (entries == body.end() || !entries->is_array())
    return false;
  for (const auto& item : *entries) {
    auto entry = keel::log_entry_from_json(item);
    if (!entry || entry->reply_to != seq)
      continue;
    if (entry->kind == keel::log_kind::reply) {
      std::cout << entry->text << '\n';
      code = exit_ok;
      return true;
    }
    if (entry->kind == keel::log_kind::error) {
      code = print_error_frame(json{{"code", entry->code},
                                    {"message", entry->text}});
      return true;
    }
  }
  return false;
}

int run_send(const keel::endpoint& ep, const send_args& args) {
  auto ws = connect(ep);
  if (!ws)
    return fail(ep, ws.error());
  auto id = args.id.empty() ? "keelctl-" + keel::random_hex(16)
                            : args.id;
  if (auto err = (*ws)->send_text(
        keel::protocol::send_frame(args.thread, id, args.text)))
    return fail(ep, err);
  frame_reader reader{ep, **ws, args.timeout};
  bool acked = false;
  // A resent id is acknowledged as a duplicate and not processed again; its
  // outcome may already be in the history, so look there too.
  std::string history_id = "keelctl-history-" + keel::random_hex(8);
  keel::seq_t seq = 0;
  for (;;) {
    int code = exit_failed;
    auto frame = reader.next(code, acked ? "reply (the message was "
                                             "acknowledged as seq "
                                             + std::to_string(seq) + ")"
                                         : std::string{"ack"});
    if (!frame)
      return code;
    const auto& body = frame->body;
    auto frame_id = field(body, "id");
    if (frame->type == "history" && frame_id == history_id) {
      if (outcome_in_page(body, seq, code))
        return code;
      auto entries = body.find("entries");
      auto more = body.find("more");
      if (more != body.end() && more->is_boolean() && more->get<bool>()
          && entries != body.end() && entries->is_array()
          && !entries->empty()) {
        auto last = entries->back().value("seq", keel::seq_t{0});
        if (auto err = (*ws)->send_text(keel::protocol::history_request_frame(
              args.thread, history_id, last,
              keel::protocol::max_history_limit)))
          return fail(ep, err);
      }
      continue;
    }
    if (frame_id != id) {
      // An error about no particular frame concerns this connection.
      if (frame->type == "error" && body.find("id") == body.end()
          && body.find("thread") == body.end())
        return print_error_frame(body);
      continue;
    }
    if (frame->type == "ack") {
      acked = true;
      seq = body.value("seq", keel::seq_t{0});
      if (body.value("duplicate", false) && seq != 0) {
        if (auto err = (*ws)->send_text(keel::protocol::history_request_frame(
              args.thread, history_id, seq,
              keel::protocol::max_history_limit)))
          return fail(ep, err);
      }
    } else if (frame->type == "reply") {
      std::cout << field(body, "text") << '\n';
      return exit_ok;
    } else if (frame->type == "error") {
      return print_error_frame(body);
    }
    // Status events only tell how far the message got.
  }
}

// -- history --------------------------------------------------------------------

struct history_args {
  std::string thread;
  keel::seq_t after = 0;
  std::optional<size_t> limit;
  bool json = false;
  milliseconds timeout{30000};
};

void print_entry(const keel::log_entry& entry) {
  char head[48];
  std::snprintf(head, sizeof(head), "%6llu  %-5s  ",
                static_cast<unsigned long long>(entry.seq),
                keel::to_string(entry.kind));
  std::string text = entry.text;
  if (entry.kind == keel::log_kind::error && !entry.code.empty())
    text = "[" + entry.code + "] " + text;
  std::cout << head << indent_lines(text, 15) << '\n';
}

int run_history(const keel::endpoint& ep, const history_args& args) {
  auto ws = connect(ep);
  if (!ws)
    return fail(ep, ws.error());
  frame_reader reader{ep, **ws, args.timeout};
  auto after = args.after;
  size_t printed = 0;
  bool more = false;
  json all = json::array();
  for (size_t page = 0;; ++page) {
    size_t want = keel::protocol::max_history_limit;
    if (args.limit)
      want = std::min(want, *args.limit - printed);
    auto id = "keelctl-history-" + std::to_string(page);
    if (auto err = (*ws)->send_text(keel::protocol::history_request_frame(
          args.thread, id, after, want)))
      return fail(ep, err);
    std::optional<keel::protocol::server_frame> frame;
    for (;;) {
      int code = exit_failed;
      frame = reader.next(code, "history");
      if (!frame)
        return code;
      if (field(frame->body, "id") != id)
        continue;
      if (frame->type == "error")
        return print_error_frame(frame->body);
      if (frame->type == "history")
        break;
    }
    const auto& body = frame->body;
    auto entries = body.find("entries");
    if (entries == body.end() || !entries->is_array())
      return fail("the node sent a history frame without entries");
    for (const auto& item : *entries) {
      auto entry = keel::log_entry_from_json(item);
      if (!entry)
        return fail("the node sent an unreadable history entry: "
                    + keel::error_message(entry.error()));
      after = entry->seq;
      ++printed;
      if (args.json)
        all.push_back(item);
      else
        print_entry(*entry);
    }
    more = body.value("more", false);
    if (!more || entries->empty() || (args.limit && printed >= *args.limit))
      break;
  }
  if (args.json) {
    std::cout << json{{"thread", args.thread}, {"entries", std::move(all)},
                      {"more", more}}
                   .dump(2)
              << '\n';
  } else if (printed == 0) {
    std::cerr << "keelctl: no history entries for " << args.thread
              << (args.after > 0 ? " after " + std::to_string(args.after)
                                 : std::string{})
              << '\n';
  } else if (more) {
    std::cerr << "keelctl: more entries follow; continue with --after "
              << after << '\n';
  }
  return exit_ok;
}

// -- status ---------------------------------------------------------------------

uint64_t number(const json& j, std::initializer_list<const char*> path) {
  const json* cur = &j;
  for (auto key : path) {
    if (!cur->is_object() || cur->find(key) == cur->end())
      return 0;
    cur = &(*cur)[key];
  }
  return cur->is_number() ? cur->get<uint64_t>() : 0;
}

// A number of milliseconds at `path` (as `number`), as a duration.
std::chrono::milliseconds
millis_at(const json& j, std::initializer_list<const char*> path) {
  return std::chrono::milliseconds{static_cast<int64_t>(number(j, path))};
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
  auto row = [](const char* label, const std::string& value) {
    char head[24];
    std::snprintf(head, sizeof(head), "%-13s", label);
    std::cout << head << value << '\n';
  };
  auto n = [&](std::initializer_list<const char*> path) {
    return std::to_string(number(s, path));
  };
  std::string protocol = s.contains("protocol") ? s["protocol"].dump() : "?";
  row("node", field(s, "node") + " (version " + field(s, "version")
                + ", protocol " + protocol + ")");
  row("address", keel::to_string(ep));
  row("uptime", keel::human_duration(millis_at(s, {"uptime_ms"})));
  row("threads", n({"threads", "active"}) + " active, "
                   + n({"threads", "stored"}) + " stored");
  row("connections", n({"gateway", "connections_open"}) + " open, "
                       + n({"gateway", "connections_total"}) + " total");
  row("frames", n({"gateway", "frames_in"}) + " in, "
                  + n({"gateway", "frames_out"}) + " out, "
                  + n({"gateway", "bad_frames"}) + " bad");
  row("store", n({"store", "flushes"}) + " flushes, "
                 + n({"store", "staged_operations"}) + " staged operations, "
                 + n({"store", "failed_flushes"}) + " failed flushes");
  row("memory", keel::human_bytes(number(s, {"rss_bytes"})) + " RSS, "
                  + keel::human_bytes(number(s, {"peak_rss_bytes"}))
                  + " peak");
  row("data dir", field(s, "data_dir"));
  return exit_ok;
}

// -- tree and kill ---------------------------------------------------------------

/// Prints one node of the supervision tree and, indented, its children.
void print_tree(const json& node, const std::string& prefix, bool last,
                bool root) {
  std::string line = root ? "" : prefix + (last ? "`-- " : "|-- ");
  line += field(node, "id");
  if (line.size() < 32)
    line.resize(32, ' ');
  char cols[160];
  std::snprintf(cols, sizeof(cols), " %-10s restarts %-4llu up %s",
                field(node, "state").c_str(),
                static_cast<unsigned long long>(number(node, {"restarts"})),
                keel::human_duration(millis_at(node, {"uptime_ms"}))
                  .c_str());
  std::cout << line << cols;
  auto exit = field(node, "last_exit");
  if (!exit.empty())
    std::cout << "  last exit: " << exit;
  std::cout << '\n';
  auto i = node.find("children");
  if (i == node.end() || !i->is_array())
    return;
  auto child_prefix = root ? "" : prefix + (last ? "    " : "|   ");
  for (size_t k = 0; k < i->size(); ++k)
    print_tree((*i)[k], child_prefix, k + 1 == i->size(), false);
}

int run_tree(const keel::endpoint& ep, bool as_json) {
  auto tree = keel::api_call(ep, "GET", "/api/v1/tree");
  if (!tree)
    return fail(ep, tree.error());
  if (as_json)
    std::cout << tree->dump(2) << '\n';
  else if (auto i = tree->find("tree"); i != tree->end())
    print_tree(*i, "", true, true);
  return exit_ok;
}

/// Opens a data folder read-only; on failure prints why (exit code 2).
std::unique_ptr<keel::store> open_data_dir(const std::string& dir, int& code) {
  auto db = keel::open_data_dir(dir);
  if (!db) {
    code = fail(keel::error_message(db.error()), exit_usage);
    return nullptr;
  }
  return std::move(*db);
}

int run_agents(const keel::endpoint& ep, const std::string& data_dir,
               bool as_json) {
  std::vector<keel::agent_info> agents;
  if (data_dir.empty()) {
    auto res = keel::api_call(ep, "GET", "/api/v1/agents");
    if (!res)
      return fail(ep, res.error());
    if (as_json) {
      std::cout << res->dump(2) << '\n';
      return exit_ok;
    }
    auto parsed = keel::agents_from_json(*res);
    if (!parsed)
      return fail(keel::error_message(parsed.error()));
    agents = std::move(*parsed);
  } else {
    int code = exit_ok;
    auto db = open_data_dir(data_dir, code);
    if (!db)
      return code;
    auto read = keel::read_agents(*db);
    if (!read)
      return fail(keel::error_message(read.error()), exit_usage);
    agents = std::move(*read);
  }
  if (as_json)
    std::cout << keel::agents_to_json(agents).dump(2) << '\n';
  else
    std::cout << keel::render_agent_tree(agents);
  return exit_ok;
}

int run_kill(const keel::endpoint& ep, const std::string& path,
             const std::string& reason) {
  json body{{"path", path}};
  if (!reason.empty())
    body["reason"] = reason;
  auto res = keel::api_call(ep, "POST", "/api/v1/kill", body.dump());
  if (!res)
    return fail(ep, res.error());
  std::cout << "killed " << field(*res, "path") << " ("
            << field(*res, "reason") << ")\n";
  return exit_ok;
}

// -- providers ----------------------------------------------------------------------

/// Prints one provider's health on one line.
void print_provider(const json& p) {
  char cols[200];
  std::snprintf(cols, sizeof(cols), "  %-20s %-9s breaker %-9s calls %-6llu "
                                    "failures %-6llu",
                field(p, "provider").c_str(), field(p, "status").c_str(),
                field(p, "breaker").c_str(),
                static_cast<unsigned long long>(number(p, {"calls"})),
                static_cast<unsigned long long>(number(p, {"failures"})));
  std::cout << cols;
  auto remaining = millis_at(p, {"cooldown_remaining_ms"});
  if (remaining.count() > 0)
    std::cout << " cooldown " << keel::human_duration(remaining);
  auto cls = field(p, "last_error_class");
  if (!cls.empty())
    std::cout << "\n    last error (" << cls << "): "
              << field(p, "last_error");
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
    std::cout << "pool " << field(pool, "pool");
    if (auto err = field(pool, "error"); !err.empty()) {
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

// -- verify and recovery ----------------------------------------------------------

int run_verify(const std::string& data_dir, bool as_json) {
  int code = exit_ok;
  auto db = open_data_dir(data_dir, code);
  if (!db)
    return code;
  auto report = keel::verify_store(*db);
  if (!report)
    return fail("cannot verify " + data_dir + ": "
                  + keel::error_message(report.error()),
                exit_usage);
  if (as_json)
    std::cout << keel::to_json(*report).dump(2) << '\n';
  else
    std::cout << keel::render_verify_report(*report);
  return report->ok() ? exit_ok : exit_failed;
}

/// Prints a recovery report, or that none has run (not an error).
int print_recovery(const std::optional<keel::recovery_report>& report,
                   bool as_json) {
  if (as_json)
    std::cout << (report ? keel::to_json(*report).dump(2) : "null") << '\n';
  else if (report)
    std::cout << keel::render_recovery_report(*report);
  else
    std::cout << "no recovery has run\n";
  return exit_ok;
}

int run_recovery(const keel::endpoint& ep, const std::string& data_dir,
                 bool as_json) {
  if (!data_dir.empty()) {
    int code = exit_ok;
    auto db = open_data_dir(data_dir, code);
    if (!db)
      return code;
    auto text = db->meta("last_recovery");
    if (!text && text.error() == keel::ec::not_found)
      return print_recovery(std::nullopt, as_json);
    if (!text)
      return fail(keel::error_message(text.error()), exit_usage);
    auto report = keel::decode<keel::recovery_report>(*text);
    if (!report)
      return fail("the stored recovery report cannot be read: "
                    + keel::error_message(report.error()),
                  exit_usage);
    return print_recovery(*report, as_json);
  }
  auto res = keel::api_call(ep, "GET", "/api/v1/recovery");
  // The node answers 404 (not_found) until a recovery has run.
  if (!res && res.error() == keel::ec::not_found)
    return print_recovery(std::nullopt, as_json);
  if (!res)
    return fail(ep, res.error());
  auto report = keel::recovery_report_from_json(*res);
  if (!report)
    return fail("the node sent an unreadable recovery report: "
                + keel::error_message(report.error()));
  return print_recovery(*report, as_json);
}

// -- argument checks --------------------------------------------------------------

std::string check_thread(const std::string& str) {
  return keel::valid_thread_id(str)
           ? std::string{}
           : "'" + str + "' is not a thread id (1 to 128 characters of "
               "A-Z a-z 0-9 . _ : -)";
}

std::string check_client_id(const std::string& str) {
  return keel::valid_client_id(str)
           ? std::string{}
           : "'" + str + "' is not a message id (1 to 128 printable ASCII "
               "characters)";
}

std::string check_text(const std::string& str) {
  if (str.empty())
    return "the text is empty";
  return keel::valid_utf8(str) ? std::string{} : "the text is not valid UTF-8";
}

} // namespace

int main(int argc, char** argv) {
  CLI::App app{"keelctl: talks to a running Keel node."};
  app.require_subcommand(1);
  // Global options may also follow the subcommand.
  app.fallthrough();
  std::string node = "127.0.0.1:8080";
  std::string token;
  keel::cli::add_node_options(app, node, token);

  send_args send;
  auto send_cmd = app.add_subcommand(
    "send", "Sends TEXT to THREAD, waits for the reply and prints it");
  send_cmd->add_option("THREAD", send.thread, "The thread id")
    ->type_name("")
    ->required()
    ->check(check_thread);
  send_cmd->add_option("TEXT", send.text, "The message text")
    ->type_name("")
    ->required()
    ->check(check_text);
  send_cmd->add_option("--id", send.id,
                       "The message id (resending an id is not processed "
                       "twice; default: a random one)")
    ->check(check_client_id);
  keel::cli::add_duration(*send_cmd, "--timeout", send.timeout,
                          "How long to wait for the reply", false)
    ->default_str("30s");

  history_args history;
  auto history_cmd = app.add_subcommand("history",
                                        "Prints a thread's history");
  history_cmd->add_option("THREAD", history.thread, "The thread id")
    ->type_name("")
    ->required()
    ->check(check_thread);
  history_cmd->add_option("--after", history.after,
                          "Only entries with a sequence number above N")
    ->type_name("N");
  history_cmd
    ->add_option_function<size_t>(
      "--limit", [&](size_t n) { history.limit = n; },
      "At most N entries (default: all)")
    ->type_name("N")
    ->check(CLI::Range(size_t{1}, size_t{1000000000}));
  history_cmd->add_flag("--json", history.json, "Print the entries as JSON");
  keel::cli::add_duration(*history_cmd, "--timeout", history.timeout,
                          "How long to wait for the node", false)
    ->default_str("30s");

  bool status_json = false;
  auto status_cmd = app.add_subcommand("status", "Prints the node's status");
  status_cmd->add_flag("--json", status_json, "Print the raw JSON");

  bool tree_json = false;
  bool tree_agents = false;
  std::string tree_data_dir;
  auto tree_cmd = app.add_subcommand(
    "tree", "Prints the live supervision tree: each actor's state, restart "
            "count, uptime and last exit reason; with --agents the agent "
            "tree instead");
  tree_cmd->add_flag("--json", tree_json, "Print the raw JSON");
  tree_cmd->add_flag("--agents", tree_agents,
                     "Print the agent tree: every root agent with its "
                     "children and their session states");
  auto tree_data_dir_opt
    = tree_cmd
        ->add_option("--data-dir", tree_data_dir,
                     "With --agents: read the agent tree from a node's data "
                     "folder rather than ask the node")
        ->type_name("DIR");
  tree_data_dir_opt->needs("--agents");

  std::string kill_path;
  std::string kill_reason;
  auto kill_cmd = app.add_subcommand(
    "kill", "Kills the actor at PATH (e.g. /persistence, /orchestrator, "
            "/providers/default, /conversations/t42); its supervisor "
            "restarts it");
  kill_cmd->add_option("PATH", kill_path, "The actor's path in the tree")
    ->type_name("")
    ->required();
  kill_cmd->add_option("--reason", kill_reason,
                       "The exit reason to use (default: killed)");

  bool providers_json = false;
  auto providers_cmd = app.add_subcommand(
    "providers", "Prints the health of every provider of every pool: status, "
                 "breaker, cooldown, calls and the last error");
  providers_cmd->add_flag("--json", providers_json, "Print the raw JSON");

  std::string verify_data_dir;
  bool verify_json = false;
  auto verify_cmd = app.add_subcommand(
    "verify", "Checks the crash recovery invariants on a stopped node's "
              "data folder (read-only; beside a running node its live "
              "threads show as ACTIVE): exit 0 if they all hold, 1 if any is "
              "violated, 2 if the data cannot be read");
  verify_cmd->add_option("--data-dir", verify_data_dir,
                         "The node's data folder (its database is in "
                         "DIR/db)")
    ->type_name("DIR")
    ->required();
  verify_cmd->add_flag("--json", verify_json, "Print the report as JSON");

  std::string recovery_data_dir;
  bool recovery_json = false;
  auto recovery_cmd = app.add_subcommand(
    "recovery", "Prints what the last recovery on boot found and did: its "
                "steps with counts and durations, and the problems it met");
  recovery_cmd->add_option("--data-dir", recovery_data_dir,
                           "Read the report from a node's data folder "
                           "rather than ask the node")
    ->type_name("DIR");
  recovery_cmd->add_flag("--json", recovery_json,
                         "Print the report as JSON (null if none has run)");

  for (auto cmd : {send_cmd, history_cmd, status_cmd, tree_cmd, kill_cmd,
                   providers_cmd, recovery_cmd})
    cmd->footer("Every command also takes --node HOST:PORT (env KEEL_NODE, "
                "default 127.0.0.1:8080) and --token TOKEN (env KEEL_TOKEN).");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? exit_ok : exit_usage;
  }
  // Needs no node, so a bad --node / KEEL_NODE does not stop it.
  if (verify_cmd->parsed())
    return run_verify(verify_data_dir, verify_json);
  auto ep = keel::parse_endpoint(node);
  if (!ep) // defaults and env values bypass nothing: still checked here
    return fail(keel::error_message(ep.error()), exit_usage);
  ep->token = token;
  if (send_cmd->parsed())
    return run_send(*ep, send);
  if (history_cmd->parsed())
    return run_history(*ep, history);
  if (status_cmd->parsed())
    return run_status(*ep, status_json);
  if (tree_cmd->parsed())
    return tree_agents ? run_agents(*ep, tree_data_dir, tree_json)
                       : run_tree(*ep, tree_json);
  if (kill_cmd->parsed())
    return run_kill(*ep, kill_path, kill_reason);
  if (providers_cmd->parsed())
    return run_providers(*ep, providers_json);
  if (recovery_cmd->parsed())
    return run_recovery(*ep, recovery_data_dir, recovery_json);
  return exit_usage;
}
