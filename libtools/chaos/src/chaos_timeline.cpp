// The timeline page of a keel-chaos run: one self-contained HTML5 document
// (inline CSS and inline SVG, no scripts, nothing loaded from elsewhere)
// that shows answered messages per second and their latency over the run,
// every fault step as a marker at its time, the summary and the violations.
// Every piece of text taken from the report is escaped.

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "keel/text.hpp"
#include "keel/tools/chaos_run.hpp"

namespace keel::chaos {

namespace {

// The chart in SVG user units; the page scales it to the window's width.
constexpr double timeline_width = 1200;
constexpr double timeline_plot_left = 80;
constexpr double timeline_plot_right = 1100;
constexpr double timeline_plot_height = 320;
constexpr double timeline_legend_height = 34;
constexpr double timeline_lane_height = 16;
constexpr double timeline_axis_height = 52;
/// Longer step texts are shortened on the chart (the tooltip and the steps
/// table keep the whole text).
constexpr size_t timeline_label_max_bytes = 60;
/// A generous width of one character of a step label (11px monospace, about
/// 6.6 units), so labels placed this far apart never overlap.
constexpr double timeline_char_width = 7;

/// `text` as well-formed UTF-8 with & < > " ' replaced by entities: safe in
/// element content and in quoted attribute values alike.
std::string timeline_escape(std::string_view text) {
  auto clean = keel::sanitize_utf8(text);
  std::string result;
  result.reserve(clean.size());
  for (char c : clean) {
    switch (c) {
      case '&': result += "&amp;"; break;
      case '<': result += "&lt;"; break;
      case '>': result += "&gt;"; break;
      case '"': result += "&quot;"; break;
      case '\'': result += "&#39;"; break;
      default: result += c;
    }
  }
  return result;
}

/// `x`, or 0 when `x` is not a finite number, so that every number written
/// into the SVG is a valid one.
double timeline_finite(double x) {
  return std::isfinite(x) ? x : 0.0;
}

/// A coordinate with one decimal.
std::string timeline_num(double x) {
  return keel::fixed(timeline_finite(x), 1);
}

/// Milliseconds as the page shows them: one decimal.
std::string timeline_ms(double x) {
  return keel::fixed(timeline_finite(x), 1) + " ms";
}

/// A value axis from 0 to `top` in ticks `step` apart; `step` is 1, 2 or 5
/// times a power of ten, `top` a multiple of it.
struct timeline_axis {
  double top = 1;
  double step = 1;

  /// The number of ticks after 0 (`top / step`).
  int ticks() const {
    return static_cast<int>(std::lround(top / step));
  }
};

/// An axis whose top is at least `max_value` and at least `at_least` (> 0),
/// in at most about `ticks` steps: an all-zero series still gets a scale.
timeline_axis timeline_make_axis(double max_value, double at_least, int ticks) {
  auto value = std::max(timeline_finite(max_value), at_least);
  auto raw = value / ticks;
  auto magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  auto step = magnitude;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * magnitude;
    if (step >= raw)
      break;
  }
  return {std::max(1.0, std::ceil(value / step - 1e-9)) * step, step};
}

/// How many decimals the tick labels of an axis with `step` need.
int timeline_digits(double step) {
  return step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
}

/// Where things go: seconds map onto the plot's width, values onto its
/// height; every value is clamped into the plot.
struct timeline_frame {
  /// Seconds shown, from 0; at least 1.
  double span = 1;
  double plot_top = 0;
  timeline_axis time;
  timeline_axis count;
  timeline_axis latency;

  double x(double seconds) const {
    auto s = std::clamp(timeline_finite(seconds), 0.0, span);
    return timeline_plot_left
           + (timeline_plot_right - timeline_plot_left) * s / span;
  }

  double bottom() const {
    return plot_top + timeline_plot_height;
  }

