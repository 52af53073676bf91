#include "kv_store.hpp"

#include <limits>
#include <string_view>

#include "records.hpp"

namespace keel::store_backend {

namespace {

// The column family named `name`, or `cf_count`.
size_t family_named(std::string_view name) {
  for (size_t cf = 0; cf < cf_count; ++cf)
    if (name == cf_names[cf])
      return cf;
  return cf_count;
}

} // namespace

void kv_store::move_to_quarantine(size_t cf, const std::string& thread,
                                  std::string_view key,
                                  std::string_view value) {
  batch_put(cf_quarantine, quarantine_key(thread, cf, key), value);
  batch_delete(cf, key);
}

template <class T>
caf::error kv_store::quarantine_range(size_t cf, const std::string& thread,
                                      quarantine_report& report) {
  return scan(cf, range_begin(thread), range_end(thread),
              [&](std::string_view key, std::string_view val) {
                T x;
                if (auto why = read_record(key, val, x)) {
                  report.unreadable.push_back(
                    bad_record{cf_names[cf], printable_key(cf, key), *why});
                  move_to_quarantine(cf, thread, key, val);
                }
                return scan_result{};
              });
}

caf::expected<seq_t> kv_store::first_unanswered_seq(const std::string& thread) {
  auto first = std::numeric_limits<seq_t>::max();
  auto err = scan(cf_inbox, range_begin(thread), range_end(thread),
                  [&](std::string_view key, std::string_view val) {
                    inbox_entry x;
                    if (read_record(key, val, x))
                      return scan_result{};
                    first = x.seq;
                    return scan_result{scan_result::stop};
                  });
  if (err)
    return err;
  return first;
}

caf::error kv_store::quarantine_context(const std::string& thread,
                                        quarantine_report& report) {
  auto turn_from = first_unanswered_seq(thread);
  if (!turn_from)
    return std::move(turn_from.error());
  // Readable records before the running turn, and the turn's own steps.
  std::vector<std::pair<std::string, std::string>> older;
  std::vector<std::pair<std::string, std::string>> steps;
  bool any_bad = false;
  auto err = scan(cf_context, range_begin(thread), range_end(thread),
                  [&](std::string_view key, std::string_view val) {
                    auto seq = key_seq(key, thread.size() + 1);
                    auto in_turn = seq && *seq >= *turn_from;
                    context_entry x;
                    if (auto why = read_record(key, val, x)) {
                      any_bad = true;
                      report.steps_lost = report.steps_lost || in_turn;
                      report.unreadable.push_back(
                        bad_record{cf_names[cf_context],
                                   printable_key(cf_context, key), *why});
                      move_to_quarantine(cf_context, thread, key, val);
                    } else {
                      (in_turn ? steps : older).emplace_back(key, val);
                    }
                    return scan_result{};
                  });
  if (err || !any_bad)
    return err;
  if (report.steps_lost)
    older.insert(older.end(), steps.begin(), steps.end());
  for (auto& [key, value] : older)
    move_to_quarantine(cf_context, thread, key, value);
  report.readable_moved += older.size();
  return caf::none;
}

caf::expected<quarantine_report>
kv_store::stage_quarantine(const std::string& thread) {
  if (engine_->read_only())
    return read_only_error();
  if (auto err = ensure_readable())
    return err;
  quarantine_report report;
  report.thread = thread;
  begin_operation(thread);
  auto value = get(cf_sessions, thread);
  if (!value)
    return std::move(value.error());
  if (*value) {
    session_record rec;
    if (auto why = read_record(thread, **value, rec)) {
      report.unreadable.push_back(
        bad_record{cf_names[cf_sessions], thread, *why});
      move_to_quarantine(cf_sessions, thread, thread, **value);
    }
  }
  caf::error err;
  if ((err = quarantine_range<inbox_entry>(cf_inbox, thread, report))
      || (err = quarantine_context(thread, report))
      || (err = quarantine_range<outbox_entry>(cf_outbox, thread, report))
      || (err = quarantine_range<tree_link>(cf_tree, thread, report)))
    return err;
  // Dropped with a failed flush like any staged write; the next load fails
  // again and quarantines again.
  count_staged();
  return report;
}

caf::expected<std::vector<quarantined_record>> kv_store::quarantined() {
  if (auto err = ensure_readable())
    return err;
  std::vector<quarantined_record> result;
  auto err = scan(
    cf_quarantine, {}, {}, [&](std::string_view key, std::string_view val) {
      std::string_view str{key.data(), key.size()};
      auto first = str.find('/');
      auto second = str.find('/', first + 1);
      if (first == std::string_view::npos || second == std::string_view::npos)
        return scan_result{};
      quarantined_record rec;
      rec.thread = std::string{str.substr(0, first)};
      rec.column_family
        = std::string{str.substr(first + 1, second - first - 1)};
      auto original = str.substr(second + 1);
      auto cf = family_named(rec.column_family);
      rec.key = cf < cf_count ? printable_key(cf, original)
                              : std::string{original};
      rec.bytes = val.size();
      result.push_back(std::move(rec));
      return scan_result{};
    });
  if (err)
    return err;
  return result;
}

} // namespace keel::store_backend
