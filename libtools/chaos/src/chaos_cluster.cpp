#include "chaos_cluster.hpp"

#include <algorithm>
#include <filesystem>
#include <map>

#include "keel/sharding.hpp"
#include "keel/tools/json_fields.hpp"
#include "keel/tools/latency.hpp"
#include "keel/tools/process.hpp"
#include "keel/tools/ws_client.hpp"

namespace keel::chaos::detail {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

namespace {

/// A proxy on a port of its own in front of 127.0.0.1:`port`.
std::unique_ptr<fault_proxy> cluster_proxy(uint16_t port) {
  return std::make_unique<fault_proxy>("127.0.0.1", port);
}

/// The libpq URI of the database through a proxy on `port` (the server
/// trusts loopback connections).
std::string cluster_proxied_url(uint16_t port) {
  return "postgresql://keel@127.0.0.1:" + std::to_string(port) + "/keel";
}

} // namespace

cluster_rig::cluster_rig(const scenario& sc)
  : dir_(make_temp_dir("keel-chaos-pg")),
    pg_(std::make_unique<pg_server>(dir_)) {
  auto cut_database = sc.breaks_link("database");
  auto cut_peers = sc.breaks_link("peers");
  for (size_t i = 0; i < sc.nodes.count; ++i) {
    node_wiring w;
    w.database_url = pg_->url();
    if (cut_database) {
      database_links_.push_back(
        cluster_proxy(static_cast<uint16_t>(pg_->port())));
      w.database_url = cluster_proxied_url(database_links_.back()->port());
    }
    w.listen_port = w.advertise_port = free_port();
    if (cut_peers) {
      peer_links_.push_back(cluster_proxy(w.listen_port));
      w.advertise_port = peer_links_.back()->port();
    }
    wiring_.push_back(std::move(w));
  }
}

cluster_rig::~cluster_rig() {
  pg_.reset();
  if (!keep_) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

std::string cluster_rig::url() const {
  return pg_->url();
}

fault_proxy* cluster_rig::link(const std::string& link, size_t index) const {
  auto& links = link == "database" ? database_links_ : peer_links_;
  return index < links.size() ? links[index].get() : nullptr;
}

std::string cluster_rig::keep() {
  keep_ = true;
  return dir_;
}

cluster_watch::cluster_watch(const scenario& sc, const node_set& nodes)
  : sc_(sc), nodes_(nodes) {
  // nop
}

nlohmann::json cluster_watch::view(size_t index) const {
  if (!nodes_.serving(index))
    return {};
  auto res = api_call(nodes_.admin_address(index), "GET", "/api/v1/cluster", {},
                      2s);
  return res ? *res : nlohmann::json{};
}

std::vector<std::string> cluster_watch::threads_of(size_t index) const {
  auto v = view(index);
  if (!v.is_object())
    if (auto other = nodes_.another(index))
      v = view(*other);
  std::vector<std::string> result;
  if (!v.is_object() || !v["owners"].is_array() || v["owners"].empty())
    return result;
  auto& owners = v["owners"];
  auto me = node_id(index);
  for (size_t t = 0; t < sc_.traffic.threads; ++t) {
    auto thread = "t" + std::to_string(t);
    auto shard = shard_of(thread, static_cast<uint32_t>(owners.size()));
    if (owners[shard].is_string() && owners[shard].get<std::string>() == me)
      result.push_back(std::move(thread));
  }
  return result;
}

void cluster_watch::died(size_t index, const std::string& how, milliseconds at,
                         std::vector<std::string> threads) {
  death d;
  d.figures.at = at;
  d.figures.node = node_id(index);
  d.figures.how = how;
  d.figures.threads = threads.size();
  d.threads = std::move(threads);
  deaths_.push_back(std::move(d));
}

void cluster_watch::rebalance(const std::string& step, milliseconds at) {
  windows_.push_back({at, step, milliseconds{-1}});
}

std::set<std::string> cluster_watch::expected_members() const {
  std::set<std::string> result;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_.responsive(i))
      result.insert(node_id(i));
  return result;
}

namespace {

/// Whether `view` shows every shard owned by one of `members`, each holding
/// some, and nothing in motion (no orphan, no handoff).
bool cluster_settled(const nlohmann::json& view,
                     const std::set<std::string>& members) {
  if (!view.is_object() || json_number(view, {"orphans"}) != 0
      || json_number(view, {"handoffs"}) != 0 || !view["owners"].is_array()
      || !view.contains("orphans") || !view.contains("handoffs"))
    return false;
  std::set<std::string> owners;
  for (auto& owner : view["owners"])
    owners.insert(owner.is_string() ? owner.get<std::string>() : "");
  return owners == members;
}

} // namespace

namespace {

bool cluster_window_open(const rebalance_window& w) {
  return w.settled_after.count() < 0;
}

} // namespace

bool cluster_watch::rebalancing() const {
  return std::any_of(windows_.begin(), windows_.end(), cluster_window_open);
}

void cluster_watch::poll(milliseconds now) {
  if (!rebalancing() || now - last_poll_ < 250ms)
    return;
  last_poll_ = now;
  auto members = expected_members();
  if (members.empty())
    return;
  auto first = nodes_.first_responsive();
  if (!first || !cluster_settled(view(*first), members))
    return;
  for (auto& w : windows_)
    if (cluster_window_open(w))
      w.settled_after = now - w.at;
}

void cluster_watch::read_counters(cluster_report& out) const {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    auto v = view(i);
    if (!v.is_object())
      continue;
    out.declared_dead += json_number(v, {"declared_dead"});
    out.claimed += json_number(v, {"claimed"});
    out.handed_over += json_number(v, {"handed_over"});
  }
}