  double y(double value, const timeline_axis& axis) const {
    auto v = std::clamp(timeline_finite(value), 0.0, axis.top);
    return bottom() - timeline_plot_height * v / axis.top;
  }
};

/// The seconds the chart spans: the timeline, the run and every step fit.
double timeline_span(const run_report& x) {
  auto span = std::max(static_cast<double>(x.timeline.size()),
                       timeline_finite(x.seconds));
  for (auto& s : x.steps)
    span = std::max(span, static_cast<double>(s.at.count()) / 1000);
  return std::max(1.0, std::ceil(span));
}

/// The frame's axes (its `plot_top` is set once the labels are placed).
timeline_frame timeline_make_frame(const run_report& x) {
  timeline_frame f;
  f.span = timeline_span(x);
  f.time = timeline_make_axis(f.span, 1, 12);
  double answered = 0;
  double latency = 0;
  for (auto& s : x.timeline) {
    answered = std::max(answered, static_cast<double>(s.answered));
    latency = std::max({latency, timeline_finite(s.latency_p50_ms),
                        timeline_finite(s.latency_max_ms)});
  }
  // Some headroom, so that the tallest bar and the highest point stay
  // clear of the frame.
  f.count = timeline_make_axis(answered * 1.05, 1, 6);
  f.latency = timeline_make_axis(latency * 1.05, 1, 6);
  return f;
}

/// A step's label: where it goes in the band above the plot.
struct timeline_label {
  const played_step* step = nullptr;
  /// The marker's x.
  double x = 0;
  /// True when the text ends at the marker instead of starting there (near
  /// the right edge, so that it stays inside the chart).
  bool leftward = false;
  /// 0 is the lane next to the plot.
  size_t lane = 0;
  /// The text shown (unescaped), at most `timeline_label_max_bytes` bytes
  /// and an ellipsis.
  std::string text;
};

/// The number of characters (not bytes) of UTF-8 `text`.
size_t timeline_chars(std::string_view text) {
  return static_cast<size_t>(
    std::count_if(text.begin(), text.end(), [](char c) {
      return (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    }));
}

/// `what` shortened to a label, never cutting a character in half.
std::string timeline_short(const std::string& what) {
  auto clean = keel::sanitize_utf8(what);
  if (clean.size() <= timeline_label_max_bytes)
    return clean;
  return std::string{keel::utf8_prefix(clean, timeline_label_max_bytes)}
         + "\u2026";
}

/// The kind of step `what` is: its first word, or "end of " and the word
/// after it. Labels a step whose text was shown before (e.g. a kill
/// repeated every few seconds), to keep the label band low.
std::string timeline_kind(const std::string& what) {
  auto from = what.rfind("end of ", 0) == 0 ? 7 : 0;
  return what.substr(0, what.find(' ', from));
}

/// Places each step's label, in time order, in the lowest lane where it
/// overlaps no label already placed: labels never overlap, and steps at
/// the same time stack up in lanes of their own. A text shown before is
/// labelled by its kind only (the tooltip and the table keep it whole).
std::vector<timeline_label> timeline_place(const run_report& x,
                                           const timeline_frame& f) {
  std::vector<const played_step*> order;
  for (auto& s : x.steps)
    order.push_back(&s);
  std::stable_sort(order.begin(), order.end(),
                   [](auto* a, auto* b) { return a->at < b->at; });
  std::vector<double> lane_end;
  std::vector<timeline_label> result;
  std::set<std::string> seen;
  for (auto* s : order) {
    timeline_label l;
    l.step = s;
    l.x = f.x(static_cast<double>(s->at.count()) / 1000);
    l.text = timeline_short(
      seen.insert(s->what).second ? s->what : timeline_kind(s->what));
    auto w = timeline_char_width * timeline_chars(l.text) + 8;
    l.leftward = l.x + w > timeline_width - 4;
    auto start = l.leftward ? l.x - w : l.x;
    auto free = std::find_if(lane_end.begin(), lane_end.end(),
                             [&](double end) { return end + 6 <= start; });
    l.lane = static_cast<size_t>(free - lane_end.begin());
    if (l.lane == lane_end.size())
      lane_end.push_back(0);
    lane_end[l.lane] = start + w;
    result.push_back(std::move(l));
  }
  return result;
}

/// The number of lanes the labels use.
size_t timeline_lanes(const std::vector<timeline_label>& labels) {
  size_t result = 0;
  for (auto& l : labels)
    result = std::max(result, l.lane + 1);
  return result;
}

/// One row of swatches naming the series and the kinds of markers.
void timeline_legend(std::ostream& out) {
  struct entry {
    const char* swatch;
    const char* label;
  };
  const entry entries[] = {
    {R"(<rect class="bar" x="0" y="-9" width="16" height="10"/>)",
     "answered per second (left)"},
    {R"(<line class="p50" x1="0" y1="-4" x2="18" y2="-4"/>)",
     "latency p50, ms (right)"},
    {R"(<line class="max" x1="0" y1="-4" x2="18" y2="-4"/>)",
     "latency max, ms (right)"},
    {R"(<line class="marker" x1="8" y1="-12" x2="8" y2="3"/>)", "fault step"},
    {R"(<g class="failed"><line class="marker" x1="8" y1="-12" x2="8" )"
     R"(y2="3"/></g>)",
     "failed step"},
    {R"(<g class="end"><line class="marker" x1="8" y1="-12" x2="8" y2="3"/>)"
     R"(</g>)",
     "end of a fault"},
  };
  double x = timeline_plot_left;
  out << "<g class=\"legend\">\n";
  for (auto& e : entries) {
    out << "<g transform=\"translate(" << timeline_num(x) << ",22)\">"
        << e.swatch << "<text x=\"24\" y=\"0\">" << e.label << "</text></g>\n";
    x += 24 + 7 * std::string_view{e.label}.size() + 24;
  }
  out << "</g>\n";
}

/// The left (answered) axis: grid lines, ticks and labels, and its title.
void timeline_count_axis(std::ostream& out, const timeline_frame& f) {
  auto digits = timeline_digits(f.count.step);
  for (int i = 0; i <= f.count.ticks(); ++i) {
    auto v = i * f.count.step;
    auto y = timeline_num(f.y(v, f.count));
    out << "<line class=\"grid\" x1=\"" << timeline_plot_left << "\" y1=\"" << y
        << "\" x2=\"" << timeline_plot_right << "\" y2=\"" << y
        << "\"/><line class=\"tick\" x1=\"" << timeline_plot_left - 5
        << "\" y1=\"" << y << "\" x2=\"" << timeline_plot_left << "\" y2=\""
        << y << "\"/><text class=\"tick-label\" x=\"" << timeline_plot_left - 8
        << "\" y=\"" << y << "\" dy=\"0.35em\" text-anchor=\"end\">"
        << keel::fixed(v, digits) << "</text>\n";
  }
  auto mid = timeline_num(f.plot_top + timeline_plot_height / 2);
  out << "<text class=\"axis-title\" transform=\"translate(22," << mid
      << ") rotate(-90)\" text-anchor=\"middle\">answered / s</text>\n";
}

/// The right (latency) axis: ticks and labels, and its title.
void timeline_latency_axis(std::ostream& out, const timeline_frame& f) {
  auto digits = timeline_digits(f.latency.step);
  for (int i = 0; i <= f.latency.ticks(); ++i) {
    auto v = i * f.latency.step;
    auto y = timeline_num(f.y(v, f.latency));
    out << "<line class=\"tick\" x1=\"" << timeline_plot_right << "\" y1=\""
        << y << "\" x2=\"" << timeline_plot_right + 5 << "\" y2=\"" << y
        << "\"/><text class=\"tick-label\" x=\"" << timeline_plot_right + 8
        << "\" y=\"" << y << "\" dy=\"0.35em\">" << keel::fixed(v, digits)
        << "</text>\n";
  }
  auto mid = timeline_num(f.plot_top + timeline_plot_height / 2);
  out << "<text class=\"axis-title\" transform=\"translate("
      << timeline_width - 14 << "," << mid
      << ") rotate(90)\" text-anchor=\"middle\">latency (ms)</text>\n";
}

/// The bottom (seconds) axis: ticks, labels, its title, and the plot's
/// frame.
void timeline_time_axis(std::ostream& out, const timeline_frame& f) {
  auto digits = timeline_digits(f.time.step);
  auto bottom = timeline_num(f.bottom());
  auto last = static_cast<int>(std::floor(f.span / f.time.step + 1e-9));
  for (int i = 0; i <= last; ++i) {
    auto t = i * f.time.step;
    auto x = timeline_num(f.x(t));
    out << "<line class=\"tick\" x1=\"" << x << "\" y1=\"" << bottom
        << "\" x2=\"" << x << "\" y2=\"" << timeline_num(f.bottom() + 5)
        << "\"/><text class=\"tick-label\" x=\"" << x << "\" y=\""
        << timeline_num(f.bottom() + 18) << "\" text-anchor=\"middle\">"
        << keel::fixed(t, digits) << "</text>\n";
  }
  out << "<text class=\"axis-title\" x=\""
      << timeline_num((timeline_plot_left + timeline_plot_right) / 2)
      << "\" y=\"" << timeline_num(f.bottom() + 42)
      << "\" text-anchor=\"middle\">seconds since the traffic started</text>\n"
      << "<rect class=\"frame\" x=\"" << timeline_plot_left << "\" y=\""
      << timeline_num(f.plot_top) << "\" width=\""
      << timeline_plot_right - timeline_plot_left << "\" height=\""
      << timeline_plot_height << "\"/>\n";
}

/// One bar per second with answers, with its figures as a tooltip; a note
/// in the plot when no second has any.
void timeline_bars(std::ostream& out, const run_report& x,
                   const timeline_frame& f) {
  auto slot = f.x(1) - f.x(0);
  auto gap = std::min(1.0, slot * 0.15);
  bool any = false;
  for (size_t i = 0; i < x.timeline.size(); ++i) {
    auto& s = x.timeline[i];
    if (s.answered == 0)
      continue;
    any = true;
    auto y = f.y(static_cast<double>(s.answered), f.count);
    out << "<rect class=\"bar\" x=\""
        << timeline_num(f.x(static_cast<double>(i)) + gap) << "\" y=\""
        << timeline_num(y) << "\" width=\""
        << timeline_num(std::max(slot - 2 * gap, 0.5)) << "\" height=\""
        << timeline_num(f.bottom() - y) << "\"><title>second " << i << ": "
        << s.answered << " answered, latency p50 "
        << timeline_ms(s.latency_p50_ms) << ", max "
        << timeline_ms(s.latency_max_ms) << "</title></rect>\n";
  }
  if (!any)
    out << "<text class=\"empty\" x=\""
        << timeline_num((timeline_plot_left + timeline_plot_right) / 2)
        << "\" y=\"" << timeline_num(f.plot_top + timeline_plot_height / 2)
        << "\" text-anchor=\"middle\">no answers recorded</text>\n";
}

/// One latency series as a line through the middle of each second with
/// answers; seconds without answers break it (they have no latency), and a
/// second alone between two such gaps gets a dot so that it still shows.
void timeline_latency(std::ostream& out, const run_report& x,
                      const timeline_frame& f, double second_figures::*field,
                      const char* cls) {
  std::string path;
  std::ostringstream dots;
  auto& t = x.timeline;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i].answered == 0)
      continue;
    auto px = timeline_num(f.x(static_cast<double>(i) + 0.5));
    auto py = timeline_num(f.y(t[i].*field, f.latency));
    bool after_gap = i == 0 || t[i - 1].answered == 0;
    if (!path.empty())
      path += ' ';
    path += (after_gap ? "M" : "L") + px + " " + py;
    bool before_gap = i + 1 == t.size() || t[i + 1].answered == 0;
    if (after_gap && before_gap)
      dots << "<circle class=\"" << cls << "-dot\" cx=\"" << px << "\" cy=\""
           << py << "\" r=\"2.5\"/>\n";
  }
  if (!path.empty())
    out << "<path class=\"" << cls << "\" d=\"" << path << "\"/>\n";
  out << dots.str();
}

