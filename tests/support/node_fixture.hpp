#pragma once

// A deterministic Keel node on CAF's test coordinator: the real root
// supervisor with persistence (real RocksDB in a temp folder), providers and
// orchestrator, plus an event sink registered as the gateway that records
// every published thread event. Time moves only when a test advances it.

#include <string>
#include <vector>

#include <caf/test/dsl.hpp>

#include "keel/actors.hpp"
#include "keel/config.hpp"
#include "keel/node.hpp"
#include "keel/protocol.hpp"
#include "keel/system_config.hpp"
#include "temp_dir.hpp"

namespace keel::test {

/// Records events published to the "gateway".
struct event_sink_state {
  static inline const char* name = "keel.test.event_sink";
  std::vector<thread_event> events;
};

inline gateway_bridge_actor::behavior_type
event_sink(gateway_bridge_actor::stateful_pointer<event_sink_state> self) {
  return {
    [](atom::open, connection_id) {},
    [](atom::frame, connection_id, protocol::client_frame&) {},
    [](atom::closed, connection_id) {},
    [](atom::http, uint64_t, std::string&, std::string&, std::string&) {},
    [self](atom::publish, thread_event& ev) {
      self->state.events.push_back(std::move(ev));
    },
    [](atom::expire) {},
  };
}

/// A node config with the scripted provider "script" in pool "default".
inline node_config scripted_config(const std::string& data_dir,
                                   std::vector<scripted_step> steps) {
  auto cfg = default_config();
  cfg.data_dir = data_dir;
  provider_config p;
  p.name = "script";
  p.kind = "scripted";
  p.script = std::move(steps);
  cfg.providers = {p};
  pool_config pool;
  pool.name = "default";
  pool.chain = {"script"};
  pool.retry.max_attempts = 1;
  cfg.pools = {pool};
  cfg.supervision.root.max_restarts = 5;
  // Restart at once: these tests move time only when they say so.
  cfg.supervision.root.backoff.initial = caf::timespan{0};
  cfg.supervision.providers.backoff.initial = caf::timespan{0};
  cfg.supervision.conversations.backoff.initial = caf::timespan{0};
  return cfg;
}

class node_fixture : public test_coordinator_fixture<system_config> {
public:
  explicit node_fixture(node_config config) : config(std::move(config)) {
    start();
  }

  /// A cluster node's tree without its cluster and peers actors: the test
  /// keeps `shards` (what the node holds) as the cluster actor would.
  node_fixture(node_config config, std::shared_ptr<shard_table> shards)
    : config(std::move(config)), shards(std::move(shards)) {
    start();
  }

  node_fixture()
    : node_fixture(scripted_config(
      fresh_data_dir(), {scripted_step{"", "re: {input}", {}, "", false}})) {
    // nop
  }

  ~node_fixture() override {
    stop();
  }

  /// Starts the tree (again) on the same data folder.
  void start() {
    sink = sys.spawn(event_sink);
    components_of(sys).put(names::gateway,
                           caf::actor_cast<caf::strong_actor_ptr>(sink));
    auto spec = root_spec(config, nullptr, false, nullptr, shards);
    CAF_REQUIRE(spec);
    root = sys.spawn(supervisor, std::move(*spec));
    components_of(sys).put(names::root,
                           caf::actor_cast<caf::strong_actor_ptr>(root));
    consume_messages();
  }

  /// Stops the tree (as a shutdown would).
  void stop() {
    if (!root)
      return;
    anon_send_exit(root, caf::exit_reason::user_shutdown);
    anon_send_exit(sink, caf::exit_reason::user_shutdown);
    consume_messages();
    components_of(sys).erase(names::gateway);
    root = nullptr;
  }

  template <class Handle>
  Handle component(caf::atom_value name) {
    auto hdl = caf::actor_cast<Handle>(components_of(sys).get(name));
    CAF_REQUIRE(hdl);
    return hdl;
  }

  orchestrator_actor orchestrator() {
    return component<orchestrator_actor>(names::orchestrator);
  }

  persistence_actor persistence() {
    return component<persistence_actor>(names::persistence);
  }

