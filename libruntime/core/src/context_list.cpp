#include "keel/context_list.hpp"

#include <algorithm>
#include <atomic>

namespace keel {

context_list::context_list(std::vector<context_entry> entries)
  : shared_(std::make_shared<std::vector<context_entry>>(std::move(entries))) {
  // nop
}

context_list::context_list(std::initializer_list<context_entry> entries)
  : context_list(std::vector<context_entry>(entries)) {
  // nop
}

std::vector<context_entry>& context_list::edit(size_t capacity) {
  if (!shared_) {
    shared_ = std::make_shared<std::vector<context_entry>>(std::move(own_));
  } else if (shared_.use_count() > 1) {
    auto copy = std::make_shared<std::vector<context_entry>>();
    copy->reserve(std::max(size(), capacity));
    copy->insert(copy->end(), shared_->begin(), shared_->end());
    copy->insert(copy->end(), std::make_move_iterator(own_.begin()),
                 std::make_move_iterator(own_.end()));
    shared_ = std::move(copy);
  } else {
    // No other list holds the entries, and none can start to: only this
    // one could be copied. The last other holder let go with an
    // acquire-release decrement (libstdc++'s and libc++'s shared_ptr), which
    // this fence pairs with, so its reads happen before our writes.
    std::atomic_thread_fence(std::memory_order_acquire);
    shared_->insert(shared_->end(), std::make_move_iterator(own_.begin()),
                    std::make_move_iterator(own_.end()));
  }
  own_.clear();
  return *shared_;
}

void context_list::append(const std::vector<context_entry>& more) {
  auto grown = [&more](size_t size) {
    return std::max(size + more.size(), size + size / 4);
  };
  auto& entries = edit(grown(size()));
  if (entries.size() + more.size() > entries.capacity())
    entries.reserve(grown(entries.size()));
  entries.insert(entries.end(), more.begin(), more.end());
}

std::vector<context_entry> context_list::to_vector() const {
  return std::vector<context_entry>(begin(), end());
}

bool operator==(const context_list& x, const context_list& y) {
  return std::equal(x.begin(), x.end(), y.begin(), y.end());
}

} // namespace keel
