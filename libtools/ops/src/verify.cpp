#include "keel/tools/verify.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>
#include <set>
#include <string_view>

#include "keel/pg_connection.hpp"
#include "keel/sharding.hpp"
#include "keel/stored_form.hpp"

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

  // Notes the records in quarantine; an inbox entry there (`thread/seq`)
  // accounts for its unanswered message.
  void quarantine(std::vector<quarantined_record> records) {
    for (auto& rec : records) {
      quarantined_threads_.insert(rec.thread);
      if (rec.column_family == "inbox")
        quarantined_inbox_.insert(rec.key);
    }
    report_.quarantined = std::move(records);
  }

  bool in_quarantine(const std::string& inbox_key) const {
    return quarantined_inbox_.count(inbox_key) > 0;
  }

  // Whether records of `thread` are in quarantine.
  bool quarantines(const std::string& thread) const {
    return quarantined_threads_.count(thread) > 0;
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
  std::set<std::string> quarantined_inbox_;
  std::set<std::string> quarantined_threads_;
};

// What the tree rules look at. Threads whose session record is corrupt
// were reported as bad records and count as present, so one problem is not
// reported twice.
struct tree_view {
  const std::map<std::string, session_record>& sessions;
  const std::set<std::string>& corrupt_sessions;

  bool known(const std::string& thread) const {
    return sessions.count(thread) > 0 || corrupt_sessions.count(thread) > 0;
  }
};

// Every link's ends have sessions, and the child's names the link's parent.
void check_links(checker& out, const tree_view& tree,
                 const std::vector<tree_link>& links) {
  for (auto& link : links) {
    auto where = link_where(link.parent, link.child);
    if (!tree.known(link.parent)) {
      out.add("dangling_link", where,
              "parent " + link.parent + " has no session");
    } else if (!tree.known(link.child)) {
      out.add("dangling_link", where,
              "child " + link.child + " has no session");
    } else if (auto i = tree.sessions.find(link.child);
               i != tree.sessions.end() && i->second.parent != link.parent) {
      out.add("dangling_link", where,
              i->second.parent.empty()
                ? "child " + link.child + " is a root by its session"
                : "child " + link.child + "'s session names parent "
                    + i->second.parent);
    }
  }
}

// Every session with a parent has its link.
void check_orphans(checker& out, const tree_view& tree,
                   const std::vector<tree_link>& links) {
  std::set<std::pair<std::string, std::string>> link_set;
  std::set<std::string> linked_children;
  for (auto& link : links) {
    link_set.emplace(link.parent, link.child);
    linked_children.insert(link.child);
  }
  for (auto& [thread, rec] : tree.sessions) {
    // A link from another parent was reported as a dangling link.
    if (rec.parent.empty() || link_set.count({rec.parent, thread}) > 0
        || linked_children.count(thread) > 0)
      continue;
    out.add(
      "orphan_child", link_where(rec.parent, thread),
      thread + " names parent " + rec.parent + " but the tree has no such link"
        + (tree.known(rec.parent) ? ""
                                  : " and " + rec.parent + " has no session"));
  }
}

// Names the cycle that `path` closes at `cur` once, parent before child,
// starting with its smallest thread id ("a -> b -> a").
std::string cycle_where(const std::vector<std::string>& path,
                        const std::string& cur) {
  auto first = std::find(path.begin(), path.end(), cur);
  std::vector<std::string> cycle(first, path.end());
  std::reverse(cycle.begin(), cycle.end());
  std::rotate(cycle.begin(), std::min_element(cycle.begin(), cycle.end()),
              cycle.end());
  std::string where;
  for (auto& x : cycle)
    where += x + " -> ";
  return where + cycle.front();
}

