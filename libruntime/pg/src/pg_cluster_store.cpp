#include "keel/pg_cluster_store.hpp"

#include <algorithm>
#include <charconv>
#include <optional>
#include <thread>

#include "keel/pg_connection.hpp"
#include "pg_cluster_schema.hpp"

namespace keel {

namespace {

using namespace std::chrono_literals;

// How often, and how far apart, `join` tries to take the liveness lock.
constexpr int liveness_lock_tries = 5;
constexpr auto liveness_lock_pause = 20ms;
using pg::cluster_schema;
using pg::liveness_lock_class;
using pg::schema_lock_id;

// -- values -------------------------------------------------------------------

// The liveness lock key of `node`: FNV-1a (32 bits) of its id, as the int4
// pg_advisory_lock takes. Stable across builds and servers.
int32_t liveness_key(const std::string& node) {
  uint32_t hash = 2166136261u;
  for (auto c : node) {
    hash ^= static_cast<uint8_t>(c);
    hash *= 16777619u;
  }
  return static_cast<int32_t>(hash);
}

// A duration as whole microseconds, the unit the statements take.
std::string micros(caf::timespan x) {
  return std::to_string(
    std::chrono::duration_cast<std::chrono::microseconds>(x).count());
}

// The PostgreSQL array literal of `items`, each quoted (`{"a","b\"c"}`).
std::string text_array(const std::vector<std::string>& items) {
  std::string result = "{";
  for (auto& item : items) {
    if (result.size() > 1)
      result += ',';
    result += '"';
    for (auto c : item) {
      if (c == '"' || c == '\\')
        result += '\\';
      result += c;
    }
    result += '"';
  }
  return result + "}";
}

std::string int_array(const std::vector<int32_t>& items) {
  std::string result = "{";
  for (auto item : items) {
    if (result.size() > 1)
      result += ',';
    result += std::to_string(item);
  }
  return result + "}";
}

// A non-negative integer column; 0 for NULL or garbage (the columns are
// NOT NULL bigints: neither happens).
uint64_t to_u64(std::string_view text) {
  uint64_t result = 0;
  std::from_chars(text.data(), text.data() + text.size(), result);
  return result;
}

member_state parse_state(std::string_view text) {
  if (text == "draining")
    return member_state::draining;
  if (text == "dead")
    return member_state::dead;
  if (text == "left")
    return member_state::left;
  return member_state::up;
}

// -- statements ---------------------------------------------------------------

// The lease of `ttl` ($3, microseconds) from now.
constexpr const char* join_sql
  = "INSERT INTO keel.nodes AS n (node_id, incarnation, address, state, "
    "lease_until, renewed_at, joined_at) VALUES ($1, 1, $2, 'up', now() + "
    "$3::bigint * interval '1 microsecond', now(), now()) ON CONFLICT "
    "(node_id) DO UPDATE SET incarnation = n.incarnation + 1, address = "
    "EXCLUDED.address, state = 'up', lease_until = EXCLUDED.lease_until, "
    "renewed_at = EXCLUDED.renewed_at, joined_at = EXCLUDED.joined_at "
    "RETURNING incarnation";

constexpr const char* renew_sql
  = "UPDATE keel.nodes SET lease_until = now() + $3::bigint * interval '1 "
    "microsecond', renewed_at = now() WHERE node_id = $1 AND incarnation = "
    "$2::bigint AND state IN ('up', 'draining') RETURNING state";

// Members, shards and whether the server started less than $1
// (microseconds) ago, in one statement: one snapshot, one round trip. The
// first column tells the rows apart.
constexpr const char* view_sql
  = "SELECT 'member', node_id, incarnation::text, address, state, "
    "(lease_until < now())::text, floor(extract(epoch FROM now() - "
    "renewed_at) * 1000)::bigint::text FROM keel.nodes "
    "UNION ALL SELECT 'shard', shard::text, coalesce(owner, ''), "
    "owner_incarnation::text, epoch::text, coalesce(handoff_to, ''), NULL "
    "FROM keel.shards "
    "UNION ALL SELECT 'store', (pg_postmaster_start_time() > now() - "
    "$1::bigint * interval '1 microsecond')::text, NULL, NULL, NULL, NULL, "
    "NULL";

// For each node ($1) with its key ($2): whether its liveness lock is free,
// released again at once. CASE evaluates the unlock only after the lock
// was taken, once per row, in one statement for all of them.
constexpr const char* vanished_sql
  = "SELECT node FROM unnest($1::text[], $2::int[]) AS t(node, lock_key) "
    "WHERE CASE WHEN pg_try_advisory_lock($3::int, lock_key) THEN "
    "pg_advisory_unlock($3::int, lock_key) ELSE false END";

// Records the move (the row `moved` returned) in keel.shard_history in
// the same statement; answers the new epoch.
std::string with_history(const std::string& update, const char* reason) {
  return "WITH moved AS (" + update
         + " RETURNING s.shard, s.epoch, s.owner, s.owner_incarnation) "
           "INSERT INTO keel.shard_history (shard, epoch, owner, "
           "owner_incarnation, reason) SELECT shard, epoch, owner, "
           "owner_incarnation, '"
         + reason + "' FROM moved RETURNING epoch";
}

// An orphan (unowned, or its owner's incarnation is neither up nor
// draining) still at epoch $2, claimed by $3/$4, which must be up.
const std::string claim_sql = with_history(
  "UPDATE keel.shards s SET owner = $3, owner_incarnation = $4::bigint, "
  "epoch = s.epoch + 1, handoff_to = NULL WHERE s.shard = $1::int AND "
  "s.epoch = $2::bigint AND (s.owner IS NULL OR NOT EXISTS (SELECT 1 FROM "
  "keel.nodes n WHERE n.node_id = s.owner AND n.incarnation = "
  "s.owner_incarnation AND n.state IN ('up', 'draining'))) AND EXISTS "
  "(SELECT 1 FROM keel.nodes c WHERE c.node_id = $3 AND c.incarnation = "
  "$4::bigint AND c.state = 'up')",
  "claim");

// The owner $3/$4 at epoch $2 gives the shard to the node that asked for
// it, if that node is up with a valid lease.
const std::string transfer_sql = with_history(
  "UPDATE keel.shards s SET owner = n.node_id, owner_incarnation = "
  "n.incarnation, epoch = s.epoch + 1, handoff_to = NULL FROM keel.nodes n "
  "WHERE s.shard = $1::int AND s.epoch = $2::bigint AND s.owner = $3 AND "
  "s.owner_incarnation = $4::bigint AND n.node_id = s.handoff_to AND "
  "n.state = 'up' AND n.lease_until >= now()",
  "transfer");

constexpr const char* request_handoff_sql
  = "UPDATE keel.shards SET handoff_to = $3 WHERE shard = $1::int AND epoch "
    "= $2::bigint AND handoff_to IS NULL AND owner IS DISTINCT FROM $3";

constexpr const char* cancel_handoff_sql
  = "UPDATE keel.shards SET handoff_to = NULL WHERE shard = $1::int AND "
    "epoch = $2::bigint AND handoff_to IS NOT NULL";

constexpr const char* declare_dead_sql
  = "UPDATE keel.nodes SET state = 'dead' WHERE node_id = $1 AND incarnation "
    "= $2::bigint AND state IN ('up', 'draining')";

constexpr const char* set_state_sql
  = "UPDATE keel.nodes SET state = $2 WHERE node_id = $1 AND state IN ('up', "
    "'draining')";

constexpr const char* leave_sql
  = "UPDATE keel.nodes SET state = 'left' WHERE node_id = $1 AND incarnation "
    "= $2::bigint AND state IN ('up', 'draining') AND NOT EXISTS (SELECT 1 "
    "FROM keel.shards s WHERE s.owner = $1 AND s.owner_incarnation = "
    "$2::bigint)";

// -- the store ----------------------------------------------------------------

class pg_cluster final : public cluster_store {
public:
  explicit pg_cluster(pg_cluster_options opts) : opts_(std::move(opts)) {
    // nop
  }

