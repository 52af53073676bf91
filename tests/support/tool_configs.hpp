#pragma once

// Tools for tests of the turn and the conversation's state: configured, never
// run (their command is `true`).

#include <string>
#include <utility>

#include "keel/config.hpp"

namespace keel::test {

/// A tool named `name` that "does NAME".
inline tool_config tool(std::string name) {
  tool_config result;
  result.name = std::move(name);
  result.description = "does " + result.name;
  result.command = {"true"};
  return result;
}

} // namespace keel::test
