#define CAF_SUITE chaos_timeline
#include <caf/test/unit_test.hpp>

#include "keel/tools/chaos_run.hpp"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <string_view>
#include <vector>

using namespace keel::chaos;
using std::chrono::milliseconds;

namespace {

size_t count(std::string_view text, std::string_view what) {
  size_t result = 0;
  for (auto i = text.find(what); i != std::string_view::npos;
       i = text.find(what, i + what.size()))
    ++result;
  return result;
}

bool has(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

// A clean run of 12 seconds with a kill, a pause and its end, and a failed
// step at the same time as another.
run_report sample() {
  run_report x;
  x.scenario = "kill-and-pause";
  x.seed = 42;
  x.seconds = 12.4;
  x.sent = 1200;
  x.acknowledged = 1190;
  x.refused = 10;
  x.resends = 17;
  x.reconnects = 5;
  x.outcomes = 1190;
  x.unplanned_exits = 1;
  x.errors_by_code = {{"overloaded", 7}, {"node_restarting", 3}};
  x.recovery = {8, 310.5, 980, 1012.25};
  for (int i = 0; i < 12; ++i) {
    second_figures s;
    s.answered = i == 4 || i == 5 ? 0 : 80 + 10 * (i % 3);
    s.latency_p50_ms = s.answered == 0 ? 0 : 12.5 + i;
    s.latency_max_ms = s.answered == 0 ? 0 : 140 + 30 * i;
    x.timeline.push_back(s);
  }
  x.steps = {{milliseconds{2000}, "kill_actor /user/gateway on node 0", ""},
             {milliseconds{4000}, "pause_node 1 for 2s", ""},
             {milliseconds{4000}, "restart_node 2", "node 2 did not stop"},
             {milliseconds{6000}, "end of pause_node 1 for 2s", ""},
             {milliseconds{11900}, "crash_node 0", ""}};
  return x;
}

// Writes `page` to DIR/NAME.html when KEEL_TIMELINE_HTML names a folder
// DIR, to look at the pages in a browser.
void maybe_write(const std::string& name, const std::string& page) {
  if (auto dir = std::getenv("KEEL_TIMELINE_HTML"))
    std::ofstream{std::string{dir} + "/" + name + ".html"} << page;
}

// The x of every element of class `cls`.
std::vector<double> xs_of(const std::string& page, const std::string& cls) {
  std::vector<double> result;
  auto tag = "class=\"" + cls + "\"";
  for (auto i = page.find(tag); i != std::string::npos;
       i = page.find(tag, i + 1)) {
    auto x = page.find(" x", i) + 2;
    x = page.find('"', x) + 1;
    result.push_back(std::stod(page.substr(x, page.find('"', x) - x)));
  }
  return result;
}

} // namespace

CAF_TEST(a clean run gives one self contained page with a marker per step) {
  auto x = sample();
  auto page = render_html(x);
  maybe_write("clean", page);
  CAF_CHECK_EQUAL(page.rfind("<!DOCTYPE html>", 0), 0u);
  CAF_CHECK(has(page, "<meta charset=\"utf-8\">"));
  CAF_CHECK(has(page, "</html>"));
  CAF_CHECK_EQUAL(count(page, "<svg"), 1u);
  CAF_CHECK_EQUAL(count(page, "</svg>"), 1u);
  CAF_CHECK_EQUAL(count(page, "class=\"marker\""), 1u * 3 + x.steps.size());
  CAF_CHECK_EQUAL(count(page, "class=\"step-label\""), x.steps.size());
  CAF_CHECK_EQUAL(count(page, "<g class=\"step failed\">"), 1u);
  CAF_CHECK_EQUAL(count(page, "<g class=\"label failed\">"), 1u);
  CAF_CHECK_EQUAL(count(page, "<g class=\"step end\">"), 1u);
  CAF_CHECK(has(page, "node 2 did not stop"));
  CAF_CHECK(has(page, "every invariant held"));
  CAF_CHECK(!has(page, "VIOLATED"));
  CAF_CHECK(has(page, "kill-and-pause"));
  CAF_CHECK(has(page, "seed <code>42</code>"));
  CAF_CHECK(has(page, "overloaded"));
  CAF_CHECK(has(page, "1012.2 ms") || has(page, "1012.3 ms"));
  CAF_CHECK(!has(page, "http://"));
  CAF_CHECK(!has(page, "https://"));
  CAF_CHECK(!has(page, "<script"));
  CAF_CHECK(!has(page, "nan\""));
}

CAF_TEST(text from the report is escaped) {
  auto x = sample();
  x.scenario = "a<b>&\"c'";
  x.steps.push_back(
    {milliseconds{3000}, "<script>alert(1)</script> & more", "x<y & \"z\""});
  x.errors_by_code["<code>"] = 1;
  x.violations.push_back({"LOST", "t1/m<1> & 'quoted'"});
  auto page = render_html(x);
  maybe_write("escaped", page);
  CAF_CHECK(!has(page, "<script"));
  CAF_CHECK(!has(page, "<b>"));
  CAF_CHECK(!has(page, "<code>\""));
  CAF_CHECK(has(page, "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more"));
  CAF_CHECK(has(page, "x&lt;y &amp; &quot;z&quot;"));
  CAF_CHECK(has(page, "a&lt;b&gt;&amp;&quot;c&#39;"));
  CAF_CHECK(has(page, "t1/m&lt;1&gt; &amp; &#39;quoted&#39;"));
  CAF_CHECK(has(page, "<code>&lt;code&gt;</code>"));
  CAF_CHECK_EQUAL(count(page, "class=\"step-label\""), x.steps.size());
}

CAF_TEST(a failing run says VIOLATED and lists every violation) {
  auto x = sample();
  x.lost = 1;
  x.duplicated = 1;
  x.violations = {{"LOST", "t3/m17 was acknowledged at seq 12 and is not in "
                           "the history"},
                  {"DUPLICATE", "t1/m2 has two outcomes (seq 5 and 9)"},
                  {"ORDER", "t2 answers m4 before m3"}};
  auto page = render_html(x);
  maybe_write("violated", page);
  CAF_CHECK(has(page, "VIOLATED: 3 violations"));
  CAF_CHECK(has(page, "class=\"banner bad\""));
  CAF_CHECK(!has(page, "class=\"banner ok\""));
  CAF_CHECK_EQUAL(count(page, "<li class=\"violation\">"), 3u);
  for (auto& v : x.violations) {
    CAF_CHECK(
      has(page, "<span class=\"rule\">" + v.rule + "</span>: " + v.text));
  }
  CAF_CHECK_EQUAL(count(page, "<tr class=\"bad\">"), 2u);
}

CAF_TEST(an empty run still gives a page with axes) {
  run_report x;
  x.scenario = "empty";
  auto page = render_html(x);
  maybe_write("empty", page);
  CAF_CHECK_EQUAL(page.rfind("<!DOCTYPE html>", 0), 0u);
  CAF_CHECK_EQUAL(count(page, "<svg"), 1u);
  CAF_CHECK(has(page, "no answers recorded"));
  CAF_CHECK_EQUAL(count(page, "class=\"step-label\""), 0u);
  CAF_CHECK(has(page, "class=\"tick-label\""));
  CAF_CHECK(!has(page, "<path"));
  CAF_CHECK(!has(page, "nan\""));
  CAF_CHECK(!has(page, "inf\""));
  CAF_CHECK(has(page, "every invariant held"));
}

CAF_TEST(one second with zero latencies and many steps at one time) {
  run_report x;
  x.scenario = "crowded";
  x.seconds = 0.8;
  x.timeline.push_back({5, 0, 0});
  for (int i = 0; i < 25; ++i)
    x.steps.push_back({milliseconds{500},
                       "kill_actor /user/a" + std::to_string(i),
                       i % 5 == 0 ? "no such actor" : ""});
  auto page = render_html(x);
  maybe_write("crowded", page);
  CAF_CHECK_EQUAL(count(page, "<svg"), 1u);
  CAF_CHECK_EQUAL(count(page, "class=\"step-label\""), 25u);
  CAF_CHECK_EQUAL(count(page, "<g class=\"step failed\">"), 5u);
  // One second: each latency series is a single dot, not a line.
  CAF_CHECK_EQUAL(count(page, "class=\"p50-dot\""), 1u);
  CAF_CHECK_EQUAL(count(page, "class=\"max-dot\""), 1u);
  CAF_CHECK(!has(page, "nan\""));
  CAF_CHECK(!has(page, "inf\""));
  // Labels of steps at the same time go into lanes of their own: no two
  // labels share a y.
  std::set<std::string> ys;
  for (auto i = page.find("class=\"step-label\""); i != std::string::npos;
       i = page.find("class=\"step-label\"", i + 1)) {
    auto y = page.find(" y=\"", i);
    ys.insert(page.substr(y, page.find('"', y + 4) - y));
  }
  CAF_CHECK_EQUAL(ys.size(), 25u);
}

CAF_TEST(long step texts are shortened on the chart but whole in the table) {
  auto x = sample();
  auto text = std::string(200, 'x') + " \xc3\xa9nd";
  x.steps.push_back({milliseconds{8000}, text, ""});
  auto page = render_html(x);
  CAF_CHECK(has(page, std::string(60, 'x') + "\xe2\x80\xa6</text>"));
  CAF_CHECK(has(page, "<td class=\"mono\">" + text + "</td>"));
}

CAF_TEST(a long run keeps every marker inside the plot in time order) {
  run_report x;
  x.scenario = "soak";
  x.seconds = 300;
  for (int i = 0; i < 300; ++i)
    x.timeline.push_back({static_cast<uint64_t>(200 + (i * 37) % 90),
                          20.0 + (i * 13) % 40, 150.0 + (i * 71) % 900});
  for (int t = 5; t <= 295; t += 5)
    x.steps.push_back(
      {milliseconds{t * 1000}, "kill_actor /user/conversation on node 1", ""});
  x.steps.push_back({milliseconds{299'990}, "crash_node 2 (last)", ""});
  auto page = render_html(x);
  maybe_write("long", page);
  auto markers = xs_of(page, "marker");
  // The legend has three marker swatches (at x1="8" in their own groups).
  CAF_REQUIRE_EQUAL(markers.size(), x.steps.size() + 3);
  markers.erase(markers.begin(), markers.begin() + 3);
  for (size_t i = 0; i < markers.size(); ++i) {
    CAF_CHECK_GREATER_OR_EQUAL(markers[i], 80.0);
    CAF_CHECK_LESS_OR_EQUAL(markers[i], 1100.0);
    if (i > 0)
      CAF_CHECK_GREATER(markers[i], markers[i - 1]);
  }
  // The repeated kill is labelled in full once, then by its kind.
  CAF_CHECK_EQUAL(
    count(page, ">kill_actor /user/conversation on node 1</text>"), 1u);
  CAF_CHECK_EQUAL(count(page, ">kill_actor</text>"), 58u);
  // The last label would run off the right edge: it ends at its marker.
  CAF_CHECK(has(page, "text-anchor=\"end\">crash_node 2 (last)</text>"));
  CAF_CHECK_EQUAL(count(page, "<path class=\"p50\""), 1u);
  CAF_CHECK_EQUAL(count(page, "<path class=\"max\""), 1u);
}
