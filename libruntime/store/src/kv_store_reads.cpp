#include "kv_store.hpp"

#include <algorithm>
#include <limits>
#include <string_view>

#include "keel/json_codec.hpp"
#include "records.hpp"

namespace keel::store_backend {

// -- reading records ----------------------------------------------------------

template <class T>
caf::error kv_store::collect(size_t cf, const std::string& lower,
                             const std::string& upper, std::vector<T>& out,
                             std::vector<bad_record>* bad) {
  return scan(
    cf, lower, upper, [&](std::string_view key, std::string_view val) {
      T x;
      auto why = read_record(key, val, x);
      if (!why)
        out.emplace_back(std::move(x));
      else if (bad != nullptr)
        bad->push_back(bad_record{cf_names[cf], printable_key(cf, key), *why});
      else
        return scan_result{corrupt(cf, key, *why)};
      return scan_result{};
    });
}

template <class T>
caf::expected<std::vector<T>>
kv_store::collect_all(size_t cf, std::vector<bad_record>* bad) {
  if (auto err = ensure_readable())
    return err;
  std::vector<T> result;
  if (auto err = collect(cf, {}, {}, result, bad))
    return err;
  return result;
}

caf::expected<thread_dump> kv_store::dump(const std::string& thread,
                                          std::vector<bad_record>* bad) {
  if (auto err = ensure_readable())
    return err;
  thread_dump result;
  result.thread = thread;
  auto begin = range_begin(thread);
  auto end = range_end(thread);
  caf::error err;
  if ((err = collect(cf_log, begin, end, result.log, bad))
      || (err = collect(cf_inbox, begin, end, result.inbox, bad))
      || (err = collect(cf_context, begin, end, result.context, bad))
      || (err = collect(cf_outbox, begin, end, result.outbox, bad)))
    return err;
  err = scan(
    cf_client_ids, begin, end, [&](std::string_view key, std::string_view val) {
      auto seq = parse_decimal(std::string{val});
      if (seq)
        result.client_ids.emplace_back(std::string{key.data() + begin.size(),
                                                   key.size() - begin.size()},
                                       *seq);
      else if (bad != nullptr)
        bad->push_back(bad_record{cf_names[cf_client_ids],
                                  printable_key(cf_client_ids, key),
                                  "not a sequence number"});
      else
        return scan_result{
          corrupt(cf_client_ids, key, "not a sequence number")};
      return scan_result{};
    });
  if (err)
    return err;
  return result;
}

caf::expected<seq_t> kv_store::last_seq(size_t cf, const std::string& thread) {
  auto begin = range_begin(thread);
  auto last = engine_->last_key(cf, begin, range_end(thread));
  if (!last)
    return std::move(last.error());
  if (!*last)
    return seq_t{0};
  auto seq = key_seq(**last, begin.size());
  if (!seq)
    return corrupt(cf, **last, "key is not thread/seq");
  return *seq;
}

// -- reads --------------------------------------------------------------------

caf::expected<thread_snapshot>
kv_store::load_thread(const std::string& thread) {
  if (auto err = ensure_readable())
    return err;
  thread_snapshot result;
  auto rec = session(thread);
  if (rec) {
    result.exists = true;
    result.session = std::move(*rec);
  } else if (rec.error() != ec::not_found) {
    return std::move(rec.error());
  }
  auto begin = range_begin(thread);
  auto end = range_end(thread);
  if (auto err = collect(cf_inbox, begin, end, result.inbox, nullptr))
    return err;
  if (auto err = collect(cf_context, begin, end, result.context, nullptr))
    return err;
  if (auto err = collect(cf_outbox, begin, end, result.outbox, nullptr))
    return err;
  auto kids = children(thread);
  if (!kids)
    return std::move(kids.error());
  result.children = std::move(*kids);
  auto last_log = last_seq(cf_log, thread);
  if (!last_log)
    return std::move(last_log.error());
  seq_t last = *last_log;
  if (!result.inbox.empty())
    last = std::max(last, result.inbox.back().seq);
  result.next_seq = last + 1;
  return result;
}

caf::expected<history_page> kv_store::history(const std::string& thread,
                                              seq_t after, size_t limit,
                                              size_t max_bytes) {
  if (auto err = ensure_readable())
    return err;
  history_page result;
  result.thread = thread;
  if (after == std::numeric_limits<seq_t>::max())
    return result;
  size_t bytes = 0;
  auto err = scan(cf_log, seq_key(thread, after + 1), range_end(thread),
                  [&](std::string_view key, std::string_view val) {
                    if (result.entries.size() == limit) {
                      result.more = true;
                      return scan_result{scan_result::stop};
                    }
                    auto x = decode_at<log_entry>(cf_log, key, val);
                    if (!x)
                      return scan_result{std::move(x.error())};
                    // Measured as the page's frame carries it (with its
                    // comma). Never an empty page: the first entry goes in
                    // whole.
                    auto size = json_size(*x) + 1;
                    if (!result.entries.empty() && size > max_bytes - bytes) {
                      result.more = true;
                      return scan_result{scan_result::stop};
                    }
                    bytes += std::min(size, max_bytes);
                    result.entries.emplace_back(std::move(*x));
                    return scan_result{};
                  });
  if (err)
    return err;
  return result;
}

caf::expected<std::vector<std::string>> kv_store::threads_with_inbox() {
  auto counts = inbox_counts();
  if (!counts)
    return std::move(counts.error());
  std::vector<std::string> result;
  for (auto& entry : *counts)
    result.emplace_back(std::move(entry.first));
  return result;
}

caf::expected<session_record> kv_store::session(const std::string& thread) {
  if (auto err = ensure_readable())
    return err;
  auto value = get(cf_sessions, thread);
  if (!value)
    return std::move(value.error());
  if (!*value)
    return caf::make_error(ec::not_found, "no session for thread " + thread);
  return decode_at<session_record>(cf_sessions, thread, **value);
}

caf::expected<uint64_t> kv_store::count_sessions() {
  if (auto err = ensure_readable())
    return err;
  uint64_t result = 0;
  auto err = scan(cf_sessions, {}, {}, [&](std::string_view, std::string_view) {
    ++result;
    return scan_result{};
  });
  if (err)
    return err;
  return result;
}

caf::expected<std::vector<session_record>> kv_store::sessions() {
  return collect_all<session_record>(cf_sessions, nullptr);
}

caf::expected<std::vector<session_record>>
kv_store::sessions_after(const std::string& after, size_t limit) {
  if (auto err = ensure_readable())
    return err;
  std::vector<session_record> result;
  if (limit == 0)
    return result;
  // Session keys are plain thread ids: the first key after `after` is
  // `after` and a NUL byte, or above.
  auto lower = after.empty() ? std::string{} : after + '\0';
  auto err = scan(
    cf_sessions, lower, {}, [&](std::string_view key, std::string_view val) {
      session_record x;
      if (auto why = read_record(key, val, x))
        return scan_result{corrupt(cf_sessions, key, *why)};
      result.push_back(std::move(x));
      return scan_result{result.size() < limit ? scan_result::next
                                               : scan_result::stop};
    });
  if (err)
    return err;
  return result;
}

caf::expected<std::vector<session_record>>
kv_store::sessions(std::vector<bad_record>& bad) {
  return collect_all<session_record>(cf_sessions, &bad);
}

caf::expected<std::vector<tree_link>> kv_store::tree_links() {
  return collect_all<tree_link>(cf_tree, nullptr);
}

caf::expected<std::vector<tree_link>>
kv_store::tree_links(std::vector<bad_record>& bad) {
  return collect_all<tree_link>(cf_tree, &bad);
}

caf::expected<std::vector<std::string>>
kv_store::children(const std::string& parent) {
  if (auto err = ensure_readable())
    return err;
  std::vector<std::string> result;
  auto begin = range_begin(parent);
  // The keys say it all; `tree_links` reads the records.
  auto err = scan(cf_tree, begin, range_end(parent),
                  [&](std::string_view key, std::string_view) {
                    result.emplace_back(key.data() + begin.size(),
                                        key.size() - begin.size());
                    return scan_result{};
                  });
  if (err)
    return err;
  return result;
}

caf::expected<std::vector<outbox_entry>> kv_store::outbox() {
  return collect_all<outbox_entry>(cf_outbox, nullptr);
}

caf::expected<std::vector<outbox_entry>>
kv_store::outbox(std::vector<bad_record>& bad) {
  return collect_all<outbox_entry>(cf_outbox, &bad);
}

caf::expected<std::vector<dead_letter>> kv_store::dead_letters() {
  return collect_all<dead_letter>(cf_dead_letters, nullptr);
}

caf::expected<std::vector<reply_delivery>> kv_store::deliveries() {
  return collect_all<reply_delivery>(cf_deliveries, nullptr);
}

caf::expected<std::vector<std::pair<std::string, uint64_t>>>
kv_store::inbox_counts() {
  if (auto err = ensure_readable())
    return err;
  std::vector<std::pair<std::string, uint64_t>> result;
  auto err
    = scan(cf_inbox, {}, {}, [&](std::string_view key, std::string_view) {
        std::string_view str{key.data(), key.size()};
        auto slash = str.find('/');
        if (slash == std::string_view::npos || !key_seq(key, slash + 1))
          return scan_result{corrupt(cf_inbox, key, "key is not thread/seq")};
        auto thread = str.substr(0, slash);
        if (result.empty() || result.back().first != thread)
          result.emplace_back(std::string{thread}, 0);
        ++result.back().second;
        return scan_result{};
      });
  if (err)
    return err;
  return result;
}

caf::expected<thread_dump> kv_store::dump_thread(const std::string& thread) {
  return dump(thread, nullptr);
}

caf::expected<thread_dump> kv_store::dump_thread(const std::string& thread,
                                                 std::vector<bad_record>& bad) {
  return dump(thread, &bad);
}

caf::expected<std::vector<provider_health_record>> kv_store::health() {
  return collect_all<provider_health_record>(cf_health, nullptr);
}

caf::expected<std::vector<owner_notice>> kv_store::notices() {
  return collect_all<owner_notice>(cf_notices, nullptr);
}

caf::expected<std::string> kv_store::meta(const std::string& key) {
  if (auto err = ensure_readable())
    return err;
  auto value = get(cf_meta, key);
  if (!value)
    return std::move(value.error());
  if (!*value)
    return caf::make_error(ec::not_found, "no meta value " + key);
  return std::move(**value);
}

} // namespace keel::store_backend
