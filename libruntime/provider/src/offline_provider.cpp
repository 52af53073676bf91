#include "keel/offline_provider.hpp"

#include <stdexcept>

#include <nlohmann/json.hpp>

#include "keel/text.hpp"

namespace keel {

provider::~provider() {
  // nop
}

std::string last_user_text(const std::vector<context_entry>& ctx) {
  for (auto i = ctx.rbegin(); i != ctx.rend(); ++i)
    if (i->role == "user")
      return i->content;
  return {};
}

std::string last_input_text(const context_list& ctx) {
  for (auto i = ctx.rbegin(); i != ctx.rend(); ++i)
    if (i->role == "user" || i->role == "tool")
      return i->content;
  return {};
}

namespace {

/// Answers every message (or tool result) with "echo: <text>", instantly,
/// offline.
class echo_provider : public provider {
public:
  explicit echo_provider(const provider_config& cfg)
    : name_(cfg.name), model_(cfg.model.empty() ? "echo" : cfg.model) {
    // nop
  }

  const std::string& name() const override {
    return name_;
  }

  provider_outcome complete(const completion_request& req, uint32_t) override {
    provider_outcome out;
    out.reply.text = "echo: " + last_input_text(req.context);
    out.reply.provider = name_;
    out.reply.model = model_;
    out.reply.finish_reason = "stop";
    return out;
  }

private:
  std::string name_;
  std::string model_;
};

/// Plays the configured script: the first step whose `match` occurs in the
/// last user message or tool result, else the unmatched steps in rotation.
class scripted_provider : public provider {
public:
  explicit scripted_provider(const provider_config& cfg)
    : name_(cfg.name), model_(cfg.model.empty() ? "scripted" : cfg.model) {
    for (auto& step : cfg.script)
      (step.match.empty() ? rotation_ : matched_).push_back(step);
  }

  const std::string& name() const override {
    return name_;
  }

  provider_outcome complete(const completion_request& req,
                            uint32_t max_tokens) override {
    auto input = last_input_text(req.context);
    const scripted_step* step = nullptr;
    for (auto& candidate : matched_)
      if (input.find(candidate.match) != std::string::npos) {
        step = &candidate;
        break;
      }
    if (step == nullptr && !rotation_.empty())
      step = &rotation_[next_++ % rotation_.size()];
    provider_outcome out;
    if (step == nullptr) {
      out.reply.text = input;
      out.reply.provider = name_;
      out.reply.model = model_;
      return out;
    }
    out.delay = step->delay;
    if (step->crash) {
      out.what = provider_outcome::kind::crash;
    } else if (!step->fail.empty()) {
      out.what = provider_outcome::kind::failure;
      out.failure
        = parse_error_class(step->fail).value_or(error_class::unknown);
      out.message = name_ + ": scripted failure (" + step->fail + ")";
      out.retry_after = step->retry_after;
      out.cut = step->cut;
    } else {
      out.reply.text = replace_all(replace_all(step->reply, "{input}", input),
                                   "{max_tokens}", std::to_string(max_tokens));
      out.reply.provider = name_;
      out.reply.model = model_;
      out.reply.finish_reason = "stop";
      if (!step->tool_name.empty()) {
        // The input goes into JSON text: escape it as a string's content.
        auto quoted = nlohmann::json(input).dump();
        auto args = replace_all(step->tool_arguments, "{input}",
                                quoted.substr(1, quoted.size() - 2));
        out.reply.tool_calls.push_back(
          tool_call{"call_" + std::to_string(next_call_id_++), step->tool_name,
                    std::move(args)});
        out.reply.finish_reason = "tool_calls";
      }
    }
    return out;
  }

private:
  std::string name_;
  std::string model_;
  std::vector<scripted_step> matched_;
  std::vector<scripted_step> rotation_;
  size_t next_ = 0;
  uint64_t next_call_id_ = 1;
};

} // namespace

caf::expected<std::unique_ptr<provider>>
make_provider(const provider_config& cfg) {
  if (cfg.kind == "echo")
    return std::unique_ptr<provider>{new echo_provider(cfg)};
  if (cfg.kind == "scripted")
    return std::unique_ptr<provider>{new scripted_provider(cfg)};
  return caf::make_error(ec::config_invalid,
                         "providers." + cfg.name + ".kind: '" + cfg.kind
                           + "' is not an offline provider (echo, scripted)");
}

} // namespace keel
