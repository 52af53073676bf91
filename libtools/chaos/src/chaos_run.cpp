#include "keel/tools/chaos_run.hpp"

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <thread>

#include "chaos_cluster.hpp"
#include "chaos_nodes.hpp"
#include "chaos_traffic.hpp"
#include "keel/protocol.hpp"
#include "keel/text.hpp"
#include "keel/tools/fault_llm_server.hpp"
#include "keel/tools/fault_proxy.hpp"
#include "keel/tools/json_fields.hpp"
#include "keel/tools/latency.hpp"
#include "keel/tools/process.hpp"
#include "keel/tools/ws_client.hpp"

namespace keel::chaos {

namespace {

using namespace detail;
using namespace std::chrono_literals;
using std::chrono::duration_cast;
using std::chrono::milliseconds;

using history_map = std::map<std::string, std::vector<history_entry>>;

/// A moment of a step: its start, or the end of a fault that lasts.
struct event {
  milliseconds at{0};
  const step* source = nullptr;
  /// False for the end of a pause or a disk fault.
  bool begins = true;
};

/// The steps as events in time order (repeated kills expanded).
std::vector<event> expand(const scenario& sc) {
  std::vector<event> result;
  for (auto& x : sc.steps) {
    if (x.what == action::kill_actor && x.every.count() > 0) {
      auto until = x.until.count() > 0 ? x.until : sc.traffic.duration;
      for (auto t = x.at; t <= until; t += x.every)
        result.push_back({t, &x, true});
      continue;
    }
    result.push_back({x.at, &x, true});
    if (x.lasting.count() > 0)
      result.push_back({x.at + x.lasting, &x, false});
  }
  std::stable_sort(result.begin(), result.end(),
                   [](const event& a, const event& b) { return a.at < b.at; });
  return result;
}

/// Reads the whole history of `thread`; nullopt when it could not.
std::optional<std::vector<history_entry>>
read_history(ws_client& ws, const std::string& thread) {
  std::vector<history_entry> result;
  uint64_t after = 0;
  for (;;) {
    if (ws.send_text(protocol::history_request_frame(thread, "h", after, 1000)))
      return std::nullopt;
    nlohmann::json page;
    do {
      auto msg = ws.receive(10s);
      if (!msg)
        return std::nullopt;
      page = nlohmann::json::parse(msg->payload, nullptr, false);
    } while (!page.is_object() || json_string(page, "type") != "history"
             || json_string(page, "thread") != thread);
    for (auto& j : page.value("entries", nlohmann::json::array())) {
      history_entry e;
      if (from_json(j, e))
        result.push_back(std::move(e));
    }
    if (!page.value("more", false) || result.empty())
      return result;
    after = result.back().seq;
  }
}

class runner {
public:
  runner(const scenario& sc, const run_options& opts, const std::string& dir)
    : sc_(sc),
      opts_(opts),
      servers_(start_servers(sc)),
      server_links_(link_servers(sc, servers_)),
      rig_(sc.cluster() ? std::make_unique<cluster_rig>(sc) : nullptr),
      nodes_(sc, opts.node_binary, dir, urls(servers_, server_links_),
             rig_ ? rig_->wiring() : std::vector<node_wiring>{}),
      watch_(sc, nodes_) {
    for (size_t i = 0; i < sc.traffic.connections; ++i)
      clients_.push_back(std::make_unique<traffic_client>(sc, i, nodes_, ctl_));
  }

  /// The clients' threads, stopped and joined when this goes out of scope,
  /// also when a step throws: a joinable thread left to its destructor
  /// would end keel-chaos in std::terminate instead of an error naming the
  /// step.
  class client_threads {
  public:
    explicit client_threads(traffic_control& ctl) : ctl_(ctl) {
    }
    client_threads(const client_threads&) = delete;
    client_threads& operator=(const client_threads&) = delete;
    ~client_threads() {
      ctl_.stop = true;
      for (auto& t : threads_)
        t.join();
    }
    template <class F>
    void start(F f) {
      threads_.emplace_back(std::move(f));
    }

