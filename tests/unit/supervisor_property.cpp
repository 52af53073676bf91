#define CAF_SUITE supervisor_property

#include <caf/test/dsl.hpp>

#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "keel/actors.hpp"
#include "keel/error.hpp"
#include "keel/supervisor.hpp"
#include "keel/system_config.hpp"

// Random supervision trees (depth <= 3, random strategies, restart types and
// intensities) under random crash schedules on the test clock; OTP's
// invariants are checked after every step. KEEL_PROPERTY_SEEDS seeds
// (default 1000) starting at KEEL_PROPERTY_SEED (default 1); a failure
// prints its seed and operations, and that seed alone replays it.

using namespace keel;
using namespace std::chrono_literals;

namespace {

using log_ptr = std::shared_ptr<std::vector<std::string>>;

// A tree node as generated.
struct node_spec {
  std::string path;
  bool sup = false;
  restart_type restart = restart_type::permanent;
  restart_strategy strategy = restart_strategy::one_for_one;
  uint32_t max_restarts = 1;
  std::vector<node_spec> children;
};

struct worker_state {
  static inline const char* name = "keel.test.prop_worker";
};

caf::behavior prop_worker(caf::stateful_actor<worker_state>* self) {
  return {
    [self](caf::delete_atom) { self->quit(); },
  };
}

std::string leaf(const std::string& path) {
  return path.substr(path.rfind('/') + 1);
}

std::string parent_of(const std::string& path) {
  auto i = path.rfind('/');
  return i == std::string::npos ? "" : path.substr(0, i);
}

// Logs "start:PATH" and "stop:PATH" of every incarnation.
caf::actor logged(caf::actor hdl, const std::string& path, log_ptr log) {
  log->push_back("start:" + path);
  caf::actor_cast<caf::abstract_actor*>(hdl)->attach_functor(
    [log, path](const caf::error&) { log->push_back("stop:" + path); });
  return hdl;
}

supervisor_config make_config(const node_spec& n, log_ptr log);

child_spec make_child(const node_spec& n, log_ptr log) {
  child_spec spec;
  spec.id = leaf(n.path);
  spec.restart = n.restart;
  spec.supervisor = n.sup;
  if (n.sup) {
    auto cfg = make_config(n, log);
    spec.start = [cfg, log, path = n.path](caf::local_actor* parent) {
      return logged(caf::actor{parent->spawn(supervisor, cfg)}, path, log);
    };
  } else {
    spec.start = [log, path = n.path](caf::local_actor* parent) {
      return logged(parent->spawn(prop_worker), path, log);
    };
  }
  return spec;
}

supervisor_config make_config(const node_spec& n, log_ptr log) {
  supervisor_config cfg;
  cfg.name = n.path.empty() ? "root" : n.path;
  cfg.strategy = n.strategy;
  cfg.max_restarts = n.max_restarts;
  cfg.period = 5s;
  cfg.seed = 1;
  for (auto& c : n.children)
    cfg.children.push_back(make_child(c, log));
  return cfg;
}

node_spec generate(std::mt19937_64& rng, const std::string& path, int depth) {
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  node_spec n;
  n.path = path;
  n.sup = true;
  n.strategy = static_cast<restart_strategy>(pick(3));
  n.max_restarts = static_cast<uint32_t>(pick(4));
  auto count = 1 + pick(4);
  for (int i = 0; i < count; ++i) {
    auto id = std::string(1, static_cast<char>('a' + i));
    auto child_path = path.empty() ? id : path + "/" + id;
    node_spec c;
    if (depth < 3 && pick(3) == 0) {
      c = generate(rng, child_path, depth + 1);
      c.restart = pick(4) == 0 ? restart_type::transient
                               : restart_type::permanent;
    } else {
      c.path = child_path;
      c.restart = static_cast<restart_type>(pick(3));
    }
    n.children.push_back(std::move(c));
  }
  return n;
}

// One child as seen in a supervisor's state.
struct seen {
  caf::actor_id id = 0;
  std::string status;
  restart_type restart = restart_type::permanent;
  bool sup = false;
  size_t index = 0; // Position among its siblings (start order).
};

using snapshot = std::map<std::string, seen>;

struct prop_fixture : test_coordinator_fixture<system_config> {
  using sup_actor = caf::stateful_actor<supervisor_state>;

  log_ptr log = std::make_shared<std::vector<std::string>>();
  std::vector<caf::actor> keep;

  void walk(const caf::actor& sup, const std::string& path, snapshot& out) {
    auto& st = deref<sup_actor>(sup).state;
    size_t index = 0;
    for (auto& [order, c] : st.children) {
      auto p = path.empty() ? c.spec.id : path + "/" + c.spec.id;
      out[p] = seen{c.actor ? c.actor.id() : 0, to_string(c.status),
                    c.spec.restart, c.spec.supervisor, index++};
      if (c.spec.supervisor && c.actor)
        walk(c.actor, p, out);
    }
  }

