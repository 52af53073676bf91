#define CAF_SUITE error_codes

// The codes clients read (`error_code_name`): an `internal` one is a bug of
// the node, so no failure that faults bring about (a component killed or
// restarting, a request not answered in time) may come out as `internal`.

#include "keel/error.hpp"

#include <caf/sec.hpp>
#include <caf/test/unit_test.hpp>

using namespace keel;

CAF_TEST(keel errors go out under their own names) {
  CAF_CHECK_EQUAL(error_code_name(caf::make_error(ec::storage_io, "disk")),
                  "storage_io");
  CAF_CHECK_EQUAL(error_code_name(caf::make_error(ec::unavailable)),
                  "unavailable");
  CAF_CHECK_EQUAL(error_code_name(caf::make_error(ec::not_owner)), "not_owner");
}

CAF_TEST(a request whose receiver died or did not answer is unavailable) {
  // The receiver was killed with the request in its mailbox, or it was sent
  // to an incarnation that had just died.
  CAF_CHECK_EQUAL(
    error_code_name(caf::make_error(caf::sec::request_receiver_down)),
    "unavailable");
  // Nobody answered in time: a component stuck behind a database cut.
  CAF_CHECK_EQUAL(error_code_name(caf::make_error(caf::sec::request_timeout)),
                  "unavailable");
}

CAF_TEST(any other CAF error is internal and its text names it) {
  auto unexpected = caf::make_error(caf::sec::unexpected_message);
  CAF_CHECK_EQUAL(error_code_name(unexpected), "internal");
  CAF_CHECK_EQUAL(readable_message(unexpected), "unexpected_message");
  CAF_CHECK_EQUAL(error_code_name(caf::make_error(caf::sec::runtime_error)),
                  "internal");
}