  private:
    traffic_control& ctl_;
    std::vector<std::thread> threads_;
  };

  run_report run() {
    report_.scenario = sc_.name;
    report_.seed = sc_.seed;
    ctl_.start = clock_type::now();
    {
      client_threads threads{ctl_};
      for (auto& c : clients_)
        threads.start([&c] { c->run(); });
      play_steps();
      settle();
    }
    conclude();
    report_.seconds
      = std::chrono::duration<double>(clock_type::now() - ctl_.start).count();
    if (rig_ && (!report_.clean() || opts_.keep_database)) {
      report_.cluster.database_folder = rig_->keep();
      say("PostgreSQL's folder kept in " + report_.cluster.database_folder);
    }
    return std::move(report_);
  }

private:
  void say(const std::string& line) {
    if (opts_.progress)
      opts_.progress(line);
  }

  milliseconds elapsed() const {
    return duration_cast<milliseconds>(clock_type::now() - ctl_.start);
  }

  /// Waits until `at` from the start, restarting nodes that exited on
  /// their own meanwhile and watching the cluster settle.
  void wait_until(milliseconds at) {
    while (elapsed() < at) {
      nodes_.restart_exited(exits_);
      if (rig_)
        watch_.poll(elapsed());
      std::this_thread::sleep_for(std::min<milliseconds>(at - elapsed(), 50ms));
    }
  }

  /// Waits (as wait_until does) until `done` holds, checking it every
  /// 200 ms; false when `timeout` passed first.
  template <class Pred>
  bool wait_for(Pred done, milliseconds timeout) {
    auto deadline = elapsed() + timeout;
    while (!done()) {
      if (elapsed() >= deadline)
        return false;
      wait_until(elapsed() + 200ms);
    }
    return true;
  }

  void play_steps() {
    auto events = expand(sc_);
    bool sending = true;
    for (auto& ev : events) {
      if (sending && ev.at > sc_.traffic.duration) {
        wait_until(sc_.traffic.duration);
        stop_sending();
        sending = false;
      }
      wait_until(ev.at);
      play(ev);
    }
    if (sending) {
      wait_until(sc_.traffic.duration);
      stop_sending();
    }
    nodes_.restart_killed();
    nodes_.disarm_all();
  }

  void stop_sending() {
    ctl_.sending = false;
    say("traffic stopped at " + human_duration(elapsed()));
  }

  void play(const event& ev) {
    auto& x = *ev.source;
    played_step played;
    played.at = elapsed();
    played.what = ev.begins ? describe(x)
                            : std::string{"end of "} + describe(x);
    try {
      played.error = act(x, ev.begins);
    } catch (const std::exception& e) {
      played.error = e.what();
    }
    if (ev.begins && !changes_membership(x)) {
      faults_.push_back(played.at);
      disturbed_.emplace_back(played.at, played.at + x.lasting + 2s);
    }
    if (ev.begins && rig_ && changes_membership(x))
      watch_.rebalance(played.what, played.at);
    say(human_duration(played.at) + ": " + played.what
        + (played.error.empty() ? "" : " FAILED: " + played.error));
    report_.steps.push_back(std::move(played));
  }

  /// The step in words; in a cluster, with the cluster id of the node it
  /// acts on.
  std::string describe(const step& x) const {
    auto on_node = x.what != action::provider_fault
                   && x.what != action::restart_db
                   && !(x.what == action::link_fault && x.link == "provider");
    return to_string(x) + (rig_ && on_node ? " (" + node_id(x.node) + ")" : "");
  }

  /// Restarts, joins and drains: not faults, but the shards move.
  static bool changes_membership(const step& x) {
    return x.what == action::restart_node || x.what == action::start_node
           || x.what == action::drain_node;
  }

