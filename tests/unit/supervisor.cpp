#define CAF_SUITE supervisor

#include <caf/test/dsl.hpp>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "keel/actors.hpp"
#include "keel/error.hpp"
#include "keel/supervisor.hpp"
#include "keel/system_config.hpp"

using namespace keel;
using namespace std::chrono_literals;

namespace {

using log_ptr = std::shared_ptr<std::vector<std::string>>;
using strings = std::vector<std::string>;

struct worker_state {
  static inline const char* name = "keel.test.worker";
};

// A child for the tests: logs "start:ID" and "stop:ID"; answers a string
// with "ID:string" and get with its actor id; quits normally on delete. A
// stubborn one traps exits and ignores them.
caf::behavior worker(caf::stateful_actor<worker_state>* self, std::string id,
                     log_ptr log, bool stubborn) {
  log->push_back("start:" + id);
  self->attach_functor(
    [log, id](const caf::error&) { log->push_back("stop:" + id); });
  if (stubborn)
    self->set_exit_handler(
      [log, id](caf::exit_msg&) { log->push_back("ignore:" + id); });
  return {
    [self](caf::delete_atom) { self->quit(); },
    [id](const std::string& x) { return id + ":" + x; },
    [self](caf::get_atom) { return self->id(); },
  };
}

child_spec worker_spec(const std::string& id, log_ptr log,
                       restart_type restart = restart_type::permanent,
                       bool stubborn = false) {
  child_spec spec;
  spec.id = id;
  spec.restart = restart;
  spec.start = [id, log, stubborn](caf::local_actor* parent) {
    return parent->spawn(worker, id, log, stubborn);
  };
  return spec;
}

child_spec supervisor_spec(const std::string& id, supervisor_config cfg) {
  child_spec spec;
  spec.id = id;
  spec.supervisor = true;
  spec.start = [cfg](caf::local_actor* parent) {
    return caf::actor{parent->spawn(supervisor, cfg)};
  };
  return spec;
}

supervisor_config config(restart_strategy strategy,
                         std::vector<child_spec> children,
                         uint32_t max_restarts = 10) {
  supervisor_config cfg;
  cfg.name = "test";
  cfg.strategy = strategy;
  cfg.children = std::move(children);
  cfg.max_restarts = max_restarts;
  cfg.seed = 42;
  return cfg;
}

using sup_actor = caf::stateful_actor<supervisor_state>;

struct fixture : test_coordinator_fixture<system_config> {
  log_ptr log = std::make_shared<strings>();
  std::vector<caf::actor> watchers;

  caf::actor spawn_sup(supervisor_config cfg) {
    auto result = sys.spawn(supervisor, std::move(cfg));
    consume_messages();
    return result;
  }

  /// A dynamic supervisor "conversations" of transient workers that log to
  /// `log`.
  supervisor_config dynamic_config(uint32_t max_restarts) {
    supervisor_config cfg;
    cfg.name = "conversations";
    cfg.dynamic = true;
    cfg.max_restarts = max_restarts;
    cfg.child_template.restart = restart_type::transient;
    cfg.dynamic_start = [lg = log](caf::local_actor* parent,
                                   const std::string& id, const caf::message&) {
      return parent->spawn(worker, id, lg, false);
    };
    return cfg;
  }

  supervisor_state& state_of(const caf::actor& sup) {
    return deref<sup_actor>(sup).state;
  }

  caf::actor child(const caf::actor& sup, const std::string& id) {
    auto ptr = state_of(sup).find(id);
    return ptr != nullptr ? ptr->actor : caf::actor{};
  }

  caf::actor_id child_id(const caf::actor& sup, const std::string& id) {
    auto hdl = child(sup, id);
    return hdl ? hdl.id() : 0;
  }

  std::string status(const caf::actor& sup, const std::string& id) {
    auto ptr = state_of(sup).find(id);
    return ptr != nullptr ? to_string(ptr->status) : "absent";
  }

  void crash(const caf::actor& hdl,
             caf::error reason = caf::make_error(ec::turn_failed)) {
    CAF_REQUIRE(hdl);
    self->send_exit(hdl, std::move(reason));
    consume_messages();
  }

  void quit_normally(const caf::actor& hdl) {
    CAF_REQUIRE(hdl);
    self->send(hdl, caf::delete_atom_v);
    consume_messages();
  }