  snapshot snap(const caf::actor& root, bool alive) {
    snapshot out;
    if (alive)
      walk(root, "", out);
    return out;
  }

  // Checks the intensity bookkeeping of every live supervisor.
  std::string check_intensity(const caf::actor& sup) {
    auto& st = deref<sup_actor>(sup).state;
    if (st.restarts.size() > st.cfg.max_restarts)
      return st.cfg.name + " recorded " + std::to_string(st.restarts.size())
             + " restarts in its window, more than "
             + std::to_string(st.cfg.max_restarts);
    for (auto& [order, c] : st.children)
      if (c.spec.supervisor && c.actor)
        if (auto err = check_intensity(c.actor); !err.empty())
          return err;
    return {};
  }
};

bool under(const std::string& path, const std::string& ancestor) {
  return ancestor.empty()
         || (path.size() > ancestor.size()
             && path.compare(0, ancestor.size(), ancestor) == 0
             && path[ancestor.size()] == '/');
}

// Stop events of direct children of `sup` (except `skip`) must come in
// reverse start order.
std::string check_stop_order(const std::vector<std::string>& log,
                             const snapshot& before, const std::string& sup,
                             const std::string& skip) {
  std::vector<size_t> indices;
  for (auto& ev : log) {
    if (ev.compare(0, 5, "stop:") != 0)
      continue;
    auto p = ev.substr(5);
    if (p == skip || parent_of(p) != sup || before.count(p) == 0)
      continue;
    indices.push_back(before.at(p).index);
  }
  for (size_t i = 1; i < indices.size(); ++i)
    if (indices[i] >= indices[i - 1])
      return "children of '" + sup + "' did not stop in reverse start order";
  return {};
}

// The invariants after child `path` (a worker) exited, abnormally or not.
std::string check_crash(const snapshot& s0, const snapshot& s1,
                        const std::vector<std::string>& log,
                        const std::string& path, bool abnormal,
                        bool root_exited,
                        const std::map<std::string, restart_strategy>& strat) {
  auto gave_up = [&](const std::string& sup) {
    if (sup.empty())
      return root_exited;
    auto i = s1.find(sup);
    return i == s1.end() || i->second.id != s0.at(sup).id;
  };
  // The exit escalates while supervisors give up.
  auto top = path;
  while (gave_up(parent_of(top))) {
    auto p = parent_of(top);
    if (auto err = check_stop_order(log, s0, p, top); !err.empty())
      return err;
    if (p.empty())
      return {}; // The root gave up: nothing is left to check.
    top = p;
    abnormal = false; // Supervisors give up with `shutdown`.
  }
  if (root_exited)
    return "the root exited although no supervisor gave up";
  auto parent = parent_of(top);
  auto strategy = strat.at(parent);
  auto& crashed = s0.at(top);
  bool eligible = crashed.restart == restart_type::permanent
                  || (crashed.restart == restart_type::transient && abnormal);
  for (auto& [p, before] : s0) {
    if (under(p, parent) && parent_of(p) == parent) {
      bool renewed = eligible
                     && (p == top || strategy == restart_strategy::one_for_all
                         || (strategy == restart_strategy::rest_for_one
                             && before.index >= crashed.index));
      auto i = s1.find(p);
      if (p == top && !eligible) {
        bool gone = before.restart == restart_type::temporary;
        if (gone ? i != s1.end()
                 : (i == s1.end() || i->second.status != "stopped"))
          return "'" + p + "' exited without restart but is "
                 + (i == s1.end() ? "absent" : i->second.status);
        continue;
      }
      if (renewed && before.restart == restart_type::temporary && p != top) {
        if (i != s1.end())
          return "temporary '" + p + "' came back in a group restart";
        continue;
      }
      if (renewed) {
        if (i == s1.end() || i->second.status != "running"
            || i->second.id == before.id)
          return "'" + p + "' should have a new incarnation";
        continue;
      }
      if (i == s1.end() || i->second.id != before.id
          || i->second.status != before.status)
        return "'" + p + "' should be unchanged";
      continue;
    }
    // Outside the restarted group nothing changes.
    bool inside = false;
    for (auto& [q, b] : s0)
      if (parent_of(q) == parent && under(p, q))
        inside = true;
    if (inside)
      continue;
    auto i = s1.find(p);
    if (i == s1.end() || i->second.id != before.id)
      return "'" + p + "' outside the affected supervisor changed";
  }
  if (eligible && strategy != restart_strategy::one_for_one)
    if (auto err = check_stop_order(log, s0, parent, top); !err.empty())
      return err;
  return {};
}

void collect_strategies(const node_spec& n,
                        std::map<std::string, restart_strategy>& out) {
  if (!n.sup)
    return;
  out[n.path] = n.strategy;
  for (auto& c : n.children)
    collect_strategies(c, out);
}

uint64_t env_or(const char* name, uint64_t fallback) {
  if (auto str = std::getenv(name))
    return std::strtoull(str, nullptr, 10);
  return fallback;
}

} // namespace

