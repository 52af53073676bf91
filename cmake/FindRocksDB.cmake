# Finds RocksDB's header and Debian's static library and exposes them as
# RocksDB::rocksdb (headers as SYSTEM, so our warnings stay ours). Static,
# because the shared library reaches its thread-locals (the perf context,
# read by every key comparison of a memtable insert) through
# __tls_get_addr, which a static link resolves at link time. Debian's own
# CMake package for RocksDB is not used: it expects CMake targets for
# gflags, snappy, lz4 and zstd, which Debian does not ship.
find_path(ROCKSDB_INCLUDE_DIR NAMES rocksdb/db.h)
find_library(ROCKSDB_STATIC_LIBRARY NAMES librocksdb.a)
# The libraries Debian's build of RocksDB was linked with. Only some of the
# archive's objects need gflags (its tools); the linker takes from an
# archive only the objects a binary uses and records a shared library only
# if something uses it (Debian's gcc links --as-needed), so keel-node does not
# load gflags.
set(rocksdb_dependencies gflags snappy z bz2 lz4 zstd)
set(rocksdb_dependency_libraries)
foreach(dependency IN LISTS rocksdb_dependencies)
  find_library(ROCKSDB_${dependency}_LIBRARY NAMES ${dependency})
  list(APPEND rocksdb_dependency_vars ROCKSDB_${dependency}_LIBRARY)
  list(APPEND rocksdb_dependency_libraries "${ROCKSDB_${dependency}_LIBRARY}")
endforeach()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(RocksDB
  REQUIRED_VARS ROCKSDB_INCLUDE_DIR ROCKSDB_STATIC_LIBRARY ${rocksdb_dependency_vars})

if(RocksDB_FOUND AND NOT TARGET RocksDB::rocksdb)
  find_package(Threads REQUIRED)
  add_library(RocksDB::rocksdb STATIC IMPORTED)
  set_target_properties(RocksDB::rocksdb PROPERTIES
    IMPORTED_LOCATION "${ROCKSDB_STATIC_LIBRARY}"
    INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${ROCKSDB_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES
      "${rocksdb_dependency_libraries};Threads::Threads;${CMAKE_DL_LIBS}")
endif()