  /// Does the step (or ends it); returns "" or why it failed.
  std::string act(const step& x, bool begins) {
    switch (x.what) {
      case action::kill_actor:
        return call(x.node, "/api/v1/kill",
                    {{"path", x.path}, {"reason", "keel-chaos"}});
      case action::kill_node:
      case action::pause_node:
        if (begins)
          take_down(x);
        else
          nodes_.resume(x.node);
        return {};
      case action::restart_node: nodes_.restart(x.node); return {};
      case action::start_node: nodes_.start(x.node); return {};
      case action::drain_node: return drain(x.node);
      case action::restart_db: return restart_db(x, begins);
      case action::disk_fault:
        return call(x.node, "/api/v1/chaos/disk",
                    {{"fail_writes", begins},
                     {"no_space", begins && x.disk_error == "enospc"}});
      case action::provider_fault:
        servers_.at(x.server)->set_default(
          begins ? *fault_llm::parse_fault(x.fault_spec) : fault_llm::fault{});
        return {};
      case action::link_fault: break_link(x, begins); return {};
      case action::kill_point:
        if (!nodes_.arm(x.node, x.kill_point_name + ":"
                                  + std::to_string(x.probability) + ":"
                                  + std::to_string(sc_.seed | 1)))
          ++report_.kill_point_deaths;
        return {};
    }
    return {};
  }

  /// kill -9 or SIGSTOP; in a cluster, first notes which threads the node
  /// owns, whose failover is measured from now.
  void take_down(const step& x) {
    std::vector<std::string> threads;
    if (rig_)
      threads = watch_.threads_of(x.node);
    if (x.what == action::kill_node)
      nodes_.kill9(x.node);
    else
      nodes_.pause(x.node);
    if (rig_)
      watch_.died(x.node, to_string(x.what), elapsed(), std::move(threads));
  }

  /// Asks another node to drain `index`, waits until it holds no shard and
  /// the cluster sees none owned by it, then stops it with SIGTERM.
  std::string drain(size_t index) {
    auto via = nodes_.another(index);
    if (!via)
      return "no other running node to ask";
    auto res = api_call(nodes_.admin_address(*via), "POST",
                        "/api/v1/cluster/drain",
                        nlohmann::json{{"node", node_id(index)}}.dump(), 5s);
    if (!res)
      return "POST /api/v1/cluster/drain: " + error_message(res.error());
    auto empty = wait_for([&] { return holds_nothing(index); }, drain_timeout);
    auto code = nodes_.stop(index);
    if (!empty) {
      auto why = node_id(index) + " still held shards "
                 + human_duration(drain_timeout) + " after its drain";
      step_violations_.push_back({"DRAIN", why});
      return why + " (stopped anyway)";
    }
    return code == 0 ? std::string{}
                     : "exited with " + std::to_string(code) + " on SIGTERM";
  }

  /// How long a drained node may take to hand every shard away.
  static constexpr milliseconds drain_timeout{120000};

  /// Whether node `index` says it holds no shard and its view of the
  /// shards names no shard of its own.
  bool holds_nothing(size_t index) {
    auto v = watch_.view(index);
    if (!v.is_object() || !v.contains("held") || json_number(v, {"held"}) > 0)
      return false;
    auto me = node_id(index);
    for (auto& owner : v["owners"])
      if (owner.is_string() && owner.get<std::string>() == me)
        return false;
    return true;
  }

  std::string restart_db(const step& x, bool begins) {
    auto& pg = rig_->server();
    if (!begins)
      pg.start();
    else if (x.db_mode == "kill9")
      pg.kill9();
    else
      pg.stop();
    return {};
  }

  void break_link(const step& x, bool begins) {
    auto proxy = x.link == "clients"    ? nodes_.link(x.node)
                 : x.link == "provider" ? server_links_.at(x.server).get()
                                        : rig_->link(x.link, x.node);
    if (!begins) {
      proxy->set_mode(link_mode::pass);
      return;
    }
    auto mode = x.link_mode == "delay"       ? link_mode::delay
                : x.link_mode == "blackhole" ? link_mode::blackhole
                                             : link_mode::reset;
    proxy->set_mode(mode, x.link_delay);
  }

