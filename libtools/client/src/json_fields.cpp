#include "keel/tools/json_fields.hpp"

namespace keel {

std::string json_string(const nlohmann::json& j, const char* key) {
  auto i = j.find(key);
  return i != j.end() && i->is_string() ? i->get<std::string>() : std::string{};
}

namespace {

/// The value at `path` (keys of nested objects), or null.
const nlohmann::json* json_at(const nlohmann::json& j,
                              std::initializer_list<const char*> path) {
  const nlohmann::json* cur = &j;
  for (auto key : path) {
    if (!cur->is_object())
      return nullptr;
    auto i = cur->find(key);
    if (i == cur->end())
      return nullptr;
    cur = &*i;
  }
  return cur;
}

} // namespace

uint64_t json_number(const nlohmann::json& j,
                     std::initializer_list<const char*> path) {
  auto x = json_at(j, path);
  return x != nullptr && x->is_number_unsigned() ? x->get<uint64_t>() : 0;
}

std::optional<double> json_double(const nlohmann::json& j,
                                  std::initializer_list<const char*> path) {
  auto x = json_at(j, path);
  if (x == nullptr || !x->is_number())
    return std::nullopt;
  return x->get<double>();
}

} // namespace keel
