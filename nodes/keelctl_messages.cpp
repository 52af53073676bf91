// keelctl send and keelctl history: the subcommands that talk to a node over
// its WebSocket.

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>

#include "cli.hpp"
#include "keel/json_codec.hpp"
#include "keel/protocol.hpp"
#include "keel/text.hpp"
#include "keel/tools/ws_client.hpp"
#include "keel/types.hpp"
#include "keelctl.hpp"

namespace keelctl {

namespace {

using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;
using keel::protocol::server_frame;

constexpr milliseconds connect_timeout{5000};

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
  std::optional<server_frame> next(int& code, const std::string& what) {
    for (;;) {
      auto left
        = std::chrono::duration_cast<milliseconds>(deadline_ - steady::now());
      if (left.count() <= 0) {
        code = fail(too_late(what));
        return std::nullopt;
      }
      auto msg = ws_.receive(left);
      if (!msg) {
        code = failed(msg.error(), what);
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
  int failed(const caf::error& err, const std::string& what) const {
    if (err == keel::ec::timeout)
      return fail(too_late(what));
    if (err == keel::ec::unavailable)
      return fail("the node closed the connection before the " + what + ": "
                    + keel::error_message(err),
                  exit_unreachable);
    return fail(ep_, err);
  }

  std::string too_late(const std::string& what) const {
    return "no " + what + " within " + keel::human_duration(timeout_);
  }

  keel::endpoint ep_;
  keel::ws_client& ws_;
  milliseconds timeout_;
  steady::time_point deadline_;
};

// -- send
// -----------------------------------------------------------------------

struct send_args {
  std::string thread;
  std::string text;
  std::string id;
  std::string agent;
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
      code = print_error_frame(
        json{{"code", entry->code}, {"message", entry->text}});
      return true;
    }
  }
  return false;
}

/// The seq after which the next page of a history follows, if there is
/// more.
std::optional<keel::seq_t> next_page_after(const json& body) {
  auto entries = body.find("entries");
  auto more = body.find("more");
  if (more != body.end() && more->is_boolean() && more->get<bool>()
      && entries != body.end() && entries->is_array() && !entries->empty())
    return entries->back().value("seq", keel::seq_t{0});
  return std::nullopt;
}

/// One `keelctl send`: sends the message and waits for its ack and its
/// outcome. A resent id is acknowledged as a duplicate and not processed
/// again; its outcome may already be in the history, so it looks there too.
class send_run {
public:
  send_run(const keel::endpoint& ep, keel::ws_client& ws, const send_args& args)
    : ep_(ep),
      ws_(ws),
      args_(args),
      id_(args.id.empty() ? "keelctl-" + keel::random_hex(16) : args.id),
      history_id_("keelctl-history-" + keel::random_hex(8)) {
    // nop
  }

  int run() {
    if (auto err = ws_.send_text(keel::protocol::send_frame(
          args_.thread, id_, args_.text, args_.agent)))
      return fail(ep_, err);
    frame_reader reader{ep_, ws_, args_.timeout};
    for (;;) {
      int code = exit_failed;
      auto frame = reader.next(code, waiting_for());
      if (!frame)
        return code;
      if (auto done = on_frame(*frame))
        return *done;
    }
  }

private:
  std::string waiting_for() const {
    if (!acked_)
      return "ack";
    return "reply (the message was acknowledged as seq " + std::to_string(seq_)
           + ")";
  }

  /// Handles one frame; returns the exit code once the command is done.
  std::optional<int> on_frame(const server_frame& frame) {
    const auto& body = frame.body;
    auto frame_id = json_string(body, "id");
    if (frame.type == "history" && frame_id == history_id_)
      return on_history(body);
    if (frame_id != id_) {
      // An error about no particular frame concerns this connection.
      if (frame.type == "error" && body.find("id") == body.end()
          && body.find("thread") == body.end())
        return print_error_frame(body);
      return std::nullopt;
    }
    if (frame.type == "ack")
      return on_ack(body);
    if (frame.type == "reply") {
      std::cout << json_string(body, "text") << '\n';
      return exit_ok;
    }
    if (frame.type == "error")
      return print_error_frame(body);
    // Status events only tell how far the message got.
    return std::nullopt;
  }

