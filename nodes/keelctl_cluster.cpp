// keelctl cluster and drain: the cluster's members, states, shard counts
// and epochs as one node sees them, and draining a member.

#include <cstdio>
#include <iostream>

#include "keel/tools/ws_client.hpp"
#include "keelctl.hpp"

namespace keelctl {

namespace {

int run_cluster(const keel::endpoint& ep, bool as_json) {
  auto res = keel::api_call(ep, "GET", "/api/v1/cluster");
  if (!res)
    return fail(ep, res.error());
  auto& c = *res;
  if (as_json) {
    std::cout << c.dump(2) << '\n';
    return exit_ok;
  }
  auto n = [&](const char* key) { return json_number(c, {key}); };
  std::cout << "node " << json_string(c, "node") << " (incarnation "
            << n("incarnation") << ", " << json_string(c, "state")
            << "): " << n("held") << " of " << n("shards")
            << " shards held, epochs " << n("min_epoch") << ".."
            << n("max_epoch") << '\n'
            << "cluster: " << n("orphans") << " shards without an owner, "
            << n("handoffs") << " handoffs pending\n";
  std::printf("%-20s %-9s %-11s %6s %10s  %s\n", "MEMBER", "STATE",
              "INCARNATION", "SHARDS", "RENEWED", "ADDRESS");
  if (auto i = c.find("members"); i != c.end() && i->is_array())
    for (auto& m : *i)
      std::printf(
        "%-20s %-9s %-11llu %6llu %8llums  %s\n",
        json_string(m, "node").c_str(), json_string(m, "state").c_str(),
        static_cast<unsigned long long>(json_number(m, {"incarnation"})),
        static_cast<unsigned long long>(json_number(m, {"shards"})),
        static_cast<unsigned long long>(json_number(m, {"since_renewal_ms"})),
        json_string(m, "address").c_str());
  return exit_ok;
}

int run_drain(const keel::endpoint& ep, const std::string& member, bool force) {
  json body{{"node", member}, {"force", force}};
  auto res = keel::api_call(ep, "POST", "/api/v1/cluster/drain", body.dump());
  if (!res)
    return fail(ep, res.error());
  std::cout << member << " is " << json_string(*res, "state")
            << ": it hands its shards to the other members and takes none; "
               "keelctl cluster shows when it holds 0\n";
  return exit_ok;
}

} // namespace

command add_cluster_command(CLI::App& app, const node_args& node) {
  auto json_flag = std::make_shared<bool>(false);
  auto cmd = add_node_command(
    app, "cluster",
    "Prints the cluster as the node sees it: members, their states, shard "
    "counts and lease renewals, and the node's own shards and epochs");
  cmd->add_flag("--json", *json_flag, "Print the raw JSON");
  return node_command(
    cmd, node,
    [json_flag](const keel::endpoint& ep) {
      return run_cluster(ep, *json_flag);
    },
    true);
}

command add_drain_command(CLI::App& app, const node_args& node) {
  struct drain_args {
    std::string member;
    bool force = false;
  };
  auto args = std::make_shared<drain_args>();
  auto cmd = add_node_command(
    app, "drain",
    "Drains the cluster member NODE (asked of any node): it hands every shard "
    "to the other members, a batch at a time, while its gateway keeps "
    "serving; stop it once it holds 0 shards");
  cmd->add_option("NODE", args->member, "The member's node id")
    ->type_name("")
    ->required();
  cmd->add_flag("--force", args->force,
                "Drain the last up member too (its shards then stay with it)");
  return node_command(
    cmd, node,
    [args](const keel::endpoint& ep) {
      return run_drain(ep, args->member, args->force);
    },
    true);
}

} // namespace keelctl
