#include "admin_api.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <string_view>
#include <utility>

#include <caf/all.hpp>

#include "keel/json_codec.hpp"
#include "keel/lookup.hpp"
#include "keel/text.hpp"
#include "keel/units.hpp"

namespace keel::admin {

namespace {

// A dead letter as the API shows it: its record and its id.
nlohmann::json dead_letter_json(const dead_letter& x) {
  auto j = to_json(x);
  j["id"] = dead_letter_id(x);
  return j;
}

// Answers an operator's action on a dead letter with the letter as stored.
// The queue's own steps (read, deliver, write) are bounded by 30 s each.
template <class... Ts>
void act_on_dead_letter(self_ptr self, uint64_t request, Ts&&... xs) {
  request_component(self, names::dead_letters, std::chrono::seconds{100},
                    std::forward<Ts>(xs)...)
    .then(
      [self, request](dead_letter& x) {
        respond_json(self, request, 200, dead_letter_json(x));
      },
      [self, request](caf::error& err) {
        respond_refused(self, request, err);
      });
}

// GET /api/v1/dlq/FROM/SEQ: one dead letter.
void on_one_dead_letter(self_ptr self, uint64_t request,
                        const std::string& from, seq_t seq) {
  request_component(self, names::dead_letters, std::chrono::seconds{30},
                    atom::dead_letters_v)
    .then(
      [self, request, from, seq](std::vector<dead_letter>& letters) {
        for (auto& x : letters)
          if (x.entry.from == from && x.entry.seq == seq) {
            respond_json(self, request, 200, dead_letter_json(x));
            return;
          }
        respond_error(self, request, 404, to_string(ec::not_found),
                      "no dead letter " + from + "/" + std::to_string(seq));
      },
      [self, request](caf::error& err) {
        respond_refused(self, request, err);
      });
}

// The rows of list `xs` on the page `page` asks for, rendered by
// `render`, and the cursor of the next page (null on the last) under
// "next". `xs` is in cursor order: the rows after the cursor (`after(x)`
// true) are a suffix of it, and `cursor_of(x)` is the cursor of the page
// after row `x`.
template <class T, class After, class CursorOf, class Render>
nlohmann::json page_of(const std::vector<T>& xs, const page_request& page,
                       After after, CursorOf cursor_of, Render render) {
  auto first = std::find_if(xs.begin(), xs.end(), after);
  auto rows = std::min<size_t>(page.limit, xs.end() - first);
  auto list = nlohmann::json::array();
  for (auto i = first; i != first + rows; ++i)
    list.push_back(render(*i));
  std::optional<std::string> next;
  if (first + rows != xs.end())
    next = cursor_of(*(first + rows - 1));
  return {{"rows", std::move(list)}, {"next", next_cursor(next)}};
}

// Whether letter `x` comes after letter FROM/SEQ in key order (keys are
// `from/` and the big-endian seq, and a thread id has no '/').
bool letter_after(const dead_letter& x, const std::string& from, seq_t seq) {
  auto key = x.entry.from + '/';
  auto cursor = from + '/';
  return key > cursor || (key == cursor && x.entry.seq > seq);
}

// How many of `letters` there are of each status.
nlohmann::json counts_by_status(const std::vector<dead_letter>& letters) {
  auto counts = nlohmann::json::object();
  for (auto& x : letters)
    counts[to_string(x.status)] = counts.value(to_string(x.status), 0) + 1;
  return counts;
}

// A notice as the API shows it: its record and its severity.
nlohmann::json notice_json(const owner_notice& x) {
  auto j = to_json(x);
  j["severity"] = to_string(severity_of(x.kind));
  return j;
}

// The cursor after notice `x`: its time and key, the order of the list
// (newest first, then by key).
std::string notice_cursor(const owner_notice& x) {
  return std::to_string(x.at) + '/' + notice_key(x);
}

// Whether `x` comes after the notice of cursor AT/KEY in the list.
bool notice_after(const owner_notice& x, millis at, const std::string& key) {
  return x.at < at || (x.at == at && notice_key(x) > key);
}

// The time and key of a notice cursor, if it is one.
std::optional<std::pair<millis, std::string>>
parse_notice_cursor(const std::string& cursor) {
  auto slash = cursor.find('/');
  auto at = parse_digits(std::string_view{cursor}.substr(0, slash));
  if (slash == std::string::npos || !at)
    return std::nullopt;
  return std::make_pair(static_cast<millis>(*at), cursor.substr(slash + 1));
}

// Answers 400 for a cursor that no page of this list gave.
void respond_bad_cursor(self_ptr self, const call& c) {
  respond_error(self, c.request, 400, "bad_request",
                "after must be the 'next' of a page of " + c.path);
}

} // namespace

// GET /api/v1/dlq?limit=N&after=CURSOR: a page of the dead letters in key
// order, with counts by status of all of them, and the cursor of the next
// page (null on the last).
void on_dead_letters(self_ptr self, const call& c) {
  auto page = read_page(self, c);
  if (!page)
    return;
  auto cursor = parse_dead_letter_id(page->after);
  if (!page->after.empty() && !cursor) {
    respond_bad_cursor(self, c);
    return;
  }
  auto [from, seq] = cursor.value_or(std::make_pair(std::string{}, seq_t{0}));
  request_component(self, names::dead_letters, std::chrono::seconds{30},
                    atom::dead_letters_v)
    .then(
      [self, request = c.request, page = *page, from = from,
       seq = seq](std::vector<dead_letter>& letters) {
        auto rows = page_of(
          letters, page,
          [&](auto& x) {
            return page.after.empty() || letter_after(x, from, seq);
          },
          [](auto& x) { return dead_letter_id(x); }, dead_letter_json);
        respond_json(self, request, 200,
                     {{"dead_letters", std::move(rows["rows"])},
                      {"counts", counts_by_status(letters)},
                      {"next", rows["next"]}});
      },
      [self, request = c.request](caf::error& err) {
        respond_refused(self, request, err);
      });
}

// GET /api/v1/notifications?limit=N&after=CURSOR: a page of the latest
// notices to the owner per kind and subject, newest first, each with its
// severity and suppressed count, and the cursor of the next page.
void on_notifications(self_ptr self, const call& c) {
  auto page = read_page(self, c);
  if (!page)
    return;
  auto cursor = parse_notice_cursor(page->after);
  if (!page->after.empty() && !cursor) {
    respond_bad_cursor(self, c);
    return;
  }
  auto [at, key] = cursor.value_or(std::make_pair(millis{0}, std::string{}));
  request_component(self, names::notifier, std::chrono::seconds{30},
                    atom::notices_v)
    .then(
      [self, request = c.request, page = *page, at = at,
       key = key](std::vector<owner_notice>& notices) {
        auto rows = page_of(
          notices, page,
          [&](auto& x) {
            return page.after.empty() || notice_after(x, at, key);
          },
          notice_cursor, notice_json);
        respond_json(self, request, 200,
                     {{"notifications", std::move(rows["rows"])},
                      {"next", rows["next"]}});
      },
      [self, request = c.request](caf::error& err) {
        respond_refused(self, request, err);
      });
}

// GET /api/v1/dlq/FROM/SEQ, POST .../retry and POST .../drop
// {"reason": "..."}: one dead letter, retried now or dropped. `rest` is the
// path after /api/v1/dlq/.
void on_dead_letter(self_ptr self, const call& c, const std::string& rest) {
  auto last = rest.rfind('/');
  auto action = last == std::string::npos ? std::string{}
                                          : rest.substr(last + 1);
  if (action != "retry" && action != "drop")
    action.clear();
  auto id = action.empty() ? rest : rest.substr(0, last);
  auto parsed = parse_dead_letter_id(id);
  auto allowed = action.empty() ? "GET" : "POST";
  if (!parsed || c.method != allowed) {
    respond_no_endpoint(self, c,
                        "GET /api/v1/dlq/THREAD/SEQ or POST "
                        "/api/v1/dlq/THREAD/SEQ/retry|drop");
    return;
  }
  auto request = c.request;
  auto& body = c.body;
  auto& [from, seq] = *parsed;
  if (action == "retry") {
    act_on_dead_letter(self, request, atom::retry_v, from, seq);
  } else if (action == "drop") {
    auto j = read_body(self, request, body.empty() ? "{}" : body,
                       {{"reason", nlohmann::json::value_t::string, false}});
    if (!j.is_discarded())
      act_on_dead_letter(self, request, atom::drop_v, from, seq,
                         j.value("reason", std::string{"dropped by operator"}));
  } else {
    on_one_dead_letter(self, request, from, seq);
  }
}

} // namespace keel::admin
