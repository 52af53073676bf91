#pragma once

// The keys of the node configuration as one table declares them (the parser
// reads from that table): what docs/configuration.md and config/example.yaml
// are checked against, so the three cannot drift.

#include <string>
#include <vector>

namespace keel {

/// One key of the node configuration, described for people.
struct config_key {
  /// The key path: dots for mappings, `[]` for the items of a list and an
  /// upper-case placeholder for a name the file chooses
  /// ("providers[].connect_timeout", "supervision.NAME.period").
  std::string path;
  /// The type and bounds as docs/configuration.md writes them ("integer
  /// 0..65535", "duration > 0", "`text` or `json`").
  std::string type;
  /// The default as docs/configuration.md writes it: the default the code
  /// holds, rendered as a file writes it (`8080`, `1MiB`, `""`), or a short
  /// text for a default that depends on other keys or is required (`—`).
  std::string default_value;
  /// What the key does, in one line.
  std::string text;
  /// A mapping whose keys are keys of this table too (`gateway.rate_limit`):
  /// documented by its keys, so it needs no row of its own.
  bool container = false;
};

/// Every key of the node configuration, section by section in the order
/// the parser reads them.
std::vector<config_key> config_keys();

} // namespace keel