  // Records how `hdl` exits.
  std::shared_ptr<std::optional<caf::error>> watch(const caf::actor& hdl) {
    auto result = std::make_shared<std::optional<caf::error>>();
    // Kept referenced: an unreferenced actor would be collected.
    watchers.push_back(
      sys.spawn([hdl, result](caf::event_based_actor* w) -> caf::behavior {
        w->monitor(hdl);
        w->set_down_handler([w, result](caf::down_msg& msg) {
          *result = msg.reason;
          w->quit();
        });
        return {[](int) {}};
      }));
    consume_messages();
    return result;
  }

  strings take_log() {
    auto result = *log;
    log->clear();
    return result;
  }

  template <class T, class... Ts>
  caf::expected<T> ask(const caf::actor& dest, Ts&&... xs) {
    auto hdl = self->request(dest, caf::infinite, std::forward<Ts>(xs)...);
    consume_messages();
    caf::expected<T> result{caf::error{}};
    hdl.receive([&](T& x) { result = std::move(x); },
                [&](caf::error& err) { result = std::move(err); });
    return result;
  }

  std::vector<child_info> tree(const caf::actor& sup) {
    auto res = ask<std::vector<child_info>>(sup, atom::children_v);
    if (!res)
      CAF_FAIL(render(res.error()));
    return std::move(*res);
  }

  // Moves time in 1 ms steps until `id` runs again; returns the time taken.
  caf::timespan time_to_restart(const caf::actor& sup, const std::string& id) {
    caf::timespan waited{0};
    while (status(sup, id) != "running" && waited < 10s) {
      advance_time(1ms);
      consume_messages();
      waited += 1ms;
    }
    return waited;
  }
};

} // namespace

CAF_TEST_FIXTURE_SCOPE(supervisor_tests, fixture)

CAF_TEST(children start in spec order and stop in reverse order) {
  auto sup = spawn_sup(config(restart_strategy::one_for_one,
                              {worker_spec("a", log), worker_spec("b", log),
                               worker_spec("c", log)}));
  CAF_CHECK_EQUAL(take_log(), (strings{"start:a", "start:b", "start:c"}));
  auto exited = watch(sup);
  self->send_exit(sup, caf::exit_reason::user_shutdown);
  consume_messages();
  CAF_CHECK_EQUAL(take_log(), (strings{"stop:c", "stop:b", "stop:a"}));
  CAF_REQUIRE(exited->has_value());
  CAF_CHECK_EQUAL(**exited, caf::exit_reason::user_shutdown);
}

CAF_TEST(one_for_one restarts only the failed child) {
  auto sup = spawn_sup(config(restart_strategy::one_for_one,
                              {worker_spec("a", log), worker_spec("b", log),
                               worker_spec("c", log)}));
  auto a = child_id(sup, "a");
  auto b = child_id(sup, "b");
  auto c = child_id(sup, "c");
  take_log();
  crash(child(sup, "b"));
  CAF_CHECK_EQUAL(take_log(), (strings{"stop:b", "start:b"}));
  CAF_CHECK_EQUAL(child_id(sup, "a"), a);
  CAF_CHECK_NOT_EQUAL(child_id(sup, "b"), b);
  CAF_CHECK_NOT_EQUAL(child_id(sup, "b"), 0u);
  CAF_CHECK_EQUAL(child_id(sup, "c"), c);
  CAF_CHECK_EQUAL(state_of(sup).find("b")->restarts, 1u);
  CAF_CHECK_EQUAL(state_of(sup).find("a")->restarts, 0u);
}

CAF_TEST(one_for_all restarts all children in order after stopping the rest in
           reverse order) {
  auto sup = spawn_sup(config(restart_strategy::one_for_all,
                              {worker_spec("a", log), worker_spec("b", log),
                               worker_spec("c", log)}));
  auto a = child_id(sup, "a");
  auto b = child_id(sup, "b");
  auto c = child_id(sup, "c");
  take_log();
  crash(child(sup, "b"));
  CAF_CHECK_EQUAL(take_log(), (strings{"stop:b", "stop:c", "stop:a", "start:a",
                                       "start:b", "start:c"}));
  for (auto [id, old] : {std::pair{"a", a}, {"b", b}, {"c", c}}) {
    CAF_CHECK_NOT_EQUAL(child_id(sup, id), old);
    CAF_CHECK_EQUAL(status(sup, id), "running");
  }
}

