#include "keel/cluster_store.hpp"

namespace keel {

cluster_store::~cluster_store() = default;

const char* to_string(member_state x) {
  switch (x) {
    case member_state::up: return "up";
    case member_state::draining: return "draining";
    case member_state::dead: return "dead";
    case member_state::left: return "left";
  }
  return "unknown";
}

} // namespace keel