  std::optional<int> on_ack(const json& body) {
    acked_ = true;
    seq_ = body.value("seq", keel::seq_t{0});
    if (body.value("duplicate", false) && seq_ != 0)
      return request_history(seq_);
    return std::nullopt;
  }

  std::optional<int> on_history(const json& body) {
    int code = exit_failed;
    if (outcome_in_page(body, seq_, code))
      return code;
    if (auto after = next_page_after(body))
      return request_history(*after);
    return std::nullopt;
  }

  /// Asks for the history after `after`; returns the exit code if that
  /// fails.
  std::optional<int> request_history(keel::seq_t after) {
    if (auto err = ws_.send_text(keel::protocol::history_request_frame(
          args_.thread, history_id_, after, keel::protocol::max_history_limit)))
      return fail(ep_, err);
    return std::nullopt;
  }

  const keel::endpoint& ep_;
  keel::ws_client& ws_;
  const send_args& args_;
  std::string id_;
  std::string history_id_;
  bool acked_ = false;
  keel::seq_t seq_ = 0;
};

int run_send(const keel::endpoint& ep, const send_args& args) {
  auto ws = connect(ep);
  if (!ws)
    return fail(ep, ws.error());
  return send_run{ep, **ws, args}.run();
}

// -- history
// --------------------------------------------------------------------

struct history_args {
  std::string thread;
  keel::seq_t after = 0;
  std::optional<size_t> limit;
  bool json = false;
  milliseconds timeout{30000};
};

/// Indents continuation lines of `text` by `indent` spaces.
std::string indent_lines(const std::string& text, size_t indent) {
  return keel::replace_all(text, "\n", "\n" + std::string(indent, ' '));
}

void print_entry(const keel::log_entry& entry) {
  char head[48];
  std::snprintf(head, sizeof(head), "%6llu  %-5s  ",
                static_cast<unsigned long long>(entry.seq),
                keel::to_string(entry.kind));
  std::string text = entry.text;
  if (entry.kind == keel::log_kind::error && !entry.code.empty())
    text = "[" + entry.code + "] " + text;
  if (!entry.detail.empty())
    text += "\n(detail) " + entry.detail;
  if (entry.kind == keel::log_kind::tool)
    text = "[" + entry.tool + "] " + text;
  std::cout << head << indent_lines(text, 15) << '\n';
}

/// Waits for the answer to the history request `id`. On failure prints why
/// and stores the exit code in `code`.
std::optional<server_frame> await_page(frame_reader& reader,
                                       const std::string& id, int& code) {
  for (;;) {
    auto frame = reader.next(code, "history");
    if (!frame)
      return std::nullopt;
    if (json_string(frame->body, "id") != id)
      continue;
    if (frame->type == "error") {
      code = print_error_frame(frame->body);
      return std::nullopt;
    }
    if (frame->type == "history")
      return frame;
  }
}

/// What `keelctl history` has read so far.
struct history_state {
  keel::seq_t after = 0;
  size_t printed = 0;
  bool more = false;
  /// With --json: the entries, printed at the end.
  json all = json::array();
};

/// Prints (or, with --json, keeps) the entries of a history page; returns
/// the exit code if the page cannot be read.
std::optional<int> take_page(const json& body, const history_args& args,
                             history_state& st) {
  auto entries = body.find("entries");
  if (entries == body.end() || !entries->is_array())
    return fail("the node sent a history frame without entries");
  for (const auto& item : *entries) {
    auto entry = keel::log_entry_from_json(item);
    if (!entry)
      return fail("the node sent an unreadable history entry: "
                  + keel::error_message(entry.error()));
    st.after = entry->seq;
    ++st.printed;
    if (args.json)
      st.all.push_back(item);
    else
      print_entry(*entry);
  }
  st.more = body.value("more", false);
  return std::nullopt;
}

/// Prints the JSON, or says on stderr that there was nothing or more.
void finish_history(const history_args& args, history_state& st) {
  if (args.json) {
    std::cout << json{{"thread", args.thread},
                      {"entries", std::move(st.all)},
                      {"more", st.more}}
                   .dump(2)
              << '\n';
  } else if (st.printed == 0) {
    std::cerr << "keelctl: no history entries for " << args.thread
              << (args.after > 0 ? " after " + std::to_string(args.after)
                                 : std::string{})
              << '\n';
  } else if (st.more) {
    std::cerr << "keelctl: more entries follow; continue with --after "
              << st.after << '\n';
  }
}

int run_history(const keel::endpoint& ep, const history_args& args) {
  auto ws = connect(ep);
  if (!ws)
    return fail(ep, ws.error());
  frame_reader reader{ep, **ws, args.timeout};
  history_state st;
  st.after = args.after;
  for (size_t page = 0;; ++page) {
    size_t want = keel::protocol::max_history_limit;
    if (args.limit)
      want = std::min(want, *args.limit - st.printed);
    auto id = "keelctl-history-" + std::to_string(page);
    if (auto err = (*ws)->send_text(keel::protocol::history_request_frame(
          args.thread, id, st.after, want)))
      return fail(ep, err);
    int code = exit_failed;
    auto frame = await_page(reader, id, code);
    if (!frame)
      return code;
    if (auto failed = take_page(frame->body, args, st))
      return *failed;
    auto empty = frame->body.at("entries").empty();
    if (!st.more || empty || (args.limit && st.printed >= *args.limit))
      break;
  }
  finish_history(args, st);
  return exit_ok;
}

// -- argument checks
// --------------------------------------------------------------

std::string check_thread(const std::string& str) {
  return keel::valid_thread_id(str)
           ? std::string{}
           : "'" + str
               + "' is not a thread id (1 to 128 characters of "
                 "A-Z a-z 0-9 . _ : -)";
}

std::string check_client_id(const std::string& str) {
  return keel::valid_client_id(str)
           ? std::string{}
           : "'" + str
               + "' is not a message id (1 to 128 printable ASCII "
                 "characters)";
}

std::string check_text(const std::string& str) {
  if (str.empty())
    return "the text is empty";
  return keel::valid_utf8(str) ? std::string{} : "the text is not valid UTF-8";
}

/// The positional THREAD.
void add_thread_argument(CLI::App& cmd, std::string& thread) {
  cmd.add_option("THREAD", thread, "The thread id")
    ->type_name("")
    ->required()
    ->check(check_thread);
}

} // namespace

command add_send_command(CLI::App& app, const node_args& node) {
  auto args = std::make_shared<send_args>();
  auto cmd = add_node_command(
    app, "send", "Sends TEXT to THREAD, waits for the reply and prints it");
  add_thread_argument(*cmd, args->thread);
  cmd->add_option("TEXT", args->text, "The message text")
    ->type_name("")
    ->required()
    ->check(check_text);
  cmd
    ->add_option("--id", args->id,
                 "The message id (resending an id is not processed "
                 "twice; default: a random one)")
    ->check(check_client_id);
  cmd->add_option("--agent", args->agent,
                  "The agent a new thread binds to (default: "
                  "threads.default_agent); a thread bound to another "
                  "refuses the message");
  keel::cli::add_duration(*cmd, "--timeout", args->timeout,
                          "How long to wait for the reply", false)
    ->default_str("30s");
  return node_command(cmd, node, [args](const keel::endpoint& ep) {
    return run_send(ep, *args);
  });
}

command add_history_command(CLI::App& app, const node_args& node) {
  auto args = std::make_shared<history_args>();
  auto cmd = add_node_command(app, "history", "Prints a thread's history");
  add_thread_argument(*cmd, args->thread);
  cmd
    ->add_option("--after", args->after,
                 "Only entries with a sequence number above N")
    ->type_name("N");
  cmd
    ->add_option_function<size_t>(
      "--limit", [args](size_t n) { args->limit = n; },
      "At most N entries (default: all)")
    ->type_name("N")
    ->check(CLI::Range(size_t{1}, size_t{1000000000}));
  cmd->add_flag("--json", args->json, "Print the entries as JSON");
  keel::cli::add_duration(*cmd, "--timeout", args->timeout,
                          "How long to wait for the node", false)
    ->default_str("30s");
  return node_command(cmd, node, [args](const keel::endpoint& ep) {
    return run_history(ep, *args);
  });
}

} // namespace keelctl
