#include "keel/orchestrator.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/error.hpp"
#include "keel/lookup.hpp"

namespace keel {

bool orchestrator_state::may_passivate(const thread_entry& entry,
                                       uint64_t last_seen) const {
  return !entry.stopping
         && (last_seen >= entry.routed || entry.floor >= entry.routed);
}

namespace {

using self_ptr = orchestrator_actor::stateful_pointer<orchestrator_state>;

caf::actor conversations(self_ptr self) {
  return lookup<caf::actor>(self->system(), names::conversations);
}

// Starts the thread's conversation unless it runs. An `already exists`
// answer is fine: the supervisor kept it (e.g. across our own restart).
void ensure_started(self_ptr self, const std::string& thread) {
  if (self->state.threads.count(thread) > 0)
    return;
  self->state.threads.emplace(thread, thread_entry{});
  auto sup = conversations(self);
  if (!sup)
    return; // The forward that follows fails and tells the sender.
  self
    ->request(sup, self->state.cfg.request_timeout, atom::start_child_v,
              thread, caf::make_message())
    .then([](const caf::actor&) {},
          [thread](caf::error& err) {
            if (err != ec::conflict)
              spdlog::warn("cannot start conversation {}: {}", thread,
                           render(err));
          });
}

// Hands a message to the thread's conversation through its supervisor; the
// conversation answers the original requester directly.
template <class Promise>
void forward(self_ptr self, Promise& rp, const std::string& thread,
             std::string client_id, std::string text) {
  auto sup = conversations(self);
  if (!sup) {
    rp.deliver(caf::make_error(ec::unavailable,
                               "the conversations supervisor is restarting; "
                               "resend with the same id"));
    return;
  }
  auto seq = ++self->state.threads[thread].routed;
  rp.delegate(sup, atom::forward_v, thread,
              caf::make_message(atom::accept_v, std::move(client_id),
                                std::move(text), seq));
}

// Stops a passivating conversation, then routes what queued meanwhile.
void stop_conversation(self_ptr self, const std::string& thread) {
  auto release = [self, thread] {
    auto i = self->state.threads.find(thread);
    if (i == self->state.threads.end())
      return;
    auto queued = std::move(i->second.queued);
    self->state.threads.erase(i);
    if (queued.empty())
      return;
    ensure_started(self, thread);
    for (auto& q : queued)
      forward(self, q.promise, thread, std::move(q.client_id),
              std::move(q.text));
  };
  auto sup = conversations(self);
  if (!sup) {
    release();
    return;
  }
  self
    ->request(sup, self->state.cfg.request_timeout, atom::stop_child_v,
              thread)
    .then([release](caf::ok_atom) { release(); },
          [release](caf::error&) { release(); });
}

} // namespace

orchestrator_actor::behavior_type
orchestrator(self_ptr self, orchestrator_config cfg) {
  self->state.cfg = std::move(cfg);
  if (self->state.cfg.recover_on_start)
    self->send(self, atom::recover_v);
  return {
    [self](atom::route, const std::string& thread, std::string& client_id,
           std::string& text) -> caf::result<accept_result> {
      auto rp = self->make_response_promise<accept_result>();
      auto i = self->state.threads.find(thread);
      if (i != self->state.threads.end() && i->second.stopping) {
        i->second.queued.push_back({rp, std::move(client_id),
                                    std::move(text)});
        return rp;
      }
      ensure_started(self, thread);
      forward(self, rp, thread, std::move(client_id), std::move(text));
      return rp;
    },
    [self](atom::passivate, const std::string& thread, uint64_t last_seen) {
      auto& threads = self->state.threads;
      auto i = threads.find(thread);
      if (i == threads.end()) {
        // Started before we were (we restarted): nothing routed by us.
        i = threads.emplace(thread, thread_entry{}).first;
      } else if (!self->state.may_passivate(i->second, last_seen)) {
        return false;
      }
      i->second.stopping = true;
      stop_conversation(self, thread);
      return true;
    },
    [self](atom::started, const std::string& thread) {
      auto i = self->state.threads.find(thread);
      if (i != self->state.threads.end())
        i->second.floor = i->second.routed;
    },
    [self](atom::status) -> uint64_t { return self->state.threads.size(); },
    [self](atom::recover) {
      auto db = lookup<persistence_actor>(self->system(), names::persistence);
      if (!db) {
        self->delayed_send(self, std::chrono::seconds{1}, atom::recover_v);
        return;
      }
      self->request(db, std::chrono::seconds{60}, atom::inboxes_v)
        .then(
          [self](std::vector<std::string>& threads) {
            for (auto& thread : threads)
              ensure_started(self, thread);
          },
          [](caf::error& err) {
            spdlog::error("cannot list unanswered messages: {}", render(err));
          });
    },
  };
}

} // namespace keel