/// Opens a group of class `cls` for step `s`, with its time, its whole text
/// and any error as the tooltip; failed steps and the ends of faults add
/// the classes `failed` and `end`.
void timeline_open_step(std::ostream& out, const char* cls,
                        const played_step& s) {
  bool failed = !s.error.empty();
  bool end = s.what.rfind("end of ", 0) == 0;
  auto tip = keel::human_duration(s.at) + ": " + s.what;
  if (failed)
    tip += "\nfailed: " + s.error;
  out << "<g class=\"" << cls << (failed ? " failed" : "")
      << (end ? " end" : "") << "\"><title>" << timeline_escape(tip)
      << "</title>";
}

/// Every step as a marker across the plot and a dotted leader up to its
/// label's lane; a wide invisible line makes the marker easy to hover.
void timeline_markers(std::ostream& out, const std::vector<timeline_label>& ls,
                      const timeline_frame& f) {
  for (auto& l : ls) {
    auto x = timeline_num(l.x);
    auto top = timeline_num(f.plot_top);
    auto bottom = timeline_num(f.bottom());
    auto label_y = f.plot_top - 3
                   - timeline_lane_height * static_cast<double>(l.lane);
    timeline_open_step(out, "step", *l.step);
    out << "<line class=\"leader\" x1=\"" << x << "\" y1=\""
        << timeline_num(label_y) << "\" x2=\"" << x << "\" y2=\"" << top
        << "\"/><line class=\"hit\" x1=\"" << x << "\" y1=\"" << top
        << "\" x2=\"" << x << "\" y2=\"" << bottom
        << "\"/><line class=\"marker\" x1=\"" << x << "\" y1=\"" << top
        << "\" x2=\"" << x << "\" y2=\"" << bottom << "\"/></g>\n";
  }
}

