// The supervisor's forwarding: messages to a child by id, held while it
// restarts and delivered to its next incarnation.

#include "keel/supervisor.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/error.hpp"
#include "keel/logging.hpp"

namespace keel {

namespace {

// Answers a forwarded message with an error; senders of asynchronous
// messages have no one to answer, so the error is logged instead.
void reject(caf::response_promise& rp, caf::error err) {
  if (rp.async()) {
    log_scope scope{log_component::supervisor};
    spdlog::warn("dropped a message: {}", render(err));
    return;
  }
  rp.deliver(std::move(err));
}

} // namespace

void supervisor_state::release_held(child_entry& child, const caf::error& why) {
  for (auto& msg : child.held)
    if (msg.mid.is_request() && msg.sender)
      msg.sender->enqueue(self->ctrl(), msg.mid.response_id(),
                          caf::make_message(why), self->context());
  child.held.clear();
}

void supervisor_state::deliver_held(child_entry& child) {
  auto ptr = caf::actor_cast<caf::abstract_actor*>(child.actor);
  for (auto& msg : child.held)
    ptr->enqueue(caf::make_mailbox_element(std::move(msg.sender), msg.mid,
                                           std::move(msg.stages),
                                           std::move(msg.content)),
                 self->context());
  child.held.clear();
}

void supervisor_state::forward(const std::string& id, caf::message content) {
  auto rp = self->make_response_promise();
  auto child = find(id);
  if (child == nullptr && cfg.dynamic && start_dynamic(id, {}))
    child = find(id); // Given up, or never started: it starts for this one.
  if (child == nullptr) {
    reject(rp, caf::make_error(ec::not_found,
                               cfg.name + ": no child '" + id + "'"));
    return;
  }
  bool hold = child->status == child_status::restarting
              || (child->status == child_status::stopping
                  && child->restart_pending);
  if (child->status == child_status::running && child->actor) {
    caf::actor_cast<caf::abstract_actor*>(child->actor)
      ->enqueue(caf::make_mailbox_element(rp.source(), rp.id(), rp.stages(),
                                          std::move(content)),
                self->context());
    return;
  }
  if (!hold) {
    reject(rp, caf::make_error(ec::unavailable, "child '" + id + "' is "
                                                  + to_string(child->status)));
    return;
  }
  if (child->held.size() >= child->spec.buffer) {
    reject(rp, caf::make_error(
                 ec::overloaded,
                 "child " + id + " is restarting and its buffer of "
                   + std::to_string(child->spec.buffer) + " messages is full"));
    return;
  }
  child->held.push_back(
    held_message{rp.source(), rp.id(), rp.stages(), std::move(content)});
}

} // namespace keel