  /// POSTs `body` to node `node`'s admin API; "" or why it failed. A node
  /// that cannot be reached is tried again for up to 10 s: one that an
  /// armed kill point took down is restarted meanwhile (by `wait_until`),
  /// and the step acts on it then rather than failing.
  std::string call(size_t node, const std::string& target,
                   const nlohmann::json& body) {
    std::string why;
    wait_for(
      [&] {
        auto res = api_call(nodes_.admin_address(node), "POST", target,
                            body.dump(), 5s);
        why = res ? std::string{} : error_message(res.error());
        return res || res.error() != ec::connection_failed;
      },
      10s);
    return why;
  }

  size_t unacknowledged() const {
    size_t n = 0;
    for (auto& c : clients_)
      n += c->unacknowledged();
    return n;
  }

  /// Waits (up to answer_timeout) until every send is acknowledged and
  /// every stored message has its outcome.
  void settle() {
    auto deadline = elapsed() + sc_.traffic.answer_timeout;
    while (unacknowledged() > 0 && elapsed() < deadline)
      wait_until(elapsed() + 100ms);
    say("every send answered at " + human_duration(elapsed()) + " ("
        + std::to_string(unacknowledged()) + " still unacknowledged)");
    // A membership change near the end may still be moving shards.
    if (rig_ && !wait_for([&] { return !watch_.rebalancing(); }, 30s))
      say("the cluster did not settle within 30 s after the traffic");
    for (;;) {
      histories_ = read_histories();
      auto merged = merged_record();
      auto found = check(merged, histories_);
      bool waiting = std::any_of(found.begin(), found.end(), [](auto& v) {
        return v.rule == "UNANSWERED";
      });
      if (!waiting || elapsed() >= deadline)
        return;
      wait_until(elapsed() + 500ms);
    }
  }

  history_map read_histories() {
    history_map result;
    for (auto& c : clients_) {
      // In a cluster any running node reads every thread.
      auto node = rig_ ? nodes_.first_responsive().value_or(0) : c->node();
      auto ws = ws_client::connect(nodes_.address(node), "/ws", 5s);
      for (auto& thread : c->threads()) {
        auto h = ws ? read_history(**ws, thread) : std::nullopt;
        result[thread] = h ? std::move(*h) : std::vector<history_entry>{};
      }
    }
    return result;
  }

  record merged_record() {
    record result;
    for (auto& c : clients_)
      result.merge(c->result().rec);
    return result;
  }

  void conclude() {
    auto rec = merged_record();
    sabotage(rec);
    report_.violations = check(rec, histories_);
    report_.violations.insert(report_.violations.end(),
                              step_violations_.begin(), step_violations_.end());
    count(rec);
    verify();
    figures();
  }

  /// --sabotage: tampers with the record or a history (see run_options).
  void sabotage(record& rec) {
    auto& what = opts_.sabotage;
    if (what == "lost" && !rec.threads().empty()) {
      auto& thread = rec.threads().begin()->second;
      auto& fake = thread["sabotage-lost"];
      fake.thread = rec.threads().begin()->first;
      fake.id = "sabotage-lost";
      fake.acked = true;
      fake.seq = 1'000'000;
      return;
    }
    for (auto& [thread, log] : histories_) {
      std::vector<size_t> outcomes;
      for (size_t i = 0; i < log.size(); ++i)
        if (log[i].kind != "user")
          outcomes.push_back(i);
      if (what == "duplicate" && !outcomes.empty()) {
        auto copy = log[outcomes[0]];
        copy.seq = log.back().seq + 1;
        log.push_back(copy);
        return;
      }
      if (what == "order" && outcomes.size() >= 2) {
        std::swap(log[outcomes[0]].reply_to, log[outcomes[1]].reply_to);
        std::swap(log[outcomes[0]].client_id, log[outcomes[1]].client_id);
        return;
      }
    }
  }

