// keelctl dlq: the dead-letter queue through the admin API: listing the
// letters, showing one with its retries, retrying one now, dropping one.
// keelctl notifications: what the owner was told, and what was suppressed.

#include <cstdio>
#include <iostream>
#include <memory>

#include "keel/text.hpp"
#include "keel/tools/ws_client.hpp"
#include "keelctl.hpp"

namespace keelctl {

namespace {

// "in 4m 10s", "3s ago" or "-" for a time in ms since the epoch.
std::string relative_time(const json& letter, const char* key) {
  auto at = static_cast<int64_t>(json_number(letter, {key}));
  if (at == 0)
    return "-";
  auto delta = at - keel::wall_clock_millis();
  auto text = keel::human_duration(std::chrono::milliseconds{std::abs(delta)});
  return delta >= 0 ? "in " + text : text + " ago";
}

// Where a letter goes: its target thread, or a reply's channels
// ("channel crm,ops").
std::string destination(const json& x) {
  auto i = x.find("channels");
  if (i == x.end() || !i->is_array() || i->empty())
    return json_string(x, "to");
  std::string result = "channel ";
  for (auto& name : *i)
    if (name.is_string())
      result += (result.size() > 8 ? "," : "") + name.get<std::string>();
  return result;
}

int print_list(const json& body, const std::string& status) {
  std::printf("%-28s %-9s %7s %-12s %-16s %s\n", "ID", "STATUS", "RETRIES",
              "NEXT RETRY", "TO", "REASON");
  if (auto i = body.find("dead_letters"); i != body.end() && i->is_array())
    for (auto& x : *i) {
      if (!status.empty() && json_string(x, "status") != status)
        continue;
      std::printf("%-28s %-9s %7llu %-12s %-16s %s\n",
                  json_string(x, "id").c_str(),
                  json_string(x, "status").c_str(),
                  static_cast<unsigned long long>(json_number(x, {"retries"})),
                  relative_time(x, "next_retry_at").c_str(),
                  destination(x).c_str(), json_string(x, "reason").c_str());
    }
  return exit_ok;
}

int print_letter(const json& x) {
  std::cout << "dead letter " << json_string(x, "id") << ": "
            << json_string(x, "status") << "\n  from " << json_string(x, "from")
            << " to " << destination(x) << ": " << json_string(x, "text")
            << "\n  reason: " << json_string(x, "reason")
            << "\n  first attempt: " << relative_time(x, "at")
            << ", last: " << relative_time(x, "last_attempt_at")
            << ", next retry: " << relative_time(x, "next_retry_at")
            << ", retries: " << json_number(x, {"retries"}) << '\n';
  if (auto i = x.find("events"); i != x.end() && i->is_array())
    for (auto& ev : *i)
      std::cout << "  " << relative_time(ev, "at") << ": "
                << json_string(ev, "action") << ": "
                << json_string(ev, "outcome") << '\n';
  return exit_ok;
}

// Calls the API and prints the answer as JSON or with `print`; exits with
// `exit_failed` (after printing) unless `succeeded` holds for the answer.
int call(const keel::endpoint& ep, const std::string& method,
         const std::string& target, const std::string& body, bool as_json,
         const std::function<int(const json&)>& print,
         const std::function<bool(const json&)>& succeeded = nullptr) {
  auto res = keel::api_call(ep, method, target, body,
                            std::chrono::seconds{110});
  if (!res)
    return fail(ep, res.error());
  if (as_json)
    std::cout << res->dump(2) << '\n';
  else
    print(*res);
  if (succeeded && !succeeded(*res))
    return fail("the retry did not deliver " + json_string(*res, "id"));
  return exit_ok;
}

// Reads the list at `target` (its rows under `rows`) page by page and
// prints it whole, as JSON or with `print`.
int list(const keel::endpoint& ep, const std::string& target, const char* rows,
         bool as_json, const std::function<int(const json&)>& print) {
  auto res = api_list(ep, target, rows);
  if (!res)
    return fail(ep, res.error());
  if (as_json)
    std::cout << res->dump(2) << '\n';
  else
    print(*res);
  return exit_ok;
}

struct dlq_args {
  std::string id;
  std::string status;
  std::string reason = "dropped by operator";
  bool as_json = false;
};

// Adds `dlq NAME`, run with the letter id and options in `args`.
CLI::App* add_action(CLI::App* dlq, const std::string& name,
                     const std::string& description,
                     const std::shared_ptr<dlq_args>& args) {
  auto cmd = dlq->add_subcommand(name, description);
  cmd->add_option("ID", args->id, "The letter's id: THREAD/SEQ")
    ->type_name("")
    ->required();
  cmd->add_flag("--json", args->as_json, "Print the raw JSON");
  return cmd;
}

int run_dlq(const keel::endpoint& ep, CLI::App* dlq, const dlq_args& args) {
  auto one = "/api/v1/dlq/" + args.id;
  if (dlq->got_subcommand("list"))
    return list(ep, "/api/v1/dlq", "dead_letters", args.as_json,
                [&](const json& j) { return print_list(j, args.status); });
  if (dlq->got_subcommand("show"))
    return call(ep, "GET", one, {}, args.as_json, print_letter);
  if (dlq->got_subcommand("retry"))
    return call(ep, "POST", one + "/retry", {}, args.as_json, print_letter,
                [](const json& x) {
                  return json_string(x, "status") == "delivered";
                });
  json body{{"reason", args.reason}};
  return call(ep, "POST", one + "/drop", body.dump(), args.as_json,
              print_letter);
}

int print_notices(const json& body) {
  std::printf("%-8s %-22s %-24s %-8s %-10s %10s  %s\n", "SEVERITY", "KIND",
              "SUBJECT", "STATUS", "AT", "SUPPRESSED", "TEXT");
  if (auto i = body.find("notifications"); i != body.end() && i->is_array())
    for (auto& x : *i) {
      auto status = json_string(x, "status");
      if (status == "failed")
        status += " (" + json_string(x, "error") + ")";
      std::printf(
        "%-8s %-22s %-24s %-8s %-10s %10llu  %s\n",
        json_string(x, "severity").c_str(), json_string(x, "kind").c_str(),
        json_string(x, "subject").c_str(), status.c_str(),
        relative_time(x, "at").c_str(),
        static_cast<unsigned long long>(json_number(x, {"suppressed"})),
        json_string(x, "text").c_str());
    }
  return exit_ok;
}

} // namespace

command add_notifications_command(CLI::App& app, const node_args& node) {
  auto as_json = std::make_shared<bool>(false);
  auto cmd = add_node_command(
    app, "notifications",
    "What the owner was told (owner.channel), newest first: per kind and "
    "subject the latest notice and how many its dedup window suppressed "
    "since");
  cmd->add_flag("--json", *as_json, "Print the raw JSON");
  return node_command(
    cmd, node,
    [as_json](const keel::endpoint& ep) {
      return list(ep, "/api/v1/notifications", "notifications", *as_json,
                  print_notices);
    },
    true);
}

command add_dlq_command(CLI::App& app, const node_args& node) {
  auto args = std::make_shared<dlq_args>();
  auto dlq = add_node_command(
    app, "dlq",
    "The dead-letter queue: messages no target could take, retried on a "
    "schedule (delivery.dead_letters) until delivered or abandoned");
  dlq->require_subcommand(1);
  auto list = dlq->add_subcommand("list", "Lists the dead letters");
  list
    ->add_option("--status", args->status,
                 "Only letters in this state: pending, delivered, "
                 "abandoned or dropped")
    ->check(CLI::IsMember({"pending", "delivered", "abandoned", "dropped"}));
  list->add_flag("--json", args->as_json, "Print the raw JSON");
  add_action(dlq, "show", "Shows one letter with its retries", args);
  add_action(dlq, "retry",
             "Retries a pending or abandoned letter now (recorded in it)",
             args);
  add_action(dlq, "drop", "Drops a letter: it is never retried again", args)
    ->add_option("--reason", args->reason, "Why (recorded in the letter)");
  return node_command(
    dlq, node,
    [args, dlq](const keel::endpoint& ep) { return run_dlq(ep, dlq, *args); },
    true);
}

} // namespace keelctl
