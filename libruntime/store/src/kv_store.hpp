#pragma once

// The store over a `kv_engine`: every record, key, check and staging rule,
// the same for every backend. Its members are defined in four files:
// kv_store.cpp (schema check, low-level access), kv_store_reads.cpp,
// kv_store_writes.cpp (the staged group and its flush) and
// kv_store_quarantine.cpp.

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "keel/kv_engine.hpp"
#include "keel/store.hpp"
#include "keys.hpp"

namespace keel::store_backend {

class kv_store : public store {
public:
  explicit kv_store(std::unique_ptr<kv_engine> engine);

  ~kv_store() override;

  /// Checks the stored schema version; writes ours into a new store.
  caf::error check_schema();

  kv_engine& engine() {
    return *engine_;
  }

  // -- reads ------------------------------------------------------------------

  caf::expected<thread_snapshot>
  load_thread(const std::string& thread) override;

  caf::expected<history_page> history(const std::string& thread, seq_t after,
                                      size_t limit, size_t max_bytes) override;

  caf::expected<std::vector<std::string>> threads_with_inbox() override;

  caf::expected<session_record> session(const std::string& thread) override;

  caf::expected<uint64_t> count_sessions() override;

  caf::expected<std::vector<session_record>> sessions() override;
  caf::expected<std::vector<session_record>>
  sessions_after(const std::string& after, size_t limit) override;

  caf::expected<std::vector<session_record>>
  sessions(std::vector<bad_record>& bad) override;

  caf::expected<std::vector<tree_link>> tree_links() override;

  caf::expected<std::vector<tree_link>>
  tree_links(std::vector<bad_record>& bad) override;

  caf::expected<std::vector<std::string>>
  children(const std::string& parent) override;

  caf::expected<std::vector<outbox_entry>> outbox() override;

  caf::expected<std::vector<outbox_entry>>
  outbox(std::vector<bad_record>& bad) override;

  caf::expected<std::vector<dead_letter>> dead_letters() override;
  caf::expected<std::vector<reply_delivery>> deliveries() override;

  caf::expected<std::vector<std::pair<std::string, uint64_t>>>
  inbox_counts() override;

  caf::expected<thread_dump> dump_thread(const std::string& thread) override;

  caf::expected<thread_dump> dump_thread(const std::string& thread,
                                         std::vector<bad_record>& bad) override;

  caf::expected<std::vector<quarantined_record>> quarantined() override;

  caf::expected<std::vector<provider_health_record>> health() override;
  caf::expected<std::vector<owner_notice>> notices() override;

  caf::expected<std::string> meta(const std::string& key) override;

  // -- staged writes ----------------------------------------------------------

  caf::expected<accept_result> stage_accept(const accept_request& req) override;

  void stage_commit(const turn_commit& commit) override;

  caf::expected<spawn_result> stage_spawn(const spawn_request& req) override;

  void stage_dead_letter(const dead_letter& letter, uint64_t tenure) override;
  void stage_delivery(const reply_delivery& rec, uint64_t tenure) override;

  void stage_session(const session_record& given, uint64_t tenure) override;
  void stage_stored_session(const session_record& rec,
                            uint64_t tenure) override;

  void stage_health(const provider_health_record& rec) override;
  void stage_notice(const owner_notice& rec) override;

  void stage_meta(const std::string& key, const std::string& value) override;

  caf::expected<quarantine_report>
  stage_quarantine(const std::string& thread) override;

  size_t staged() const override;

  caf::error flush() override;

  store_stats stats() const override;

private:
  // -- low-level access (kv_store.cpp) ----------------------------------------

  // Calls `fn(key, value)` for each key of `cf` in [lower, upper); an empty
  // bound is open.
  caf::error scan(size_t cf, std::string_view lower, std::string_view upper,
                  const scan_fn& fn);

  // Reads one value, or none.
  caf::expected<std::optional<std::string>> get(size_t cf,
                                                std::string_view key);

  caf::error ensure_readable();

  caf::error read_only_error() const;

  // -- reading records (kv_store_reads.cpp) ------------------------------

  // Appends the records of `cf` in [lower, upper) to `out`. A record that
  // cannot be read fails the call, or, given `bad`, is listed there and
  // skipped.
  template <class T>
  caf::error collect(size_t cf, const std::string& lower,
                     const std::string& upper, std::vector<T>& out,
                     std::vector<bad_record>* bad);

  // Returns every record of `cf` (see `collect`).
  template <class T>
  caf::expected<std::vector<T>>
  collect_all(size_t cf, std::vector<bad_record>* bad);