  /// Routes a message and processes everything that follows (without
  /// moving time). Returns the accept outcome.
  caf::expected<accept_result> send(const std::string& thread,
                                    const std::string& id,
                                    const std::string& text) {
    auto hdl = self->request(orchestrator(), caf::infinite, atom::route_v,
                             thread, id, text, std::string{});
    consume_messages();
    caf::expected<accept_result> result{caf::error{}};
    hdl.receive([&](accept_result& res) { result = res; },
                [&](caf::error& err) { result = std::move(err); });
    return result;
  }

  /// Asks `hdl` and processes everything that follows; returns the answer
  /// (an error fails the test).
  template <class T, class Handle, class... Ts>
  T ask(const Handle& hdl, Ts&&... xs) {
    auto rh = self->request(hdl, caf::infinite, std::forward<Ts>(xs)...);
    consume_messages();
    T result{};
    rh.receive([&](T& x) { result = std::move(x); },
               [&](caf::error& err) { CAF_FAIL(render(err)); });
    return result;
  }

  /// Writes a dead letter through the dead-letter queue: message 2 of
  /// thread `from` to `to`, refused for good.
  void add_dead_letter(const std::string& from, const std::string& to) {
    outbox_entry entry;
    entry.from = from;
    entry.seq = 2;
    entry.to = to;
    entry.client_id = agent_client_id(from, 2);
    entry.text = "a note for " + to;
    ask<caf::ok_atom>(component<dead_letter_queue_actor>(names::dead_letters),
                      caf::put_atom_v, entry,
                      std::string{"target thread has no session"}, uint64_t{0});
  }

  /// Reads a thread's whole history.
  std::vector<log_entry> history(const std::string& thread) {
    auto hdl = self->request(persistence(), caf::infinite, atom::history_v,
                             thread, seq_t{0}, uint64_t{1000});
    consume_messages();
    std::vector<log_entry> result;
    hdl.receive([&](history_page& page) { result = std::move(page.entries); },
                [&](caf::error& err) { CAF_FAIL(render(err)); });
    return result;
  }

  /// Number of running conversations.
  uint64_t active_conversations() {
    auto hdl = self->request(orchestrator(), caf::infinite, atom::stats_v);
    consume_messages();
    uint64_t result = 0;
    hdl.receive([&](uint64_t active, uint64_t, uint64_t) { result = active; },
                [&](caf::error& err) { CAF_FAIL(render(err)); });
    return result;
  }

  /// Events published for `thread`, parsed, in order.
  std::vector<nlohmann::json> events(const std::string& thread) {
    std::vector<nlohmann::json> result;
    for (auto& ev :
         deref<gateway_bridge_actor::stateful_base<event_sink_state>>(sink)
           .state.events)
      if (ev.thread == thread)
        result.push_back(nlohmann::json::parse(ev.frame));
    return result;
  }

  /// The conversations supervisor's view of its children.
  std::vector<child_info> conversations() {
    auto sup = component<supervisor_actor>(names::conversations);
    auto hdl = self->request(sup, caf::infinite, atom::children_v);
    consume_messages();
    std::vector<child_info> result;
    hdl.receive([&](std::vector<child_info>& xs) { result = std::move(xs); },
                [&](caf::error& err) { CAF_FAIL(render(err)); });
    return result;
  }

  /// Kills the actor at `path` below the root, as `keelctl kill` does.
  void kill(const std::string& path) {
    auto sup = component<supervisor_actor>(names::root);
    auto hdl = self->request(sup, caf::infinite, atom::kill_child_v, path,
                             caf::make_error(ec::killed, "test"));
    consume_messages();
    hdl.receive([](caf::ok_atom) {},
                [&](caf::error& err) { CAF_FAIL(render(err)); });
  }

  /// Moves the test clock and processes what became due.
  void advance(caf::timespan d) {
    advance_time(d);
    consume_messages();
  }

  /// A new, empty data folder (removed when the test binary exits).
  static std::string fresh_data_dir() {
    static temp_dir dir{"keel-node-fixture"};
    static int n = 0;
    return (dir.path() / std::to_string(n++)).string();
  }

  node_config config;
  std::shared_ptr<shard_table> shards;
  caf::actor root;
  gateway_bridge_actor sink;
};

/// Texts of a history, for compact assertions.
inline std::vector<std::string> texts(const std::vector<log_entry>& entries) {
  std::vector<std::string> result;
  for (auto& e : entries)
    result.push_back(std::string{to_string(e.kind)} + ":" + e.text);
  return result;
}

} // namespace keel::test