// No cycles: each session has at most one parent, so follow parents from
// every thread, coloring threads in progress (1) and done (2).
void check_cycles(checker& out,
                  const std::map<std::string, session_record>& sessions) {
  std::map<std::string, int> color;
  for (auto& start : sessions) {
    std::vector<std::string> path;
    auto cur = start.first;
    for (;;) {
      auto i = sessions.find(cur);
      if (i == sessions.end() || color[cur] == 2)
        break;
      if (color[cur] == 1) {
        out.add("tree_cycle", cycle_where(path, cur),
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

// The tree rules: links against sessions, sessions against links, cycles.
void check_tree(checker& out,
                const std::map<std::string, session_record>& sessions,
                const std::set<std::string>& corrupt_sessions,
                const std::vector<tree_link>& links) {
  tree_view tree{sessions, corrupt_sessions};
  check_links(out, tree, links);
  check_orphans(out, tree, links);
  check_cycles(out, sessions);
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

// One thread's log, indexed for the message rules.
struct message_index {
  const std::string& thread;
  /// User messages by seq.
  std::map<seq_t, const log_entry*> users;
  /// Replies and errors (both answer) by the seq they answer.
  std::map<seq_t, std::vector<const log_entry*>> outcomes;
  /// Seqs in the inbox.
  std::set<seq_t> pending;

  explicit message_index(const thread_dump& dump) : thread(dump.thread) {
    for (auto& entry : dump.log) {
      if (entry.kind == log_kind::user)
        users.emplace(entry.seq, &entry);
      else if (entry.kind != log_kind::tool) // Steps, not answers.
        outcomes[entry.reply_to].push_back(&entry);
    }
    for (auto& entry : dump.inbox)
      pending.insert(entry.seq);
  }
};

// Every user message is answered exactly once or pending, never both; its
// answers carry its client id.
void check_answers(checker& out, verify_report& report,
                   const message_index& idx) {
  for (auto& [seq, user] : idx.users) {
    auto where = seq_where(idx.thread, seq);
    auto i = idx.outcomes.find(seq);
    size_t answers = i == idx.outcomes.end() ? 0 : i->second.size();
    bool in_inbox = idx.pending.count(seq) > 0;
    if (answers > 0)
      ++report.answered;
    if (answers == 0 && !in_inbox && out.in_quarantine(where)) {
      ++report.quarantined_messages;
      continue;
    }
    if (answers == 0 && !in_inbox)
      out.add("lost_message", where,
              describe(*user) + " is neither answered nor in the inbox");
    if (answers == 0)
      continue;
    if (in_inbox)
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
    for (auto* x : i->second)
      if (x->client_id != user->client_id)
        out.add("client_id_mismatch", seq_where(idx.thread, x->seq),
                std::string{to_string(x->kind)} + " to seq "
                  + std::to_string(seq) + " carries client id " + x->client_id
                  + ", the message has " + user->client_id);
  }
}

// Every reply or error answers a user message of its thread.
void check_outcomes(checker& out, const message_index& idx) {
  for (auto& [reply_to, list] : idx.outcomes)
    if (idx.users.count(reply_to) == 0)
      for (auto* x : list)
        out.add("outcome_without_message", seq_where(idx.thread, x->seq),
                std::string{to_string(x->kind)} + " answers seq "
                  + std::to_string(reply_to) + ", which is not a user message");
}

// Every inbox entry has its user message, with the same client id.
void check_inbox(checker& out, const message_index& idx,
                 const thread_dump& dump) {
  for (auto& entry : dump.inbox) {
    auto where = seq_where(idx.thread, entry.seq);
    auto i = idx.users.find(entry.seq);
    if (i == idx.users.end())
      out.add("inbox_without_message", where,
              "inbox entry (client id " + entry.client_id
                + ") has no user message in the log");
    else if (i->second->client_id != entry.client_id)
      out.add("client_id_mismatch", where,
              "inbox entry has client id " + entry.client_id
                + ", the message has " + i->second->client_id);
  }
}

// The client id index maps every user message's client id to its seq, and
// nothing else.
void check_client_ids(checker& out, const message_index& idx,
                      const thread_dump& dump) {
  std::map<std::string, seq_t> index{dump.client_ids.begin(),
                                     dump.client_ids.end()};
  std::set<std::string> user_ids;
  for (auto& [seq, user] : idx.users) {
    user_ids.insert(user->client_id);
    auto i = index.find(user->client_id);
    if (i == index.end())
      out.add("client_id_mismatch", seq_where(idx.thread, seq),
              "client id " + user->client_id + " is not in the index");
    else if (i->second != seq)
      out.add("client_id_mismatch", seq_where(idx.thread, seq),
              "the index maps client id " + user->client_id + " to seq "
                + std::to_string(i->second));
  }
  // Index entries of a client id some message carries were checked above.
  for (auto& [client_id, seq] : index) {
    if (user_ids.count(client_id) > 0)
      continue;
    auto i = idx.users.find(seq);
    auto mapped = "the index maps client id " + client_id + " to seq "
                  + std::to_string(seq);
    if (i == idx.users.end())
      out.add("client_id_mismatch", seq_where(idx.thread, seq),
              mapped + ", which is not a user message");
    else if (i->second->client_id != client_id)
      out.add("client_id_mismatch", seq_where(idx.thread, seq),
              mapped + ", whose client id is " + i->second->client_id);
  }
}

// The message rules for one thread: every user message (a client's, or one
// from another thread with an `agent:` client id) is answered exactly once
// or pending, never both; the inbox and the client id index agree with the
// log.
void check_messages(checker& out, verify_report& report,
                    const thread_dump& dump) {
  message_index idx{dump};
  report.user_messages += idx.users.size();
  report.pending += dump.inbox.size();
  check_answers(out, report, idx);
  check_outcomes(out, idx);
  check_inbox(out, idx, dump);
  check_client_ids(out, idx, dump);
}

// The session's token totals are the sum of its messages' usage: every
// commit that counts a model call writes both. A thread with records in
// quarantine is left out (their usage went with them).
void check_usage(checker& out, const thread_dump& dump,
                 const std::map<std::string, session_record>& sessions,
                 bool quarantined) {
  auto i = sessions.find(dump.thread);
  if (i == sessions.end() || quarantined)
    return;
  usage_count sum;
  for (auto& entry : dump.log)
    if (entry.kind == log_kind::user)
      sum += entry.usage;
  auto& total = i->second.usage;
  if (sum == total)
    return;
  auto text = [](const usage_count& x) {
    return std::to_string(x.input_tokens) + " in, "
           + std::to_string(x.output_tokens) + " out, "
           + std::to_string(x.model_calls) + " calls";
  };
  out.add("usage_total", dump.thread,
          "the session counts " + text(total) + ", its messages " + text(sum));
}

// Every outbox entry targets a thread with a session and carries the
// client id `agent_client_id(from, seq)`.
void check_outbox(checker& out, const std::vector<outbox_entry>& outbox,
                  const tree_view& tree) {
  for (auto& entry : outbox) {
    auto where = seq_where(entry.from, entry.seq);
    if (!tree.known(entry.to))
      out.add("outbox_target_missing", where,
              "message to " + entry.to + ", which has no session");
    auto expected = agent_client_id(entry.from, entry.seq);
    if (entry.client_id != expected)
      out.add("client_id_mismatch", where,
              "outbox entry has client id " + entry.client_id + ", expected "
                + expected);
  }
}

// The records the other rules do not look at only need to parse.
caf::error check_other_records(checker& out, store& db) {
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
  return caf::none;
}

// The whole-store records: sessions, tree links and outboxes, read leniently
// (corrupt records become bad_record violations).
struct store_records {
  std::vector<session_record> sessions;
  std::vector<tree_link> links;
  std::vector<outbox_entry> outbox;
  /// Sessions by thread.
  std::map<std::string, session_record> by_thread;
  /// Threads whose session record is corrupt.
  std::set<std::string> corrupt_sessions;
};

caf::expected<store_records> read_records(checker& out, store& db) {
  store_records x;
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
  x.sessions = std::move(*sessions);
  x.links = std::move(*links);
  x.outbox = std::move(*outbox);
  for (auto& b : bad)
    if (b.column_family == "sessions")
      x.corrupt_sessions.insert(b.key);
  return x;
}

// Checks the message rules on every thread in `threads`; fails only when a
// thread cannot be read at all. Returns whether a dump reported a corrupt
// inbox record.
caf::expected<bool>
check_threads(checker& out, verify_report& report, store& db,
              const std::set<std::string>& threads,
              const std::map<std::string, session_record>& sessions) {
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
    check_usage(out, *dump, sessions,
                !thread_bad.empty() || out.quarantines(thread));
  }
  return inbox_reported;
}

// -- the epoch audit
// -----------------------------------------------------------

// Rows the audit fetches at a time from a family's cursor.
constexpr int audit_page_rows = 5000;

// Microseconds since 1970 as `YYYY-MM-DD HH:MM:SS.uuuuuu UTC`.
std::string audit_time(int64_t micros) {
  auto secs = static_cast<std::time_t>(micros / 1000000);
  std::tm utc{};
  gmtime_r(&secs, &utc);
  char text[128];
  std::snprintf(text, sizeof(text), "%04d-%02d-%02d %02d:%02d:%02d.%06lld UTC",
                utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour,
                utc.tm_min, utc.tm_sec,
                static_cast<long long>(micros % 1000000));
  return text;
}

// The bytes of a `bytea` in text format (`\x` and hex digits).
std::string audit_bytes(std::string_view hex) {
  auto digit = [](char c) {
    return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
  };
  std::string bytes;
  for (size_t i = 2; i + 1 < hex.size(); i += 2)
    bytes += static_cast<char>(digit(hex[i]) * 16 + digit(hex[i + 1]));
  return bytes;
}

// `family/key` as the audit names a row: a sequence number (8 bytes after
// the thread in the per-message families) in decimal, other bytes outside
// printable ASCII as \xNN.
std::string audit_where(const std::string& family, std::string_view key) {
  static const std::set<std::string> seq_families{"inbox", "context", "log",
                                                  "outbox", "dead_letters"};
  auto slash = key.find('/');
  if (seq_families.count(family) > 0 && slash != std::string_view::npos
      && key.size() == slash + 9) {
    uint64_t seq = 0;
    for (auto c : key.substr(slash + 1))
      seq = (seq << 8) | static_cast<unsigned char>(c);
    return family + "/" + std::string{key.substr(0, slash + 1)}
           + std::to_string(seq);
  }
  std::string where = family + "/";
  for (auto c : key) {
    auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      where += c;
      continue;
    }
    char hex[5];
    std::snprintf(hex, sizeof(hex), "\\x%02x", static_cast<unsigned>(u));
    where += hex;
  }
  return where;
}

// One epoch of a shard in keel.shard_history, with the epoch after it.
struct audit_epoch {
  std::string owner;
  std::optional<uint64_t> next;
  std::string next_owner;
  int64_t next_began = 0;
};

// A stamped row as the audit reads it.
struct audit_row {
  std::string where;
  shard_id shard = 0;
  std::string writer;
  std::optional<uint64_t> epoch;
  int64_t written_at = 0;
};

// The audit over one read-only snapshot of the database.
class epoch_auditor {
public:
  epoch_auditor(pg::connection& conn, checker& out, epoch_audit_summary& sum)
    : conn_(conn), out_(out), sum_(sum) {
    // nop
  }

  // Reads the cluster's shard count and history, then every family's
  // stamped rows; sets `sum_.skipped` for a database it does not audit.
  caf::error run() {
    if (auto err = read_cluster(); err || !sum_.skipped.empty())
      return err;
    if (auto err = read_history())
      return err;
    for (auto& family : column_families)
      if (auto err = audit_family(family))
        return err;
    sum_.shards = shards_seen_.size();
    sum_.epochs = epochs_seen_.size();
    return caf::none;
  }

private:
  caf::expected<pg::result> first_value(const std::string& sql) {
    auto res = conn_.exec(sql);
    if (res && res->rows() == 0)
      return caf::make_error(ec::storage_io, "no row from: " + sql);
    return res;
  }

  caf::error read_cluster() {
    auto tables = first_value("SELECT to_regclass('keel.cluster') IS NOT "
                              "NULL AND to_regclass('keel.shard_history') IS "
                              "NOT NULL");
    if (!tables)
      return std::move(tables.error());
    if (tables->value(0, 0) != "t") {
      sum_.skipped = "the database has no cluster tables (one node: no "
                     "write is fenced)";
      return caf::none;
    }
    auto layout = first_value("SELECT version FROM keel.layout");
    if (!layout)
      return std::move(layout.error());
    if (std::stoll(std::string{layout->value(0, 0)}) < 2) {
      sum_.skipped = "the database has layout "
                     + std::string{layout->value(0, 0)}
                     + ": its rows carry no writer (a node of this build "
                       "upgrades it to layout 2)";
      return caf::none;
    }
    auto shards = conn_.exec("SELECT shards FROM keel.cluster");
    if (!shards)
      return std::move(shards.error());
    if (shards->rows() == 0) {
      sum_.skipped = "the cluster was never prepared (keel.cluster is empty)";
      return caf::none;
    }
    sum_.cluster_shards = std::stoull(std::string{shards->value(0, 0)});
    return caf::none;
  }

  // Every epoch of every shard, with the owner and start of the next one:
  // a window over keel.shard_history.
  caf::error read_history() {
    auto res = conn_.exec(
      "SELECT shard, epoch, owner, lead(epoch) OVER w, lead(owner) OVER w, "
      "(extract(epoch FROM lead(at) OVER w) * 1000000)::bigint FROM "
      "keel.shard_history WINDOW w AS (PARTITION BY shard ORDER BY epoch)");
    if (!res)
      return std::move(res.error());
    for (size_t row = 0; row < res->rows(); ++row) {
      audit_epoch x{std::string{res->value(row, 2)}, std::nullopt, {}, 0};
      if (!res->is_null(row, 3)) {
        x.next = std::stoull(std::string{res->value(row, 3)});
        x.next_owner = std::string{res->value(row, 4)};
        x.next_began = std::stoll(std::string{res->value(row, 5)});
      }
      history_.emplace(
        std::make_pair(to_shard(res->value(row, 0)),
                       std::stoull(std::string{res->value(row, 1)})),
        std::move(x));
    }
    sum_.history = history_.size();
    return caf::none;
  }

  static shard_id to_shard(std::string_view text) {
    return static_cast<shard_id>(std::stoul(std::string{text}));
  }

  caf::error count_unstamped(const std::string& table) {
    auto res
      = first_value("SELECT count(*) FROM " + table + " WHERE writer IS NULL");
    if (!res)
      return std::move(res.error());
    sum_.unstamped += std::stoull(std::string{res->value(0, 0)});
    return caf::none;
  }

  // Reads the stamped rows of `family` through a cursor, a page at a
  // time, and checks each.
  caf::error audit_family(const std::string& family) {
    auto table = "keel." + family;
    if (auto err = count_unstamped(table))
      return err;
    auto declared = conn_.exec(
      "DECLARE keel_audit NO SCROLL CURSOR FOR SELECT key, writer, "
      "writer_epoch, (extract(epoch FROM written_at) * 1000000)::bigint FROM "
      + table + " WHERE writer IS NOT NULL");
    if (!declared)
      return std::move(declared.error());
    for (;;) {
      auto page = conn_.exec("FETCH " + std::to_string(audit_page_rows)
                             + " FROM keel_audit");
      if (!page)
        return std::move(page.error());
      for (size_t row = 0; row < page->rows(); ++row)
        check(read_row(family, *page, row));
      if (page->rows() < static_cast<size_t>(audit_page_rows))
        break;
    }
    auto closed = conn_.exec("CLOSE keel_audit");
    return closed ? caf::none : std::move(closed.error());
  }

  audit_row read_row(const std::string& family, const pg::result& page,
                     size_t row) {
    audit_row x;
    auto key = audit_bytes(page.value(row, 0));
    x.where = audit_where(family, key);
    x.shard = shard_of(std::string_view{key}.substr(0, key.find('/')),
                       static_cast<uint32_t>(sum_.cluster_shards));
    x.writer = std::string{page.value(row, 1)};
    if (!page.is_null(row, 2))
      x.epoch = std::stoull(std::string{page.value(row, 2)});
    if (!page.is_null(row, 3))
      x.written_at = std::stoll(std::string{page.value(row, 3)});
    return x;
  }

  // The row's epoch of its shard was its writer's, and had not ended when
  // the row was written.
  void check(const audit_row& x) {
    ++sum_.rows;
    auto shard = " of shard " + std::to_string(x.shard);
    if (!x.epoch) {
      out_.add("epoch_audit", x.where,
               "row written by " + x.writer
                 + " in a transaction not fenced on its shard "
                 + std::to_string(x.shard));
      return;
    }
    shards_seen_.insert(x.shard);
    epochs_seen_.emplace(x.shard, *x.epoch);
    auto epoch = std::to_string(*x.epoch);
    auto written = "row written by " + x.writer + " at epoch " + epoch + shard;
    auto i = history_.find({x.shard, *x.epoch});
    if (i == history_.end())
      out_.add("epoch_audit", x.where,
               written + ", but keel.shard_history has no such epoch");
    else if (i->second.owner != x.writer)
      out_.add("epoch_audit", x.where,
               written + ", but epoch " + epoch + " is " + i->second.owner
                 + "'s");
    else if (i->second.next && x.written_at >= i->second.next_began)
      out_.add("epoch_audit", x.where,
               written + ", but epoch " + std::to_string(*i->second.next) + " ("
                 + i->second.next_owner + ") began before it ("
                 + audit_time(i->second.next_began) + "; written "
                 + audit_time(x.written_at) + ")");
  }

  pg::connection& conn_;
  checker& out_;
  epoch_audit_summary& sum_;
  std::map<std::pair<shard_id, uint64_t>, audit_epoch> history_;
  std::set<shard_id> shards_seen_;
  std::set<std::pair<shard_id, uint64_t>> epochs_seen_;
};

caf::error audit_failed(const caf::error& err) {
  return caf::make_error(ec::storage_io,
                         "the epoch audit cannot read the database: "
                           + error_message(err));
}

} // namespace

caf::error audit_epochs(const std::string& pg_url, verify_report& report) {
  auto conn = pg::connection::open(pg_url);
  if (!conn)
    return audit_failed(conn.error());
  // One snapshot: the history and the rows as of one moment.
  auto begun = conn->exec("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY");
  if (!begun)
    return audit_failed(begun.error());
  epoch_audit_summary sum;
  checker out{report};
  auto err = epoch_auditor{*conn, out, sum}.run();
  static_cast<void>(conn->exec("ROLLBACK"));
  if (err)
    return audit_failed(err);
  report.epoch_audit = std::move(sum);
  return caf::none;
}

std::string render_epoch_audit(const epoch_audit_summary& x) {
  if (!x.skipped.empty())
    return "epoch audit skipped: " + x.skipped + "\n";
  auto count = [](uint64_t n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  return "epoch audit: " + count(x.rows, "row", "rows") + " with a writer ("
         + count(x.shards, "shard", "shards") + ", "
         + count(x.epochs, "epoch", "epochs") + ") checked against "
         + count(x.history, "epoch", "epochs") + " of "
         + count(x.cluster_shards, "shard", "shards")
         + " in keel.shard_history; " + count(x.unstamped, "row", "rows")
         + " without a writer\n";
}

caf::expected<verify_report> verify_store(store& db) {
  verify_report report;
  checker out{report};
  auto quarantined = db.quarantined();
  if (!quarantined)
    return std::move(quarantined.error());
  out.quarantine(std::move(*quarantined));
  auto records = read_records(out, db);
  if (!records)
    return std::move(records.error());
  auto& x = *records;
  report.sessions = x.sessions.size();
  report.links = x.links.size();
  report.outbox = x.outbox.size();
  for (auto& rec : x.sessions) {
    if (rec.state == session_state::active)
      out.add("active_session", rec.thread,
              "the session is ACTIVE (recovery should have suspended it)");
    x.by_thread.emplace(rec.thread, rec);
  }
  check_tree(out, x.by_thread, x.corrupt_sessions, x.links);
  // Every thread that has anything: sessions (readable or not), inboxes,
  // outboxes.
  std::set<std::string> threads{x.corrupt_sessions};
  for (auto& rec : x.sessions)
    threads.insert(rec.thread);
  // A malformed inbox key fails this listing; the lenient dump of its
  // thread names it (reported below unless the dump did).
  auto inbox = db.inbox_counts();
  if (!inbox && inbox.error() != ec::storage_corrupt)
    return std::move(inbox.error());
  if (inbox)
    for (auto& entry : *inbox)
      threads.insert(entry.first);
  for (auto& entry : x.outbox)
    threads.insert(entry.from);
  check_outbox(out, x.outbox, tree_view{x.by_thread, x.corrupt_sessions});
  auto inbox_reported = check_threads(out, report, db, threads, x.by_thread);
  if (!inbox_reported)
    return std::move(inbox_reported.error());
  if (!*inbox_reported)
    static_cast<void>(out.tolerate_corrupt(inbox, "inbox"));
  if (auto err = check_other_records(out, db))
    return err;
  return report;
}

} // namespace keel
