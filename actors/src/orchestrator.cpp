#include "orchestrator_impl.hpp"

#include <thread>

namespace keel {

namespace orchestrator_impl {

namespace {

// Asks `thread`'s conversation (started for it if it is not live) `req`
// and answers its answer; in a cluster the thread's owner is asked
// `owner_req` instead.
template <class Result>
caf::result<Result> ask_conversation(self_ptr self, const std::string& thread,
                                     caf::message owner_req, caf::message req) {
  if (elsewhere(self, thread))
    return to_owner<Result>(self, thread, std::move(owner_req));
  auto rp = self->make_response_promise<Result>();
  auto id = self->state.hold(rp);
  when_routable(self, thread, [self, id, thread, req] {
    auto sup = conversations(self);
    if (!sup) {
      answer(self, id,
             caf::make_error(ec::unavailable, "the conversations supervisor "
                                              "is restarting; try again"));
      return;
    }
    timed_request(self, sup, self->state.cfg.request_timeout, atom::forward_v,
                  thread, req)
      .then([self, id](Result& x) { answer(self, id, std::move(x)); },
            [self, id](caf::error& err) { answer(self, id, std::move(err)); });
  });
  return rp;
}

// The conversations: live, passivated and evicted so far.
caf::result<uint64_t, uint64_t, uint64_t> counts(self_ptr self) {
  auto& st = self->state;
  return caf::make_result(uint64_t{st.threads.size()}, st.passivations,
                          st.evictions);
}

// Stopped or killed: whoever waits for a held request or a release (a
// drain) learns now; a conversations supervisor gone: its threads are no
// longer routed to.
void set_handlers(self_ptr self) {
  self->set_exit_handler([self](caf::exit_msg& msg) {
    auto err = caf::make_error(ec::unavailable, "the orchestrator stopped; "
                                                "resend with the same id");
    self->state.fail_held(err);
    for (auto& entry : self->state.releases)
      entry.second.rp.deliver(err);
    self->state.releases.clear();
    self->quit(msg.reason);
  });
  self->set_down_handler([self](caf::down_msg& msg) {
    // We monitor nothing but conversations supervisors. An older
    // incarnation's down may come after we saw the new one: the table may
    // hold threads of either, so it goes all the same.
    if (msg.source)
      conversations_lost(self, msg.source);
  });
}

// A client's message as the orchestrator routes every message.
outbox_entry client_message(std::string& client_id, std::string& text,
                            std::string& agent) {
  outbox_entry msg;
  msg.client_id = std::move(client_id);
  msg.text = std::move(text);
  msg.agent = std::move(agent);
  return msg;
}

} // namespace

} // namespace orchestrator_impl

// The behaviour calls the parts by their names (this file only).
using namespace orchestrator_impl;

orchestrator_actor::behavior_type orchestrator(self_ptr self,
                                               orchestrator_config cfg) {
  self->state.cfg = std::move(cfg);
  if (self->state.cfg.recover_on_start)
    self->send(self, atom::recover_v);
  else // Watch the supervisor from the start.
    conversations(self);
  set_handlers(self);
  return {
    [self](atom::route, const std::string& thread, std::string& client_id,
           std::string& text, std::string& agent) {
      return route(self, thread, client_message(client_id, text, agent));
    },
    [self](atom::deliver, outbox_entry& msg) {
      auto target = msg.to;
      return route(self, target, std::move(msg));
    },
    [self](atom::spawn, const std::string& parent, const std::string& child,
           const std::string& agent) {
      return spawn(self, parent, child, agent);
    },
    [self](atom::cancel, const std::string& thread) {
      return cancel(self, thread);
    },
    [self](atom::pause, const std::string& thread, bool paused) {
      return ask_conversation<caf::ok_atom>(
        self, thread, caf::make_message(atom::pause_v, thread, paused),
        caf::make_message(atom::pause_v, paused));
    },
    [self](atom::task, const std::string& thread, seq_t seq) {
      return ask_conversation<log_entry>(
        self, thread, caf::make_message(atom::task_v, thread, seq),
        caf::make_message(atom::task_v, seq));
    },
    [self](atom::passivate, const std::string& thread, uint64_t last_seen) {
      return passivate(self, thread, last_seen);
    },
    [self](atom::started, const std::string& thread) {
      self->state.restarted(thread);
    },
    [self](atom::stats) { return counts(self); },
    [self](atom::health) { return self->state.recovered; },
    [self](atom::drain, caf::timespan wait) { return drain(self, wait); },
    [](atom::wedge, caf::timespan duration) {
      // Chaos only (the gateway asks it with chaos.kill on): blocks this
      // worker on purpose, as a deadlocked handler would.
      std::this_thread::sleep_for(duration);
    },
    [self](atom::recover) { recover(self); },
    [self](atom::expire) { expire_deadlines(self); },
    [self](atom::recover, const std::vector<uint32_t>& shards) {
      recover_shards(self, shards);
    },
    [self](atom::release, const std::vector<uint32_t>& shards,
           caf::timespan wait) { return release_shards(self, shards, wait); },
    [self](atom::release, uint64_t id) { check_release(self, id); },
  };
}

} // namespace keel
