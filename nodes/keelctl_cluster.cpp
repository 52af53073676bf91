// keelctl cluster and drain: the cluster's members, states, shard counts
// and epochs as one node sees them, draining a member, and `cluster certs`,
// which makes the CA and node certificates of cluster.tls.

#include <cstdio>
#include <iostream>

#include "keel/tools/certificates.hpp"
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

struct certs_args {
  std::string dir;
  std::vector<std::string> nodes;
  int days = 365;
};

int run_certs(const certs_args& args) {
  auto made = keel::make_cluster_certs(args.dir, args.nodes, args.days);
  if (!made)
    return fail(keel::render(made.error()), exit_failed);
  std::cout << "CA: " << made->ca_cert << " (its key " << made->ca_key
            << ": keep it off the nodes)\n";
  for (auto& [cert, key] : made->nodes)
    std::cout << "node: " << cert << ' ' << key << '\n';
  std::cout << "each node's cluster.tls: cert NODE.crt, key NODE.key, ca "
               "ca.crt\n";
  return exit_ok;
}

CLI::App* add_certs_command(CLI::App& cluster, certs_args& args) {
  auto cmd = cluster.add_subcommand(
    "certs",
    "Makes a new CA (DIR/ca.crt, DIR/ca.key) and, signed by it, a "
    "certificate and key for each node (DIR/NODE.crt, DIR/NODE.key) for "
    "cluster.tls: mutual TLS between the nodes. Keys are written 0600; an "
    "existing DIR/ca.key is never replaced");
  cmd->add_option("DIR", args.dir, "The folder to write to")
    ->type_name("")
    ->required();
  cmd
    ->add_option("--nodes", args.nodes,
                 "The node ids to make certificates for (default n1 n2 n3)")
    ->delimiter(',');
  cmd->add_option("--days", args.days, "How long they are valid")
    ->check(CLI::Range(1, 3650));
  return cmd;
}

} // namespace

command add_cluster_command(CLI::App& app, const node_args& node) {
  auto json_flag = std::make_shared<bool>(false);
  auto certs = std::make_shared<certs_args>();
  auto cmd = add_node_command(
    app, "cluster",
    "Prints the cluster as the node sees it: members, their states, shard "
    "counts and lease renewals, and the node's own shards and epochs; "
    "`cluster certs DIR` makes the certificates of cluster.tls");
  cmd->add_flag("--json", *json_flag, "Print the raw JSON");
  auto certs_cmd = add_certs_command(*cmd, *certs);
  auto show = node_command(
    cmd, node,
    [json_flag](const keel::endpoint& ep) {
      return run_cluster(ep, *json_flag);
    },
    true);
  return {cmd, [show, certs_cmd, certs] {
            if (!certs_cmd->parsed())
              return show.run();
            if (certs->nodes.empty())
              certs->nodes = {"n1", "n2", "n3"};
            return run_certs(*certs);
          }};
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