/// Every step's label in its lane. Drawn after all the markers, with a
/// white halo, so that no leader line crosses a label.
void timeline_labels(std::ostream& out, const std::vector<timeline_label>& ls,
                     const timeline_frame& f) {
  for (auto& l : ls) {
    auto y = f.plot_top - 6
             - timeline_lane_height * static_cast<double>(l.lane);
    timeline_open_step(out, "label", *l.step);
    out << "<text class=\"step-label\" x=\""
        << timeline_num(l.leftward ? l.x - 3 : l.x + 3) << "\" y=\""
        << timeline_num(y) << "\"" << (l.leftward ? " text-anchor=\"end\"" : "")
        << ">" << timeline_escape(l.text) << "</text></g>\n";
  }
}

/// The whole chart: legend, label lanes, plot and axes. Its height grows
/// with the number of label lanes.
void timeline_svg(std::ostream& out, const run_report& x) {
  auto f = timeline_make_frame(x);
  auto labels = timeline_place(x, f);
  auto lanes = static_cast<double>(timeline_lanes(labels));
  auto band = lanes > 0 ? lanes * timeline_lane_height + 10 : 0.0;
  f.plot_top = timeline_legend_height + band + 6;
  auto height = f.bottom() + timeline_axis_height;
  out << "<svg class=\"chart\" viewBox=\"0 0 " << timeline_width << " "
      << timeline_num(height) << "\" width=\"" << timeline_width
      << "\" height=\"" << timeline_num(height)
      << "\" role=\"img\" aria-label=\"answered messages per second and "
         "their latency over the run, with the fault steps\">\n";
  timeline_legend(out);
  timeline_count_axis(out, f);
  timeline_bars(out, x, f);
  timeline_markers(out, labels, f);
  timeline_labels(out, labels, f);
  timeline_latency(out, x, f, &second_figures::latency_p50_ms, "p50");
  timeline_latency(out, x, f, &second_figures::latency_max_ms, "max");
  timeline_latency_axis(out, f);
  timeline_time_axis(out, f);
  out << "</svg>\n";
}

