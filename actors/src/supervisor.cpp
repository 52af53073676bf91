// The supervisor's behaviour: its messages, handled by supervisor_state.

#include "keel/supervisor.hpp"

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/error.hpp"
#include "keel/logging.hpp"

namespace keel {

caf::behavior supervisor(caf::stateful_actor<supervisor_state>* self,
                         supervisor_config cfg) {
  // Children are monitored, not linked (a child dying of CAF's untrappable
  // `kill` would take a linked supervisor with it); if the supervisor dies
  // anyway (killed, exception), this stops the children it still has.
  self->attach_functor([live = self->state.by_addr](const caf::error& why) {
    auto reason = why ? why : caf::make_error(ec::shutdown);
    for (auto& [addr, order] : *live)
      if (auto ptr = caf::actor_cast<caf::strong_actor_ptr>(addr))
        ptr->enqueue(nullptr, caf::make_message_id(),
                     caf::make_message(caf::exit_msg{addr, reason}), nullptr);
    live->clear();
  });
  self->set_down_handler(
    [self](caf::down_msg& msg) { self->state.on_down(msg); });
  self->set_exit_handler(
    [self](caf::exit_msg& msg) { self->state.on_exit(msg); });
  if (auto err = self->state.init(std::move(cfg))) {
    log_scope scope{log_component::supervisor};
    spdlog::error("{}", render(err));
    self->quit(std::move(err));
    return {};
  }
  if (self->state.quit_called)
    return {};
  return {
    [self](atom::children) {
      self->state.which_children(self->make_response_promise());
    },
    [self](atom::kill_child, std::string& path, caf::error& reason) {
      self->state.kill(path, std::move(reason), self->make_response_promise());
    },
    [self](atom::start_child, std::string& id,
           caf::message& args) -> caf::result<caf::actor> {
      auto res = self->state.start_dynamic(id, args);
      if (!res)
        return std::move(res.error());
      return std::move(*res);
    },
    [self](atom::stop_child, std::string& id) {
      self->state.terminate(id, self->make_response_promise());
    },
    [self](atom::forward, std::string& id, caf::message& content) {
      self->state.forward(id, std::move(content));
    },
    [self](atom::restart, uint64_t order, uint64_t token) {
      self->state.on_restart_timer(order, token);
    },
    [self](atom::restart, uint64_t order, caf::error& reason) {
      // A start failed: handled as an immediate exit of that incarnation.
      self->state.decide(order, std::move(reason));
    },
    [self](atom::stop_timer, uint64_t order, uint64_t token) {
      self->state.on_stop_timer(order, token);
    },
  };
}

} // namespace keel
