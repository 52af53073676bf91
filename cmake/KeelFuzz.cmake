# The libFuzzer build (-DKEEL_FUZZ=ON, scripts/fuzz): clang only, every
# runtime module compiled with coverage, AddressSanitizer and
# UndefinedBehaviorSanitizer, and fuzz/'s targets linked with libFuzzer.
# Included by the top-level CMakeLists.txt before the runtime's modules, so
# the flags reach the code being fuzzed and not only the fuzz targets.

if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR
    "KEEL_FUZZ needs clang (libFuzzer), but the C++ compiler is "
    "${CMAKE_CXX_COMPILER_ID} (${CMAKE_CXX_COMPILER}). Configure a separate "
    "build with -DCMAKE_CXX_COMPILER=clang++, or run scripts/fuzz.")
endif()

# Any undefined behaviour is a crash, as is any ASan report; the runtime's
# own code gets coverage counters (fuzzer-no-link) so libFuzzer steers by it.
set(keel_sanitizers address,undefined)
# -O1 with line tables only: symbolized reports at about half the compile
# time of -O2 -g. Assertions stay on (scripts/fuzz uses the build type
# "Fuzz", which adds no flags of its own).
add_compile_options(-fsanitize=fuzzer-no-link,${keel_sanitizers}
                    -fno-sanitize-recover=undefined -fno-omit-frame-pointer
                    -O1 -gline-tables-only)
add_link_options(-fsanitize=${keel_sanitizers})

include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=fuzzer)
check_cxx_source_compiles([[
  #include <cstddef>
  #include <cstdint>
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }
]] KEEL_HAVE_LIBFUZZER)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
if(NOT KEEL_HAVE_LIBFUZZER)
  message(FATAL_ERROR
    "clang cannot link with -fsanitize=fuzzer: the libFuzzer runtime is "
    "missing (Debian: libclang-rt-14-dev; scripts/setup installs it).")
endif()

# keel_add_fuzzer(NAME SOURCES file.cpp... [LINKS target...] [INCLUDES dir...])
#
# One libFuzzer executable fuzz-NAME from SOURCES (each defining
# LLVMFuzzerTestOneInput), linked with the runtime modules in LINKS and
# seeing the extra include folders INCLUDES (a module's private src/); its
# seed corpus is fuzz/corpus/NAME and its dictionary, if any,
# fuzz/corpus/NAME.dict. scripts/fuzz runs every target so added (the list
# is written to fuzzers.txt in the build folder).
function(keel_add_fuzzer name)
  cmake_parse_arguments(arg "" "" "SOURCES;LINKS;INCLUDES" ${ARGN})
  add_executable(fuzz-${name} ${arg_SOURCES})
  target_include_directories(fuzz-${name} PRIVATE
                             "${PROJECT_SOURCE_DIR}/fuzz" ${arg_INCLUDES})
  target_link_libraries(fuzz-${name} PRIVATE ${arg_LINKS} keel_warnings)
  target_link_options(fuzz-${name} PRIVATE -fsanitize=fuzzer)
  file(APPEND "${CMAKE_BINARY_DIR}/fuzzers.txt" "${name}\n")
endfunction()
file(WRITE "${CMAKE_BINARY_DIR}/fuzzers.txt" "")
