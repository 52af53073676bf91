#include "kv_store.hpp"

#include <exception>
#include <set>

#include "keel/stored_form.hpp"
#include "keel/text.hpp"

namespace keel::store_backend {

// -- the staged group ---------------------------------------------------------

caf::expected<std::optional<session_record>>
kv_store::find_session(const std::string& thread) {
  if (auto i = pending_sessions_.find(thread); i != pending_sessions_.end())
    return std::optional<session_record>{i->second};
  auto rec = session(thread);
  if (rec)
    return std::optional<session_record>{std::move(*rec)};
  if (rec.error() == ec::not_found)
    return std::optional<session_record>{};
  return std::move(rec.error());
}

caf::expected<session_record> kv_store::with_stored_parent(session_record rec) {
  if (!rec.parent.empty())
    return rec;
  auto existing = find_session(rec.thread);
  if (!existing)
    return std::move(existing.error());
  if (*existing && !(*existing)->parent.empty())
    rec.parent = (*existing)->parent;
  return rec;
}

bool kv_store::ready_to_stage(const std::string& thread, uint64_t tenure) {
  if (engine_->read_only()) {
    poison(error_message(read_only_error()));
    return false;
  }
  if (auto err = ensure_readable()) {
    poison(error_message(err));
    return false;
  }
  begin_operation(thread, tenure);
  return true;
}

void kv_store::begin_operation(const std::string& thread, uint64_t tenure) {
  batch_->begin_operation(thread, tenure);
}

void kv_store::batch_put(size_t cf, std::string_view key,
                         std::string_view value) {
  if (!batch_->put(cf, key, value))
    poison(std::string{"cannot stage a write to "} + cf_names[cf]);
}

void kv_store::batch_delete(size_t cf, std::string_view key) {
  if (!batch_->erase(cf, key))
    poison(std::string{"cannot stage a removal from "} + cf_names[cf]);
}

template <class T>
bool kv_store::stage_record(size_t cf, const std::string& thread,
                            const std::string& key, const T& rec,
                            uint64_t tenure) {
  if (!ready_to_stage(thread, tenure))
    return false;
  batch_put(cf, key, encode(rec));
  count_staged();
  return true;
}

void kv_store::count_staged() {
  ++staged_;
  ++stats_.staged_operations;
}

void kv_store::poison(std::string what) {
  if (!poisoned_)
    poisoned_ = caf::make_error(ec::storage_io, std::move(what));
}

void kv_store::clear_group() {
  batch_->clear();
  pending_ids_.clear();
  pending_sessions_.clear();
  staged_ = 0;
  poisoned_ = caf::none;
}

void kv_store::drop_group() {
  clear_group();
  ++stats_.failed_flushes;
}

// -- accepting a message ------------------------------------------------------

caf::expected<accept_result> kv_store::stage_accept(const accept_request& req) {
  if (engine_->read_only())
    return read_only_error();
  auto id_key = client_id_key(req.thread, req.entry.client_id);
  auto known = known_client_id(id_key);
  if (!known)
    return std::move(known.error());
  begin_operation(req.thread, req.tenure);
  if (*known) {
    // A duplicate is in the target already: the outbox entry it came from
    // goes all the same.
    if (remove_delivered(req))
      count_staged();
    return accept_result{**known, true};
  }
  if (auto err = stage_new_message(req, std::move(id_key)))
    return err;
  return accept_result{req.entry.seq, false};
}

caf::expected<std::optional<seq_t>>
kv_store::known_client_id(const std::string& id_key) {
  // The staged group first: a resend may arrive before its first copy is
  // flushed.
  if (auto i = pending_ids_.find(id_key); i != pending_ids_.end())
    return std::optional<seq_t>{i->second};
  if (auto err = ensure_readable())
    return err;
  auto value = get(cf_client_ids, id_key);
  if (!value)
    return std::move(value.error());
  if (!*value)
    return std::optional<seq_t>{};
  auto seq = parse_decimal(**value);
  if (!seq)
    return corrupt(cf_client_ids, id_key, "not a sequence number");
  return std::optional<seq_t>{*seq};
}

bool kv_store::remove_delivered(const accept_request& req) {
  // A message from another thread leaves the sender's outbox in the batch
  // that puts it into the target's inbox.
  if (req.outbox_from.empty())
    return false;
  batch_delete(cf_outbox, seq_key(req.outbox_from, req.outbox_seq));
  return true;
}

caf::error kv_store::stage_new_message(const accept_request& req,
                                       std::string id_key) {
  const auto& entry = req.entry;
  std::optional<session_record> session;
  if (req.create_session) {
    auto rec = with_stored_parent(req.session);
    if (!rec)
      return std::move(rec.error());
    session = std::move(*rec);
  }
  auto key = seq_key(req.thread, entry.seq);
  batch_put(cf_inbox, key, encode(entry));
  batch_put(cf_log, key, encode(message_log_entry(entry)));
  batch_put(cf_client_ids, id_key, std::to_string(entry.seq));
  if (session) {
    batch_put(cf_sessions, req.thread, encode(*session));
    pending_sessions_[req.thread] = std::move(*session);
  }
  remove_delivered(req);
  pending_ids_.emplace(std::move(id_key), entry.seq);
  count_staged();
  return caf::none;
}

// -- other staged writes ------------------------------------------------------

void kv_store::stage_commit(const turn_commit& commit) {
  if (!ready_to_stage(commit.thread, commit.tenure))
    return;
  // Encode everything first so that a failure stages nothing.
  using kv_list = std::vector<std::pair<std::string, std::string>>;
  kv_list context;
  kv_list log;
  kv_list sessions;
  kv_list outbox;
  kv_list deliveries;
  std::optional<session_record> session;
  if (commit.write_session) {
    auto rec = with_stored_parent(commit.session);
    if (!rec) {
      poison("cannot read the session of " + commit.thread + ": "
             + render(rec.error()));
      return;
    }
    session = std::move(*rec);
  }
  for (auto& x : commit.context)
    context.emplace_back(seq_key(commit.thread, x.seq), encode(x));
  for (auto& x : commit.log)
    log.emplace_back(seq_key(commit.thread, x.seq), encode(x));
  if (session)
    sessions.emplace_back(session->thread, encode(*session));
  for (auto& x : commit.outbox)
    outbox.emplace_back(seq_key(x.from, x.seq), encode(x));
  for (auto& x : commit.deliveries)
    deliveries.emplace_back(seq_key(x.thread, x.seq), encode(x));
  if (!commit.keeps_inbox)
    batch_delete(cf_inbox, seq_key(commit.thread, commit.inbox_seq));
  for (auto seq : commit.retire_context)
    batch_delete(cf_context, seq_key(commit.thread, seq));
  for (auto& [key, value] : context)
    batch_put(cf_context, key, value);
  for (auto& [key, value] : log)
    batch_put(cf_log, key, value);
  for (auto& [key, value] : sessions)
    batch_put(cf_sessions, key, value);
  for (auto& [key, value] : outbox)
    batch_put(cf_outbox, key, value);
  for (auto& [key, value] : deliveries)
    batch_put(cf_deliveries, key, value);
  if (session)
    pending_sessions_[session->thread] = std::move(*session);
  count_staged();
}

caf::expected<spawn_result> kv_store::stage_spawn(const spawn_request& req) {
  if (engine_->read_only())
    return read_only_error();
  if (auto err = ensure_readable())
    return err;
  auto resent = check_spawn(req);
  if (!resent)
    return std::move(resent.error());
  if (*resent)
    return **resent;
  begin_operation(req.link.parent);
  const auto& child = req.child.thread;
  const auto& parent = req.link.parent;
  batch_put(cf_sessions, child, encode(req.child));
  batch_put(cf_tree, tree_key(parent, child), encode(req.link));
  pending_sessions_[child] = req.child;
  count_staged();
  return spawn_result{parent, child, true};
}

caf::expected<std::optional<spawn_result>>
kv_store::check_spawn(const spawn_request& req) {
  const auto& child = req.child.thread;
  const auto& parent = req.link.parent;
  auto refuse = [&](ec code, const std::string& why) {
    return caf::make_error(code, "cannot spawn " + child + " under " + parent
                                   + ": " + why);
  };
  // The ids become key prefixes: a '/' in one would corrupt the ranges.
  if (!valid_thread_id(child) || !valid_thread_id(parent))
    return refuse(ec::conflict, "not a valid thread id");
  if (child == parent)
    return refuse(ec::conflict, "a thread cannot be its own child");
  if (req.link.child != child || req.child.parent != parent)
    return refuse(ec::conflict, "the link (" + req.link.parent + " -> "
                                  + req.link.child
                                  + ") does not match the child's session "
                                    "(parent "
                                  + req.child.parent + ")");
  auto parent_rec = find_session(parent);
  if (!parent_rec)
    return std::move(parent_rec.error());
  if (!*parent_rec)
    return refuse(ec::not_found, "the parent has no session");
  if ((*parent_rec)->state == session_state::closed)
    return refuse(ec::conflict, "the parent is CLOSED");
  auto existing = find_session(child);
  if (!existing)
    return std::move(existing.error());
  if (!*existing) {
    if (auto err = check_agent_limits(req, **parent_rec))
      return err;
    return std::optional<spawn_result>{};
  }
  const auto& other = (*existing)->parent;
  if (other == parent)
    return std::optional<spawn_result>{spawn_result{parent, child, false}};
  return refuse(ec::conflict, other.empty()
                                ? "the thread exists as a root"
                                : "the thread exists under " + other);
}

caf::error kv_store::check_agent_limits(const spawn_request& req,
                                        const session_record& parent_rec) {
  const auto& parent = req.link.parent;
  auto refuse = [&](const std::string& why) {
    return caf::make_error(ec::agent_limit, "cannot spawn " + req.child.thread
                                              + " under " + parent + ": "
                                              + why);
  };
  if (req.max_depth > 0) {
    auto depth = tree_depth(parent_rec, req.max_depth);
    if (!depth)
      return std::move(depth.error());
    if (*depth + 1 > req.max_depth)
      return refuse("the tree would be deeper than "
                    + std::to_string(req.max_depth)
                    + " levels (threads.agents.max_depth)");
  }
  if (req.max_children > 0) {
    auto count = count_children(parent);
    if (!count)
      return std::move(count.error());
    if (*count >= req.max_children)
      return refuse("it has " + std::to_string(*count)
                    + " child agents, the most a thread may have "
                      "(threads.agents.max_children)");
  }
  return caf::none;
}

caf::expected<size_t> kv_store::tree_depth(const session_record& rec,
                                           size_t max_depth) {
  size_t depth = 0;
  auto parent = rec.parent;
  // Walks up to one level past `max_depth`: enough to refuse.
  while (!parent.empty() && depth <= max_depth) {
    ++depth;
    auto up = find_session(parent);
    if (!up)
      return std::move(up.error());
    if (!*up)
      break;
    parent = (*up)->parent;
  }
  return depth;
}

caf::expected<size_t> kv_store::count_children(const std::string& parent) {
  auto stored = children(parent);
  if (!stored)
    return std::move(stored.error());
  std::set<std::string> all(stored->begin(), stored->end());
  for (auto& [thread, rec] : pending_sessions_)
    if (rec.parent == parent)
      all.insert(thread);
  return all.size();
}

void kv_store::stage_dead_letter(const dead_letter& letter, uint64_t tenure) {
  auto& entry = letter.entry;
  auto key = seq_key(entry.from, entry.seq);
  if (stage_record(cf_dead_letters, entry.from, key, letter, tenure))
    batch_delete(letter.channels.empty() ? cf_outbox : cf_deliveries, key);
}

void kv_store::stage_delivery(const reply_delivery& rec, uint64_t tenure) {
  auto key = seq_key(rec.thread, rec.seq);
  if (!rec.channels.empty()) {
    stage_record(cf_deliveries, rec.thread, key, rec, tenure);
    return;
  }
  if (!ready_to_stage(rec.thread, tenure))
    return;
  batch_delete(cf_deliveries, key);
  count_staged();
}

void kv_store::stage_session(const session_record& given, uint64_t tenure) {
  if (!ready_to_stage(given.thread, tenure))
    return;
  auto rec = with_stored_parent(given);
  if (!rec) {
    poison("cannot read the session of " + given.thread + ": "
           + render(rec.error()));
    return;
  }
  put_session(std::move(*rec), tenure);
}

// What the group's reads take from a session is its parent and whether it is
// CLOSED (`find_session`'s callers). A stored record rewritten otherwise
// changes neither, so it reads as well from disk until the flush; keeping
// it anyway cost a copy of each of the 90,000 sessions a recovery suspends.
void kv_store::stage_stored_session(const session_record& rec,
                                    uint64_t tenure) {
  if (rec.state == session_state::closed
      || pending_sessions_.count(rec.thread) > 0)
    put_session(rec, tenure);
  else
    stage_record(cf_sessions, rec.thread, rec.thread, rec, tenure);
}

void kv_store::put_session(session_record rec, uint64_t tenure) {
  if (stage_record(cf_sessions, rec.thread, rec.thread, rec, tenure))
    pending_sessions_[rec.thread] = std::move(rec);
}

void kv_store::stage_health(const provider_health_record& rec) {
  auto key = health_key(rec.pool, rec.provider);
  stage_record(cf_health, rec.pool, key, rec);
}

void kv_store::stage_notice(const owner_notice& rec) {
  stage_record(cf_notices, rec.subject, notice_key(rec), rec);
}

void kv_store::stage_meta(const std::string& key, const std::string& value) {
  if (!ready_to_stage(key))
    return;
  batch_put(cf_meta, key, value);
  count_staged();
}

size_t kv_store::staged() const {
  // A write that could not be staged failed the group: its owner waits for
  // the flush like any other, and the flush reports the failure.
  return staged_ + (poisoned_ ? 1 : 0);
}

caf::error kv_store::flush() {
  if (engine_->read_only()) {
    drop_group();
    return read_only_error();
  }
  if (staged_ == 0 && !poisoned_)
    return caf::none;
  if (poisoned_) {
    auto err = std::move(poisoned_);
    drop_group();
    return err;
  }
  if (auto err = engine_->write(*batch_)) {
    drop_group();
    return err;
  }
  ++stats_.flushes;
  clear_group();
  return caf::none;
}

store_stats kv_store::stats() const {
  auto result = stats_;
  result.reopens = engine_->reopens();
  return result;
}

} // namespace keel::store_backend
