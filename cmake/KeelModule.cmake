# keel_add_module(NAME SOURCES src/... [PUBLIC deps...] [PRIVATE deps...])
#
# One module of the runtime (or the tools): a static library keel_NAME with
# the alias keel::NAME, built from the module folder's src/ and exporting
# its include/ (headers as keel/HEADER.hpp). PUBLIC dependencies are what
# the module's headers need; PRIVATE ones stay inside it (RocksDB in store,
# Beast in gateway and http), so a dependency cannot leak by accident.
function(keel_add_module name)
  cmake_parse_arguments(arg "" "" "SOURCES;PUBLIC;PRIVATE" ${ARGN})
  add_library(keel_${name} STATIC ${arg_SOURCES})
  add_library(keel::${name} ALIAS keel_${name})
  target_include_directories(keel_${name} PUBLIC
                             "${CMAKE_CURRENT_SOURCE_DIR}/include")
  target_link_libraries(keel_${name} PUBLIC ${arg_PUBLIC}
                        PRIVATE keel_warnings ${arg_PRIVATE})
endfunction()

# keel_compile_as_one(TARGET...)
#
# Compiles each TARGET's sources as one translation unit (CMake's unity
# build). Modules and tools are split into files by subject for reading,
# but the files of one target include the same heavy headers (CAF, Beast,
# RocksDB, CLI11), which a clean build would otherwise parse and
# instantiate once per file (over a minute of compile time in all). Only
# for targets whose files can share one unit: actors and provider declare
# the same file-local names (`self_ptr`, helpers in anonymous namespaces)
# in several files. -DKEEL_UNITY=OFF compiles file by file, which rebuilds
# less after a small change.
option(KEEL_UNITY "Compile each module and tool target as one unit" ON)
function(keel_compile_as_one)
  if(NOT KEEL_UNITY)
    return()
  endif()
  foreach(target IN LISTS ARGN)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON
                                               UNITY_BUILD_BATCH_SIZE 0)
  endforeach()
endfunction()
