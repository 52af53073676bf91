// The test runner's main: CAF's unit test framework (Debian's libcaf-dev
// ships no test library, so the implementation is compiled here).
#include <caf/test/unit_test_impl.hpp>
