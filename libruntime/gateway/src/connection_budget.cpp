#include "keel/connection_budget.hpp"

#include <algorithm>

namespace keel {

connection_budget::connection_budget(size_t max_total, size_t max_per_address)
  : max_total_(std::max<size_t>(max_total, 1)),
    max_per_address_(std::max<size_t>(max_per_address, 1)) {
  // nop
}

std::optional<uint64_t> connection_budget::admit(uint64_t id,
                                                 const std::string& address) {
  std::optional<uint64_t> leaving;
  if (auto i = by_address_.find(address);
      i != by_address_.end() && i->second.size() >= max_per_address_)
    leaving = *i->second.begin();
  else if (address_of_.size() >= max_total_)
    leaving = address_of_.begin()->first;
  if (leaving)
    remove(*leaving);
  address_of_.emplace(id, address);
  by_address_[address].insert(id);
  return leaving;
}

bool connection_budget::remove(uint64_t id) {
  auto i = address_of_.find(id);
  if (i == address_of_.end())
    return false;
  auto j = by_address_.find(i->second);
  j->second.erase(id);
  if (j->second.empty())
    by_address_.erase(j);
  address_of_.erase(i);
  return true;
}

size_t connection_budget::count(const std::string& address) const {
  auto i = by_address_.find(address);
  return i != by_address_.end() ? i->second.size() : 0;
}

} // namespace keel
