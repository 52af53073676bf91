#include "keel/tools/chaos_oracle.hpp"

#include <algorithm>
#include <set>
#include <utility>

namespace keel::chaos {

namespace {

using json = nlohmann::json;
using seq_list = std::vector<uint64_t>;
using thread_messages = std::map<std::string, sent_message>;

bool is_outcome_kind(const std::string& kind) {
  return kind == "reply" || kind == "error";
}

bool contains(const seq_list& xs, uint64_t x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

// Reads the non-negative integer at `key` into `out`. True when it was read,
// or when it is missing and not `required`; a value of another type (or a
// negative one) is never accepted.
bool read_seq_field(const json& j, const char* key, bool required,
                    uint64_t& out) {
  auto i = j.find(key);
  if (i == j.end())
    return !required;
  if (i->is_number_unsigned()) {
    out = i->get<uint64_t>();
    return true;
  }
  if (!i->is_number_integer() || i->get<int64_t>() < 0)
    return false;
  out = static_cast<uint64_t>(i->get<int64_t>());
  return true;
}

// Reads the string at `key` into `out`; false when it is missing or not a
// string.
bool read_string_field(const json& j, const char* key, std::string& out) {
  auto i = j.find(key);
  if (i == j.end() || !i->is_string())
    return false;
  out = i->get<std::string>();
  return true;
}

sent_message* find_message(record& rec, const std::string& thread,
                           const std::string& id) {
  auto t = rec.threads().find(thread);
  if (t == rec.threads().end())
    return nullptr;
  auto m = t->second.find(id);
  return m == t->second.end() ? nullptr : &m->second;
}

// Notes an ack of `msg` at `seq`: the first ack sets `seq`; a later one at
// another seq is added to `conflicting_acks` unless it is there already.
void note_ack(sent_message& msg, uint64_t seq) {
  if (!msg.acked) {
    msg.acked = true;
    msg.seq = seq;
  } else if (seq != msg.seq && !contains(msg.conflicting_acks, seq)) {
    msg.conflicting_acks.push_back(seq);
  }
}

// Adds what `from` knows to `into` (another record's view of the same
// message), as if `into`'s record had received `from`'s frames after its
// own.
void absorb(sent_message& into, const sent_message& from) {
  if (from.acked)
    note_ack(into, from.seq);
  for (auto seq : from.conflicting_acks)
    note_ack(into, seq);
  if (into.refusal.empty())
    into.refusal = from.refusal;
  for (auto seq : from.outcomes_seen)
    if (!contains(into.outcomes_seen, seq))
      into.outcomes_seen.push_back(seq);
  into.outcomes_seen_as.insert(from.outcomes_seen_as.begin(),
                               from.outcomes_seen_as.end());
}

} // namespace

bool is_outcome(const history_entry& e) {
  return is_outcome_kind(e.kind);
}

bool from_json(const json& j, history_entry& out) {
  if (!j.is_object())
    return false;
  history_entry x;
  if (!read_seq_field(j, "seq", true, x.seq)
      || !read_string_field(j, "kind", x.kind)
      || !read_string_field(j, "client_id", x.client_id)
      || !read_seq_field(j, "reply_to", false, x.reply_to))
    return false;
  auto outcome = is_outcome_kind(x.kind);
  if (!outcome && x.kind != "user")
    return false;
  if (outcome && x.reply_to == 0)
    return false;
  out = std::move(x);
  return true;
}

void record::sent(const std::string& thread, const std::string& id) {
  auto& msg = threads_[thread][id];
  msg.thread = thread;
  msg.id = id;
}

void record::adopt(const std::string& thread, const std::string& id) {
  auto [i, added] = threads_[thread].try_emplace(id);
  if (!added)
    return;
  i->second.thread = thread;
  i->second.id = id;
  i->second.own = true;
}

bool record::acked(const std::string& thread, const std::string& id,
                   uint64_t seq) {
  auto msg = find_message(*this, thread, id);
  if (msg == nullptr)
    return false;
  note_ack(*msg, seq);
  return true;
}

void record::refused(const std::string& thread, const std::string& id,
                     const std::string& code) {
  auto msg = find_message(*this, thread, id);
  // An error frame without a code still refuses: the refusal is never empty.
  if (msg != nullptr && msg->refusal.empty())
    msg->refusal = code.empty() ? std::string{"(no code)"} : code;
}

void record::outcome(const std::string& thread, const std::string& id,
                     uint64_t seq) {
  if (auto msg = find_message(*this, thread, id))
    msg->outcomes_seen.push_back(seq);
}

void record::outcome(const std::string& thread, const std::string& id,
                     const history_entry& seen) {
  if (auto msg = find_message(*this, thread, id)) {
    msg->outcomes_seen.push_back(seen.seq);
    msg->outcomes_seen_as.emplace(seen.seq, seen);
  }
}

void record::merge(const record& other) {
  if (&other == this)
    return;
  for (auto& [thread, msgs] : other.threads_) {
    auto& mine = threads_[thread];
    for (auto& [id, msg] : msgs) {
      auto [i, added] = mine.emplace(id, msg);
      if (!added)
        absorb(i->second, msg);
    }
  }
}

uint64_t record::messages() const {
  uint64_t n = 0;
  for (auto& [thread, msgs] : threads_)
    n += msgs.size();
  return n;
}

uint64_t record::acknowledged() const {
  uint64_t n = 0;
  for (auto& [thread, msgs] : threads_)
    for (auto& [id, msg] : msgs)
      n += msg.acked ? 1 : 0;
  return n;
}

uint64_t record::unknown() const {
  uint64_t n = 0;
  for (auto& [thread, msgs] : threads_)
    for (auto& [id, msg] : msgs)
      n += !msg.acked && msg.refusal.empty() ? 1 : 0;
  return n;
}

// -- check --------------------------------------------------------------------

namespace {

// What one thread's history holds, indexed for the checks.
struct history_index {
  // Client id -> the seqs of the user entries carrying it, increasing.
  std::map<std::string, seq_list> stored;
  // Answered seq -> the seqs of the outcome entries answering it, increasing.
  std::map<uint64_t, seq_list> outcomes;
  // Seq -> its entry (the first one, should a seq appear twice).
  std::map<uint64_t, const history_entry*> at;
  // The highest seq in the history (0 for none).
  uint64_t last = 0;
};

// Indexes `entries`, which must outlive the result.
history_index index_history(const std::vector<history_entry>& entries) {
  history_index x;
  for (auto& e : entries) {
    x.at.emplace(e.seq, &e);
    x.last = std::max(x.last, e.seq);
    if (e.kind == "user")
      x.stored[e.client_id].push_back(e.seq);
    else if (is_outcome_kind(e.kind))
      x.outcomes[e.reply_to].push_back(e.seq);
  }
  for (auto& kv : x.stored)
    std::sort(kv.second.begin(), kv.second.end());
  for (auto& kv : x.outcomes)
    std::sort(kv.second.begin(), kv.second.end());
  return x;
}

// A recorded message as its thread's history holds it.
struct placement {
  // `thread/id`, as every violation names the message.
  std::string name;
  const sent_message* msg = nullptr;
  // The seqs of its user entries, increasing; empty when not stored.
  seq_list stored;
  // The seqs of the outcomes answering any of them, increasing.
  seq_list outcomes;
};

placement place(const std::string& thread, const std::string& id,
                const sent_message& msg, const history_index& h) {
  placement p{thread + "/" + id, &msg, {}, {}};
  if (auto i = h.stored.find(id); i != h.stored.end())
    p.stored = i->second;
  for (auto seq : p.stored)
    if (auto i = h.outcomes.find(seq); i != h.outcomes.end())
      p.outcomes.insert(p.outcomes.end(), i->second.begin(), i->second.end());
  std::sort(p.outcomes.begin(), p.outcomes.end());
  return p;
}

std::string str(uint64_t x) {
  return std::to_string(x);
}

// "5", "5 and 9", "5, 9 and 11".
std::string seq_words(const seq_list& xs) {
  std::string result;
  for (size_t k = 0; k < xs.size(); ++k) {
    if (k > 0)
      result += k + 1 == xs.size() ? " and " : ", ";
    result += str(xs[k]);
  }
  return result;
}

void add(std::vector<violation>& out, const char* rule, const std::string& what,
         bool beyond_history = false) {
  out.push_back(violation{rule, what, beyond_history});
}

// LOST and MISPLACED: an acknowledged message is stored, first at the seq its
// ack named, and every ack of it named that seq.
void check_ack(std::vector<violation>& out, const placement& p) {
  auto& m = *p.msg;
  if (!m.acked)
    return;
  auto acked = p.name + " was acknowledged at seq " + str(m.seq);
  if (p.stored.empty())
    add(out, "LOST", acked + " and is not in the history");
  else if (p.stored.front() != m.seq)
    add(out, "MISPLACED", acked + " and is stored at seq " + str(p.stored[0]));
  for (auto seq : m.conflicting_acks)
    add(out, "MISPLACED", acked + " and again at seq " + str(seq));
}

// DUPLICATE, STORED_REFUSED and UNANSWERED: a stored message is stored once,
// was not refused, and has exactly one outcome (a refused one that was
// never acknowledged need not have one: its storing is the violation).
void check_stored(std::vector<violation>& out, const placement& p) {
  if (p.stored.empty())
    return;
  auto& m = *p.msg;
  auto at = " at seq " + str(p.stored[0]);
  if (p.stored.size() > 1)
    add(out, "DUPLICATE",
        p.name + " is stored " + str(p.stored.size()) + " times, at seqs "
          + seq_words(p.stored));
  if (!m.refusal.empty())
    add(out, "STORED_REFUSED",
        p.name + " was refused (" + m.refusal + ") and is stored" + at);
  if (p.outcomes.size() > 1)
    add(out, "DUPLICATE",
        p.name + " stored" + at + " has " + str(p.outcomes.size())
          + " outcomes, at seqs " + seq_words(p.outcomes));
  else if (p.outcomes.empty() && (m.acked || m.refusal.empty()))
    add(out, "UNANSWERED", p.name + " is stored" + at + " and has no outcome",
        true);
}

// Why the entry at `seq` is not an outcome of `p`'s message; "" when it is.
std::string why_not_outcome(const placement& p, const history_index& h,
                            uint64_t seq) {
  if (contains(p.outcomes, seq))
    return {};
  auto where = "the entry at seq " + str(seq);
  auto i = h.at.find(seq);
  if (i == h.at.end())
    return "the history has no entry at seq " + str(seq);
  auto& e = *i->second;
  if (!is_outcome_kind(e.kind))
    return where + " is a " + e.kind + " entry of client id " + e.client_id;
  auto answers = where + " answers seq " + str(e.reply_to);
  if (p.stored.empty())
    return answers + " and the message is not stored";
  return answers + ", not seq " + str(p.stored[0]);
}

// An outcome entry in one line: `reply to seq 5 "answer to m1"`, `error to
// seq 5 [cancelled]`.
std::string outcome_words(const history_entry& e) {
  auto result = e.kind + " to seq " + str(e.reply_to);
  if (!e.code.empty())
    result += " [" + e.code + "]";
  if (e.kind == "reply")
    result += " \"" + e.text + "\"";
  return result;
}

// Why the outcome `stored` does not show what the frame `seen` showed (its
// kind, reply_to, code, and a reply's text); "" when it does.
std::string why_not_as_seen(const history_entry& seen,
                            const history_entry& stored) {
  if (seen.kind == stored.kind && seen.reply_to == stored.reply_to
      && seen.code == stored.code
      && (seen.kind != "reply" || seen.text == stored.text))
    return {};
  return "the history holds " + outcome_words(stored) + ", the frame showed "
         + outcome_words(seen);
}

// UNEXPECTED: every outcome seen live (each distinct seq once) is in the
// history, answering this message, and shows what its frame showed when
// that was recorded.
void check_seen(std::vector<violation>& out, const placement& p,
                const history_index& h) {
  std::set<uint64_t> done;
  for (auto seq : p.msg->outcomes_seen) {
    if (!done.insert(seq).second)
      continue;
    auto why = why_not_outcome(p, h, seq);
    auto seen = p.msg->outcomes_seen_as.find(seq);
    if (why.empty() && seen != p.msg->outcomes_seen_as.end())
      why = why_not_as_seen(seen->second, *h.at.at(seq));
    if (!why.empty())
      add(out, "UNEXPECTED",
          p.name + " was answered live at seq " + str(seq) + ", but " + why,
          seq > h.last);
  }
}

// ORDER: the thread's answered messages, in the order of their seqs, have
// increasing (first) outcome seqs. Reports the first inversion only: with an
// increasing prefix, it is between neighbours.
void check_order(std::vector<violation>& out,
                 const std::vector<placement>& placed) {
  std::vector<const placement*> answered;
  for (auto& p : placed)
    if (!p.stored.empty() && !p.outcomes.empty() && !p.msg->own)
      answered.push_back(&p);
  std::sort(answered.begin(), answered.end(),
            [](auto x, auto y) { return x->stored[0] < y->stored[0]; });
  for (size_t k = 1; k < answered.size(); ++k) {
    auto& a = *answered[k - 1];
    auto& b = *answered[k];
    if (b.outcomes[0] < a.outcomes[0]) {
      add(out, "ORDER",
          b.name + " (seq " + str(b.stored[0]) + ") is answered at seq "
            + str(b.outcomes[0]) + ", before " + a.name + " (seq "
            + str(a.stored[0]) + "), answered at seq " + str(a.outcomes[0]));
      return;
    }
  }
}

void check_thread(std::vector<violation>& out, const std::string& thread,
                  const thread_messages& msgs, const history_index& h) {
  std::vector<placement> placed;
  placed.reserve(msgs.size());
  for (auto& [id, msg] : msgs) {
    placed.push_back(place(thread, id, msg, h));
    check_ack(out, placed.back());
    check_stored(out, placed.back());
    check_seen(out, placed.back(), h);
  }
  check_order(out, placed);
}

} // namespace

std::vector<violation>
check(const record& rec,
      const std::map<std::string, std::vector<history_entry>>& histories) {
  static const std::vector<history_entry> no_entries;
  std::vector<violation> out;
  for (auto& [thread, msgs] : rec.threads()) {
    auto i = histories.find(thread);
    auto& entries = i == histories.end() ? no_entries : i->second;
    check_thread(out, thread, msgs, index_history(entries));
  }
  return out;
}

} // namespace keel::chaos
