#pragma once

// A model's working memory as a list that copies cheaply: a conversation
// keeps its context in one shared vector, every request made from it shares
// that vector, and only the few entries a request adds are its own.

#include <cstddef>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <vector>

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>

#include "keel/types.hpp"

namespace keel {

/// Context entries: first those shared with the copies of this list (read
/// only while shared), then those this list alone holds. Copying a list
/// copies its own entries only; `edit` copies the shared ones only while
/// another list still shares them. Not safe for concurrent use of one list
/// (as any value); copies may live on other threads. Iterators name a
/// position in a list, so moving the list invalidates them; the vector
/// `edit` returns may be changed only until the list is next copied.
class context_list {
public:
  class const_iterator;
  using value_type = context_entry;
  using size_type = size_t;
  using const_reference = const context_entry&;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;

  context_list() = default;
  context_list(std::vector<context_entry> entries);
  context_list(std::initializer_list<context_entry> entries);

  size_t size() const {
    return shared_count() + own_.size();
  }

  bool empty() const {
    return size() == 0;
  }

  const context_entry& operator[](size_t i) const {
    auto shared = shared_count();
    return i < shared ? (*shared_)[i] : own_[i - shared];
  }

  const context_entry& back() const {
    return (*this)[size() - 1];
  }

  const_iterator begin() const;
  const_iterator end() const;
  const_reverse_iterator rbegin() const;
  const_reverse_iterator rend() const;

  /// Appends an entry of this list's own.
  void push_back(context_entry entry) {
    own_.push_back(std::move(entry));
  }

  /// Every entry, for changing: afterwards they are all shared with the
  /// next copies. Copies them first only if another list shares them, into
  /// storage for at least `capacity` entries.
  std::vector<context_entry>& edit(size_t capacity = 0);

  /// Appends `more` after every entry, all of them shared with the next
  /// copies afterwards (as `edit`). The storage grows by a quarter when
  /// full, so at most a fifth of it stands unused: a live thread keeps its
  /// whole context in memory.
  void append(const std::vector<context_entry>& more);

  /// Every entry, copied.
  std::vector<context_entry> to_vector() const;

  /// True if `other` reads the same shared entries (none copied between).
  bool shares_with(const context_list& other) const {
    return shared_ != nullptr && shared_ == other.shared_;
  }

  /// The shared entries (null if none): the same vector after an `edit`
  /// means the edit copied nothing.
  const std::vector<context_entry>* shared_entries() const {
    return shared_.get();
  }

private:
  size_t shared_count() const {
    return shared_ ? shared_->size() : 0;
  }

  std::shared_ptr<std::vector<context_entry>> shared_;
  std::vector<context_entry> own_;
};

/// Reads a `context_list` by position.
class context_list::const_iterator {
public:
  using iterator_category = std::random_access_iterator_tag;
  using value_type = context_entry;
  using difference_type = std::ptrdiff_t;
  using pointer = const context_entry*;
  using reference = const context_entry&;

  const_iterator() = default;
  const_iterator(const context_list* list, size_t pos)
    : list_(list), pos_(pos) {
    // nop
  }

  reference operator*() const {
    return (*list_)[pos_];
  }
  pointer operator->() const {
    return &**this;
  }
  reference operator[](difference_type n) const {
    return *(*this + n);
  }
  const_iterator& operator+=(difference_type n) {
    pos_ = static_cast<size_t>(static_cast<difference_type>(pos_) + n);
    return *this;
  }
  const_iterator& operator-=(difference_type n) {
    return *this += -n;
  }
  const_iterator& operator++() {
    return *this += 1;
  }
  const_iterator& operator--() {
    return *this -= 1;
  }
  const_iterator operator++(int) {
    auto old = *this;
    ++*this;
    return old;
  }
  const_iterator operator--(int) {
    auto old = *this;
    --*this;
    return old;
  }
  friend const_iterator operator+(const_iterator x, difference_type n) {
    return x += n;
  }
  friend const_iterator operator+(difference_type n, const_iterator x) {
    return x += n;
  }
  friend const_iterator operator-(const_iterator x, difference_type n) {
    return x -= n;
  }
  friend difference_type operator-(const const_iterator& x,
                                   const const_iterator& y) {
    return static_cast<difference_type>(x.pos_)
           - static_cast<difference_type>(y.pos_);
  }
  friend bool operator==(const const_iterator& x, const const_iterator& y) {
    return x.pos_ == y.pos_;
  }
  friend bool operator!=(const const_iterator& x, const const_iterator& y) {
    return x.pos_ != y.pos_;
  }
  friend bool operator<(const const_iterator& x, const const_iterator& y) {
    return x.pos_ < y.pos_;
  }
  friend bool operator>(const const_iterator& x, const const_iterator& y) {
    return y < x;
  }
  friend bool operator<=(const const_iterator& x, const const_iterator& y) {
    return !(y < x);
  }
  friend bool operator>=(const const_iterator& x, const const_iterator& y) {
    return !(x < y);
  }

private:
  const context_list* list_ = nullptr;
  size_t pos_ = 0;
};

inline context_list::const_iterator context_list::begin() const {
  return {this, 0};
}

inline context_list::const_iterator context_list::end() const {
  return {this, size()};
}

inline context_list::const_reverse_iterator context_list::rbegin() const {
  return const_reverse_iterator{end()};
}

inline context_list::const_reverse_iterator context_list::rend() const {
  return const_reverse_iterator{begin()};
}

bool operator==(const context_list& x, const context_list& y);

/// Travels as a plain list of entries.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, context_list& x) {
  std::vector<context_entry> entries;
  if constexpr (Inspector::reads_state)
    entries = x.to_vector();
  auto adopt = caf::meta::load_callback([&]() -> caf::error {
    x = context_list{std::move(entries)};
    return caf::none;
  });
  return f(entries, adopt);
}

} // namespace keel
