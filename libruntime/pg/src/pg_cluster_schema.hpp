#pragma once

// The SQL of the cluster store (see `keel/pg_cluster_store.hpp`): its
// tables, the write fence the store's transactions call, and the advisory
// lock keys it shares with the engine.

#include <cstdint>
#include <string_view>

namespace keel::pg {

/// Serializes creating the schema `keel` (the engine's tables and the
/// cluster's) between nodes starting side by side: the one-argument
/// (bigint) form of pg_advisory_xact_lock. Locks of the two-argument
/// (int4, int4) form live in a key space of their own, so the liveness
/// locks below never collide with it.
constexpr const char* schema_lock_id = "7361057100420015";

/// The class id of every node's liveness lock, "keel" in ASCII:
/// pg_advisory_lock(liveness_lock_class, key of the node id).
constexpr int32_t liveness_lock_class = 0x6b65656c;

/// The SQLSTATE `keel.fence` raises when this node does not own a shard at
/// the epoch it holds it at.
constexpr std::string_view fence_sqlstate = "KL001";

/// The statements that create the cluster's tables and the fence, each
/// idempotent (run in one transaction under the schema lock).
constexpr const char* cluster_schema[] = {
  "CREATE SCHEMA IF NOT EXISTS keel",
  "CREATE TABLE IF NOT EXISTS keel.cluster ("
  " id int PRIMARY KEY CHECK (id = 1),"
  " shards int NOT NULL,"
  " created_at timestamptz NOT NULL DEFAULT now())",
  "CREATE TABLE IF NOT EXISTS keel.nodes ("
  " node_id text PRIMARY KEY,"
  " incarnation bigint NOT NULL,"
  " address text NOT NULL,"
  " state text NOT NULL CHECK (state IN ('up', 'draining', 'dead', 'left')),"
  " lease_until timestamptz NOT NULL,"
  " renewed_at timestamptz NOT NULL,"
  " joined_at timestamptz NOT NULL)",
  "CREATE TABLE IF NOT EXISTS keel.shards ("
  " shard int PRIMARY KEY,"
  " owner text,"
  " owner_incarnation bigint NOT NULL DEFAULT 0,"
  " epoch bigint NOT NULL DEFAULT 0,"
  " handoff_to text)",
  // `at`: when the epoch began, by the clock when the row is inserted
  // (clock_timestamp(), not now()): the claim or transfer inserts it after
  // its UPDATE got the shard row, so after every fenced transaction of the
  // old epoch committed (they hold the row FOR SHARE), and a row stamped
  // by one (`written_at`, its start) is always older. The epoch audit of
  // `keelctl verify` relies on it.
  "CREATE TABLE IF NOT EXISTS keel.shard_history ("
  " shard int NOT NULL,"
  " epoch bigint NOT NULL,"
  " owner text NOT NULL,"
  " owner_incarnation bigint NOT NULL,"
  " reason text NOT NULL CHECK (reason IN ('claim', 'transfer')),"
  " at timestamptz NOT NULL DEFAULT clock_timestamp(),"
  " PRIMARY KEY (shard, epoch))",
  // The write fence. The shard rows are locked FOR SHARE (in shard order)
  // until the calling transaction ends: a claim or transfer (an UPDATE of
  // the row) waits for it, so no write of an old epoch commits after the
  // epoch moved. The check then reads the rows as locked (a new snapshot:
  // the function is VOLATILE).
  "CREATE OR REPLACE FUNCTION keel.fence(node text, shards int[], "
  "epochs bigint[]) RETURNS void LANGUAGE plpgsql AS $fence$\n"
  "DECLARE\n"
  "  bad record;\n"
  "BEGIN\n"
  "  PERFORM 1 FROM keel.shards s WHERE s.shard = ANY (shards)\n"
  "    ORDER BY s.shard FOR SHARE;\n"
  "  SELECT w.shard, w.epoch, s.owner, s.epoch AS actual,\n"
  "         s.shard IS NULL AS missing INTO bad\n"
  "    FROM unnest(shards, epochs) AS w(shard, epoch)\n"
  "    LEFT JOIN keel.shards s ON s.shard = w.shard\n"
  "    WHERE s.shard IS NULL OR s.owner IS DISTINCT FROM node\n"
  "       OR s.epoch <> w.epoch\n"
  "    ORDER BY w.shard LIMIT 1;\n"
  "  IF NOT FOUND THEN\n"
  "    RETURN;\n"
  "  END IF;\n"
  "  IF bad.missing THEN\n"
  "    RAISE EXCEPTION 'shard % is not owned by % at epoch % (no such "
  "shard)', bad.shard, node, bad.epoch USING ERRCODE = 'KL001';\n"
  "  END IF;\n"
  "  RAISE EXCEPTION 'shard % is not owned by % at epoch % (owner %, "
  "epoch %)', bad.shard, node, bad.epoch, coalesce(bad.owner, 'none'),\n"
  "    bad.actual USING ERRCODE = 'KL001';\n"
  "END\n"
  "$fence$",
};

} // namespace keel::pg
