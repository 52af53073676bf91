#include "fault_file_system.hpp"

namespace keel::store_backend {

namespace {

rocksdb::IOStatus injected_error(fault_injection& faults) {
  ++faults.failed_writes;
  if (faults.no_space)
    return rocksdb::IOStatus::NoSpace("injected fault");
  return rocksdb::IOStatus::IOError("injected fault");
}

// A writable file whose appends fail while `faults.fail_writes` is set.
class faulty_file : public rocksdb::FSWritableFileOwnerWrapper {
public:
  faulty_file(std::unique_ptr<rocksdb::FSWritableFile> file,
              std::shared_ptr<fault_injection> faults)
    : FSWritableFileOwnerWrapper(std::move(file)), faults_(std::move(faults)) {
    // nop
  }

  rocksdb::IOStatus Append(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& opts,
                           rocksdb::IODebugContext* dbg) override {
    if (faults_->fail_writes)
      return injected_error(*faults_);
    return FSWritableFileOwnerWrapper::Append(data, opts, dbg);
  }

  rocksdb::IOStatus Append(const rocksdb::Slice& data,
                           const rocksdb::IOOptions& opts,
                           const rocksdb::DataVerificationInfo& info,
                           rocksdb::IODebugContext* dbg) override {
    if (faults_->fail_writes)
      return injected_error(*faults_);
    return FSWritableFileOwnerWrapper::Append(data, opts, info, dbg);
  }

  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data,
                                     uint64_t offset,
                                     const rocksdb::IOOptions& opts,
                                     rocksdb::IODebugContext* dbg) override {
    if (faults_->fail_writes)
      return injected_error(*faults_);
    return FSWritableFileOwnerWrapper::PositionedAppend(data, offset, opts,
                                                        dbg);
  }

  rocksdb::IOStatus PositionedAppend(const rocksdb::Slice& data,
                                     uint64_t offset,
                                     const rocksdb::IOOptions& opts,
                                     const rocksdb::DataVerificationInfo& info,
                                     rocksdb::IODebugContext* dbg) override {
    if (faults_->fail_writes)
      return injected_error(*faults_);
    return FSWritableFileOwnerWrapper::PositionedAppend(data, offset, opts,
                                                        info, dbg);
  }

private:
  std::shared_ptr<fault_injection> faults_;
};

// The default file system with every writable file wrapped in faulty_file.
class faulty_file_system : public rocksdb::FileSystemWrapper {
public:
  explicit faulty_file_system(std::shared_ptr<fault_injection> faults)
    : FileSystemWrapper(rocksdb::FileSystem::Default()),
      faults_(std::move(faults)) {
    // nop
  }

  const char* Name() const override {
    return "keel.faulty_file_system";
  }

  rocksdb::IOStatus
  NewWritableFile(const std::string& name, const rocksdb::FileOptions& opts,
                  std::unique_ptr<rocksdb::FSWritableFile>* result,
                  rocksdb::IODebugContext* dbg) override {
    return wrap(target()->NewWritableFile(name, opts, result, dbg), result);
  }

  rocksdb::IOStatus
  ReopenWritableFile(const std::string& name, const rocksdb::FileOptions& opts,
                     std::unique_ptr<rocksdb::FSWritableFile>* result,
                     rocksdb::IODebugContext* dbg) override {
    return wrap(target()->ReopenWritableFile(name, opts, result, dbg), result);
  }

  rocksdb::IOStatus
  ReuseWritableFile(const std::string& name, const std::string& old_name,
                    const rocksdb::FileOptions& opts,
                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                    rocksdb::IODebugContext* dbg) override {
    return wrap(target()->ReuseWritableFile(name, old_name, opts, result, dbg),
                result);
  }

private:
  rocksdb::IOStatus wrap(rocksdb::IOStatus status,
                         std::unique_ptr<rocksdb::FSWritableFile>* result) {
    if (status.ok())
      *result = std::make_unique<faulty_file>(std::move(*result), faults_);
    return status;
  }

  std::shared_ptr<fault_injection> faults_;
};

} // namespace

std::shared_ptr<rocksdb::FileSystem>
make_faulty_file_system(std::shared_ptr<fault_injection> faults) {
  return std::make_shared<faulty_file_system>(std::move(faults));
}

} // namespace keel::store_backend