/// The page's whole style: system fonts only, nothing loaded from elsewhere.
constexpr const char* timeline_css = R"(
body { font: 14px/1.45 system-ui, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
  color: #212529; background: #fff; max-width: 1240px; margin: 20px auto;
  padding: 0 16px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 26px 0 8px; }
code, .mono { font-family: ui-monospace, "DejaVu Sans Mono", Menlo,
  Consolas, monospace; }
.banner { padding: 12px 18px; border-radius: 6px; border-left: 10px solid; }
.banner.ok { background: #ebfbee; border-color: #2f9e44; }
.banner.bad { background: #fff5f5; border-color: #e03131; }
.verdict { font-size: 20px; font-weight: 700; margin: 2px 0; }
.ok .verdict { color: #2b8a3e; }
.bad .verdict { color: #c92a2a; }
.meta { color: #495057; margin: 0; }
svg.chart { display: block; width: 100%; height: auto; margin-top: 8px; }
svg text { font: 12px system-ui, "DejaVu Sans", sans-serif; fill: #495057; }
svg .legend text { fill: #212529; }
svg .axis-title { font-weight: 600; }
svg .empty { font-size: 16px; fill: #868e96; }
svg .grid { stroke: #e9ecef; }
svg .tick, svg .frame { stroke: #868e96; fill: none; }
svg .bar { fill: #74c0fc; }
svg .bar:hover { fill: #339af0; }
svg .p50 { stroke: #2b8a3e; stroke-width: 2; fill: none;
  stroke-linejoin: round; }
svg .max { stroke: #9c36b5; stroke-width: 1.5; fill: none;
  stroke-linejoin: round; }
svg .p50-dot { fill: #2b8a3e; }
svg .max-dot { fill: #9c36b5; }
svg .marker { stroke: #343a40; stroke-width: 1.3; }
svg .leader { stroke: #adb5bd; stroke-dasharray: 2 2; }
svg .hit { stroke: transparent; stroke-width: 9; }
svg .step-label { font: 11px ui-monospace, "DejaVu Sans Mono", Menlo,
  Consolas, monospace; fill: #343a40; paint-order: stroke; stroke: #fff;
  stroke-width: 3px; stroke-linejoin: round; }
svg .end .marker { stroke-dasharray: 5 4; opacity: 0.45; }
svg .end .step-label { fill: #868e96; }
svg .failed .marker { stroke: #e8590c; stroke-width: 2.2; opacity: 1; }
svg .failed .step-label { fill: #d9480f; font-weight: 700; }
svg .label:hover .step-label { fill: #000; }
.tables { display: flex; flex-wrap: wrap; gap: 18px; align-items: flex-start; }
table { border-collapse: collapse; min-width: 190px; }
caption { text-align: left; font-weight: 600; padding-bottom: 4px; }
th, td { padding: 3px 10px; border-bottom: 1px solid #e9ecef; text-align: left;
  vertical-align: top; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.bad td, li.violation .rule, td.error { color: #c92a2a; font-weight: 600; }
ol.violations li { margin: 3px 0; }
.none { color: #495057; }
)";

/// The banner: scenario, seed, length and the verdict in words and colour.
void timeline_banner(std::ostream& out, const run_report& x) {
  out << "<header class=\"banner " << (x.clean() ? "ok" : "bad")
      << "\">\n<h1>keel-chaos: <code>" << timeline_escape(x.scenario)
      << "</code></h1>\n<p class=\"meta\">seed <code>" << x.seed
      << "</code> &middot; " << keel::fixed(timeline_finite(x.seconds), 1)
      << " s &middot; " << x.steps.size()
      << " steps</p>\n<p class=\"verdict\">";
  if (x.clean())
    out << "every invariant held";
  else
    out << "VIOLATED: " << x.violations.size()
        << (x.violations.size() == 1 ? " violation" : " violations");
  out << "</p>\n</header>\n";
}

/// A row of a summary table; `bad` marks a figure that should be zero.
void timeline_row(std::ostream& out, const char* label,
                  const std::string& value, bool bad = false) {
  out << "<tr" << (bad ? " class=\"bad\"" : "") << "><th>" << label
      << "</th><td class=\"n\">" << value << "</td></tr>\n";
}

/// A cluster run's figures: failover, rebalances and their latency, the
/// database's verification.
void timeline_cluster(std::ostream& out, const cluster_report& c) {
  using std::to_string;
  out << "<table class=\"summary\"><caption title=\"from a node's death to "
         "the first answer on each of its threads\">Cluster of "
      << c.nodes << " nodes</caption>\n";
  timeline_row(out, "failover p50", timeline_ms(c.failover.p50_ms));
  timeline_row(out, "failover p99", timeline_ms(c.failover.p99_ms));
  timeline_row(out, "failover max", timeline_ms(c.failover.max_ms));
  timeline_row(out, "rebalances", to_string(c.rebalances.size()));
  timeline_row(out, "latency p99, rebalancing",
               timeline_ms(c.rebalance_latency.p99_ms));
  timeline_row(out, "latency p99, steady",
               timeline_ms(c.steady_latency.p99_ms));
  timeline_row(out, "restarts after exit 75", to_string(c.declared_dead_exits));
  timeline_row(out, "keelctl verify --pg", "exit " + to_string(c.verify_exit),
               c.verify_exit != 0);
  out << "</table>\n";
}

/// The counts, the recovery figures and the error frames by code, as small
/// tables side by side.
void timeline_summary(std::ostream& out, const run_report& x) {
  using std::to_string;
  out << "<h2>Summary</h2>\n<div class=\"tables\">\n"
      << "<table class=\"summary\"><caption>Messages</caption>\n";
  timeline_row(out, "sent", to_string(x.sent));
  timeline_row(out, "acknowledged", to_string(x.acknowledged));
  timeline_row(out, "refused", to_string(x.refused));
  timeline_row(out, "unknown", to_string(x.unknown), x.unknown > 0);
  timeline_row(out, "resends", to_string(x.resends));
  timeline_row(out, "outcomes", to_string(x.outcomes));
  timeline_row(out, "lost", to_string(x.lost), x.lost > 0);
  timeline_row(out, "duplicated", to_string(x.duplicated), x.duplicated > 0);
  timeline_row(out, "answered / s", keel::fixed(x.answered_per_second, 1));
  out << "</table>\n<table class=\"summary\"><caption>Nodes and "
         "connections</caption>\n";
  timeline_row(out, "reconnects", to_string(x.reconnects));
  timeline_row(out, "unplanned node exits", to_string(x.unplanned_exits));
  timeline_row(out, "kill point deaths", to_string(x.kill_point_deaths));
  out << "</table>\n<table class=\"summary\"><caption title=\"from a fault "
         "to the first answer on a thread, over every (fault, thread) "
         "pair\">Recovery after a fault</caption>\n";
  timeline_row(out, "samples", to_string(x.recovery.samples));
  timeline_row(out, "p50", timeline_ms(x.recovery.p50_ms));
  timeline_row(out, "p99", timeline_ms(x.recovery.p99_ms));
  timeline_row(out, "max", timeline_ms(x.recovery.max_ms));
  out << "</table>\n";
  if (x.cluster.enabled)
    timeline_cluster(out, x.cluster);
  out << "<table class=\"summary\"><caption>Error frames by "
         "code</caption>\n";
  if (x.errors_by_code.empty())
    out << "<tr><td class=\"none\">none</td></tr>\n";
  for (auto& [code, n] : x.errors_by_code)
    out << "<tr><th><code>" << timeline_escape(code)
        << "</code></th><td class=\"n\">" << n << "</td></tr>\n";
  out << "</table>\n</div>\n";
}

/// Every step with its time and, when it failed, why.
void timeline_step_table(std::ostream& out, const run_report& x) {
  out << "<h2>Steps</h2>\n";
  if (x.steps.empty()) {
    out << "<p class=\"none\">none</p>\n";
    return;
  }
  out << "<table class=\"steps\">\n<tr><th>at</th><th>step</th><th>result"
         "</th></tr>\n";
  for (auto& s : x.steps) {
    out << "<tr><td class=\"n\">" << timeline_escape(keel::human_duration(s.at))
        << "</td><td class=\"mono\">" << timeline_escape(s.what) << "</td>";
    if (s.error.empty())
      out << "<td>ok</td></tr>\n";
    else
      out << "<td class=\"error\">failed: " << timeline_escape(s.error)
          << "</td></tr>\n";
  }
  out << "</table>\n";
}

/// Every violation with its rule, or a line saying there is none.
void timeline_violations(std::ostream& out, const run_report& x) {
  out << "<h2>Violations</h2>\n";
  if (x.violations.empty()) {
    out << "<p class=\"none\">none: every invariant held</p>\n";
    return;
  }
  out << "<ol class=\"violations\">\n";
  for (auto& v : x.violations)
    out << "<li class=\"violation\"><span class=\"rule\">"
        << timeline_escape(v.rule) << "</span>: " << timeline_escape(v.text)
        << "</li>\n";
  out << "</ol>\n";
}

} // namespace

std::string render_html(const run_report& x) {
  std::ostringstream out;
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta "
         "charset=\"utf-8\">\n<meta name=\"viewport\" "
         "content=\"width=device-width, initial-scale=1\">\n<title>keel-chaos "
      << timeline_escape(x.scenario) << " (seed " << x.seed
      << "): " << (x.clean() ? "every invariant held" : "VIOLATED")
      << "</title>\n<style>" << timeline_css << "</style>\n</head>\n<body>\n";
  timeline_banner(out, x);
  out << "<h2>Timeline</h2>\n";
  timeline_svg(out, x);
  timeline_summary(out, x);
  timeline_violations(out, x);
  timeline_step_table(out, x);
  out << "</body>\n</html>\n";
  return out.str();
}

} // namespace keel::chaos
