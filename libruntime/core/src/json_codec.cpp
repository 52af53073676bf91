#include "keel/json_codec.hpp"

namespace keel {

namespace {

using json = nlohmann::json;

// Reads a required field of the given JSON type, or explains what is wrong.
template <class T>
caf::error read_field(const json& j, const char* key, T& out) {
  auto i = j.find(key);
  if (i == j.end())
    return caf::make_error(ec::storage_corrupt,
                           std::string{"missing field '"} + key + "'");
  try {
    out = i->get<T>();
  } catch (const json::exception&) {
    return caf::make_error(ec::storage_corrupt, std::string{"field '"} + key
                                                  + "' has the wrong type");
  }
  return caf::none;
}

// Reads an optional field: a missing one keeps `out` (fields added after
// records of the old form were written), a wrong type is an error.
template <class T>
caf::error read_optional(const json& j, const char* key, T& out) {
  if (j.find(key) == j.end())
    return caf::none;
  return read_field(j, key, out);
}

template <class T, class Fn>
caf::expected<T> decode_object(const json& j, const char* what, Fn fn) {
  if (!j.is_object())
    return caf::make_error(ec::storage_corrupt,
                           std::string{what} + ": not a JSON object");
  T result;
  if (auto err = fn(result)) {
    return caf::make_error(ec::storage_corrupt,
                           std::string{what} + ": " + error_message(err));
  }
  return result;
}

} // namespace

json to_json(const session_record& x) {
  return json{{"thread", x.thread},
              {"parent", x.parent},
              {"pool", x.pool},
              {"model", x.model},
              {"provider", x.provider},
              {"state", to_string(x.state)},
              {"created_at", x.created_at},
              {"recovered_at", x.recovered_at},
              {"provider_state", x.provider_state}};
}

json to_json(const tree_link& x) {
  return json{{"parent", x.parent},
              {"child", x.child},
              {"created_at", x.created_at}};
}

json to_json(const outbox_entry& x) {
  return json{{"from", x.from},           {"seq", x.seq},
              {"to", x.to},               {"client_id", x.client_id},
              {"text", x.text},           {"created_at", x.created_at}};
}

json to_json(const dead_letter& x) {
  auto j = to_json(x.entry);
  j["reason"] = x.reason;
  j["at"] = x.at;
  return j;
}

json to_json(const agent_info& x) {
  return json{{"thread", x.thread},         {"parent", x.parent},
              {"state", x.state},           {"pool", x.pool},
              {"model", x.model},           {"provider", x.provider},
              {"created_at", x.created_at}, {"children", x.children}};
}

json to_json(const recovery_step& x) {
  return json{{"name", x.name}, {"count", x.count}, {"micros", x.micros}};
}

json to_json(const recovery_report& x) {
  auto steps = json::array();
  for (auto& step : x.steps)
    steps.push_back(to_json(step));
  return json{{"started_at", x.started_at},
              {"finished_at", x.finished_at},
              {"sessions", x.sessions},
              {"roots", x.roots},
              {"links", x.links},
              {"suspended", x.suspended},
              {"inbox_messages", x.inbox_messages},
              {"inbox_threads", x.inbox_threads},
              {"outbox_messages", x.outbox_messages},
              {"roots_resumed", x.roots_resumed},
              {"children_resumed", x.children_resumed},
              {"cancels_finished", x.cancels_finished},
              {"problems", x.problems},
              {"steps", std::move(steps)}};
}

json to_json(const inbox_entry& x) {
  return json{{"seq", x.seq},
              {"client_id", x.client_id},
              {"text", x.text},
              {"accepted_at", x.accepted_at}};
}

json to_json(const log_entry& x) {
  json j{{"seq", x.seq},
         {"kind", to_string(x.kind)},
         {"client_id", x.client_id},
         {"text", x.text},
         {"at", x.at}};
  if (x.reply_to != 0)
    j["reply_to"] = x.reply_to;
  if (!x.code.empty())
    j["code"] = x.code;
  if (!x.provider.empty())
    j["provider"] = x.provider;
  return j;
}

json to_json(const context_entry& x) {
  return json{{"seq", x.seq}, {"role", x.role}, {"content", x.content}};
}

json to_json(const provider_health_record& x) {
  return json{{"pool", x.pool},
              {"provider", x.provider},
              {"status", x.status},
              {"breaker", x.breaker},
              {"consecutive_failures", x.consecutive_failures},
              {"last_error", x.last_error},
              {"last_error_class", x.last_error_class},
              {"last_success", x.last_success},
              {"cooldown_until", x.cooldown_until},
              {"calls", x.calls},
              {"failures", x.failures}};
}

caf::expected<session_record> session_record_from_json(const json& j) {
  return decode_object<session_record>(j, "session record", [&](auto& x) {
    std::string state;
    caf::error err;
    if ((err = read_field(j, "thread", x.thread))
        || (err = read_field(j, "parent", x.parent))
        || (err = read_field(j, "pool", x.pool))
        || (err = read_field(j, "model", x.model))
        || (err = read_field(j, "state", state))
        || (err = read_field(j, "created_at", x.created_at))
        || (err = read_field(j, "provider_state", x.provider_state))
        // Records written before crash recovery (issue 5) lack these.
        || (err = read_optional(j, "provider", x.provider))
        || (err = read_optional(j, "recovered_at", x.recovered_at)))
      return err;
    auto parsed = parse_session_state(state);
    if (!parsed)
      return caf::make_error(ec::storage_corrupt,
                             "field 'state' has unknown value '" + state + "'");
    x.state = *parsed;
    return caf::error{};
  });
}

caf::expected<tree_link> tree_link_from_json(const json& j) {
  return decode_object<tree_link>(j, "tree link", [&](auto& x) {
    caf::error err;
    if ((err = read_field(j, "parent", x.parent))
        || (err = read_field(j, "child", x.child))
        || (err = read_field(j, "created_at", x.created_at)))
      return err;
    return caf::error{};
  });
}

namespace {

caf::error read_outbox_fields(const json& j, outbox_entry& x) {
  caf::error err;
  if ((err = read_field(j, "from", x.from))
      || (err = read_field(j, "seq", x.seq))
      || (err = read_field(j, "to", x.to))
      || (err = read_field(j, "client_id", x.client_id))
      || (err = read_field(j, "text", x.text))
      || (err = read_field(j, "created_at", x.created_at)))
    return err;
  return caf::none;
}

} // namespace

caf::expected<outbox_entry> outbox_entry_from_json(const json& j) {
  return decode_object<outbox_entry>(j, "outbox entry", [&](auto& x) {
    return read_outbox_fields(j, x);
  });
}

caf::expected<dead_letter> dead_letter_from_json(const json& j) {
  return decode_object<dead_letter>(j, "dead letter", [&](auto& x) {
    caf::error err;
    if ((err = read_outbox_fields(j, x.entry))
        || (err = read_field(j, "reason", x.reason))
        || (err = read_field(j, "at", x.at)))
      return err;
    return caf::error{};
  });
}

caf::expected<recovery_report> recovery_report_from_json(const json& j) {
  return decode_object<recovery_report>(j, "recovery report", [&](auto& x) {
    caf::error err;
    json steps;
    // The counters are optional so that a report stored by an older build
    // (with fewer counters) still reads.
    if ((err = read_field(j, "started_at", x.started_at))
        || (err = read_field(j, "finished_at", x.finished_at))
        || (err = read_field(j, "steps", steps))
        || (err = read_optional(j, "sessions", x.sessions))
        || (err = read_optional(j, "roots", x.roots))
        || (err = read_optional(j, "links", x.links))
        || (err = read_optional(j, "suspended", x.suspended))
        || (err = read_optional(j, "inbox_messages", x.inbox_messages))
        || (err = read_optional(j, "inbox_threads", x.inbox_threads))
        || (err = read_optional(j, "outbox_messages", x.outbox_messages))
        || (err = read_optional(j, "roots_resumed", x.roots_resumed))
        || (err = read_optional(j, "children_resumed", x.children_resumed))
        || (err = read_optional(j, "cancels_finished", x.cancels_finished))
        || (err = read_optional(j, "problems", x.problems)))
      return err;
    if (!steps.is_array())
      return caf::make_error(ec::storage_corrupt,
                             "field 'steps' has the wrong type");
    for (size_t i = 0; i < steps.size(); ++i) {
      auto what = "steps[" + std::to_string(i) + "]";
      auto step = decode_object<recovery_step>(
        steps[i], what.c_str(), [&](auto& y) {
          caf::error step_err;
          if ((step_err = read_field(steps[i], "name", y.name))
              || (step_err = read_field(steps[i], "count", y.count))
              || (step_err = read_field(steps[i], "micros", y.micros)))
            return step_err;
          return caf::error{};
        });
      if (!step)
        return std::move(step.error());
      x.steps.push_back(std::move(*step));
    }
    return caf::error{};
  });
}

caf::expected<agent_info> agent_info_from_json(const json& j) {
  return decode_object<agent_info>(j, "agent", [&](auto& x) {
    caf::error err;
    if ((err = read_field(j, "thread", x.thread))
        || (err = read_field(j, "parent", x.parent))
        || (err = read_field(j, "state", x.state))
        || (err = read_field(j, "children", x.children))
        || (err = read_optional(j, "pool", x.pool))
        || (err = read_optional(j, "model", x.model))
        || (err = read_optional(j, "provider", x.provider))
        || (err = read_optional(j, "created_at", x.created_at)))
      return err;
    return caf::error{};
  });
}

caf::expected<inbox_entry> inbox_entry_from_json(const json& j) {
  return decode_object<inbox_entry>(j, "inbox entry", [&](auto& x) {
    caf::error err;
    if ((err = read_field(j, "seq", x.seq))
        || (err = read_field(j, "client_id", x.client_id))
        || (err = read_field(j, "text", x.text))
        || (err = read_field(j, "accepted_at", x.accepted_at)))
      return err;
    return caf::error{};
  });
}

caf::expected<log_entry> log_entry_from_json(const json& j) {
  return decode_object<log_entry>(j, "log entry", [&](auto& x) {
    std::string kind;
    caf::error err;
    if ((err = read_field(j, "seq", x.seq))
        || (err = read_field(j, "kind", kind))
        || (err = read_field(j, "client_id", x.client_id))
        || (err = read_field(j, "text", x.text))
        || (err = read_field(j, "at", x.at)))
      return err;
    auto parsed = parse_log_kind(kind);
    if (!parsed)
      return caf::make_error(ec::storage_corrupt,
                             "field 'kind' has unknown value '" + kind + "'");
    x.kind = *parsed;
    x.reply_to = j.value("reply_to", seq_t{0});
    x.code = j.value("code", std::string{});
    x.provider = j.value("provider", std::string{});
    return caf::error{};
  });
}

caf::expected<context_entry> context_entry_from_json(const json& j) {
  return decode_object<context_entry>(j, "context entry", [&](auto& x) {
    caf::error err;
    if ((err = read_field(j, "seq", x.seq))
        || (err = read_field(j, "role", x.role))
        || (err = read_field(j, "content", x.content)))
      return err;
    return caf::error{};
  });
}

caf::expected<provider_health_record>
provider_health_record_from_json(const json& j) {
  return decode_object<provider_health_record>(
    j, "provider health record", [&](auto& x) {
      caf::error err;
      if ((err = read_field(j, "pool", x.pool))
          || (err = read_field(j, "provider", x.provider))
          || (err = read_field(j, "status", x.status))
          || (err = read_field(j, "breaker", x.breaker))
          || (err = read_field(j, "consecutive_failures",
                               x.consecutive_failures))
          || (err = read_field(j, "last_error", x.last_error))
          || (err = read_field(j, "last_error_class", x.last_error_class))
          || (err = read_field(j, "last_success", x.last_success))
          || (err = read_field(j, "cooldown_until", x.cooldown_until)))
        return err;
      x.calls = j.value("calls", uint64_t{0});
      x.failures = j.value("failures", uint64_t{0});
      return caf::error{};
    });
}

json agents_to_json(const std::vector<agent_info>& agents) {
  auto list = json::array();
  for (auto& x : agents)
    list.push_back(to_json(x));
  return json{{"agents", std::move(list)}};
}

caf::expected<std::vector<agent_info>> agents_from_json(const json& j) {
  auto list = j.find("agents");
  if (!j.is_object() || list == j.end() || !list->is_array())
    return caf::make_error(ec::protocol_violation,
                           "the agents answer has no 'agents' array");
  std::vector<agent_info> result;
  for (size_t i = 0; i < list->size(); ++i) {
    auto x = agent_info_from_json((*list)[i]);
    if (!x)
      return caf::make_error(ec::protocol_violation,
                             "agents[" + std::to_string(i)
                               + "]: " + error_message(x.error()));
    result.push_back(std::move(*x));
  }
  return result;
}

namespace {

template <class T, class Fn>
caf::expected<T> parse_then(std::string_view text, Fn fn) {
  auto j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded())
    return caf::make_error(ec::storage_corrupt, "record is not valid JSON");
  return fn(j);
}

} // namespace

