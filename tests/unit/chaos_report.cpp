#define CAF_SUITE chaos_report

// keel-chaos's report as a person reads it and as JSON: an `internal`
// error frame is a bug of the node, so each one a client got is given
// whole (when, which client on which node, the thread and id, its text).

#include <caf/test/unit_test.hpp>

#include "keel/tools/chaos_run.hpp"

#include <chrono>
#include <string>
#include <string_view>

using namespace keel::chaos;
using std::chrono::milliseconds;

namespace {

bool has(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

run_report with_internal_errors() {
  run_report x;
  x.scenario = "mixed";
  x.errors_by_code = {{"internal", 2}, {"unavailable", 5}};
  internal_error refusal;
  refusal.at = milliseconds{4200};
  refusal.client = 3;
  refusal.node = 1;
  refusal.thread = "t7";
  refusal.id = "t7-m12";
  refusal.message = "unexpected_message";
  internal_error outcome;
  outcome.at = milliseconds{9000};
  outcome.client = 0;
  outcome.node = 2;
  outcome.thread = "t0";
  outcome.id = "t0-m3";
  outcome.outcome = true;
  outcome.message = "the node failed to handle a frame: bad_alloc";
  x.internal_errors = {refusal, outcome};
  return x;
}

} // namespace

CAF_TEST(the text report gives every internal frame with its time and text) {
  auto text = render_text(with_internal_errors());
  CAF_CHECK(has(text, "internal errors (2"));
  CAF_CHECK(has(text, "4.2s  client 3 on node 1, t7/t7-m12: "
                      "unexpected_message\n"));
  CAF_CHECK(has(text, "9s  client 0 on node 2, outcome of t0/t0-m3: the "
                      "node failed to handle a frame: bad_alloc\n"));
}

CAF_TEST(the json report gives every internal frame with its time and text) {
  auto j = to_json(with_internal_errors());
  auto& xs = j["internal_errors"];
  CAF_REQUIRE(xs.is_array());
  CAF_REQUIRE_EQUAL(xs.size(), 2u);
  CAF_CHECK_EQUAL(xs[0]["at_ms"], 4200);
  CAF_CHECK_EQUAL(xs[0]["client"], 3);
  CAF_CHECK_EQUAL(xs[0]["node"], 1);
  CAF_CHECK_EQUAL(xs[0]["thread"], "t7");
  CAF_CHECK_EQUAL(xs[0]["id"], "t7-m12");
  CAF_CHECK_EQUAL(xs[0]["outcome"], false);
  CAF_CHECK_EQUAL(xs[0]["message"], "unexpected_message");
  CAF_CHECK_EQUAL(xs[1]["outcome"], true);
}

CAF_TEST(a run without internal frames has no such section) {
  run_report x;
  CAF_CHECK(!has(render_text(x), "internal errors"));
  auto j = to_json(x);
  CAF_CHECK(j["internal_errors"].is_array());
  CAF_CHECK(j["internal_errors"].empty());
}
