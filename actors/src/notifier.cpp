#include "keel/notifier.hpp"

#include <algorithm>
#include <utility>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "keel/logging.hpp"
#include "keel/lookup.hpp"
#include "keel/redact.hpp"
#include "keel/text.hpp"

namespace keel {

// -- state --------------------------------------------------------------------

void notifier_state::configure(notifier_config config) {
  cfg = std::move(config);
  for (auto& [kind, window] : cfg.windows)
    gate.set_window(kind, window);
}

std::vector<owner_notice>
notifier_state::restore(std::vector<owner_notice> stored) {
  std::vector<owner_notice> resend;
  for (auto& x : stored) {
    if (x.status != notice_status::failed)
      gate.restore(x.kind, x.subject, x.at);
    if (x.status == notice_status::pending)
      resend.push_back(x);
    latest.insert_or_assign(notice_key(x), std::move(x));
  }
  loaded = true;
  return resend;
}

std::optional<owner_notice> notifier_state::raise(owner_notice x,
                                                  epoch_ms now) {
  auto key = notice_key(x);
  // Each sending of a key has its own time: its idempotency key.
  if (auto prev = latest.find(key); prev != latest.end())
    now = std::max(now, prev->second.at + 1);
  if (!gate.admit(x.kind, x.subject, now)) {
    auto& last = latest.try_emplace(key, x).first->second;
    ++last.suppressed;
    last.last_suppressed_at = now;
    unstored.insert(key);
    return std::nullopt;
  }
  x.at = now;
  x.status = cfg.channel.empty() ? notice_status::logged
                                 : notice_status::pending;
  x.error.clear();
  x.suppressed = 0;
  x.last_suppressed_at = 0;
  latest.insert_or_assign(key, x);
  unstored.erase(key);
  return x;
}

bool notifier_state::settle(const owner_notice& x) {
  auto i = latest.find(notice_key(x));
  if (i == latest.end() || i->second.at != x.at)
    return false;
  i->second.status = x.status;
  i->second.error = x.error;
  if (x.status == notice_status::failed)
    gate.forget(x.kind, x.subject, x.at);
  return true;
}

std::vector<owner_notice> notifier_state::listing() const {
  std::vector<owner_notice> result;
  for (auto& [key, x] : latest)
    result.push_back(x);
  std::stable_sort(result.begin(), result.end(),
                   [](auto& a, auto& b) { return a.at > b.at; });
  return result;
}

// -- the actor ----------------------------------------------------------------

namespace {

using self_ptr = notifier_state::self_ptr;

// Writes the latest notice of `key`; a failed write is logged (the next
// change of the key writes it again).
void store(self_ptr self, const std::string& key) {
  auto& x = self->state.latest.at(key);
  request_component(self, names::persistence, self->state.cfg.store_timeout,
                    caf::put_atom_v, x)
    .then([](caf::ok_atom) {},
          [key](caf::error& err) {
            log_scope scope{log_component::notifier};
            spdlog::warn("owner notice {}: cannot store it: {}", key,
                         render(err));
          });
}

// Records how the sending of `x` ended and stores it.
void sent(self_ptr self, owner_notice x) {
  x.error = redact(x.error, self->state.cfg.secrets);
  if (!self->state.settle(x))
    return;
  log_scope scope{log_component::notifier};
  if (x.status == notice_status::failed)
    spdlog::warn("owner notice {}: the owner's channel did not take it: {}",
                 notice_key(x), x.error);
  store(self, notice_key(x));
}

void send(self_ptr self, const owner_notice& x) {
  auto& cfg = self->state.cfg;
  request_component(self, names::channels, cfg.send_timeout, atom::notify_v, x,
                    cfg.channel)
    .then([self](owner_notice& done) { sent(self, done); },
          [self, x](caf::error& err) {
            auto failed = x;
            failed.status = notice_status::failed;
            failed.error = render(err);
            sent(self, failed);
          });
}

void arm_flush(self_ptr self) {
  auto& st = self->state;
  if (st.flush_armed)
    return;
  st.flush_armed = true;
  self->delayed_send(self, st.cfg.flush_interval, atom::tick_v);
}

void flush(self_ptr self) {
  auto& st = self->state;
  st.flush_armed = false;
  for (auto& key : std::exchange(st.unstored, {}))
    store(self, key);
}

void raise(self_ptr self, owner_notice x) {
  log_scope scope{log_component::notifier};
  auto& st = self->state;
  x.text = redact(x.text, st.cfg.secrets);
  if (!st.loaded) {
    if (st.held.size() < notifier_state::max_held)
      st.held.push_back(std::move(x));
    else
      spdlog::warn("owner notice {} dropped: the stored notices are not read "
                   "yet and {} wait",
                   notice_key(x), st.held.size());
    return;
  }
  auto admitted = st.raise(std::move(x), st.clock.now(self->clock()));
  if (!admitted) {
    arm_flush(self);
    return;
  }
  spdlog::warn("owner notice [{}] {} ({}): {}",
               to_string(severity_of(admitted->kind)),
               to_string(admitted->kind), admitted->subject, admitted->text);
  store(self, notice_key(*admitted));
  if (admitted->status == notice_status::pending)
    send(self, *admitted);
}

void load(self_ptr self) {
  request_component(self, names::persistence, self->state.cfg.store_timeout,
                    atom::notices_v)
    .then(
      [self](std::vector<owner_notice>& stored) {
        for (auto& x : self->state.restore(std::move(stored)))
          send(self, x);
        for (auto& x : std::exchange(self->state.held, {}))
          raise(self, std::move(x));
      },
      [self](caf::error& err) {
        log_scope scope{log_component::notifier};
        spdlog::warn("notifier: cannot read the stored notices: {}",
                     render(err));
        self->delayed_send(self, self->state.cfg.reload_after_failure,
                           atom::tick_v);
      });
}

} // namespace

notifier_actor::behavior_type
notifier(notifier_actor::stateful_pointer<notifier_state> self,
         notifier_config cfg) {
  self->state.configure(std::move(cfg));
  self->state.clock.anchor(self->clock());
  self->send(self, atom::tick_v);
  return {
    [self](atom::notify, owner_notice& x) { raise(self, std::move(x)); },
    [self](atom::notices) { return self->state.listing(); },
    [self](atom::tick) {
      if (self->state.loaded)
        flush(self);
      else
        load(self);
    },
  };
}

} // namespace keel
