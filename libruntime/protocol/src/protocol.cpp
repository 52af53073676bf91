#include "keel/protocol.hpp"

#include <iterator>
#include <optional>

#include "keel/json_codec.hpp"
#include "keel/text.hpp"

namespace keel::protocol {

namespace {

using json = nlohmann::json;

// -- encoding -----------------------------------------------------------------

// Server frames on the hot path (ack, status, reply, pong, error) are written
// directly instead of building a JSON DOM first: it saves a handful of
// allocations per frame. Strings that are not valid UTF-8 (which only a buggy
// provider could produce) go through nlohmann's dump, which replaces the bad
// bytes with U+FFFD, so the output is always valid JSON.
void append_string(std::string& out, std::string_view str) {
  if (!valid_utf8(str)) {
    out += json(std::string{str})
             .dump(-1, ' ', false, json::error_handler_t::replace);
    return;
  }
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  size_t run = 0; // Start of the pending run of bytes that need no escape.
  for (size_t i = 0; i < str.size(); ++i) {
    auto c = static_cast<unsigned char>(str[i]);
    if (c >= 0x20 && c != '"' && c != '\\')
      continue;
    out.append(str.data() + run, i - run);
    run = i + 1;
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        out += "\\u00";
        out += hex[c >> 4];
        out += hex[c & 0x0F];
    }
  }
  out.append(str.data() + run, str.size() - run);
  out += '"';
}

// Builds one flat JSON object: `{"type":"...","k":v,...}`.
class object_writer {
public:
  object_writer(const char* type, size_t size_hint) {
    out_.reserve(size_hint + 48);
    out_ += R"({"type":")";
    out_ += type;
    out_ += '"';
  }

  object_writer& field(const char* key, std::string_view value) {
    key_(key);
    append_string(out_, value);
    return *this;
  }

  /// Adds the field only when `value` is non-empty.
  object_writer& optional(const char* key, std::string_view value) {
    if (!value.empty())
      field(key, value);
    return *this;
  }

  object_writer& field(const char* key, uint64_t value) {
    key_(key);
    out_ += std::to_string(value);
    return *this;
  }

  object_writer& field(const char* key, bool value) {
    key_(key);
    out_ += value ? "true" : "false";
    return *this;
  }

  // Without this overload, string literals would pick the `bool` one.
  object_writer& field(const char* key, const char* value) {
    return field(key, std::string_view{value});
  }

  /// Adds `usage` (the tokens of a turn's model calls) unless it counts no
  /// call: `{"input_tokens","output_tokens","estimated"}`, estimated when a
  /// call of the turn reported none.
  object_writer& usage(const usage_count& x) {
    if (x.model_calls == 0)
      return *this;
    key_("usage");
    out_ += R"({"input_tokens":)" + std::to_string(x.input_tokens)
            + R"(,"output_tokens":)" + std::to_string(x.output_tokens)
            + R"(,"estimated":)" + (x.estimated_calls > 0 ? "true" : "false")
            + "}";
    return *this;
  }

  std::string done() {
    out_ += '}';
    return std::move(out_);
  }

private:
  void key_(const char* key) {
    out_ += ",\"";
    out_ += key;
    out_ += "\":";
  }

  std::string out_;
};

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// -- decoding -----------------------------------------------------------------

/// Keeps messages that quote client input short.
std::string clip(std::string str, size_t max = 160) {
  if (str.size() > max) {
    str.resize(max);
    str += "...";
  }
  return str;
}

using decode_result = std::variant<client_frame, frame_error>;

/// What is wrong with a frame, or nothing.
using frame_check = std::optional<frame_error>;

frame_error make_frame_error(const char* code, std::string message) {
  frame_error err;
  err.code = code;
  err.message = std::move(message);
  return err;
}

// Reads an optional non-negative integer field into `out` after checking that
// it lies in [min, max]. Returns the error code on failure, null otherwise.
const char* read_uint(const json* val, const char* key, uint64_t min,
                      uint64_t max, uint64_t& out, std::string& message) {
  if (val == nullptr)
    return nullptr;
  if (val->is_number_unsigned()) {
    auto x = val->get<uint64_t>();
    if (x >= min && x <= max) {
      out = x;
      return nullptr;
    }
  } else if (!val->is_number_integer()) {
    message = std::string{"field '"} + key + "' must be a non-negative integer";
    return "wrong_type";
  }
  // Out of range, or a negative integer.
  message = std::string{"field '"} + key + "' must be ";
  if (max == UINT64_MAX)
    message += "at least " + std::to_string(min);
  else
    message += "between " + std::to_string(min) + " and " + std::to_string(max);
  return "bad_value";
}