  caf::expected<thread_dump> dump(const std::string& thread,
                                  std::vector<bad_record>* bad);

  // Returns the seq of the last key of `thread` in `cf`, or 0.
  caf::expected<seq_t> last_seq(size_t cf, const std::string& thread);

  // -- quarantine (kv_store_quarantine.cpp) ------------------------------

  // Stages moving the records of `thread` in `cf` (decoded as `T`) that
  // cannot be read to quarantine.
  template <class T>
  caf::error quarantine_range(size_t cf, const std::string& thread,
                              quarantine_report& report);

  // The seq of `thread`'s oldest readable inbox entry, or the largest seq
  // if there is none.
  caf::expected<seq_t> first_unanswered_seq(const std::string& thread);

  // Stages moving `thread`'s whole context to quarantine once one record of
  // it cannot be read, but the readable steps of the oldest unanswered
  // message's turn (see `quarantine_report::steps_lost`).
  caf::error quarantine_context(const std::string& thread,
                                quarantine_report& report);

  // Stages moving one record to quarantine.
  void move_to_quarantine(size_t cf, const std::string& thread,
                          std::string_view key, std::string_view value);

  // -- the staged group (kv_store_writes.cpp) ----------------------------

  // The seq stored for a client id of a thread (staged, else on disk), or
  // none if the id is new.
  caf::expected<std::optional<seq_t>>
  known_client_id(const std::string& id_key);

  // Stages removing the outbox entry an accepted message came from, if it
  // came from another thread. Returns whether it staged anything.
  bool remove_delivered(const accept_request& req);

  // Stages a new message: inbox entry, user log entry, client id and, if
  // requested, the session record.
  caf::error stage_new_message(const accept_request& req, std::string id_key);

  // Checks a spawn against the ids and the stored sessions; returns the
  // refusal, or a `spawn_result` with `created == false` for a resent spawn,
  // or nothing if the spawn is new.
  caf::expected<std::optional<spawn_result>>
  check_spawn(const spawn_request& req);
  // `agent_limit` if a new child of `req` would pass its limits.
  caf::error check_agent_limits(const spawn_request& req,
                                const session_record& parent_rec);
  // How deep `rec` is in its tree (a root: 0), counted up to `max_depth`
  // + 1; staged sessions included.
  caf::expected<size_t> tree_depth(const session_record& rec, size_t max_depth);
  // The children of `parent`, stored or staged.
  caf::expected<size_t> count_children(const std::string& parent);

  // The session of `thread` as the next flush leaves it: staged, else on
  // disk, else none. Exact in its parent and whether it is CLOSED; a record
  // `stage_stored_session` rewrote may read in its stored state otherwise.
  caf::expected<std::optional<session_record>>
  find_session(const std::string& thread);

  // The tree is written by spawns alone: a session write from a thread's
  // conversation keeps the parent its stored record has (a conversation
  // that began before its thread was spawned as a child knows none). A
  // record naming a parent is right as it is: parents never change.
  caf::expected<session_record> with_stored_parent(session_record rec);

  // Stages writing `rec` as it is and keeps it for `find_session`.
  void put_session(session_record rec, uint64_t tenure);

  // Makes sure the engine can take staged writes; a `void` stage reports
  // failure through the group.
  bool ready_to_stage(const std::string& thread, uint64_t tenure = 0);

  // Starts an operation of `thread` by a writer of `tenure` in the batch
  // (see `kv_batch`).
  void begin_operation(const std::string& thread, uint64_t tenure = 0);

  void batch_put(size_t cf, std::string_view key, std::string_view value);

  void batch_delete(size_t cf, std::string_view key);

  // Stages one record under `key` (encoding never fails: see `encode`).
  // Returns whether it staged the record (false once the group failed).
  template <class T>
  bool stage_record(size_t cf, const std::string& thread,
                    const std::string& key, const T& rec, uint64_t tenure = 0);

  void count_staged();

  // Fails the current group at its flush (a `void` stage cannot report).
  void poison(std::string what);

  void clear_group();

  void drop_group();

  // -- state ------------------------------------------------------------------

  std::unique_ptr<kv_engine> engine_;
  // The staged group.
  std::unique_ptr<kv_batch> batch_;
  std::unordered_map<std::string, seq_t> pending_ids_;
  // The latest staged session record per thread, for `stage_spawn`.
  std::unordered_map<std::string, session_record> pending_sessions_;
  size_t staged_ = 0;
  caf::error poisoned_;
  store_stats stats_;
};

} // namespace keel::store_backend