CAF_TEST(rest_for_one restarts the failed child and those started after it) {
  auto sup = spawn_sup(config(restart_strategy::rest_for_one,
                              {worker_spec("a", log), worker_spec("b", log),
                               worker_spec("c", log), worker_spec("d", log)}));
  auto a = child_id(sup, "a");
  auto b = child_id(sup, "b");
  auto c = child_id(sup, "c");
  take_log();
  crash(child(sup, "b"));
  CAF_CHECK_EQUAL(take_log(), (strings{"stop:b", "stop:d", "stop:c", "start:b",
                                       "start:c", "start:d"}));
  CAF_CHECK_EQUAL(child_id(sup, "a"), a);
  CAF_CHECK_NOT_EQUAL(child_id(sup, "b"), b);
  CAF_CHECK_NOT_EQUAL(child_id(sup, "c"), c);
  CAF_CHECK_EQUAL(status(sup, "d"), "running");
}

CAF_TEST(restart types decide after normal and abnormal exits) {
  auto sup
    = spawn_sup(config(restart_strategy::one_for_one,
                       {worker_spec("p", log, restart_type::permanent),
                        worker_spec("t", log, restart_type::transient),
                        worker_spec("u", log, restart_type::transient),
                        worker_spec("s", log, restart_type::transient),
                        worker_spec("x", log, restart_type::temporary)}));
  auto p = child_id(sup, "p");
  quit_normally(child(sup, "p"));
  CAF_CHECK_NOT_EQUAL(child_id(sup, "p"), p);
  CAF_CHECK_EQUAL(status(sup, "p"), "running");
  // transient: normal and shutdown exits are normal, anything else is not.
  quit_normally(child(sup, "t"));
  CAF_CHECK_EQUAL(status(sup, "t"), "stopped");
  crash(child(sup, "s"), caf::make_error(ec::shutdown));
  CAF_CHECK_EQUAL(status(sup, "s"), "stopped");
  auto u = child_id(sup, "u");
  crash(child(sup, "u"));
  CAF_CHECK_NOT_EQUAL(child_id(sup, "u"), u);
  CAF_CHECK_EQUAL(status(sup, "u"), "running");
  // temporary: never restarted, and forgotten (as OTP).
  crash(child(sup, "x"));
  CAF_CHECK_EQUAL(status(sup, "x"), "absent");
  auto ids = strings{};
  for (auto& info : tree(sup))
    ids.push_back(info.id + "=" + info.state);
  CAF_CHECK_EQUAL(
    ids, (strings{"p=running", "t=stopped", "u=running", "s=stopped"}));
  CAF_CHECK(is_normal_exit(caf::exit_reason::normal));
  CAF_CHECK(is_normal_exit(caf::make_error(ec::shutdown, "ctx")));
  CAF_CHECK(!is_normal_exit(caf::make_error(ec::killed)));
  CAF_CHECK(!is_normal_exit(caf::exit_reason::kill));
}

CAF_TEST(exceeding the intensity stops the children in reverse order and exits
           with shutdown) {
  auto sup = spawn_sup(config(
    restart_strategy::one_for_one,
    {worker_spec("a", log), worker_spec("b", log), worker_spec("c", log)}, 2));
  auto exited = watch(sup);
  crash(child(sup, "b"));
  advance_time(6s); // The first restart leaves the 5 s window.
  crash(child(sup, "b"));
  crash(child(sup, "a"));
  CAF_CHECK(!exited->has_value());
  take_log();
  crash(child(sup, "b")); // Third restart within 5 s: one too many.
  CAF_CHECK_EQUAL(take_log(), (strings{"stop:b", "stop:c", "stop:a"}));
  CAF_REQUIRE(exited->has_value());
  CAF_CHECK_EQUAL(**exited, caf::make_error(ec::shutdown));
  CAF_CHECK_EQUAL(error_code_name(**exited), "shutdown");
}

