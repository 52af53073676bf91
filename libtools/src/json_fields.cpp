#include "keel/tools/json_fields.hpp"

namespace keel {

std::string json_string(const nlohmann::json& j, const char* key) {
  auto i = j.find(key);
  return i != j.end() && i->is_string() ? i->get<std::string>() : std::string{};
}

uint64_t json_number(const nlohmann::json& j,
                     std::initializer_list<const char*> path) {
  const nlohmann::json* cur = &j;
  for (auto key : path) {
    if (!cur->is_object())
      return 0;
    auto i = cur->find(key);
    if (i == cur->end())
      return 0;
    cur = &*i;
  }
  return cur->is_number_unsigned() ? cur->get<uint64_t>() : 0;
}

} // namespace keel
