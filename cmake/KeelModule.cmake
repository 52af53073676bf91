# keel_add_module(NAME SOURCES src/... [PUBLIC deps...] [PRIVATE deps...])
#
# One module of the runtime (or the tools): a static library keel_NAME with
# the alias keel::NAME, built from the module folder's src/ and exporting
# its include/ (headers as keel/HEADER.hpp). PUBLIC dependencies are what
# the module's headers need; PRIVATE ones stay inside it (RocksDB in store,
# Beast in gateway and provider), so a dependency cannot leak by accident.
function(keel_add_module name)
  cmake_parse_arguments(arg "" "" "SOURCES;PUBLIC;PRIVATE" ${ARGN})
  add_library(keel_${name} STATIC ${arg_SOURCES})
  add_library(keel::${name} ALIAS keel_${name})
  target_include_directories(keel_${name} PUBLIC
                             "${CMAKE_CURRENT_SOURCE_DIR}/include")
  target_link_libraries(keel_${name} PUBLIC ${arg_PUBLIC}
                        PRIVATE keel_warnings ${arg_PRIVATE})
endfunction()