namespace {

using cluster_answer_times = std::map<std::string, std::vector<milliseconds>>;

recovery_figures cluster_summary(bench::latency_recorder& rec) {
  auto s = rec.summary();
  return {rec.count(), s.p50, s.p99, s.max};
}

/// Records, for each of `threads`, the time from `at` to its first answer
/// after `at` (threads never answered again record nothing).
void cluster_first_answers(const cluster_answer_times& times,
                           const std::vector<std::string>& threads,
                           milliseconds at, bench::latency_recorder& out) {
  for (auto& thread : threads) {
    auto i = times.find(thread);
    if (i == times.end())
      continue;
    auto next = std::lower_bound(i->second.begin(), i->second.end(), at);
    if (next != i->second.end())
      out.record(*next - at);
  }
}

bool cluster_within(const std::vector<run_span>& spans, milliseconds t) {
  return std::any_of(spans.begin(), spans.end(), [t](const run_span& s) {
    return s.first <= t && t <= s.second;
  });
}

} // namespace

void cluster_watch::figures(const std::vector<answer_sample>& answers,
                            const std::vector<run_span>& disturbed,
                            milliseconds end, cluster_report& out) const {
  cluster_answer_times times;
  for (auto& a : answers)
    times[a.thread].push_back(a.at);
  for (auto& [thread, ts] : times)
    std::sort(ts.begin(), ts.end());
  bench::latency_recorder all;
  for (auto& d : deaths_) {
    bench::latency_recorder one;
    cluster_first_answers(times, d.threads, d.figures.at, one);
    cluster_first_answers(times, d.threads, d.figures.at, all);
    out.failovers.push_back(d.figures);
    out.failovers.back().time = cluster_summary(one);
  }
  out.failover = cluster_summary(all);
  out.rebalances = windows_;
  std::vector<run_span> windows;
  for (auto& w : windows_)
    windows.emplace_back(
      w.at, w.settled_after.count() < 0 ? end : w.at + w.settled_after);
  bench::latency_recorder rebalancing;
  bench::latency_recorder steady;
  for (auto& a : answers) {
    if (cluster_within(windows, a.at))
      rebalancing.record(a.latency);
    else if (!cluster_within(disturbed, a.at))
      steady.record(a.latency);
  }
  out.rebalance_latency = cluster_summary(rebalancing);
  out.steady_latency = cluster_summary(steady);
}

} // namespace keel::chaos::detail