const char* thread_rule = "1 to 128 characters of [A-Za-z0-9._:-]";
const char* id_rule = "1 to 128 printable ASCII characters without spaces";

/// Parses `input` into `out`. Ill-formed UTF-8 is `invalid_utf8`, anything
/// else that does not parse is `bad_json`.
frame_check parse_frame(std::string_view input, json& out) {
  try {
    out = json::parse(input.begin(), input.end());
    return std::nullopt;
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    // nlohmann rejects ill-formed UTF-8 and lone surrogate escapes; both are
    // an encoding problem rather than a syntax problem.
    if (!valid_utf8(input) || what.find("surrogate") != std::string::npos
        || what.find("UTF-8") != std::string::npos)
      return make_frame_error("invalid_utf8", "frame is not valid UTF-8 (or "
                                              "escapes a lone surrogate)");
    // Drop the "[json.exception.parse_error.101] " prefix.
    if (auto pos = what.find("] "); pos != std::string::npos)
      what.erase(0, pos + 2);
    return make_frame_error("bad_json", clip("malformed JSON: " + what));
  } catch (const std::exception& e) {
    return make_frame_error("bad_json",
                            clip(std::string{"malformed JSON: "} + e.what()));
  }
}

/// The fields of a client frame's JSON object. Strings stay in the DOM until
/// the whole frame is valid; then they move into the `client_frame`.
class frame_fields {
public:
  explicit frame_fields(json::object_t& obj)
    : obj_(obj),
      jid_(get("id")),
      jthread_(get("thread")),
      id_(jid_ != nullptr ? jid_->get_ptr<std::string*>() : nullptr),
      thread_(jthread_ != nullptr ? jthread_->get_ptr<std::string*>()
                                  : nullptr) {
    // nop
  }

  /// The field `key`, or null when it is absent or null: both count as
  /// missing.
  json* get(const char* key) const {
    auto i = obj_.find(key);
    return i == obj_.end() || i->second.is_null() ? nullptr : &i->second;
  }

  /// An error carrying the frame's `id` and `thread` whenever they are usable
  /// for correlation.
  frame_error fail(const char* code, std::string message) const {
    auto err = make_frame_error(code, std::move(message));
    if (id_ != nullptr && valid_client_id(*id_))
      err.id = *id_;
    if (thread_ != nullptr && valid_thread_id(*thread_))
      err.thread = *thread_;
    return err;
  }

  /// Points `out` at the string `val` of field `key`; fails if the field is
  /// missing or not a string.
  frame_check string_field(json* val, const char* key,
                           std::string*& out) const {
    if (val == nullptr)
      return fail("missing_field", std::string{"missing field '"} + key + "'");
    out = val->get_ptr<std::string*>();
    if (out == nullptr)
      return fail("wrong_type",
                  std::string{"field '"} + key + "' must be a string");
    return std::nullopt;
  }

  frame_check string_field(const char* key, std::string*& out) const {
    return string_field(get(key), key, out);
  }

  /// Checks the optional `id`, which `required` makes mandatory.
  frame_check check_id(bool required) const {
    if (jid_ == nullptr) {
      if (required)
        return fail("missing_field", "missing field 'id'");
      return std::nullopt;
    }
    if (id_ == nullptr)
      return fail("wrong_type", "field 'id' must be a string");
    if (!valid_client_id(*id_))
      return fail("bad_value", std::string{"field 'id' must be "} + id_rule);
    if (reserved_client_id(*id_))
      return fail("bad_request",
                  "field 'id' must not start with 'agent:': such ids are "
                  "reserved for messages between agents");
    return std::nullopt;
  }

  /// Checks the mandatory `thread`.
  frame_check check_thread() const {
    std::string* thread = nullptr;
    if (auto err = string_field(jthread_, "thread", thread))
      return err;
    if (!valid_thread_id(*thread))
      return fail("bad_value",
                  std::string{"field 'thread' must be "} + thread_rule);
    return std::nullopt;
  }

  /// The `id` string, or null when absent.
  std::string* id() const {
    return id_;
  }

  /// The `thread` string, or null when absent.
  std::string* thread() const {
    return thread_;
  }

private:
  json::object_t& obj_;
  json* jid_;
  json* jthread_;
  std::string* id_;
  std::string* thread_;
};

