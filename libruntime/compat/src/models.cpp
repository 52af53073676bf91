#include "keel/compat_models.hpp"

#include <nlohmann/json.hpp>

#include "keel/text.hpp"

#include "json_text.hpp"

namespace keel::compat {

namespace {

using json = nlohmann::json;

json model_json(api wire, const model_entry& model) {
  if (wire == api::openai)
    return {{"id", model.id},
            {"object", "model"},
            {"created", model.created},
            {"owned_by", "keel"}};
  return {{"type", "model"},
          {"id", model.id},
          {"display_name",
           model.description.empty() ? model.id : model.description},
          {"created_at", rfc3339_utc(model.created * 1000)}};
}

} // namespace

std::string models_body(api wire, const std::vector<model_entry>& models) {
  auto data = json::array();
  for (auto& model : models)
    data.push_back(model_json(wire, model));
  if (wire == api::openai)
    return json_text({{"object", "list"}, {"data", std::move(data)}});
  auto first = models.empty() ? json() : json(models.front().id);
  auto last = models.empty() ? json() : json(models.back().id);
  return json_text({{"data", std::move(data)},
                    {"has_more", false},
                    {"first_id", first},
                    {"last_id", last}});
}

std::string model_body(api wire, const model_entry& model) {
  return json_text(model_json(wire, model));
}

} // namespace keel::compat