CAF_TEST(a child supervisor giving up escalates through two levels) {
  auto mid_cfg = config(restart_strategy::one_for_one, {worker_spec("w", log)},
                        0);
  mid_cfg.name = "mid";
  auto root_cfg
    = config(restart_strategy::one_for_one,
             {worker_spec("a", log), supervisor_spec("mid", mid_cfg),
              worker_spec("z", log)},
             1);
  root_cfg.name = "root";
  auto root = spawn_sup(root_cfg);
  auto exited = watch(root);
  auto mid = child(root, "mid");
  auto z = child_id(root, "z");
  take_log();
  // The worker fails; mid may not restart anything (0 restarts allowed), so
  // it exits with shutdown and root restarts it (and so a new worker).
  crash(child(mid, "w"));
  CAF_CHECK_EQUAL(take_log(), (strings{"stop:w", "start:w"}));
  auto mid2 = child(root, "mid");
  CAF_REQUIRE(mid2);
  CAF_CHECK_NOT_EQUAL(mid2.id(), mid.id());
  CAF_CHECK_EQUAL(state_of(root).find("mid")->restarts, 1u);
  CAF_CHECK_EQUAL(render(state_of(root).find("mid")->last_exit),
                  "shutdown: mid: restart intensity exceeded");
  CAF_CHECK_EQUAL(child_id(root, "z"), z);
  CAF_CHECK(!exited->has_value());
  // Again: now root exceeds its intensity (1) and gives up in turn.
  crash(child(mid2, "w"));
  CAF_CHECK_EQUAL(take_log(), (strings{"stop:w", "stop:z", "stop:a"}));
  CAF_REQUIRE(exited->has_value());
  CAF_CHECK_EQUAL(render(**exited),
                  "shutdown: root: restart intensity exceeded");
}

CAF_TEST(a child that ignores shutdown is killed exactly at its timeout) {
  auto slow = worker_spec("b", log, restart_type::permanent, true);
  slow.shutdown = shutdown_spec::with_timeout(1s);
  auto sup
    = spawn_sup(config(restart_strategy::one_for_one,
                       {worker_spec("a", log), slow, worker_spec("c", log)}));
  auto exited = watch(sup);
  take_log();
  self->send_exit(sup, caf::exit_reason::user_shutdown);
  consume_messages();
  CAF_CHECK_EQUAL(take_log(), (strings{"stop:c", "ignore:b"}));
  advance_time(999ms);
  consume_messages();
  CAF_CHECK(log->empty());
  CAF_CHECK_EQUAL(status(sup, "b"), "stopping");
  advance_time(1ms);
  consume_messages();
  CAF_CHECK_EQUAL(take_log(), (strings{"stop:b", "stop:a"}));
  CAF_REQUIRE(exited->has_value());
  CAF_CHECK_EQUAL(**exited, caf::exit_reason::user_shutdown);
}

CAF_TEST(brutal_kill kills at once and never reaches the supervisor) {
  auto brutal = worker_spec("b", log, restart_type::permanent, true);
  brutal.shutdown = shutdown_spec::brutal();
  auto sup
    = spawn_sup(config(restart_strategy::one_for_all,
                       {worker_spec("a", log), brutal, worker_spec("c", log)}));
  take_log();
  // one_for_all stops b (brutally) as part of the group restart.
  crash(child(sup, "c"));
  CAF_CHECK_EQUAL(take_log(), (strings{"stop:c", "stop:b", "stop:a", "start:a",
                                       "start:b", "start:c"}));
  // CAF's untrappable kill sent straight to a child does not propagate to
  // the supervisor, which only monitors it.
  auto b = child_id(sup, "b");
  crash(child(sup, "b"), caf::exit_reason::kill);
  CAF_CHECK_EQUAL(status(sup, "a"), "running");
  CAF_CHECK_NOT_EQUAL(child_id(sup, "b"), b);
  CAF_CHECK_EQUAL(state_of(sup).find("b")->last_exit, caf::exit_reason::kill);
}

CAF_TEST(a killed supervisor takes its children with it) {
  auto sup = spawn_sup(config(restart_strategy::one_for_one,
                              {worker_spec("a", log), worker_spec("b", log)}));
  take_log();
  self->send_exit(sup, caf::exit_reason::kill);
  consume_messages();
  auto events = take_log();
  std::sort(events.begin(), events.end());
  CAF_CHECK_EQUAL(events, (strings{"stop:a", "stop:b"}));
}

CAF_TEST(backoff delays grow and are capped and reset after a stable period) {
  auto spec = worker_spec("b", log);
  spec.backoff.initial = 100ms;
  spec.backoff.max = 400ms;
  spec.backoff.multiplier = 2.0;
  spec.backoff.jitter = 0;
  spec.backoff.reset_after = 10s;
  auto sup = spawn_sup(config(restart_strategy::one_for_one, {spec}, 100));
  std::vector<caf::timespan> delays;
  for (int i = 0; i < 4; ++i) {
    crash(child(sup, "b"));
    CAF_CHECK_EQUAL(status(sup, "b"), "restarting");
    delays.push_back(time_to_restart(sup, "b"));
  }
  CAF_CHECK_EQUAL(delays,
                  (std::vector<caf::timespan>{100ms, 200ms, 400ms, 400ms}));
  advance_time(10s);
  consume_messages();
  crash(child(sup, "b"));
  CAF_CHECK_EQUAL(time_to_restart(sup, "b"), caf::timespan{100ms});
}

