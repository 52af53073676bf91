#include "keel/conversation.hpp"

#include <exception>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/lookup.hpp"
#include "keel/protocol.hpp"
#include "keel/providers.hpp"
#include "keel/text.hpp"

namespace keel {

conversation_config make_conversation_config(const thread_defaults& defaults,
                                             std::string thread) {
  conversation_config cfg;
  cfg.thread = std::move(thread);
  cfg.pool = defaults.pool;
  cfg.system_prompt = defaults.system_prompt;
  cfg.idle_timeout = defaults.idle_timeout;
  cfg.turn_timeout = defaults.turn_timeout;
  cfg.max_inbox = defaults.max_inbox;
  return cfg;
}

bool conversation_state::idle() const {
  return loaded && inbox.empty() && !turn_running && accepting.empty()
         && deferred.empty();
}

completion_request conversation_state::make_request() const {
  completion_request req;
  req.thread = cfg.thread;
  req.system_prompt = cfg.system_prompt;
  req.context = context;
  auto& msg = inbox.front();
  req.client_id = msg.client_id;
  req.seq = msg.seq;
  req.context.push_back(context_entry{msg.seq, "user", msg.text});
  return req;
}

turn_commit conversation_state::make_reply_commit(const completion& reply,
                                                  millis now) {
  auto& msg = inbox.front();
  auto seq = next_seq++;
  turn_commit commit;
  commit.thread = cfg.thread;
  commit.inbox_seq = msg.seq;
  commit.context.push_back(context_entry{msg.seq, "user", msg.text});
  // Tools run with a later issue; until then a requested call is kept in
  // the answer's text so that neither the user nor the model loses it.
  auto text = reply.text;
  for (auto& call : reply.tool_calls)
    text += (text.empty() ? "" : "\n") + std::string{"[tool call "}
            + call.name + " " + call.arguments + "]";
  commit.context.push_back(context_entry{seq, "assistant", text});
  log_entry entry;
  entry.seq = seq;
  entry.kind = log_kind::reply;
  entry.client_id = msg.client_id;
  entry.reply_to = msg.seq;
  entry.text = std::move(text);
  entry.provider = reply.provider;
  entry.at = now;
  commit.log.push_back(std::move(entry));
  return commit;
}

turn_commit conversation_state::make_error_commit(const std::string& code,
                                                  const std::string& text,
                                                  millis now) {
  auto& msg = inbox.front();
  turn_commit commit;
  commit.thread = cfg.thread;
  commit.inbox_seq = msg.seq;
  // The unanswered message stays out of the context: the model never sees a
  // question without its answer.
  log_entry entry;
  entry.seq = next_seq++;
  entry.kind = log_kind::error;
  entry.client_id = msg.client_id;
  entry.reply_to = msg.seq;
  entry.text = text;
  entry.code = code;
  entry.at = now;
  commit.log.push_back(std::move(entry));
  return commit;
}

void conversation_state::apply(const turn_commit& commit) {
  if (!inbox.empty() && inbox.front().seq == commit.inbox_seq)
    inbox.pop_front();
  context.insert(context.end(), commit.context.begin(), commit.context.end());
}

void conversation_state::fail_pending_accepts(const caf::error& reason) {
  for (auto& [seq, promise] : accepting)
    promise.deliver(reason);
  accepting.clear();
  for (auto& d : deferred)
    d.promise.deliver(reason);
  deferred.clear();
}

void conversation_state::restore(thread_snapshot snapshot) {
  session_exists = snapshot.exists;
  session = std::move(snapshot.session);
  inbox.assign(std::make_move_iterator(snapshot.inbox.begin()),
               std::make_move_iterator(snapshot.inbox.end()));
  context = std::move(snapshot.context);
  next_seq = std::max(next_seq, snapshot.next_seq);
  loaded = true;
}

namespace {

using self_ptr = conversation_actor::stateful_pointer<conversation_state>;

void drain(self_ptr self);

// Pushes a ready-made frame to the thread's subscribers, if a gateway runs.
void publish(self_ptr self, std::string frame) {
  publish_event(self->system(), self->state.cfg.thread, std::move(frame));
}

// Records that the thread just became idle. At most one idle timer is
// pending per actor; when it fires early (work came and went since) it is
// re-armed for the remainder, so a busy thread costs no timer per turn.
void note_idle(self_ptr self) {
  auto& st = self->state;
  st.idle_since = self->clock().now();
  if (st.idle_timer_armed)
    return;
  st.idle_timer_armed = true;
  self->delayed_send(self, st.cfg.idle_timeout, atom::idle_v);
}

// Describes a provider error to the user (seed 000's messages).
std::pair<std::string, std::string> describe_failure(const caf::error& err) {
  if (err == caf::sec::request_timeout || err == ec::provider_timeout
      || err == ec::timeout)
    return {to_string(ec::provider_timeout), turn_errors::provider_timeout};
  if (err == ec::context_overflow)
    return {to_string(ec::context_overflow), turn_errors::context_overflow};
  if (err == ec::provider_rejected)
    return {to_string(ec::provider_rejected), turn_errors::provider_rejected};
  if (err.category() == error_category)
    return {error_code_name(err), turn_errors::provider_failed};
  // The pool is down or restarting: still a provider problem to the user.
  return {to_string(ec::provider_failed), turn_errors::provider_failed};
}

// Commits the outcome of the current turn, then moves on to the next one.
// A failed commit keeps the message in the inbox and retries the turn later:
// nothing is acknowledged as answered that is not durable.
void commit_turn(self_ptr self, turn_commit commit) {
  auto done = [self](turn_commit& commit) {
    self->state.apply(commit);
    for (auto& entry : commit.log)
      publish(self, protocol::outcome_frame(commit.thread, entry));
    self->state.turn_running = false;
    drain(self);
  };
  auto failed = [self](const caf::error& err) {
    auto& st = self->state;
    spdlog::warn("thread {}: commit failed: {}", st.cfg.thread, render(err));
    auto& msg = st.inbox.front();
    publish(self, protocol::status_frame(st.cfg.thread, msg.client_id,
                                         msg.seq, "retrying"));
    self->delayed_send(self, st.cfg.commit_retry_delay, atom::drain_v);
    // The turn stays "running" until the retry so nothing overtakes it.
  };
  request_component(self, names::persistence, self->state.cfg.storage_timeout,
                    atom::commit_v, commit)
    .then([done, commit](caf::ok_atom) mutable { done(commit); },
          [failed](caf::error& err) { failed(err); });
}

void fail_turn(self_ptr self, const std::string& code,
               const std::string& text) {
  commit_turn(self, self->state.make_error_commit(code, text,
                                                  wall_clock_millis()));
}

// The error boundary: whatever a turn step throws becomes a descriptive
// error in the thread, and the drain goes on.
template <class F>
void guarded(self_ptr self, F step) {
  try {
    step();
  } catch (const std::exception& e) {
    fail_turn(self, to_string(ec::turn_failed),
              turn_errors::unknown_prefix + std::string{e.what()}
                + turn_errors::unknown_suffix);
  } catch (...) {
    fail_turn(self, to_string(ec::turn_failed),
              turn_errors::unknown_prefix + std::string{"unknown error"}
                + turn_errors::unknown_suffix);
  }
}

void run_turn(self_ptr self) {
  auto& st = self->state;
  auto& msg = st.inbox.front();
  publish(self,
          protocol::status_frame(st.cfg.thread, msg.client_id, msg.seq,
                                 "thinking"));
  auto providers = lookup<caf::actor>(self->system(), names::providers);
  if (!providers) {
    fail_turn(self, to_string(ec::provider_failed),
              turn_errors::provider_failed);
    return;
  }
  // Through the providers supervisor, which hands the request to the pool
  // (holding it while the pool restarts); the pool answers us directly.
  self
    ->request(providers, st.cfg.turn_timeout, atom::forward_v, st.cfg.pool,
              complete_message(st.make_request()))
    .then(
      [self](completion& reply) {
        guarded(self, [&] {
          commit_turn(self, self->state.make_reply_commit(
                              reply, wall_clock_millis()));
        });
      },
      [self](caf::error& err) {
        spdlog::info("thread {}: turn failed: {}", self->state.cfg.thread,
                     render(err));
        auto [code, text] = describe_failure(err);
        fail_turn(self, code, text);
      });
}

// Starts the next turn unless one runs; arms the idle timer when done.
void drain(self_ptr self) {
  auto& st = self->state;
  if (!st.loaded || st.turn_running)
    return;
  if (st.inbox.empty()) {
    if (st.idle())
      note_idle(self);
    return;
  }
  st.turn_running = true;
  guarded(self, [&] { run_turn(self); });
}

// Appends a message durably; the promise is answered once it is synced.
void accept(self_ptr self, caf::typed_response_promise<accept_result> rp,
            std::string client_id, std::string text) {
  auto& st = self->state;
  if (st.inbox.size() + st.accepting.size() >= st.cfg.max_inbox) {
    rp.deliver(caf::make_error(ec::overloaded,
                               "thread '" + st.cfg.thread + "' already has "
                                 + std::to_string(st.cfg.max_inbox)
                                 + " unanswered messages"));
    return;
  }
  accept_request req;
  req.thread = st.cfg.thread;
  req.entry = inbox_entry{st.next_seq++, std::move(client_id),
                          std::move(text), wall_clock_millis()};
  if (!st.session_active) {
    // The first accept of an activation (re)writes the session as ACTIVE in
    // the same synced batch as the message.
    if (!st.session_exists) {
      st.session.thread = st.cfg.thread;
      st.session.pool = st.cfg.pool;
      st.session.created_at = req.entry.accepted_at;
    }
    st.session.state = session_state::active;
    req.create_session = true;
    req.session = st.session;
  }
  auto seq = req.entry.seq;
  st.accepting.emplace(seq, rp);
  // Answers the sender unless the promise was already failed (exit).
  auto answer = [self, seq](auto&& result) {
    auto& accepting = self->state.accepting;
    auto i = accepting.find(seq);
    if (i == accepting.end())
      return;
    auto promise = std::move(i->second);
    accepting.erase(i);
    promise.deliver(std::forward<decltype(result)>(result));
  };
  request_component(self, names::persistence, st.cfg.storage_timeout,
                    atom::accept_v, req)
    .then(
      [self, answer, entry = req.entry, wrote_session = req.create_session](
        accept_result& res) mutable {
        auto& st = self->state;
        if (wrote_session) {
          st.session_exists = true;
          st.session_active = true;
        }
        if (!res.duplicate)
          st.inbox.push_back(std::move(entry));
        answer(res);
        drain(self);
      },
      [self, answer](caf::error& err) mutable {
        answer(std::move(err));
        drain(self);
      });
}

void load(self_ptr self) {
  auto fail = [self](const caf::error& err) {
    for (auto& d : self->state.deferred)
      d.promise.deliver(err);
    self->state.deferred.clear();
    self->quit(err);
  };
  request_component(self, names::persistence, self->state.cfg.storage_timeout,
                    atom::load_v, self->state.cfg.thread)
    .then(
      [self](thread_snapshot& snapshot) {
        auto& st = self->state;
        st.restore(std::move(snapshot));
        auto deferred = std::move(st.deferred);
        st.deferred.clear();
        for (auto& d : deferred)
          accept(self, d.promise, std::move(d.client_id), std::move(d.text));
        drain(self);
      },
      fail);
}

// Writes the session as SUSPENDED, then asks the orchestrator to stop us.
// If it agrees, our supervisor stops us; if a message is on its way, we stay.
void passivate(self_ptr self) {
  auto& st = self->state;
  if (!st.session_exists) {
    note_idle(self); // Nothing on disk yet: try again later.
    return;
  }
  auto record = st.session;
  record.state = session_state::suspended;
  st.session_active = false;
  request_component(self, names::persistence, st.cfg.storage_timeout,
                    caf::put_atom_v, record)
    .then(
      [self](caf::ok_atom) {
        self->state.session.state = session_state::suspended;
        request_component(self, names::orchestrator,
                          self->state.cfg.storage_timeout, atom::passivate_v,
                          self->state.cfg.thread, self->state.last_route)
          .then(
            [self](bool stopping) {
              if (!stopping && self->state.idle())
                note_idle(self);
            },
            [self](caf::error&) {
              if (self->state.idle())
                note_idle(self);
            });
      },
      [self](caf::error& err) {
        spdlog::warn("thread {}: cannot suspend: {}", self->state.cfg.thread,
                     render(err));
        if (self->state.idle())
          note_idle(self);
      });
}

} // namespace

conversation_actor::behavior_type
conversation(conversation_actor::stateful_pointer<conversation_state> self,
             conversation_config cfg) {
  self->state.cfg = std::move(cfg);
  // Tell the orchestrator an incarnation started: messages routed to an
  // earlier one may have died with it.
  if (auto orch = lookup<orchestrator_actor>(self->system(),
                                             names::orchestrator))
    self->send(orch, atom::started_v, self->state.cfg.thread);
  // Stopped or killed: senders of accepts not yet answered learn at once
  // that they must resend (a durable one is then acknowledged as duplicate).
  self->set_exit_handler([self](caf::exit_msg& msg) {
    self->state.fail_pending_accepts(caf::make_error(
      ec::unavailable, "the conversation of thread '" + self->state.cfg.thread
                         + "' stopped; resend with the same id"));
    self->quit(msg.reason);
  });
  load(self);
  return {
    [self](atom::accept, std::string& client_id, std::string& text,
           uint64_t route) -> caf::result<accept_result> {
      auto& st = self->state;
      st.last_route = route;
      auto rp = self->make_response_promise<accept_result>();
      if (!st.loaded)
        st.deferred.push_back({rp, std::move(client_id), std::move(text)});
      else
        accept(self, rp, std::move(client_id), std::move(text));
      return rp;
    },
    [self](atom::drain) {
      // A commit retry: the failed turn runs again.
      self->state.turn_running = false;
      drain(self);
    },
    [self](atom::idle) {
      auto& st = self->state;
      st.idle_timer_armed = false;
      if (!st.idle())
        return; // Busy again: the next idle moment arms a new timer.
      auto idle_for = self->clock().now() - st.idle_since;
      if (idle_for < st.cfg.idle_timeout) {
        st.idle_timer_armed = true;
        self->delayed_send(self, st.cfg.idle_timeout - idle_for, atom::idle_v);
        return;
      }
      passivate(self);
    },
  };
}

} // namespace keel
