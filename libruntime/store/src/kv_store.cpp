#include "kv_store.hpp"

namespace keel {

const std::vector<std::string> column_families{store_backend::cf_names.begin(),
                                               store_backend::cf_names.end()};

store::~store() {
  // nop
}

kv_batch::~kv_batch() {
  // nop
}

kv_engine::~kv_engine() {
  // nop
}

caf::expected<std::unique_ptr<store>>
make_kv_store(std::unique_ptr<kv_engine> engine) {
  auto result = std::make_unique<store_backend::kv_store>(std::move(engine));
  if (auto err = result->check_schema())
    return err;
  return std::unique_ptr<store>{std::move(result)};
}

namespace {

using store_backend::kv_store;

// Records a copy writes per group.
constexpr size_t copy_group_records = 1000;

caf::expected<kv_store*> as_kv_store(store& x) {
  if (auto* result = dynamic_cast<kv_store*>(&x))
    return result;
  return caf::make_error(ec::storage_io, "not a store of this build");
}

// Fails unless `to` holds nothing but its schema version.
caf::error check_empty(kv_engine& to) {
  for (size_t cf = 0; cf < store_backend::cf_count; ++cf) {
    std::optional<std::string> found;
    auto err = to.scan(cf, {}, {}, [&](std::string_view key, std::string_view) {
      if (cf == store_backend::cf_meta && key == store_backend::schema_key)
        return scan_result{};
      found = std::string{key};
      return scan_result{scan_result::stop};
    });
    if (err)
      return err;
    if (found)
      return caf::make_error(
        ec::conflict, "the target already holds data ("
                        + store_backend::printable_key(cf, *found) + " in "
                        + store_backend::cf_names[cf]
                        + "): copy into an empty store (after an interrupted "
                          "copy, empty it first)");
  }
  return caf::none;
}

// Copies family `cf`; returns how many records.
caf::expected<uint64_t> copy_family(kv_engine& from, kv_engine& to, size_t cf) {
  auto batch = to.new_batch();
  uint64_t copied = 0;
  size_t pending = 0;
  caf::error write_err;
  auto err
    = from.scan(cf, {}, {}, [&](std::string_view key, std::string_view value) {
        batch->begin_operation(key.substr(0, key.find('/')), 0);
        batch->put(cf, key, value);
        ++copied;
        if (++pending < copy_group_records)
          return scan_result{};
        pending = 0;
        write_err = to.write(*batch);
        batch->clear();
        return write_err ? scan_result{write_err} : scan_result{};
      });
  if (err)
    return err;
  if (pending > 0)
    if (auto last = to.write(*batch))
      return last;
  return copied;
}

// Compares family `cf` of both, record by record: every record of `from`
// is in `to` with the same bytes, and `to` holds `copied` records.
caf::error compare_family(kv_engine& from, kv_engine& to, size_t cf,
                          uint64_t copied) {
  auto differs = [&](const std::string& what) {
    return caf::make_error(ec::storage_corrupt, std::string{"after the copy, "}
                                                  + store_backend::cf_names[cf]
                                                  + " " + what);
  };
  auto err
    = from.scan(cf, {}, {}, [&](std::string_view key, std::string_view value) {
        auto theirs = to.get(cf, key);
        if (!theirs)
          return scan_result{std::move(theirs.error())};
        if (!*theirs || **theirs != value)
          return scan_result{
            differs("differs at " + store_backend::printable_key(cf, key))};
        return scan_result{};
      });
  if (err)
    return err;
  uint64_t held = 0;
  err = to.scan(cf, {}, {}, [&](std::string_view, std::string_view) {
    ++held;
    return scan_result{};
  });
  if (!err && held != copied)
    return differs("holds " + std::to_string(held) + " records, copied "
                   + std::to_string(copied));
  return err;
}

} // namespace

caf::expected<copy_report> copy_store(store& from_store, store& to_store) {
  auto from = as_kv_store(from_store);
  auto to = as_kv_store(to_store);
  if (!from || !to)
    return !from ? std::move(from.error()) : std::move(to.error());
  auto& src = (*from)->engine();
  auto& dst = (*to)->engine();
  if (auto err = check_empty(dst))
    return err;
  copy_report report;
  for (size_t cf = 0; cf < store_backend::cf_count; ++cf) {
    auto copied = copy_family(src, dst, cf);
    if (!copied)
      return std::move(copied.error());
    report.families.emplace_back(store_backend::cf_names[cf], *copied);
    report.records += *copied;
  }
  for (size_t cf = 0; cf < store_backend::cf_count; ++cf)
    if (auto err = compare_family(src, dst, cf, report.families[cf].second))
      return err;
  return report;
}

} // namespace keel

namespace keel::store_backend {

kv_store::kv_store(std::unique_ptr<kv_engine> engine)
  : engine_(std::move(engine)), batch_(engine_->new_batch()) {
  // nop
}

kv_store::~kv_store() {
  // nop
}

caf::error kv_store::check_schema() {
  auto value = get(cf_meta, schema_key);
  if (!value)
    return caf::make_error(ec::storage_open_failed,
                           "cannot open " + engine_->describe() + ": "
                             + error_message(value.error()));
  if (*value) {
    auto version = parse_decimal(**value);
    if (!version)
      return caf::make_error(ec::storage_open_failed,
                             engine_->describe() + ": schema version '"
                               + **value + "' is not a number");
    if (*version > schema_version)
      return caf::make_error(ec::storage_open_failed,
                             engine_->describe() + ": schema version " + **value
                               + " is newer than this build's "
                               + std::to_string(schema_version));
    if (*version == schema_version)
      return caf::none;
  }
  // A new store, or an older one this build writes records into: builds that
  // cannot read them refuse it from now on.
  if (engine_->read_only())
    return caf::none;
  auto batch = engine_->new_batch();
  batch->begin_operation(schema_key, 0);
  batch->put(cf_meta, schema_key, std::to_string(schema_version));
  if (auto err = engine_->write(*batch))
    return caf::make_error(ec::storage_open_failed,
                           "cannot open " + engine_->describe() + ": "
                             + error_message(err));
  return caf::none;
}

caf::error kv_store::ensure_readable() {
  return engine_->ensure_readable();
}

caf::error kv_store::read_only_error() const {
  return caf::make_error(ec::storage_io, engine_->describe()
                                           + " is open read-only: cannot "
                                             "write");
}

caf::error kv_store::scan(size_t cf, std::string_view lower,
                          std::string_view upper, const scan_fn& fn) {
  return engine_->scan(cf, lower, upper, fn);
}

caf::expected<std::optional<std::string>> kv_store::get(size_t cf,
                                                        std::string_view key) {
  return engine_->get(cf, key);
}

} // namespace keel::store_backend