CAF_TEST(jittered backoff delays stay within the fraction) {
  auto spec = worker_spec("b", log);
  spec.backoff.initial = 100ms;
  spec.backoff.max = 100ms;
  spec.backoff.jitter = 0.5;
  auto sup = spawn_sup(config(restart_strategy::one_for_one, {spec}, 100));
  std::set<caf::timespan> seen;
  for (int i = 0; i < 20; ++i) {
    crash(child(sup, "b"));
    auto d = time_to_restart(sup, "b");
    CAF_CHECK_GREATER_OR_EQUAL(d, 50ms);
    CAF_CHECK_LESS_OR_EQUAL(d, 151ms);
    seen.insert(d);
  }
  CAF_CHECK_GREATER(seen.size(), 5u); // It does vary.
}

CAF_TEST(backoff restarts count toward the intensity when scheduled) {
  auto spec = worker_spec("b", log);
  spec.backoff.initial = 1s;
  spec.backoff.jitter = 0;
  auto sup = spawn_sup(config(restart_strategy::one_for_one, {spec}, 1));
  auto exited = watch(sup);
  crash(child(sup, "b"));
  CAF_CHECK_EQUAL(time_to_restart(sup, "b"), caf::timespan{1s});
  crash(child(sup, "b"));
  CAF_REQUIRE(exited->has_value());
  CAF_CHECK_EQUAL(error_code_name(**exited), "shutdown");
}

CAF_TEST(messages to a restarting child are held and delivered in order) {
  auto spec = worker_spec("b", log);
  spec.backoff.initial = 100ms;
  spec.backoff.jitter = 0;
  spec.buffer = 2;
  auto sup = spawn_sup(config(restart_strategy::one_for_one, {spec}, 100));
  // Up: the child answers directly.
  auto res = ask<std::string>(sup, atom::forward_v, std::string{"b"},
                              caf::make_message(std::string{"up"}));
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(*res, "b:up");
  crash(child(sup, "b"));
  auto r1 = self->request(sup, caf::infinite, atom::forward_v, std::string{"b"},
                          caf::make_message(std::string{"one"}));
  auto r2 = self->request(sup, caf::infinite, atom::forward_v, std::string{"b"},
                          caf::make_message(std::string{"two"}));
  auto r3 = self->request(sup, caf::infinite, atom::forward_v, std::string{"b"},
                          caf::make_message(std::string{"three"}));
  consume_messages();
  // The third does not fit.
  std::string overflow;
  r3.receive([](std::string&) { CAF_FAIL("unexpected answer"); },
             [&](caf::error& err) { overflow = render(err); });
  CAF_CHECK_EQUAL(overflow, "overloaded: child b is restarting and its "
                            "buffer of 2 messages is full");
  advance_time(100ms);
  consume_messages();
  CAF_CHECK_EQUAL(status(sup, "b"), "running");
  std::vector<std::string> answers;
  r1.receive([&](std::string& x) { answers.push_back(x); },
             [](caf::error& err) { CAF_FAIL(render(err)); });
  r2.receive([&](std::string& x) { answers.push_back(x); },
             [](caf::error& err) { CAF_FAIL(render(err)); });
  CAF_CHECK_EQUAL(answers, (strings{"b:one", "b:two"}));
  // A request answered by the new incarnation (its actor id).
  auto id = ask<caf::actor_id>(sup, atom::forward_v, std::string{"b"},
                               caf::make_message(caf::get_atom_v));
  CAF_REQUIRE(id);
  CAF_CHECK_EQUAL(*id, child_id(sup, "b"));
}

