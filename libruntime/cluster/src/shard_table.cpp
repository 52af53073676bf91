#include "keel/shard_table.hpp"

#include <algorithm>

namespace keel {

namespace {

bool same_owner(const shard_owner& x, const shard_owner& y) {
  return x.node == y.node && x.address == y.address && x.epoch == y.epoch;
}

} // namespace

// A table of no shards could not hold any thread: zero counts as one (the
// configuration rejects zero before a node gets here).
shard_table::shard_table(std::string me, uint32_t shards)
  : me_(std::move(me)),
    shards_(std::max(shards, uint32_t{1})),
    held_(shards_),
    retiring_(shards_, false),
    owners_(shards_) {
  // nop
}

std::optional<uint64_t> shard_table::held_epoch(shard_id shard) const {
  std::lock_guard<std::mutex> guard{mtx_};
  if (shard >= shards_)
    return std::nullopt;
  return held_[shard];
}

uint64_t shard_table::tenure(std::string_view thread) const {
  return held_epoch(shard_of(thread)).value_or(no_tenure);
}

caf::error shard_table::check_tenure(std::string_view thread,
                                     uint64_t tenure) const {
  if (tenure == 0)
    return caf::none;
  auto shard = shard_of(thread);
  auto held = held_epoch(shard);
  if (held == tenure)
    return caf::none;
  auto loaded = tenure == no_tenure ? std::string{"while it held none"}
                                    : "under epoch " + std::to_string(tenure);
  auto now = held ? "holds it at epoch " + std::to_string(*held)
                  : std::string{"does not hold it"};
  return caf::make_error(
    ec::not_owner, "write fenced off: thread " + std::string{thread}
                     + " was loaded " + loaded + " of shard "
                     + std::to_string(shard) + ", and this node now " + now);
}

bool shard_table::serves(std::string_view thread) const {
  auto shard = shard_of(thread);
  std::lock_guard<std::mutex> guard{mtx_};
  return held_[shard].has_value() && !retiring_[shard];
}

shard_owner shard_table::owner(shard_id shard) const {
  std::lock_guard<std::mutex> guard{mtx_};
  if (shard >= shards_)
    return {};
  return owners_[shard];
}

void shard_table::hold(shard_id shard, uint64_t epoch) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (shard >= shards_ || (held_[shard] == epoch && !retiring_[shard]))
    return;
  held_[shard] = epoch;
  retiring_[shard] = false;
  ++version_;
}

void shard_table::retire(shard_id shard) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (shard >= shards_ || !held_[shard] || retiring_[shard])
    return;
  retiring_[shard] = true;
  ++version_;
}

void shard_table::release(shard_id shard) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (shard >= shards_ || !held_[shard])
    return;
  held_[shard].reset();
  retiring_[shard] = false;
  ++version_;
}

std::vector<shard_id> shard_table::release_all() {
  std::lock_guard<std::mutex> guard{mtx_};
  std::vector<shard_id> released;
  for (shard_id shard = 0; shard < shards_; ++shard) {
    if (held_[shard]) {
      held_[shard].reset();
      retiring_[shard] = false;
      released.push_back(shard);
    }
  }
  if (!released.empty())
    ++version_;
  return released;
}

void shard_table::set_owner(shard_id shard, shard_owner owner) {
  std::lock_guard<std::mutex> guard{mtx_};
  if (shard >= shards_ || same_owner(owners_[shard], owner))
    return;
  owners_[shard] = std::move(owner);
  ++version_;
}

std::vector<shard_id> shard_table::held() const {
  std::lock_guard<std::mutex> guard{mtx_};
  std::vector<shard_id> result;
  for (shard_id shard = 0; shard < shards_; ++shard)
    if (held_[shard])
      result.push_back(shard);
  return result;
}

uint64_t shard_table::version() const {
  std::lock_guard<std::mutex> guard{mtx_};
  return version_;
}

} // namespace keel