  void count(const record& rec) {
    report_.acknowledged = rec.acknowledged();
    report_.unknown = rec.unknown();
    for (auto& c : clients_) {
      auto& r = c->result();
      report_.sent += r.sent;
      report_.resends += r.resends;
      report_.reconnects += r.reconnects;
      for (auto& [code, n] : r.errors_by_code)
        report_.errors_by_code[code] += n;
      auto& internal = report_.internal_errors;
      internal.insert(internal.end(), r.internal_errors.begin(),
                      r.internal_errors.end());
    }
    std::stable_sort(report_.internal_errors.begin(),
                     report_.internal_errors.end(),
                     [](auto& a, auto& b) { return a.at < b.at; });
    for (auto& [thread, msgs] : rec.threads())
      for (auto& [id, m] : msgs)
        report_.refused += m.refusal.empty() ? 0 : 1;
    for (auto& [thread, log] : histories_)
      for (auto& e : log)
        report_.outcomes += e.kind == "user" ? 0 : 1;
    for (auto& v : report_.violations) {
      report_.lost += v.rule == "LOST" ? 1 : 0;
      report_.duplicated += v.rule == "DUPLICATE" ? 1 : 0;
    }
    report_.unplanned_exits = exits_.unplanned;
    report_.kill_point_deaths += exits_.armed;
    report_.cluster.enabled = rig_ != nullptr;
    report_.cluster.nodes = rig_ ? sc_.nodes.count : 0;
    report_.cluster.declared_dead_exits = exits_.declared_dead;
  }

  /// Stops the nodes and runs `keelctl verify` on each data folder, or on
  /// the cluster's database.
  void verify() {
    if (rig_)
      watch_.read_counters(report_.cluster);
    if (!nodes_.stop_all())
      report_.violations.push_back(
        {"STOP", "a node did not stop cleanly on SIGTERM"});
    if (rig_) {
      verify_database();
      return;
    }
    for (auto& dir : nodes_.data_dirs()) {
      auto res
        = run_command({opts_.keelctl_binary, "verify", "--data-dir", dir});
      if (res.exit_code != 0)
        report_.violations.push_back(
          {"VERIFY", "keelctl verify --data-dir " + dir + " exited with "
                       + std::to_string(res.exit_code) + ": " + res.out
                       + res.err});
    }
  }

  /// `keelctl verify --pg` on the database the cluster's nodes shared (all
  /// of them stopped: a running node's sessions would be ACTIVE).
  void verify_database() {
    auto res = run_command(
      {opts_.keelctl_binary, "verify", "--pg", rig_->url()}, 300s);
    auto& c = report_.cluster;
    c.verify_exit = res.exit_code;
    c.verify_output = res.out + res.err;
    while (!c.verify_output.empty() && c.verify_output.back() == '\n')
      c.verify_output.pop_back();
    if (res.exit_code != 0)
      report_.violations.push_back({"VERIFY", "keelctl verify --pg exited with "
                                                + std::to_string(res.exit_code)
                                                + ": " + c.verify_output});
  }

  void figures() {
    std::map<std::string, std::vector<milliseconds>> by_thread;
    std::map<int64_t, bench::latency_recorder> by_second;
    for (auto& c : clients_)
      for (auto& a : c->result().answers) {
        by_thread[a.thread].push_back(a.at);
        by_second[a.at.count() / 1000].record(a.latency);
      }
    bench::latency_recorder recovery;
    for (auto& [thread, times] : by_thread) {
      std::sort(times.begin(), times.end());
      for (auto fault : faults_) {
        auto i = std::lower_bound(times.begin(), times.end(), fault);
        if (i != times.end())
          recovery.record(*i - fault);
      }
    }
    auto r = recovery.summary();
    report_.recovery = {recovery.count(), r.p50, r.p99, r.max};
    auto last = by_second.empty() ? -1 : by_second.rbegin()->first;
    for (int64_t s = 0; s <= last; ++s) {
      auto& rec = by_second[s];
      auto sum = rec.summary();
      report_.timeline.push_back({rec.count(), sum.p50, sum.max});
    }
    throughput();
    if (rig_)
      watch_.figures(all_answers(), disturbed_, elapsed(), report_.cluster);
  }