CAF_TEST(held requests fail when the child does not come back) {
  auto spec = worker_spec("b", log);
  spec.backoff.initial = 100ms;
  spec.backoff.jitter = 0;
  auto sup = spawn_sup(
    config(restart_strategy::one_for_one,
           {spec, worker_spec("t", log, restart_type::transient)}, 100));
  crash(child(sup, "b"));
  auto r1 = self->request(sup, caf::infinite, atom::forward_v, std::string{"b"},
                          caf::make_message(std::string{"one"}));
  consume_messages();
  // The supervisor stops before the restart: the held request fails.
  self->send_exit(sup, caf::exit_reason::user_shutdown);
  consume_messages();
  std::string err1;
  r1.receive([](std::string&) { CAF_FAIL("unexpected answer"); },
             [&](caf::error& err) { err1 = render(err); });
  CAF_CHECK_EQUAL(err1, "unavailable: supervisor 'test' stopped");
}

CAF_TEST(forwarding to unknown or stopped children fails clearly) {
  auto sup
    = spawn_sup(config(restart_strategy::one_for_one,
                       {worker_spec("t", log, restart_type::transient)}));
  auto res = ask<std::string>(sup, atom::forward_v, std::string{"nope"},
                              caf::make_message(std::string{"x"}));
  CAF_REQUIRE(!res);
  CAF_CHECK_EQUAL(render(res.error()), "not_found: test: no child 'nope'");
  quit_normally(child(sup, "t"));
  res = ask<std::string>(sup, atom::forward_v, std::string{"t"},
                         caf::make_message(std::string{"x"}));
  CAF_REQUIRE(!res);
  CAF_CHECK_EQUAL(render(res.error()), "unavailable: child 't' is stopped");
}

CAF_TEST(which_children describes the tree and kill_child walks paths) {
  auto inner = config(restart_strategy::one_for_one,
                      {worker_spec("x", log), worker_spec("y", log)});
  inner.name = "providers";
  auto sup = spawn_sup(config(restart_strategy::one_for_one,
                              {worker_spec("persistence", log),
                               supervisor_spec("providers", inner)}));
  advance_time(3s);
  consume_messages();
  auto t = tree(sup);
  CAF_REQUIRE_EQUAL(t.size(), 2u);
  CAF_CHECK_EQUAL(t[0].id, "persistence");
  CAF_CHECK_EQUAL(t[0].state, "running");
  CAF_CHECK_EQUAL(t[0].uptime, caf::timespan{3s});
  CAF_CHECK_EQUAL(t[0].supervisor, false);
  CAF_CHECK_EQUAL(t[1].supervisor, true);
  CAF_REQUIRE_EQUAL(t[1].children.size(), 2u);
  CAF_CHECK_EQUAL(t[1].children[1].id, "y");
  auto providers = child(sup, "providers");
  auto y = child_id(providers, "y");
  CAF_CHECK_EQUAL(t[1].children[1].actor_id, y);
  // Kill by path (default reason: killed); y comes back.
  auto res = ask<caf::ok_atom>(sup, atom::kill_child_v,
                               std::string{"providers/y"},
                               caf::make_error(ec::killed));
  CAF_REQUIRE(res);
  consume_messages();
  CAF_CHECK_NOT_EQUAL(child_id(providers, "y"), y);
  t = tree(sup);
  CAF_CHECK_EQUAL(t[1].children[1].restarts, 1u);
  CAF_CHECK_EQUAL(t[1].children[1].last_exit, "killed");
  CAF_CHECK_EQUAL(t[1].children[1].uptime, caf::timespan{0});
  // Unknown paths are named in the error.
  res = ask<caf::ok_atom>(sup, atom::kill_child_v, std::string{"providers/z"},
                          caf::make_error(ec::killed));
  CAF_REQUIRE(!res);
  CAF_CHECK_EQUAL(render(res.error()),
                  "not_found: test: no child at path 'providers/z'");
  res = ask<caf::ok_atom>(sup, atom::kill_child_v, std::string{"persistence/q"},
                          caf::make_error(ec::killed));
  CAF_REQUIRE(!res);
  CAF_CHECK_EQUAL(render(res.error()),
                  "not_found: test: no child at path 'persistence/q'");
  // Killing the supervisor child restarts it with fresh children.
  res = ask<caf::ok_atom>(sup, atom::kill_child_v, std::string{"providers"},
                          caf::make_error(ec::killed));
  CAF_REQUIRE(res);
  consume_messages();
  CAF_CHECK_NOT_EQUAL(child(sup, "providers"), providers);
  CAF_CHECK_EQUAL(tree(sup)[1].children.size(), 2u);
}

