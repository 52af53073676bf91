#include "keel/deadline_set.hpp"

namespace keel {

namespace {

std::pair<uint8_t, uint64_t> make_key(deadline_set::kind what, uint64_t id) {
  return {static_cast<uint8_t>(what), id};
}

} // namespace

bool deadline_set::add(kind what, uint64_t id, time_point at) {
  remove(what, id);
  auto pos = by_time_.emplace(at, entry{what, id});
  by_key_.emplace(make_key(what, id), pos);
  if (armed_ && *armed_ <= at)
    return false;
  armed_ = at;
  return true;
}

void deadline_set::remove(kind what, uint64_t id) {
  auto i = by_key_.find(make_key(what, id));
  if (i == by_key_.end())
    return;
  by_time_.erase(i->second);
  by_key_.erase(i);
}

std::vector<deadline_set::entry> deadline_set::expire(time_point now) {
  if (armed_ && *armed_ <= now)
    armed_.reset();
  std::vector<entry> due;
  auto i = by_time_.begin();
  for (; i != by_time_.end() && i->first <= now; ++i) {
    due.push_back(i->second);
    by_key_.erase(make_key(i->second.what, i->second.id));
  }
  by_time_.erase(by_time_.begin(), i);
  return due;
}

std::optional<deadline_set::time_point> deadline_set::rearm() {
  if (by_time_.empty())
    return std::nullopt;
  auto next = by_time_.begin()->first;
  if (armed_ && *armed_ <= next)
    return std::nullopt;
  armed_ = next;
  return next;
}

} // namespace keel