// -- readers for the fields of one frame type ---------------------------------

// Each runs after `id` and `thread` passed their checks and is the last check,
// so it may move its strings out of the DOM once they are valid.

using field_reader = frame_check (*)(const frame_fields&, const decode_limits&,
                                     client_frame&);

// Reads the optional `agent` of a send or spawn.
frame_check read_agent(const frame_fields& fields, client_frame& out) {
  auto val = fields.get("agent");
  if (val == nullptr)
    return std::nullopt;
  std::string* agent = nullptr;
  if (auto err = fields.string_field(val, "agent", agent))
    return err;
  if (!valid_agent_name(*agent))
    return fields.fail("bad_value",
                       std::string{"field 'agent' must be "} + agent_rule);
  out.agent = std::move(*agent);
  return std::nullopt;
}

frame_check read_send(const frame_fields& fields, const decode_limits& limits,
                      client_frame& out) {
  if (auto err = read_agent(fields, out))
    return err;
  std::string* text = nullptr;
  if (auto err = fields.string_field("text", text))
    return err;
  if (text->empty())
    return fields.fail("bad_value", "field 'text' must not be empty");
  if (text->size() > limits.max_text_bytes)
    return fields.fail("too_large", "field 'text' has "
                                      + std::to_string(text->size())
                                      + " bytes; the limit is "
                                      + std::to_string(limits.max_text_bytes));
  out.text = std::move(*text);
  return std::nullopt;
}

frame_check read_spawn(const frame_fields& fields, const decode_limits&,
                       client_frame& out) {
  std::string* child = nullptr;
  if (auto err = fields.string_field("child", child))
    return err;
  if (!valid_thread_id(*child))
    return fields.fail("bad_value",
                       std::string{"field 'child' must be "} + thread_rule);
  if (*child == *fields.thread())
    return fields.fail("bad_value", "field 'child' must differ from 'thread'");
  if (auto err = read_agent(fields, out))
    return err;
  out.child = std::move(*child);
  return std::nullopt;
}

frame_check read_history(const frame_fields& fields, const decode_limits&,
                         client_frame& out) {
  std::string message;
  uint64_t limit = out.limit;
  auto code = read_uint(fields.get("after"), "after", 0, UINT64_MAX, out.after,
                        message);
  if (code == nullptr)
    code = read_uint(fields.get("limit"), "limit", 1, max_history_limit, limit,
                     message);
  if (code != nullptr)
    return fields.fail(code, std::move(message));
  out.limit = static_cast<size_t>(limit);
  return std::nullopt;
}

/// How to decode one frame type.
struct frame_spec {
  /// The value of the `type` field.
  const char* name;
  client_frame_type type;
  bool needs_id;
  bool needs_thread;
  /// Reads the fields of this type only; null if it has none.
  field_reader read;
};

// In the order the "unknown frame type" message lists them.
constexpr frame_spec frame_specs[] = {
  {"send", client_frame_type::send, true, true, read_send},
  {"subscribe", client_frame_type::subscribe, false, true, nullptr},
  {"unsubscribe", client_frame_type::unsubscribe, false, true, nullptr},
  {"history", client_frame_type::history, false, true, read_history},
  {"spawn", client_frame_type::spawn, true, true, read_spawn},
  {"cancel", client_frame_type::cancel, false, true, nullptr},
  {"ping", client_frame_type::ping, false, false, nullptr},
};

/// "send, subscribe, ... or ping".
const std::string& frame_type_names() {
  static const std::string names = [] {
    std::string str;
    auto n = std::size(frame_specs);
    for (size_t i = 0; i < n; ++i) {
      if (i > 0)
        str += i + 1 < n ? ", " : " or ";
      str += frame_specs[i].name;
    }
    return str;
  }();
  return names;
}

/// Points `out` at the spec for the frame's `type`.
frame_check find_spec(const frame_fields& fields, const frame_spec*& out) {
  std::string* type = nullptr;
  if (auto err = fields.string_field("type", type))
    return err;
  for (const auto& spec : frame_specs) {
    if (*type == spec.name) {
      out = &spec;
      return std::nullopt;
    }
  }
  return fields.fail("unknown_type", "unknown frame type '" + clip(*type, 64)
                                       + "' (expected " + frame_type_names()
                                       + ")");
}

} // namespace

// -- client frames (decoding) -------------------------------------------------

