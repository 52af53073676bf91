#include "keel/stored_form.hpp"

#include "binary_inspector.hpp"

namespace keel {

namespace detail {

caf::error record_cut_short() {
  return caf::make_error(ec::storage_corrupt, "record is cut short");
}

caf::error cut_short(const char* name) {
  return field_error(name, "is cut short");
}

caf::error not_utf8(const char* name) {
  return field_error(name, "is not valid UTF-8");
}

caf::error out_of_range(const char* name) {
  return field_error(name, "is out of range");
}

} // namespace detail

namespace {

template <class T>
caf::expected<T> decode_binary(std::string_view bytes) {
  detail::binary_reader reader{bytes};
  T result;
  if (auto err = reader.read_record(result))
    return detail::in_context(detail::name_of_record<T>(), err);
  if (reader.remaining() > 0)
    return caf::make_error(ec::storage_corrupt,
                           detail::name_of_record<T>() + ": "
                             + std::to_string(reader.remaining())
                             + " bytes after the record");
  return result;
}

template <class T>
caf::expected<T> decode_json(std::string_view text) {
  auto j = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded())
    return caf::make_error(ec::storage_corrupt, "record is not valid JSON");
  return detail::read_record<T>(j);
}

} // namespace

template <class T>
std::string encode(const T& x) {
  std::string result;
  result.reserve(64);
  result.push_back(binary_record_marker);
  detail::binary_writer writer{result};
  writer.write_record(x);
  return result;
}

template <class T>
caf::expected<T> decode(std::string_view bytes) {
  if (!bytes.empty() && bytes.front() == binary_record_marker)
    return decode_binary<T>(bytes.substr(1));
  return decode_json<T>(bytes);
}

#define KEEL_STORED_FORM(type)                                                 \
  template std::string encode<type>(const type&);                              \
  template caf::expected<type> decode<type>(std::string_view);

KEEL_STORED_FORM(session_record)
KEEL_STORED_FORM(tree_link)
KEEL_STORED_FORM(outbox_entry)
KEEL_STORED_FORM(dead_letter)
KEEL_STORED_FORM(reply_delivery)
KEEL_STORED_FORM(owner_notice)
KEEL_STORED_FORM(inbox_entry)
KEEL_STORED_FORM(log_entry)
KEEL_STORED_FORM(context_entry)
KEEL_STORED_FORM(provider_health_record)
KEEL_STORED_FORM(recovery_step)
KEEL_STORED_FORM(recovery_report)
KEEL_STORED_FORM(agent_info)

#undef KEEL_STORED_FORM

} // namespace keel
