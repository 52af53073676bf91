// The helpers every keelctl subcommand uses.

#include <cctype>
#include <iostream>
#include <optional>

#include "keel/tools/data_dir.hpp"
#include "keel/tools/ws_client.hpp"
#include "keelctl.hpp"

namespace keelctl {

int fail(const keel::endpoint& ep, const caf::error& err) {
  auto described = keel::describe_node_error(ep, err);
  std::cerr << "keelctl: " << keel::readable_message(described) << '\n';
  if (described == keel::ec::config_invalid) // e.g. an unreadable --ca-file
    return exit_usage;
  return described == keel::ec::connection_failed
             || described == keel::ec::unauthorized
           ? exit_unreachable
           : exit_failed;
}

int fail(const std::string& msg, int code) {
  std::cerr << "keelctl: " << msg << '\n';
  return code;
}

int with_node(const node_args& node,
              const std::function<int(const keel::endpoint&)>& run,
              bool admin) {
  auto ep = keel::parse_endpoint(node.address);
  if (!ep) // defaults and env values bypass nothing: still checked here
    return fail(keel::error_message(ep.error()), exit_usage);
  ep->token = admin && !node.admin_token.empty() ? node.admin_token
                                                 : node.token;
  ep->ca_file = node.ca_file;
  return run(*ep);
}

CLI::App* add_node_command(CLI::App& app, const std::string& name,
                           const std::string& description) {
  auto cmd = app.add_subcommand(name, description);
  cmd->footer("Every command also takes --node HOST:PORT or wss://HOST:PORT "
              "(env KEEL_NODE, default 127.0.0.1:8080), --token TOKEN (env "
              "KEEL_TOKEN), --ca-file FILE for TLS (env KEEL_CA_FILE) and, "
              "for the commands that use the admin API, --admin-token TOKEN "
              "(env KEEL_ADMIN_TOKEN).");
  return cmd;
}

command node_command(CLI::App* cmd, const node_args& node,
                     std::function<int(const keel::endpoint&)> run,
                     bool admin) {
  return {cmd, [&node, run = std::move(run), admin] {
            return with_node(node, run, admin);
          }};
}

std::chrono::milliseconds millis_at(const json& j,
                                    std::initializer_list<const char*> path) {
  auto ms = static_cast<int64_t>(json_number(j, path));
  return std::chrono::milliseconds{ms};
}

int print_error_frame(const json& body) {
  auto code = json_string(body, "code");
  auto message = json_string(body, "message");
  std::cerr << "keelctl: error " << (code.empty() ? "(no code)" : code)
            << (message.empty() ? "" : ": " + message) << '\n';
  return exit_failed;
}

CLI::Option* add_data_options(CLI::App* cmd, keel::data_source& src,
                              bool required) {
  auto dir = cmd
               ->add_option("--data-dir", src.data_dir,
                            "Read a node's data folder (its database is in "
                            "DIR/db)")
               ->type_name("DIR");
  auto pg = cmd
              ->add_option("--pg", src.pg_url,
                           "Read a node's PostgreSQL store (a libpq URL; "
                           "env KEEL_PG_URL)")
              ->type_name("URL");
  dir->excludes(pg);
  // Only where data is all the command reads: elsewhere a set KEEL_PG_URL
  // must not turn a question to the node into one to the database.
  if (required)
    pg->envname("KEEL_PG_URL");
  return dir;
}

namespace {

// `text` percent-encoded for a URL's query: unreserved characters stay.
std::string query_encoded(const std::string& text) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string result;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      result += static_cast<char>(c);
    } else {
      result += '%';
      result += hex[c >> 4];
      result += hex[c & 15];
    }
  }
  return result;
}

} // namespace

caf::expected<json> api_list(const keel::endpoint& ep, const std::string& path,
                             const char* list) {
  // The largest page the node answers: the fewest round trips.
  constexpr const char* rows = "1000";
  std::optional<json> result;
  std::string after;
  for (;;) {
    auto target = path + "?limit=" + rows;
    if (!after.empty())
      target += "&after=" + query_encoded(after);
    auto page = keel::api_call(ep, "GET", target);
    if (!page)
      return std::move(page.error());
    auto next = page->value("next", json{});
    page->erase("next");
    if (!result) {
      result = std::move(*page);
    } else if (auto i = page->find(list); i != page->end() && i->is_array()) {
      auto& all = (*result)[list];
      all.insert(all.end(), i->begin(), i->end());
    }
    if (!next.is_string() || next.get<std::string>().empty())
      return std::move(*result);
    after = next.get<std::string>();
  }
}

int with_data(const keel::data_source& src,
              const std::function<int(keel::store&)>& run) {
  if (src.data_dir.empty() && src.pg_url.empty())
    return fail("give --data-dir DIR or --pg URL", exit_usage);
  auto db = keel::open_data_source(src);
  if (!db)
    return fail(keel::error_message(db.error()), exit_usage);
  return run(**db);
}

} // namespace keelctl