std::variant<client_frame, frame_error>
decode_client_frame(std::string_view input, const decode_limits& limits) {
  json j;
  if (auto err = parse_frame(input, j))
    return std::move(*err);
  if (!j.is_object())
    return make_frame_error("bad_frame", "frame must be a JSON object");
  frame_fields fields{j.get_ref<json::object_t&>()};
  const frame_spec* spec = nullptr;
  if (auto err = find_spec(fields, spec))
    return std::move(*err);
  if (auto err = fields.check_id(spec->needs_id))
    return std::move(*err);
  if (spec->needs_thread)
    if (auto err = fields.check_thread())
      return std::move(*err);
  client_frame result;
  result.type = spec->type;
  if (spec->read != nullptr)
    if (auto err = spec->read(fields, limits, result))
      return std::move(*err);
  // Valid: move the strings out of the DOM instead of copying them.
  if (fields.id() != nullptr)
    result.id = std::move(*fields.id());
  if (spec->needs_thread)
    result.thread = std::move(*fields.thread());
  return result;
}

// -- server frames (encoding) -------------------------------------------------

std::string hello_frame(const std::string& node) {
  return object_writer{"hello", node.size()}
    .field("protocol", static_cast<uint64_t>(version))
    .field("node", node)
    .done();
}

std::string ack_frame(const std::string& thread, const std::string& client_id,
                      seq_t seq, bool duplicate) {
  return object_writer{"ack", thread.size() + client_id.size() + 48}
    .field("thread", thread)
    .field("id", client_id)
    .field("seq", seq)
    .field("duplicate", duplicate)
    .done();
}

std::string status_text(std::string_view state) {
  if (state == "retrying" || state == "retrying_provider")
    return status_texts::retrying;
  if (state == "failing_over")
    return status_texts::model_fallback;
  if (state == "tool_disabled")
    return status_texts::tool_failed;
  if (state == "tool_timed_out")
    return status_texts::tool_timed_out;
  return {};
}

std::string status_frame(const std::string& thread,
                         const std::string& client_id, seq_t reply_to,
                         const std::string& state, const std::string& detail) {
  auto text = status_text(state);
  return object_writer{"status", thread.size() + client_id.size()
                                   + detail.size() + text.size() + 64}
    .field("thread", thread)
    .field("id", client_id)
    .field("reply_to", reply_to)
    .field("state", state)
    .optional("detail", detail)
    .optional("text", text)
    .done();
}

std::string delta_frame(const std::string& thread, const std::string& client_id,
                        seq_t reply_to, uint32_t attempt,
                        std::string_view text) {
  return object_writer{"delta",
                       thread.size() + client_id.size() + text.size() + 80}
    .field("thread", thread)
    .field("id", client_id)
    .field("reply_to", reply_to)
    .field("attempt", uint64_t{attempt})
    .field("text", text)
    .done();
}

std::string outcome_frame(const std::string& thread, const log_entry& entry) {
  auto hint = thread.size() + entry.client_id.size() + entry.text.size() + 96;
  switch (entry.kind) {
    case log_kind::reply:
      return object_writer{"reply", hint + entry.provider.size()}
        .field("thread", thread)
        .field("seq", entry.seq)
        .field("reply_to", entry.reply_to)
        .field("id", entry.client_id)
        .field("text", entry.text)
        .field("provider", entry.provider)
        .usage(entry.usage)
        .done();
    case log_kind::error:
      return object_writer{"error", hint + entry.code.size()}
        .field("code", entry.code.empty() ? std::string_view{"turn_failed"}
                                          : std::string_view{entry.code})
        .field("message", entry.text)
        .optional("detail", entry.detail)
        .field("thread", thread)
        .field("seq", entry.seq)
        .field("reply_to", entry.reply_to)
        .field("id", entry.client_id)
        .usage(entry.usage)
        .done();
    case log_kind::tool:
      return object_writer{"tool", hint + entry.tool.size()}
        .field("thread", thread)
        .field("seq", entry.seq)
        .field("reply_to", entry.reply_to)
        .field("id", entry.client_id)
        .field("tool", entry.tool)
        .field("text", entry.text)
        .done();
    case log_kind::user: break;
  }
  // Not sent by v1 nodes; encoded anyway so that no entry is ever dropped.
  return object_writer{"message", hint}
    .field("thread", thread)
    .field("seq", entry.seq)
    .field("id", entry.client_id)
    .field("text", entry.text)
    .done();
}

