#include "keel/orchestrator.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/conversation.hpp"
#include "keel/error.hpp"
#include "keel/lookup.hpp"

namespace keel {

using self_ptr = orchestrator_actor::stateful_pointer<orchestrator_state>;

conversation_entry&
orchestrator_state::conversation_for(self_ptr self, const std::string& thread) {
  auto i = threads.find(thread);
  if (i != threads.end())
    return i->second;
  auto actor = self->spawn<caf::linked>(
    conversation, make_conversation_config(cfg.threads, thread));
  return threads.emplace(thread, conversation_entry{actor, 0}).first->second;
}

namespace {

// True if the thread failed too often recently to be restarted right away.
bool restart_limit_reached(self_ptr self, const std::string& thread) {
  auto& st = self->state;
  auto now = self->clock().now();
  auto& times = st.failures[thread];
  times.push_back(now);
  auto horizon = now - st.cfg.restart_period;
  times.erase(std::remove_if(times.begin(), times.end(),
                             [&](auto t) { return t < horizon; }),
              times.end());
  return times.size() > st.cfg.max_conversation_restarts;
}

void on_conversation_exit(self_ptr self, caf::exit_msg& msg) {
  auto& threads = self->state.threads;
  auto i = std::find_if(threads.begin(), threads.end(), [&](auto& kvp) {
    return kvp.second.actor.address() == msg.source;
  });
  if (i == threads.end()) {
    // Not a conversation: our supervisor (or a linked peer) is stopping us.
    self->quit(msg.reason);
    return;
  }
  auto thread = i->first;
  threads.erase(i);
  if (!msg.reason || msg.reason == caf::exit_reason::normal)
    return;
  spdlog::warn("conversation {} failed: {}", thread, render(msg.reason));
  // Restart into a valid state: the new actor reloads the thread and re-runs
  // whatever is still in its inbox.
  if (!restart_limit_reached(self, thread))
    self->state.conversation_for(self, thread);
}

} // namespace

orchestrator_actor::behavior_type
orchestrator(self_ptr self, orchestrator_config cfg) {
  self->state.cfg = std::move(cfg);
  self->set_exit_handler(
    [self](caf::exit_msg& msg) { on_conversation_exit(self, msg); });
  if (self->state.cfg.recover_on_start)
    self->send(self, atom::recover_v);
  return {
    [self](atom::route, const std::string& thread, std::string& client_id,
           std::string& text) -> caf::result<accept_result> {
      auto& entry = self->state.conversation_for(self, thread);
      ++entry.routed;
      return self->delegate(entry.actor, atom::accept_v, std::move(client_id),
                            std::move(text));
    },
    [self](atom::passivate, const std::string& thread, uint64_t received) {
      auto& threads = self->state.threads;
      auto i = threads.find(thread);
      if (i == threads.end() || i->second.routed != received)
        return false;
      // Unlink so the conversation's normal exit is not mistaken for ours.
      self->unlink_from(i->second.actor);
      threads.erase(i);
      return true;
    },
    [self](atom::status) -> uint64_t { return self->state.threads.size(); },
    [self](atom::recover) {
      auto db = lookup<persistence_actor>(self->system(), names::persistence);
      if (!db)
        return;
      self->request(db, std::chrono::seconds{60}, atom::inboxes_v)
        .then(
          [self](std::vector<std::string>& threads) {
            for (auto& thread : threads)
              self->state.conversation_for(self, thread);
          },
          [](caf::error& err) {
            spdlog::error("cannot list unanswered messages: {}", render(err));
          });
    },
  };
}

} // namespace keel
