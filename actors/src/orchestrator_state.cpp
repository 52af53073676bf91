#include "keel/orchestrator.hpp"

#include <algorithm>
#include <utility>

namespace keel {

bool orchestrator_state::may_passivate(const thread_entry& entry,
                                       uint64_t last_seen) const {
  return !entry.stopping
         && (last_seen >= entry.routed || entry.floor >= entry.routed);
}

void orchestrator_state::restarted(const std::string& thread) {
  auto i = threads.find(thread);
  if (i == threads.end())
    return;
  if (std::exchange(i->second.starting, false))
    return; // The one we started: nothing routed to it was lost.
  i->second.floor = i->second.routed;
}

uint64_t orchestrator_state::tenure_of(const std::string& thread) const {
  return cfg.shards ? cfg.shards->tenure(thread) : 0;
}

bool orchestrator_state::stale(const std::string& thread,
                               const thread_entry& entry) const {
  return cfg.shards && !entry.stopping && entry.tenure != tenure_of(thread);
}

thread_entry& orchestrator_state::add(const std::string& thread) {
  auto [i, added] = threads.try_emplace(thread);
  if (added)
    remember(thread, i->second);
  return i->second;
}

void orchestrator_state::erase(thread_map::iterator i) {
  forget(i->first, i->second);
  threads.erase(i);
}

orchestrator_state::thread_map orchestrator_state::take_all() {
  live.clear();
  auto result = std::move(threads);
  threads.clear();
  return result;
}

void orchestrator_state::forget(const std::string& thread,
                                const thread_entry& entry) {
  if (!entry.stopping && !entry.evicting)
    live.erase({entry.routed, thread});
}

void orchestrator_state::remember(const std::string& thread,
                                  const thread_entry& entry) {
  if (!entry.stopping && !entry.evicting)
    live.emplace(entry.routed, thread);
}

bool orchestrator_state::at_live_limit() const {
  return live.size() >= cfg.max_live;
}

std::string
orchestrator_state::idlest(const std::string& thread,
                           const std::vector<std::string>& skip) const {
  for (auto& [routed, id] : live)
    if (id != thread && std::find(skip.begin(), skip.end(), id) == skip.end())
      return id;
  return {};
}

uint64_t orchestrator_state::hold(caf::response_promise rp) {
  auto id = ++last_hold;
  held.emplace(id, std::move(rp));
  return id;
}

caf::response_promise orchestrator_state::take(uint64_t id) {
  auto i = held.find(id);
  if (i == held.end())
    return {};
  auto rp = std::move(i->second);
  held.erase(i);
  return rp;
}

void orchestrator_state::fail_held(const caf::error& err) {
  auto all = std::move(held);
  held.clear();
  for (auto& entry : all)
    entry.second.deliver(err);
}

} // namespace keel