  // Connects (see `usable`).
  caf::error open() {
    return connect();
  }

  caf::error prepare(uint32_t shards) override;

  caf::expected<uint64_t> join(const std::string& node,
                               const std::string& address,
                               caf::timespan ttl) override;

  caf::expected<member_state> renew(const std::string& node, uint64_t inc,
                                    caf::timespan ttl) override;

  caf::expected<cluster_view> view() override;

  caf::expected<bool> declare_dead(const std::string& node,
                                   uint64_t inc) override;

  caf::expected<std::vector<std::string>>
  vanished(const std::vector<std::string>& nodes) override;

  caf::expected<std::optional<uint64_t>> claim(shard_id shard, uint64_t epoch,
                                               const std::string& node,
                                               uint64_t inc) override;

  caf::expected<bool> request_handoff(shard_id shard, uint64_t epoch,
                                      const std::string& node) override;

  caf::expected<bool> cancel_handoff(shard_id shard, uint64_t epoch) override;

  caf::expected<std::optional<uint64_t>>
  transfer(shard_id shard, uint64_t epoch, const std::string& node,
           uint64_t inc) override;

  caf::expected<bool> set_state(const std::string& node,
                                member_state state) override;

  caf::expected<bool> leave(const std::string& node, uint64_t inc) override;

private:
  // Whether a statement that failed because its connection broke may go
  // once more on a fresh one (reads, and writes that do the same again).
  enum class on_lost { fail, retry };