template <>
caf::expected<session_record> decode<session_record>(std::string_view text) {
  return parse_then<session_record>(text, session_record_from_json);
}

template <>
caf::expected<tree_link> decode<tree_link>(std::string_view text) {
  return parse_then<tree_link>(text, tree_link_from_json);
}

template <>
caf::expected<outbox_entry> decode<outbox_entry>(std::string_view text) {
  return parse_then<outbox_entry>(text, outbox_entry_from_json);
}

template <>
caf::expected<dead_letter> decode<dead_letter>(std::string_view text) {
  return parse_then<dead_letter>(text, dead_letter_from_json);
}

template <>
caf::expected<recovery_report>
decode<recovery_report>(std::string_view text) {
  return parse_then<recovery_report>(text, recovery_report_from_json);
}

template <>
caf::expected<inbox_entry> decode<inbox_entry>(std::string_view text) {
  return parse_then<inbox_entry>(text, inbox_entry_from_json);
}

template <>
caf::expected<log_entry> decode<log_entry>(std::string_view text) {
  return parse_then<log_entry>(text, log_entry_from_json);
}

template <>
caf::expected<context_entry> decode<context_entry>(std::string_view text) {
  return parse_then<context_entry>(text, context_entry_from_json);
}

template <>
caf::expected<provider_health_record>
decode<provider_health_record>(std::string_view text) {
  return parse_then<provider_health_record>(text,
                                            provider_health_record_from_json);
}

} // namespace keel
