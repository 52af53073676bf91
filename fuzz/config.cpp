// The YAML configuration parser (keel::parse_config) on arbitrary text, with
// an environment that knows KEEL_TOKEN, KEEL_PORT and an empty KEEL_EMPTY.
// Properties: no exception escapes; a refusal is a message naming the
// source; an accepted configuration satisfies the cross-field rules the
// parser promises (frame and text limits, pools naming existing providers,
// the default pool existing).

#include <optional>
#include <string>

#include "fuzz_check.hpp"
#include "keel/config.hpp"
#include "keel/error.hpp"

using namespace keel;
using keel::fuzz::require;

namespace {

const char* source = "fuzz.yaml";

std::optional<std::string> lookup(const std::string& name) {
  if (name == "KEEL_TOKEN")
    return "s3cret";
  if (name == "KEEL_PORT")
    return "9090";
  if (name == "KEEL_EMPTY")
    return std::string{};
  return std::nullopt;
}

void check_accepted(const node_config& cfg) {
  const auto& gw = cfg.gateway;
  require(gw.max_frame_bytes >= 1024, "max_frame_bytes under 1 KiB accepted");
  require(gw.max_text_bytes <= gw.max_frame_bytes,
          "max_text_bytes over max_frame_bytes accepted");
  require(!cfg.providers.empty() && !cfg.pools.empty(),
          "a configuration without providers or pools accepted");
  for (size_t i = 0; i < cfg.providers.size(); ++i)
    require(cfg.find_provider(cfg.providers[i].name) == &cfg.providers[i],
            "two providers of one name accepted");
  for (const auto& pool : cfg.pools) {
    require(!pool.chain.empty(), "a pool with an empty chain accepted");
    for (const auto& name : pool.chain)
      require(cfg.find_provider(name) != nullptr,
              "a pool naming an unknown provider accepted");
  }
  require(cfg.find_pool(cfg.threads.pool) != nullptr,
          "threads.pool names no pool");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return keel::fuzz::guarded([&] {
    std::string yaml{keel::fuzz::as_text(data, size)};
    auto cfg = parse_config(yaml, source, lookup);
    if (cfg) {
      check_accepted(*cfg);
      return;
    }
    auto what = error_message(cfg.error());
    require(what.find(source) != std::string::npos,
            "a refusal does not name the file");
  });
}
