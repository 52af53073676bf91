#include "keel/system_config.hpp"

#include <algorithm>
#include <thread>

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/scheduler/coordinator.hpp>

#include "keel/actors.hpp"
#include "keel/handoff_sharing.hpp"

namespace keel {

system_config::system_config() {
  add_message_type<session_record>("keel::session_record");
  add_message_type<inbox_entry>("keel::inbox_entry");
  add_message_type<log_entry>("keel::log_entry");
  add_message_type<context_entry>("keel::context_entry");
  add_message_type<thread_snapshot>("keel::thread_snapshot");
  add_message_type<accept_request>("keel::accept_request");
  add_message_type<accept_result>("keel::accept_result");
  add_message_type<turn_commit>("keel::turn_commit");
  add_message_type<history_page>("keel::history_page");
  add_message_type<thread_event>("keel::thread_event");
  add_message_type<completion_request>("keel::completion_request");
  add_message_type<completion>("keel::completion");
  add_message_type<protocol::client_frame>("keel::protocol::client_frame");
  add_message_type<persistence_stats>("keel::persistence_stats");
  add_message_type<std::vector<std::string>>("std::vector<std::string>");
  add_message_type<child_info>("keel::child_info");
  add_message_type<std::vector<child_info>>("std::vector<keel::child_info>");
  add_message_type<provider_health_record>("keel::provider_health_record");
  add_message_type<std::vector<provider_health_record>>(
    "std::vector<keel::provider_health_record>");
  add_message_type<attempt_request>("keel::attempt_request");
  add_message_type<attempt_outcome>("keel::attempt_outcome");
  add_message_type<tree_link>("keel::tree_link");
  add_message_type<std::vector<tree_link>>("std::vector<keel::tree_link>");
  add_message_type<outbox_entry>("keel::outbox_entry");
  add_message_type<spawn_request>("keel::spawn_request");
  add_message_type<spawn_result>("keel::spawn_result");
  add_message_type<recovery_step>("keel::recovery_step");
  add_message_type<tool_run>("keel::tool_run");
  add_message_type<tool_outcome>("keel::tool_outcome");
  add_message_type<dead_letter>("keel::dead_letter");
  add_message_type<std::vector<dead_letter>>("std::vector<keel::dead_letter>");
  add_message_type<reply_delivery>("keel::reply_delivery");
  add_message_type<std::vector<reply_delivery>>(
    "std::vector<keel::reply_delivery>");
  add_message_type<recovery_report>("keel::recovery_report");
  add_message_type<recovery_plan>("keel::recovery_plan");
  add_message_type<std::vector<session_record>>(
    "std::vector<keel::session_record>");
  add_message_type<std::vector<uint32_t>>("std::vector<uint32_t>");
  add_message_type<std::vector<uint64_t>>("std::vector<uint64_t>");
  add_message_type<cluster_member_info>("keel::cluster_member_info");
  add_message_type<std::vector<cluster_member_info>>(
    "std::vector<keel::cluster_member_info>");
  add_message_type<cluster_status>("keel::cluster_status");
  add_error_category(error_category,
                     [](uint8_t code, caf::atom_value category,
                        const caf::message& ctx) -> std::string {
                       return render(caf::error{code, category, ctx});
                     });
}

void system_config::load_middleman(caf::timespan heartbeat,
                                   caf::timespan timeout,
                                   const cluster_tls_config& tls) {
  load<caf::io::middleman>();
  if (tls.enabled()) {
    load<caf::openssl::manager>();
    openssl_certificate = tls.cert;
    openssl_key = tls.key;
    openssl_cafile = tls.ca;
  }
  // Both are off by default in CAF 0.17: a stopped peer would then only be
  // noticed at the TCP timeout.
  set("middleman.heartbeat-interval", heartbeat);
  set("middleman.connection-timeout", timeout);
}

size_t scheduler_workers(size_t configured) {
  if (configured > 0)
    return configured;
  return std::max<size_t>(std::thread::hardware_concurrency(), 2);
}

void system_config::configure_node(const node_config& cfg) {
  if (cfg.scheduler == scheduler_policy::sharing) {
    // A loaded scheduler takes the place of CAF's own choice: the policy
    // setting only names it. Each actor's run on a worker ends after
    // `sharing_max_throughput` messages, so that an actor fed without pause
    // never holds its worker's hand-off slot for long (CAF's network layer
    // reads at most as many messages per poll, too).
    this->load<caf::scheduler::coordinator<handoff_sharing>>();
    set("scheduler.max-throughput", sharing_max_throughput);
    set("scheduler.policy", caf::atom("sharing"));
  } else {
    set("scheduler.policy", caf::atom("stealing"));
  }
  set("scheduler.max-threads", scheduler_workers(cfg.workers));
  if (cfg.cluster.enabled)
    load_middleman(cfg.cluster.heartbeat, cfg.cluster.lease_ttl,
                   cfg.cluster.tls);
}

} // namespace keel