CAF_TEST(a dynamic supervisor scales to many children) {
  auto sup = spawn_sup(dynamic_config(10));
  constexpr int n = 10000;
  for (int i = 0; i < n; ++i)
    self->send(sup, atom::start_child_v, "t" + std::to_string(i),
               caf::make_message());
  consume_messages();
  auto& st = state_of(sup);
  CAF_REQUIRE_EQUAL(st.children.size(), static_cast<size_t>(n));
  std::vector<caf::actor_id> before;
  for (auto& [order, c] : st.children)
    before.push_back(c.actor.id());
  log->clear();
  crash(child(sup, "t4242"));
  CAF_CHECK_EQUAL(take_log(), (strings{"stop:t4242", "start:t4242"}));
  size_t changed = 0;
  size_t i = 0;
  for (auto& [order, c] : st.children)
    changed += c.actor.id() != before[i++] ? 1 : 0;
  CAF_CHECK_EQUAL(changed, 1u);
  // Duplicate ids are refused; stop_child forgets the child.
  auto res = ask<caf::actor>(sup, atom::start_child_v, std::string{"t1"},
                             caf::make_message());
  CAF_REQUIRE(!res);
  CAF_CHECK_EQUAL(error_code_name(res.error()), "conflict");
  auto stopped = ask<caf::ok_atom>(sup, atom::stop_child_v, std::string{"t1"});
  CAF_REQUIRE(stopped);
  CAF_CHECK_EQUAL(status(sup, "t1"), "absent");
  // A transient child ending normally is forgotten.
  quit_normally(child(sup, "t2"));
  CAF_CHECK_EQUAL(status(sup, "t2"), "absent");
  CAF_CHECK_EQUAL(st.children.size(), static_cast<size_t>(n - 2));
  CAF_CHECK_EQUAL(st.by_addr->size(), static_cast<size_t>(n - 2));
  // Shutdown stops all of them.
  auto exited = watch(sup);
  log->clear();
  self->send_exit(sup, caf::exit_reason::user_shutdown);
  consume_messages();
  CAF_CHECK_EQUAL(log->size(), static_cast<size_t>(n - 2));
  CAF_CHECK(exited->has_value());
}

CAF_TEST(a dynamic child that crash loops is given up alone) {
  auto cfg = dynamic_config(3);
  cfg.period = 10s;
  auto sup = spawn_sup(cfg);
  auto exited = watch(sup);
  for (auto id : {"bad", "a", "b"})
    self->send(sup, atom::start_child_v, std::string{id}, caf::make_message());
  consume_messages();
  // Three restarts of "bad" use its whole budget; one crash each of the
  // others still restarts them: budgets are per child.
  for (int i = 0; i < 3; ++i)
    crash(child(sup, "bad"));
  crash(child(sup, "a"));
  crash(child(sup, "b"));
  CAF_CHECK_EQUAL(status(sup, "a"), "running");
  CAF_CHECK_EQUAL(status(sup, "b"), "running");
  // The fourth crash within the period gives "bad" up, and only "bad".
  crash(child(sup, "bad"));
  CAF_CHECK_EQUAL(status(sup, "bad"), "absent");
  CAF_CHECK_EQUAL(status(sup, "a"), "running");
  CAF_CHECK(!exited->has_value());
  // A message for it starts it again, with a fresh budget.
  auto res = ask<std::string>(sup, atom::forward_v, std::string{"bad"},
                              caf::make_message(std::string{"x"}));
  CAF_REQUIRE(res);
  CAF_CHECK_EQUAL(*res, "bad:x");
  CAF_CHECK_EQUAL(status(sup, "bad"), "running");
}

CAF_TEST(invalid configs make the supervisor quit naming the field) {
  auto cfg = config(restart_strategy::one_for_one,
                    {worker_spec("a", log), worker_spec("a", log)});
  auto sup = sys.spawn(supervisor, cfg);
  auto exited = watch(sup);
  consume_messages();
  CAF_REQUIRE(exited->has_value());
  CAF_CHECK_EQUAL(render(**exited), "config_invalid: supervisor 'test': "
                                    "children[1].id: duplicate id 'a'");
  CAF_CHECK(log->empty());
  auto bad = worker_spec("b", log);
  bad.backoff.initial = 1s;
  bad.backoff.max = 1ms;
  cfg = config(restart_strategy::one_for_one, {bad});
  CAF_CHECK_EQUAL(render(validate(cfg)),
                  "config_invalid: supervisor 'test': children[0].backoff.max: "
                  "must be at least initial");
}

CAF_TEST_FIXTURE_SCOPE_END()