std::string error_frame(const std::string& code, const std::string& message,
                        const std::string& id, const std::string& thread) {
  return object_writer{"error", code.size() + message.size() + id.size()
                                  + thread.size() + 48}
    .field("code", code)
    .field("message", message)
    .optional("id", id)
    .optional("thread", thread)
    .done();
}

std::string error_frame(const frame_error& err) {
  return error_frame(err.code, err.message, err.id, err.thread);
}

std::string history_frame(const std::string& id, const history_page& page) {
  json entries = json::array();
  auto& arr = entries.get_ref<json::array_t&>();
  arr.reserve(page.entries.size());
  for (const auto& entry : page.entries)
    arr.emplace_back(to_json(entry));
  json j{{"type", "history"},
         {"thread", page.thread},
         {"entries", std::move(entries)},
         {"more", page.more}};
  if (!id.empty())
    j["id"] = id;
  return dump(j);
}

std::string subscribed_frame(const std::string& thread, bool subscribed,
                             const std::string& id) {
  nlohmann::json j{
    {"type", "subscribed"}, {"thread", thread}, {"subscribed", subscribed}};
  if (!id.empty())
    j["id"] = id;
  return dump(j);
}

std::string spawned_frame(const spawn_result& result, const std::string& id) {
  return object_writer{"spawned", result.parent.size() + result.child.size()
                                    + id.size() + 48}
    .optional("id", id)
    .field("thread", result.parent)
    .field("child", result.child)
    .field("created", result.created)
    .done();
}

std::string cancelled_frame(const std::string& thread,
                            const std::vector<std::string>& threads,
                            const std::string& id) {
  nlohmann::json j{
    {"type", "cancelled"}, {"thread", thread}, {"threads", threads}};
  if (!id.empty())
    j["id"] = id;
  return dump(j);
}

std::string pong_frame(const std::string& id) {
  return object_writer{"pong", id.size()}.optional("id", id).done();
}

// -- client frames (encoding) -------------------------------------------------

std::string send_frame(const std::string& thread, const std::string& id,
                       const std::string& text, const std::string& agent) {
  return object_writer{"send", thread.size() + id.size() + text.size()
                                 + agent.size() + 48}
    .field("thread", thread)
    .field("id", id)
    .field("text", text)
    .optional("agent", agent)
    .done();
}

std::string subscribe_frame(const std::string& thread, const std::string& id) {
  return object_writer{"subscribe", thread.size() + id.size() + 16}
    .field("thread", thread)
    .optional("id", id)
    .done();
}

std::string unsubscribe_frame(const std::string& thread,
                              const std::string& id) {
  return object_writer{"unsubscribe", thread.size() + id.size() + 16}
    .field("thread", thread)
    .optional("id", id)
    .done();
}

std::string history_request_frame(const std::string& thread,
                                  const std::string& id, seq_t after,
                                  size_t limit) {
  return object_writer{"history", thread.size() + id.size() + 48}
    .field("thread", thread)
    .optional("id", id)
    .field("after", after)
    .field("limit", static_cast<uint64_t>(limit))
    .done();
}

std::string spawn_frame(const std::string& parent, const std::string& child,
                        const std::string& id, const std::string& agent) {
  return object_writer{"spawn", parent.size() + child.size() + id.size()
                                  + agent.size() + 48}
    .field("thread", parent)
    .field("child", child)
    .field("id", id)
    .optional("agent", agent)
    .done();
}

std::string cancel_frame(const std::string& thread, const std::string& id) {
  return object_writer{"cancel", thread.size() + id.size() + 16}
    .field("thread", thread)
    .optional("id", id)
    .done();
}

std::string ping_frame(const std::string& id) {
  return object_writer{"ping", id.size()}.optional("id", id).done();
}

// -- server frames (decoding) -------------------------------------------------

caf::expected<server_frame> decode_server_frame(std::string_view text) {
  server_frame result;
  try {
    result.body = json::parse(text.begin(), text.end());
  } catch (const std::exception& e) {
    return caf::make_error(
      ec::protocol_violation,
      clip(std::string{"server frame is not valid JSON: "} + e.what()));
  }
  if (!result.body.is_object())
    return caf::make_error(ec::protocol_violation,
                           "server frame is not a JSON object");
  auto i = result.body.find("type");
  if (i == result.body.end() || !i->is_string())
    return caf::make_error(ec::protocol_violation,
                           "server frame has no string field 'type'");
  result.type = i->get<std::string>();
  return result;
}

} // namespace keel::protocol
