#include "admin_api.hpp"

#include <chrono>
#include <optional>
#include <utility>

#include <caf/all.hpp>

#include "keel/agent_tree.hpp"
#include "keel/json_codec.hpp"
#include "keel/lookup.hpp"
#include "keel/text.hpp"

namespace keel::admin {

namespace {

// The thread of `METHOD /api/v1/agents/REST` and whether it asks to pause
// (POST THREAD/pause) or to resume (POST THREAD/resume); none otherwise.
std::optional<std::pair<std::string, bool>>
parse_agent_action(const std::string& method, const std::string& rest) {
  auto last = rest.rfind('/');
  if (method != "POST" || last == std::string::npos)
    return std::nullopt;
  auto action = rest.substr(last + 1);
  auto thread = rest.substr(0, last);
  if ((action != "pause" && action != "resume") || !valid_thread_id(thread))
    return std::nullopt;
  return std::make_pair(thread, action == "pause");
}

} // namespace

// GET /api/v1/agents?limit=N&after=CURSOR: a page of the sessions in
// thread order, each with its parent and children; `next` is the cursor
// of the page after it (null on the last). One more session than the page
// is read, to know whether another page follows.
void on_agents(self_ptr self, const call& c) {
  auto page = read_page(self, c);
  if (!page)
    return;
  auto limit = page->limit;
  request_component(self, names::persistence, std::chrono::seconds{30},
                    atom::agents_v, page->after, uint64_t{limit + 1})
    .then(
      [self, request = c.request, limit](std::vector<session_record>& sessions,
                                         std::vector<tree_link>& links) {
        std::optional<std::string> next;
        if (sessions.size() > limit) {
          sessions.resize(limit);
          next = sessions.back().thread;
        }
        auto body = agents_to_json(make_agents(sessions, links));
        body["next"] = next_cursor(next);
        respond_json(self, request, 200, body);
      },
      [self, request = c.request](caf::error& err) {
        respond_unavailable(self, request, err);
      });
}

// POST /api/v1/agents/THREAD/pause or /resume: through the thread's
// conversation (its owner's in a cluster); answers once the session says
// so on disk.
void on_agent_action(self_ptr self, const call& c, const std::string& rest) {
  auto parsed = parse_agent_action(c.method, rest);
  if (!parsed) {
    respond_no_endpoint(self, c, "POST /api/v1/agents/THREAD/pause|resume");
    return;
  }
  auto request = c.request;
  auto [thread, paused] = *parsed;
  request_component(self, names::orchestrator, std::chrono::seconds{30},
                    atom::pause_v, thread, paused)
    .then(
      [self, request, thread, paused](caf::ok_atom) {
        respond_json(self, request, 200,
                     {{"thread", thread}, {"paused", paused}});
      },
      [self, request](caf::error& err) {
        respond_refused(self, request, err);
      });
}

// GET /api/v1/tasks/THREAD/SEQ: where message SEQ of THREAD stands as a
// task (a task is named like a dead letter: THREAD/SEQ).
void on_task(self_ptr self, const call& c, const std::string& rest) {
  auto parsed = parse_dead_letter_id(rest);
  if (!parsed || c.method != "GET") {
    respond_no_endpoint(self, c, "GET /api/v1/tasks/THREAD/SEQ");
    return;
  }
  auto request = c.request;
  auto [thread, seq] = *parsed;
  request_component(self, names::orchestrator, std::chrono::seconds{30},
                    atom::task_v, thread, seq)
    .then(
      [self, request, thread = thread](log_entry& x) {
        respond_json(self, request, 200,
                     {{"thread", thread},
                      {"seq", x.seq},
                      {"client_id", x.client_id},
                      {"text", x.text},
                      {"state", to_string(x.task)},
                      {"attempts", x.attempts},
                      {"accepted_at", x.at},
                      {"updated_at", x.task_at}});
      },
      [self, request](caf::error& err) {
        respond_refused(self, request, err);
      });
}

} // namespace keel::admin
