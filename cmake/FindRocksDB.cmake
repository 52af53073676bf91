# Debian's librocksdb-dev ships no CMake package; this finds the header and
# the library and exposes them as RocksDB::rocksdb (headers as SYSTEM, so
# our warnings stay ours).
find_path(ROCKSDB_INCLUDE_DIR NAMES rocksdb/db.h)
find_library(ROCKSDB_LIBRARY NAMES rocksdb)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(RocksDB
  REQUIRED_VARS ROCKSDB_INCLUDE_DIR ROCKSDB_LIBRARY)

if(RocksDB_FOUND AND NOT TARGET RocksDB::rocksdb)
  add_library(RocksDB::rocksdb UNKNOWN IMPORTED)
  set_target_properties(RocksDB::rocksdb PROPERTIES
    IMPORTED_LOCATION "${ROCKSDB_LIBRARY}"
    INTERFACE_SYSTEM_INCLUDE_DIRECTORIES "${ROCKSDB_INCLUDE_DIR}")
endif()
