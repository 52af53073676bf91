#include "keel/tools/verify.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>

#include "keel/json_codec.hpp"

namespace keel {

namespace {

std::string seq_where(const std::string& thread, seq_t seq) {
  return thread + "/" + std::to_string(seq);
}

std::string link_where(const std::string& parent, const std::string& child) {
  return parent + " -> " + child;
}

// Collects violations; one per problem.
class checker {
public:
  explicit checker(verify_report& report) : report_(report) {
    // nop
  }

  void add(const char* rule, std::string where, std::string what) {
    report_.violations.push_back(
      violation{rule, std::move(where), std::move(what)});
  }

  void add_bad(const std::vector<bad_record>& bad) {
    for (auto& x : bad)
      add("bad_record", x.key,
          "corrupt record in " + x.column_family + ": " + x.what);
  }

  // A read that failed on a corrupt record becomes a violation at `where`;
  // any other failure (I/O) ends the check.
  template <class T>
  caf::error tolerate_corrupt(const caf::expected<T>& x, const char* where) {
    if (x || x.error() != ec::storage_corrupt)
      return x ? caf::none : x.error();
    add("bad_record", where, error_message(x.error()));
    return caf::none;
  }

private:
  verify_report& report_;
};

// The tree rules: links against sessions, sessions against links, cycles.
// Threads whose session record is corrupt were reported as bad records and
// count as present, so one problem is not reported twice.
void check_tree(checker& out,
                const std::map<std::string, session_record>& sessions,
                const std::set<std::string>& corrupt_sessions,
                const std::vector<tree_link>& links) {
  auto known = [&](const std::string& thread) {
    return sessions.count(thread) > 0 || corrupt_sessions.count(thread) > 0;
  };
  std::set<std::pair<std::string, std::string>> link_set;
  std::set<std::string> linked_children;
  for (auto& link : links) {
    link_set.emplace(link.parent, link.child);
    linked_children.insert(link.child);
    auto where = link_where(link.parent, link.child);
    if (!known(link.parent)) {
      out.add("dangling_link", where,
              "parent " + link.parent + " has no session");
    } else if (!known(link.child)) {
      out.add("dangling_link", where,
              "child " + link.child + " has no session");
    } else if (auto i = sessions.find(link.child);
               i != sessions.end() && i->second.parent != link.parent) {
      out.add("dangling_link", where,
              i->second.parent.empty()
                ? "child " + link.child + " is a root by its session"
                : "child " + link.child + "'s session names parent "
                    + i->second.parent);
    }
  }
  for (auto& [thread, rec] : sessions) {
    // A link from another parent was reported above as a dangling link.
    if (rec.parent.empty() || link_set.count({rec.parent, thread}) > 0
        || linked_children.count(thread) > 0)
      continue;
    out.add("orphan_child", link_where(rec.parent, thread),
            thread + " names parent " + rec.parent
              + " but the tree has no such link"
              + (known(rec.parent) ? ""
                                   : " and " + rec.parent + " has no session"));
  }
  // Each session has at most one parent: follow parents from every thread,
  // coloring threads in progress (1) and done (2).
  std::map<std::string, int> color;
  for (auto& start : sessions) {
    std::vector<std::string> path;
    auto cur = start.first;
    for (;;) {
      auto i = sessions.find(cur);
      if (i == sessions.end() || color[cur] == 2)
        break;
      if (color[cur] == 1) {
        // The cycle is the part of the path from `cur` on; name it once,
        // parent before child, starting with its smallest thread id.
        auto first = std::find(path.begin(), path.end(), cur);
        std::vector<std::string> cycle(first, path.end());
        std::reverse(cycle.begin(), cycle.end());
        std::rotate(cycle.begin(),
                    std::min_element(cycle.begin(), cycle.end()),
                    cycle.end());
        std::string where;
        for (auto& x : cycle)
          where += x + " -> ";
        where += cycle.front();
        out.add("tree_cycle", where,
                "the parents form a cycle: these threads have no root");
        break;
      }
      color[cur] = 1;
      path.push_back(cur);
      if (i->second.parent.empty())
        break;
      cur = i->second.parent;
    }
    for (auto& x : path)
      color[x] = 2;
  }
}

bool from_agent(const std::string& client_id) {
  return std::string_view{client_id}.substr(0, 6) == "agent:";
}

std::string describe(const log_entry& user) {
  return std::string{from_agent(user.client_id) ? "message from another "
                                                  "thread"
                                                : "message"}
         + " (client id " + user.client_id + ")";
}

// The message rules for one thread: every user message (a client's, or one
// from another thread with an `agent:` client id) is answered exactly once
// or pending, never both; the inbox and the client id index agree with the
// log.
void check_messages(checker& out, verify_report& report,
                    const thread_dump& dump) {
  const auto& thread = dump.thread;
  std::map<seq_t, const log_entry*> users;
  std::map<seq_t, std::vector<const log_entry*>> outcomes;
  for (auto& entry : dump.log) {
    if (entry.kind == log_kind::user)
      users.emplace(entry.seq, &entry);
    else // replies and errors both answer
      outcomes[entry.reply_to].push_back(&entry);
  }
  std::set<seq_t> pending;
  for (auto& entry : dump.inbox)
    pending.insert(entry.seq);
  report.user_messages += users.size();
  report.pending += dump.inbox.size();
  for (auto& [seq, user] : users) {
    auto where = seq_where(thread, seq);
    auto i = outcomes.find(seq);
    size_t answers = i == outcomes.end() ? 0 : i->second.size();
    bool in_inbox = pending.count(seq) > 0;
    if (answers > 0)
      ++report.answered;
    if (answers == 0 && !in_inbox)
      out.add("lost_message", where,
              describe(*user) + " is neither answered nor in the inbox");
    if (answers > 0 && in_inbox)
      out.add("answered_but_pending", where,
              describe(*user) + " is answered by seq "
                + std::to_string(i->second.front()->seq)
                + " and still in the inbox");
    if (answers > 1) {
      std::string seqs;
      for (auto* x : i->second)
        seqs += (seqs.empty() ? "" : ", ") + std::to_string(x->seq);
      out.add("duplicate_reply", where,
              describe(*user) + " is answered " + std::to_string(answers)
                + " times (seqs " + seqs + ")");
    }
    if (answers > 0)
      for (auto* x : i->second)
        if (x->client_id != user->client_id)
          out.add("client_id_mismatch", seq_where(thread, x->seq),
                  std::string{to_string(x->kind)} + " to seq "
                    + std::to_string(seq) + " carries client id "
                    + x->client_id + ", the message has "
                    + user->client_id);
  }
  for (auto& [reply_to, list] : outcomes)
    if (users.count(reply_to) == 0)
      for (auto* x : list)
        out.add("outcome_without_message", seq_where(thread, x->seq),
                std::string{to_string(x->kind)} + " answers seq "
                  + std::to_string(reply_to)
                  + ", which is not a user message");
  for (auto& entry : dump.inbox) {
    auto where = seq_where(thread, entry.seq);
    auto i = users.find(entry.seq);
    if (i == users.end())
      out.add("inbox_without_message", where,
              "inbox entry (client id " + entry.client_id
                + ") has no user message in the log");
    else if (i->second->client_id != entry.client_id)
      out.add("client_id_mismatch", where,
              "inbox entry has client id " + entry.client_id
                + ", the message has " + i->second->client_id);
  }
  std::map<std::string, seq_t> index{dump.client_ids.begin(),
                                     dump.client_ids.end()};
  std::set<std::string> user_ids;
  for (auto& [seq, user] : users) {
    user_ids.insert(user->client_id);
    auto i = index.find(user->client_id);
    if (i == index.end())
      out.add("client_id_mismatch", seq_where(thread, seq),
              "client id " + user->client_id + " is not in the index");
    else if (i->second != seq)
      out.add("client_id_mismatch", seq_where(thread, seq),
              "the index maps client id " + user->client_id + " to seq "
                + std::to_string(i->second));
  }
  // Index entries of a client id some message carries were checked above.
  for (auto& [client_id, seq] : index) {
    if (user_ids.count(client_id) > 0)
      continue;
    auto i = users.find(seq);
    if (i == users.end())
      out.add("client_id_mismatch", seq_where(thread, seq),
              "the index maps client id " + client_id + " to seq "
                + std::to_string(seq) + ", which is not a user message");
    else if (i->second->client_id != client_id)
      out.add("client_id_mismatch", seq_where(thread, seq),
              "the index maps client id " + client_id + " to seq "
                + std::to_string(seq) + ", whose client id is "
                + i->second->client_id);
  }
}

} // namespace

caf::expected<verify_report> verify_store(store& db) {
  verify_report report;
  checker out{report};
  std::vector<bad_record> bad;
  auto sessions = db.sessions(bad);
  if (!sessions)
    return std::move(sessions.error());
  auto links = db.tree_links(bad);
  if (!links)
    return std::move(links.error());
  auto outbox = db.outbox(bad);
  if (!outbox)
    return std::move(outbox.error());
  out.add_bad(bad);
  report.sessions = sessions->size();
  report.links = links->size();
  report.outbox = outbox->size();
  std::map<std::string, session_record> by_thread;
  std::set<std::string> corrupt_sessions;
  for (auto& x : bad)
    if (x.column_family == "sessions")
      corrupt_sessions.insert(x.key);
  for (auto& rec : *sessions) {
    if (rec.state == session_state::active)
      out.add("active_session", rec.thread,
              "the session is ACTIVE (recovery should have suspended it)");
    by_thread.emplace(rec.thread, rec);
  }
  check_tree(out, by_thread, corrupt_sessions, *links);
  // Every thread that has anything: sessions (readable or not), inboxes,
  // outboxes.
  std::set<std::string> threads{corrupt_sessions};
  for (auto& rec : *sessions)
    threads.insert(rec.thread);
  // A malformed inbox key fails this listing; the lenient dump of its
  // thread names it (reported below unless the dump did).
  auto inbox = db.inbox_counts();
  if (!inbox && inbox.error() != ec::storage_corrupt)
    return std::move(inbox.error());
  if (inbox)
    for (auto& entry : *inbox)
      threads.insert(entry.first);
  for (auto& entry : *outbox) {
    threads.insert(entry.from);
    auto where = seq_where(entry.from, entry.seq);
    if (by_thread.count(entry.to) == 0 && corrupt_sessions.count(entry.to) == 0)
      out.add("outbox_target_missing", where,
              "message to " + entry.to + ", which has no session");
    auto expected = agent_client_id(entry.from, entry.seq);
    if (entry.client_id != expected)
      out.add("client_id_mismatch", where,
              "outbox entry has client id " + entry.client_id
                + ", expected " + expected);
  }
  bool inbox_reported = false;
  for (auto& thread : threads) {
    std::vector<bad_record> thread_bad;
    auto dump = db.dump_thread(thread, thread_bad);
    if (!dump)
      return std::move(dump.error());
    out.add_bad(thread_bad);
    inbox_reported |= std::any_of(thread_bad.begin(), thread_bad.end(),
                                  [](const bad_record& x) {
                                    return x.column_family == "inbox";
                                  });
    check_messages(out, report, *dump);
  }
  if (!inbox_reported)
    static_cast<void>(out.tolerate_corrupt(inbox, "inbox"));
  // The remaining records only need to parse.
  if (auto err = out.tolerate_corrupt(db.health(), "health"))
    return err;
  if (auto err = out.tolerate_corrupt(db.dead_letters(), "dead_letters"))
    return err;
  if (auto text = db.meta("last_recovery")) {
    auto rec = decode<recovery_report>(*text);
    if (!rec)
      out.add("bad_record", "last_recovery",
              "corrupt record in meta: " + error_message(rec.error()));
  } else if (text.error() != ec::not_found) {
    return std::move(text.error());
  }
  return report;
}

} // namespace keel