  // (Re)connects and re-takes the liveness lock of the node that joined.
  caf::error connect();

  // The connection, reconnected first if it broke.
  caf::expected<pg::connection*> usable();

  // Runs `sql`; a failure is "WHAT: REASON" with the reason's code
  // (`ec::storage_io`, `ec::connection_failed`, `ec::conflict`).
  caf::expected<pg::result> run(const std::string& what, const std::string& sql,
                                const std::vector<pg::param>& params,
                                on_lost lost = on_lost::fail);

  // Takes the liveness lock of `node` on this session; `ec::conflict` if
  // another session holds it.
  caf::error take_liveness_lock(pg::connection& conn, const std::string& node);

  // Runs the statements of `cluster_schema` and fills in the cluster's
  // row and its `shards` shard rows unless there; returns the shard count
  // of the cluster.
  caf::expected<uint32_t> create_tables(uint32_t shards);

  // A compare-and-set that moves a shard (claim, transfer): the new epoch,
  // or none if nothing matched.
  caf::expected<std::optional<uint64_t>>
  move_shard(const std::string& what, const std::string& sql, shard_id shard,
             uint64_t epoch, const std::string& node, uint64_t inc);

  pg_cluster_options opts_;
  std::optional<pg::connection> conn_;
  // The node that joined over this store: its liveness lock is held by
  // this session (and re-taken by a new one).
  std::string joined_;
  // The lease of the last join or renew: the store is "recent" while it
  // started less than one ago.
  caf::timespan ttl_ = 3s;
};

caf::error failed(const std::string& what, const caf::error& err) {
  auto code = err.category() == caf::atom("keel") ? static_cast<ec>(err.code())
                                                  : ec::storage_io;
  return caf::make_error(code, what + ": " + error_message(err));
}

caf::error pg_cluster::connect() {
  conn_.reset();
  auto opened = pg::connection::open(opts_.url, opts_.connect_timeout);
  if (!opened)
    return caf::make_error(ec::connection_failed,
                           error_message(opened.error()));
  // A server or link gone silent must not hold the cluster actor past its
  // lease: it fences itself once renewing fails.
  opened->answer_timeout(opts_.statement_timeout
                         + std::chrono::milliseconds{500});
  auto set = opened->exec("SELECT set_config('statement_timeout', $1, false), "
                          "set_config('application_name', 'keel-cluster', "
                          "false), set_config('client_min_messages', "
                          "'warning', false)",
                          {std::to_string(opts_.statement_timeout.count())});
  if (!set)
    return std::move(set.error());
  if (!joined_.empty())
    if (auto err = take_liveness_lock(*opened, joined_))
      return err;
  conn_ = std::move(*opened);
  return caf::none;
}

caf::expected<pg::connection*> pg_cluster::usable() {
  if (!conn_ || !conn_->ok())
    if (auto err = connect())
      return err;
  return &*conn_;
}

caf::expected<pg::result>
pg_cluster::run(const std::string& what, const std::string& sql,
                const std::vector<pg::param>& params, on_lost lost) {
  for (int attempt = 0;; ++attempt) {
    auto conn = usable();
    if (!conn)
      return failed(what, conn.error());
    auto res = (*conn)->exec(sql, params);
    // A connection found broken at its first use since the server restarted
    // did nothing: the statement goes once more on a fresh one, if it may.
    if (res || (*conn)->ok() || lost == on_lost::fail || attempt > 0)
      return res ? std::move(res) : failed(what, res.error());
  }
}

caf::error pg_cluster::take_liveness_lock(pg::connection& conn,
                                          const std::string& node) {
  // Another node's `vanished` holds the lock for an instant while it
  // probes: a few tries tell that from a live owner.
  for (int attempt = 0; attempt < liveness_lock_tries; ++attempt) {
    if (attempt > 0)
      std::this_thread::sleep_for(liveness_lock_pause);
    auto res = conn.exec("SELECT pg_try_advisory_lock($1::int, $2::int)",
                         {std::to_string(liveness_lock_class),
                          std::to_string(liveness_key(node))});
    if (!res)
      return failed("cannot take the liveness lock of " + node, res.error());
    if (res->value(0, 0) == "t")
      return caf::none;
  }
  return caf::make_error(ec::conflict,
                         "node " + node
                           + " is running already: another live session "
                             "holds its liveness lock (two processes with one "
                             "node id)");
}

// -- schema -------------------------------------------------------------------

caf::expected<uint32_t> pg_cluster::create_tables(uint32_t shards) {
  auto conn = usable();
  if (!conn)
    return std::move(conn.error());
  std::vector<std::pair<std::string, std::vector<pg::param>>> steps{
    {"BEGIN", {}},
    {std::string{"SELECT pg_advisory_xact_lock("} + schema_lock_id + ")", {}},
  };
  for (auto* sql : cluster_schema)
    steps.emplace_back(sql, std::vector<pg::param>{});
  steps.emplace_back("INSERT INTO keel.cluster (id, shards) VALUES (1, "
                     "$1::int) ON CONFLICT (id) DO NOTHING",
                     std::vector<pg::param>{std::to_string(shards)});
  // Idempotent: the rows of the cluster's count, whoever created it.
  steps.emplace_back("INSERT INTO keel.shards (shard) SELECT "
                     "generate_series(0, shards - 1) FROM keel.cluster ON "
                     "CONFLICT (shard) DO NOTHING",
                     std::vector<pg::param>{});
  steps.emplace_back("SELECT shards FROM keel.cluster",
                     std::vector<pg::param>{});
  pg::result count;
  for (auto& [sql, params] : steps) {
    auto res = (*conn)->exec(sql, params);
    if (!res) {
      if ((*conn)->ok() && !(*conn)->idle())
        static_cast<void>((*conn)->exec("ROLLBACK"));
      return std::move(res.error());
    }
    count = std::move(*res);
  }
  if (auto res = (*conn)->exec("COMMIT"); !res)
    return std::move(res.error());
  return static_cast<uint32_t>(to_u64(count.value(0, 0)));
}

caf::error pg_cluster::prepare(uint32_t shards) {
  if (shards == 0)
    return caf::make_error(ec::config_invalid,
                           "cannot prepare a cluster of 0 shards");
  auto existing = create_tables(shards);
  if (!existing)
    return failed("cannot prepare the cluster tables", existing.error());
  if (*existing != shards)
    return caf::make_error(ec::config_invalid,
                           "the cluster has " + std::to_string(*existing)
                             + " shards; this node is configured with "
                             + std::to_string(shards)
                             + " (cluster.shards is fixed when the cluster "
                               "is created)");
  return caf::none;
}

// -- membership ---------------------------------------------------------------

caf::expected<uint64_t> pg_cluster::join(const std::string& node,
                                         const std::string& address,
                                         caf::timespan ttl) {
  auto what = "cannot join as " + node;
  auto conn = usable();
  if (!conn)
    return failed(what, conn.error());
  // Taken before the row changes: a second process with this id fails
  // here, before it could make the first one's incarnation stale. The
  // lock is re-entrant within a session: taken once per node.
  if (joined_ != node) {
    if (auto err = take_liveness_lock(**conn, node))
      return err;
    if (!joined_.empty())
      static_cast<void>((*conn)->exec("SELECT pg_advisory_unlock($1::int, "
                                      "$2::int)",
                                      {std::to_string(liveness_lock_class),
                                       std::to_string(liveness_key(joined_))}));
    joined_ = node;
  }
  auto res = run(what, join_sql, {node, address, micros(ttl)});
  if (!res)
    return std::move(res.error());
  ttl_ = ttl;
  return to_u64(res->value(0, 0));
}

caf::expected<member_state> pg_cluster::renew(const std::string& node,
                                              uint64_t inc, caf::timespan ttl) {
  auto res = run("cannot renew the lease of " + node, renew_sql,
                 {node, std::to_string(inc), micros(ttl)}, on_lost::retry);
  if (!res)
    return std::move(res.error());
  ttl_ = ttl;
  if (res->rows() == 0)
    return member_state::dead;
  return parse_state(res->value(0, 0));
}

caf::expected<cluster_view> pg_cluster::view() {
  auto res = run("cannot read the cluster", view_sql, {micros(ttl_)},
                 on_lost::retry);
  if (!res)
    return std::move(res.error());
  cluster_view result;
  for (size_t row = 0; row < res->rows(); ++row) {
    auto kind = res->value(row, 0);
    if (kind == "member") {
      member x;
      x.node_id = std::string{res->value(row, 1)};
      x.incarnation = to_u64(res->value(row, 2));
      x.address = std::string{res->value(row, 3)};
      x.state = parse_state(res->value(row, 4));
      x.lease_expired = res->value(row, 5) == "true";
      // Negative (a renewal stamped after this statement began) reads 0.
      x.since_renewal = std::chrono::milliseconds{
        static_cast<int64_t>(to_u64(res->value(row, 6)))};
      result.members.push_back(std::move(x));
    } else if (kind == "shard") {
      shard_row x;
      x.shard = static_cast<shard_id>(to_u64(res->value(row, 1)));
      x.owner = std::string{res->value(row, 2)};
      x.owner_incarnation = to_u64(res->value(row, 3));
      x.epoch = to_u64(res->value(row, 4));
      x.handoff_to = std::string{res->value(row, 5)};
      result.shards.push_back(std::move(x));
    } else {
      result.store_recent = res->value(row, 1) == "true";
    }
  }
  std::sort(result.members.begin(), result.members.end(),
            [](auto& a, auto& b) { return a.node_id < b.node_id; });
  std::sort(result.shards.begin(), result.shards.end(),
            [](auto& a, auto& b) { return a.shard < b.shard; });
  return result;
}

caf::expected<bool> pg_cluster::declare_dead(const std::string& node,
                                             uint64_t inc) {
  auto res = run("cannot declare " + node + " dead", declare_dead_sql,
                 {node, std::to_string(inc)});
  if (!res)
    return std::move(res.error());
  return res->affected() == 1;
}

caf::expected<std::vector<std::string>>
pg_cluster::vanished(const std::vector<std::string>& nodes) {
  std::vector<std::string> others;
  std::vector<int32_t> keys;
  for (auto& node : nodes) {
    // This session holds its own node's lock (and would take it again).
    if (node == joined_)
      continue;
    others.push_back(node);
    keys.push_back(liveness_key(node));
  }
  if (others.empty())
    return std::vector<std::string>{};
  auto res = run("cannot probe the liveness locks", vanished_sql,
                 {text_array(others), int_array(keys),
                  std::to_string(liveness_lock_class)},
                 on_lost::retry);
  if (!res)
    return std::move(res.error());
  std::vector<std::string> result;
  for (size_t row = 0; row < res->rows(); ++row)
    result.emplace_back(res->value(row, 0));
  return result;
}

caf::expected<bool> pg_cluster::set_state(const std::string& node,
                                          member_state state) {
  if (state != member_state::up && state != member_state::draining)
    return caf::make_error(ec::config_invalid,
                           std::string{"cannot set the state of "} + node
                             + " to " + to_string(state)
                             + ": only up or draining (see declare_dead and "
                               "leave)");
  auto res = run("cannot set the state of " + node, set_state_sql,
                 {node, std::string{to_string(state)}});
  if (!res)
    return std::move(res.error());
  return res->affected() == 1;
}

caf::expected<bool> pg_cluster::leave(const std::string& node, uint64_t inc) {
  auto res = run("cannot leave the cluster as " + node, leave_sql,
                 {node, std::to_string(inc)});
  if (!res)
    return std::move(res.error());
  return res->affected() == 1;
}

// -- shards -------------------------------------------------------------------

caf::expected<std::optional<uint64_t>>
pg_cluster::move_shard(const std::string& what, const std::string& sql,
                       shard_id shard, uint64_t epoch, const std::string& node,
                       uint64_t inc) {
  auto res = run(what, sql,
                 {std::to_string(shard), std::to_string(epoch), node,
                  std::to_string(inc)});
  if (!res)
    return std::move(res.error());
  if (res->rows() == 0)
    return std::optional<uint64_t>{};
  return std::optional<uint64_t>{to_u64(res->value(0, 0))};
}

caf::expected<std::optional<uint64_t>>
pg_cluster::claim(shard_id shard, uint64_t epoch, const std::string& node,
                  uint64_t inc) {
  return move_shard("cannot claim shard " + std::to_string(shard) + " for "
                      + node,
                    claim_sql, shard, epoch, node, inc);
}

caf::expected<std::optional<uint64_t>>
pg_cluster::transfer(shard_id shard, uint64_t epoch, const std::string& node,
                     uint64_t inc) {
  return move_shard("cannot transfer shard " + std::to_string(shard) + " from "
                      + node,
                    transfer_sql, shard, epoch, node, inc);
}

caf::expected<bool> pg_cluster::request_handoff(shard_id shard, uint64_t epoch,
                                                const std::string& node) {
  auto res = run(
    "cannot ask for shard " + std::to_string(shard) + " for " + node,
    request_handoff_sql, {std::to_string(shard), std::to_string(epoch), node});
  if (!res)
    return std::move(res.error());
  return res->affected() == 1;
}

caf::expected<bool> pg_cluster::cancel_handoff(shard_id shard, uint64_t epoch) {
  auto res = run("cannot cancel the handoff of shard " + std::to_string(shard),
                 cancel_handoff_sql,
                 {std::to_string(shard), std::to_string(epoch)});
  if (!res)
    return std::move(res.error());
  return res->affected() == 1;
}

} // namespace

caf::expected<std::unique_ptr<cluster_store>>
open_pg_cluster_store(const pg_cluster_options& opts) {
  auto result = std::make_unique<pg_cluster>(opts);
  if (auto err = result->open())
    return failed("cannot open the cluster store", err);
  return std::unique_ptr<cluster_store>{std::move(result)};
}

} // namespace keel