  /// Answers per second while the traffic was sent, and the busiest second.
  void throughput() {
    uint64_t during = 0;
    for (auto& c : clients_)
      for (auto& a : c->result().answers)
        during += a.at <= sc_.traffic.duration ? 1 : 0;
    report_.answered_per_second
      = static_cast<double>(during)
        / std::chrono::duration<double>(sc_.traffic.duration).count();
    for (auto& s : report_.timeline)
      report_.peak_per_second = std::max(report_.peak_per_second, s.answered);
  }

  std::vector<answer_sample> all_answers() {
    std::vector<answer_sample> result;
    for (auto& c : clients_)
      result.insert(result.end(), c->result().answers.begin(),
                    c->result().answers.end());
    return result;
  }

  static std::vector<std::unique_ptr<fault_llm::fault_llm_server>>
  start_servers(const scenario& sc) {
    std::vector<std::unique_ptr<fault_llm::fault_llm_server>> result;
    for (size_t i = 0; i < sc.providers.fault_servers; ++i)
      result.push_back(std::make_unique<fault_llm::fault_llm_server>());
    return result;
  }

  /// A fault proxy in front of each fault server when the scenario breaks
  /// that link.
  static std::vector<std::unique_ptr<fault_proxy>> link_servers(
    const scenario& sc,
    const std::vector<std::unique_ptr<fault_llm::fault_llm_server>>& servers) {
    std::vector<std::unique_ptr<fault_proxy>> result;
    if (sc.breaks_link("provider"))
      for (auto& s : servers)
        result.push_back(std::make_unique<fault_proxy>("127.0.0.1", s->port()));
    return result;
  }

  /// The URL the nodes call each fault server at: its proxy's, if any.
  static std::vector<std::string>
  urls(const std::vector<std::unique_ptr<fault_llm::fault_llm_server>>& servers,
       const std::vector<std::unique_ptr<fault_proxy>>& links) {
    std::vector<std::string> result;
    for (size_t i = 0; i < servers.size(); ++i)
      result.push_back(links.empty() ? servers[i]->base_url()
                                     : "http://127.0.0.1:"
                                         + std::to_string(links[i]->port()));
    return result;
  }

  const scenario& sc_;
  const run_options& opts_;
  /// Declared before the nodes: they call the servers until they stop.
  std::vector<std::unique_ptr<fault_llm::fault_llm_server>> servers_;
  std::vector<std::unique_ptr<fault_proxy>> server_links_;
  /// Declared before the nodes: they use the database until they stop.
  std::unique_ptr<cluster_rig> rig_;
  node_set nodes_;
  cluster_watch watch_;
  node_set::exits exits_;
  traffic_control ctl_;
  std::vector<std::unique_ptr<traffic_client>> clients_;
  std::vector<milliseconds> faults_;
  /// The fault steps' spans (with 2 s after each), out of the steady state.
  std::vector<run_span> disturbed_;
  /// Violations found while playing the steps (a drain that never ended).
  std::vector<violation> step_violations_;
  history_map histories_;
  run_report report_;
};

} // namespace

caf::expected<run_report> run_scenario(const scenario& sc,
                                       const run_options& opts) {
  auto dir = opts.work_dir;
  bool temporary = dir.empty();
  try {
    if (temporary)
      dir = make_temp_dir("keel-chaos-" + sc.name);
    std::filesystem::create_directories(dir);
    dir = std::filesystem::absolute(dir).lexically_normal().string();
    auto report = runner{sc, opts, dir}.run();
    if (temporary && report.clean())
      std::filesystem::remove_all(dir);
    else if (opts.progress)
      opts.progress("data folders kept in " + dir);
    return report;
  } catch (const std::exception& e) {
    return caf::make_error(ec::unavailable,
                           "cannot run scenario " + sc.name + ": " + e.what());
  }
}

} // namespace keel::chaos