CAF_TEST_FIXTURE_SCOPE(supervisor_property_tests, prop_fixture)

CAF_TEST(random trees keep OTP invariants under random crashes) {
  // Thousands of expected restarts: keep the output readable.
  auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::off);
  auto seeds = env_or("KEEL_PROPERTY_SEEDS", 1000);
  auto first = env_or("KEEL_PROPERTY_SEED", 1);
  size_t crashes = 0;
  size_t root_exits = 0;
  for (auto seed = first; seed < first + seeds; ++seed) {
    std::mt19937_64 rng{seed};
    auto tree = generate(rng, "", 1);
    std::map<std::string, restart_strategy> strategies;
    collect_strategies(tree, strategies);
    log->clear();
    auto root = sys.spawn(supervisor, make_config(tree, log));
    bool root_exited = false;
    keep.push_back(sys.spawn(
      [root, &root_exited](caf::event_based_actor* w) -> caf::behavior {
        w->monitor(root);
        w->set_down_handler([w, &root_exited](caf::down_msg&) {
          root_exited = true;
          w->quit();
        });
        return {[](int) {}};
      }));
    consume_messages();
    std::ostringstream ops;
    std::map<caf::actor_id, std::set<std::string>> gone_temporaries;
    auto fail = [&](const std::string& what) {
      CAF_FAIL("seed " << seed << " (replay: KEEL_PROPERTY_SEED=" << seed
                       << " KEEL_PROPERTY_SEEDS=1): " << what
                       << "; operations:" << ops.str());
    };
    for (int step = 0; step < 12 && !root_exited; ++step) {
      auto s0 = snap(root, true);
      std::vector<std::string> workers;
      for (auto& [p, c] : s0)
        if (!c.sup && c.status == "running")
          workers.push_back(p);
      if (workers.empty() || rng() % 5 == 0) {
        auto d = caf::timespan{std::chrono::milliseconds(rng() % 6000)};
        ops << " advance("
            << std::chrono::duration_cast<std::chrono::milliseconds>(d).count()
            << "ms)";
        advance_time(d);
        consume_messages();
        if (snap(root, true).size() != s0.size())
          fail("advancing time changed the tree");
        continue;
      }
      auto victim = workers[rng() % workers.size()];
      bool abnormal = rng() % 4 != 0;
      ops << (abnormal ? " crash(" : " quit(") << victim << ")";
      log->clear();
      ++crashes;
      // Find the victim's handle through its supervisor's state.
      caf::actor sup = root;
      for (auto p = parent_of(victim); !p.empty();) {
        auto seg = p.substr(0, p.find('/'));
        sup = deref<sup_actor>(sup).state.find(seg)->actor;
        p = p.find('/') == std::string::npos ? "" : p.substr(p.find('/') + 1);
      }
      auto hdl = deref<sup_actor>(sup).state.find(leaf(victim))->actor;
      if (abnormal)
        self->send_exit(hdl, caf::make_error(ec::turn_failed));
      else
        self->send(hdl, caf::delete_atom_v);
      consume_messages();
      auto s1 = snap(root, !root_exited);
      if (auto err = check_crash(s0, s1, *log, victim, abnormal, root_exited,
                                 strategies);
          !err.empty())
        fail(err);
      if (root_exited) {
        ++root_exits;
        break;
      }
      if (auto err = check_intensity(root); !err.empty())
        fail(err);
      // Temporary children never come back within one supervisor
      // incarnation.
      for (auto& [p, c] : s0) {
        auto parent = parent_of(p);
        auto sup_id = parent.empty() ? root.id() : s0.at(parent).id;
        if (c.restart == restart_type::temporary && s1.count(p) == 0)
          gone_temporaries[sup_id].insert(p);
      }
      for (auto& [p, c] : s1) {
        auto parent = parent_of(p);
        auto sup_id = parent.empty() ? root.id() : s1.at(parent).id;
        if (gone_temporaries[sup_id].count(p) != 0)
          fail("temporary '" + p + "' came back");
      }
    }
    if (!root_exited)
      self->send_exit(root, caf::exit_reason::user_shutdown);
    consume_messages();
    // Every incarnation that started has stopped.
    auto starts = std::count_if(log->begin(), log->end(), [](auto& ev) {
      return ev.compare(0, 6, "start:") == 0;
    });
    auto stops = std::count_if(log->begin(), log->end(), [](auto& ev) {
      return ev.compare(0, 5, "stop:") == 0;
    });
    if (starts > stops)
      fail("children outlived their stopped tree");
    keep.clear();
  }
  spdlog::set_level(level);
  CAF_MESSAGE(seeds << " seeds checked: " << crashes << " exits, " << root_exits
                    << " roots gave up");
}

CAF_TEST_FIXTURE_SCOPE_END()
