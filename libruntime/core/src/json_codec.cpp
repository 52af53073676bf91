#include "keel/json_codec.hpp"

#include "json_inspector.hpp"
#include "keel/text.hpp"

namespace keel {

using json = nlohmann::json;

namespace detail {

caf::error field_error(const char* name, std::string_view problem) {
  return caf::make_error(ec::storage_corrupt, std::string{"field '"} + name
                                                + "' " + std::string{problem});
}

caf::error missing_field(const char* name) {
  return caf::make_error(ec::storage_corrupt,
                         std::string{"missing field '"} + name + "'");
}

caf::error wrong_type(const char* name) {
  return field_error(name, "has the wrong type");
}

caf::error unknown_value(const char* name, const std::string& value) {
  return field_error(name, "has unknown value '" + value + "'");
}

caf::error in_context(const std::string& what, const caf::error& err) {
  return caf::make_error(ec::storage_corrupt, what + ": " + error_message(err));
}

void record_name_reader::take(const caf::meta::type_name_t& x) {
  if (!name.empty())
    return;
  std::string_view full{x.value};
  if (auto pos = full.rfind("::"); pos != std::string_view::npos)
    full.remove_prefix(pos + 2);
  name = replace_all(std::string{full}, "_", " ");
}

void record_name_reader::take(const record_name_t& x) {
  name = x.name;
}

} // namespace detail

// -- records ------------------------------------------------------------------

json to_json(const session_record& x) {
  return detail::write_record(x);
}

json to_json(const tree_link& x) {
  return detail::write_record(x);
}

json to_json(const outbox_entry& x) {
  return detail::write_record(x);
}

json to_json(const dead_letter& x) {
  return detail::write_record(x);
}

json to_json(const reply_delivery& x) {
  return detail::write_record(x);
}

json to_json(const owner_notice& x) {
  return detail::write_record(x);
}

json to_json(const agent_info& x) {
  return detail::write_record(x);
}

json to_json(const recovery_step& x) {
  return detail::write_record(x);
}

json to_json(const recovery_report& x) {
  return detail::write_record(x);
}

json to_json(const inbox_entry& x) {
  return detail::write_record(x);
}

json to_json(const log_entry& x) {
  return detail::write_record(x);
}

size_t json_string_size(std::string_view str) {
  const bool well_formed = valid_utf8(str);
  size_t n = 2;
  for (auto c : str) {
    auto byte = static_cast<unsigned char>(c);
    if (byte == '"' || byte == '\\' || byte == '\b' || byte == '\f'
        || byte == '\n' || byte == '\r' || byte == '\t')
      n += 2;
    else if (byte < 0x20)
      n += 6;
    else if (byte >= 0x80 && !well_formed)
      n += 3;
    else
      n += 1;
  }
  return n;
}

size_t json_size(const log_entry& x) {
  // The record without its text, which is the only field of any length
  // the client chose, and the text measured on its own.
  auto rest = x;
  rest.text.clear();
  auto frame = to_json(rest).dump(-1, ' ', false,
                                  json::error_handler_t::replace);
  return frame.size() - 2 + json_string_size(x.text);
}

json to_json(const context_entry& x) {
  return detail::write_record(x);
}

json to_json(const provider_health_record& x) {
  return detail::write_record(x);
}

caf::expected<session_record> session_record_from_json(const json& j) {
  return detail::read_record<session_record>(j);
}

caf::expected<tree_link> tree_link_from_json(const json& j) {
  return detail::read_record<tree_link>(j);
}

caf::expected<outbox_entry> outbox_entry_from_json(const json& j) {
  return detail::read_record<outbox_entry>(j);
}

caf::expected<dead_letter> dead_letter_from_json(const json& j) {
  return detail::read_record<dead_letter>(j);
}

caf::expected<reply_delivery> reply_delivery_from_json(const json& j) {
  return detail::read_record<reply_delivery>(j);
}

caf::expected<owner_notice> owner_notice_from_json(const json& j) {
  return detail::read_record<owner_notice>(j);
}

caf::expected<recovery_report> recovery_report_from_json(const json& j) {
  return detail::read_record<recovery_report>(j);
}

caf::expected<agent_info> agent_info_from_json(const json& j) {
  return detail::read_record<agent_info>(j);
}

caf::expected<inbox_entry> inbox_entry_from_json(const json& j) {
  return detail::read_record<inbox_entry>(j);
}

caf::expected<log_entry> log_entry_from_json(const json& j) {
  return detail::read_record<log_entry>(j);
}

caf::expected<context_entry> context_entry_from_json(const json& j) {
  return detail::read_record<context_entry>(j);
}

caf::expected<provider_health_record>
provider_health_record_from_json(const json& j) {
  return detail::read_record<provider_health_record>(j);
}

// -- the agent list -----------------------------------------------------------

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

} // namespace keel
