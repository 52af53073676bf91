#include "keel/pg_connection.hpp"

#include <cerrno>
#include <utility>

#include <libpq-fe.h>
#include <poll.h>

namespace keel::pg {

namespace {

/// libpq's last message for `conn`, without its trailing newline.
std::string last_error(const PGconn* conn) {
  std::string msg = conn != nullptr ? PQerrorMessage(conn) : "out of memory";
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' '))
    msg.pop_back();
  return msg.empty() ? "no reason given" : msg;
}

/// "SQLSTATE CODE: MESSAGE" of a refused statement.
std::string describe(const PGresult* res) {
  auto code = PQresultErrorField(res, PG_DIAG_SQLSTATE);
  auto text = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
  return std::string{"SQLSTATE "} + (code ? code : "?????") + ": "
         + (text ? text : "no message");
}

/// Whether the session ended rather than the statement: an error libpq
/// made itself (no SQLSTATE: the socket closed under it), connection
/// exceptions (class 08) and shutdowns (57P01..57P03, e.g. the postmaster
/// died under the backend).
bool ends_session(const PGresult* res) {
  auto field = PQresultErrorField(res, PG_DIAG_SQLSTATE);
  std::string_view code = field != nullptr ? field : "";
  return code.empty() || code.substr(0, 2) == "08"
         || code.substr(0, 3) == "57P";
}

/// The message of an error result, without its trailing newline.
std::string result_message(const PGresult* res) {
  std::string msg = PQresultErrorMessage(res);
  while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' '))
    msg.pop_back();
  return msg.empty() ? "no reason given" : msg;
}

/// A statement waited longer than the connection's answer timeout.
caf::error no_answer(std::chrono::milliseconds timeout) {
  return caf::make_error(ec::storage_io,
                         "connection lost: no answer from the server in "
                           + std::to_string(timeout.count()) + " ms");
}

// A statement's parameters in binary format, as libpq takes them.
struct binary_params {
  explicit binary_params(const std::vector<std::string_view>& params)
    : formats(params.size(), 1) {
    for (auto p : params) {
      // A null pointer would be SQL NULL; an empty value is not.
      values.push_back(p.data() != nullptr ? p.data() : "");
      lengths.push_back(static_cast<int>(p.size()));
    }
  }

  int size() const {
    return static_cast<int>(values.size());
  }

  std::vector<const char*> values;
  std::vector<int> lengths;
  std::vector<int> formats;
};

// Statements a connection keeps prepared.
constexpr size_t max_prepared = 64;

} // namespace

// -- result -------------------------------------------------------------------

result::result(pg_result* res) : res_(res, PQclear) {
  // nop
}

size_t result::rows() const {
  return res_ ? static_cast<size_t>(PQntuples(res_.get())) : 0;
}

size_t result::columns() const {
  return res_ ? static_cast<size_t>(PQnfields(res_.get())) : 0;
}

bool result::is_null(size_t row, size_t column) const {
  return PQgetisnull(res_.get(), static_cast<int>(row),
                     static_cast<int>(column))
         != 0;
}

std::string_view result::value(size_t row, size_t column) const {
  auto r = static_cast<int>(row);
  auto c = static_cast<int>(column);
  return {PQgetvalue(res_.get(), r, c),
          static_cast<size_t>(PQgetlength(res_.get(), r, c))};
}

uint64_t result::affected() const {
  std::string_view text = res_ ? PQcmdTuples(res_.get()) : "";
  uint64_t n = 0;
  for (auto c : text)
    n = n * 10 + static_cast<uint64_t>(c - '0');
  return n;
}

// -- connection ---------------------------------------------------------------

caf::expected<connection> connection::open(const std::string& url,
                                           std::chrono::milliseconds timeout) {
  auto secs = std::max<int64_t>(
    1, std::chrono::duration_cast<std::chrono::seconds>(timeout).count());
  auto seconds = std::to_string(secs);
  const char* keys[] = {"dbname", "connect_timeout", nullptr};
  const char* values[] = {url.c_str(), seconds.c_str(), nullptr};
  // expand_dbname = 1: `dbname` holds the URL or conninfo string.
  connection conn{PQconnectdbParams(keys, values, 1)};
  if (!conn.ok())
    return caf::make_error(ec::storage_io, "cannot connect to PostgreSQL: "
                                             + last_error(conn.conn_));
  return conn;
}

connection::connection(pg_conn* conn) noexcept : conn_(conn) {
  // nop
}

connection::connection(connection&& other) noexcept
  : conn_(std::exchange(other.conn_, nullptr)),
    broken_(std::exchange(other.broken_, false)),
    prepared_(std::move(other.prepared_)),
    answer_timeout_(other.answer_timeout_) {
  // nop
}

connection& connection::operator=(connection&& other) noexcept {
  if (this != &other) {
    if (conn_ != nullptr)
      PQfinish(conn_);
    conn_ = std::exchange(other.conn_, nullptr);
    broken_ = std::exchange(other.broken_, false);
    prepared_ = std::move(other.prepared_);
    answer_timeout_ = other.answer_timeout_;
  }
  return *this;
}

connection::~connection() {
  if (conn_ != nullptr)
    PQfinish(conn_);
}

bool connection::ok() const {
  return conn_ != nullptr && !broken_ && PQstatus(conn_) == CONNECTION_OK;
}

int connection::server_version() const {
  return conn_ != nullptr ? PQserverVersion(conn_) : 0;
}

caf::expected<result> connection::exec(const std::string& sql,
                                       const std::vector<param>& params) {
  if (!ok())
    return caf::make_error(ec::storage_io,
                           "connection lost: " + last_error(conn_));
  std::vector<const char*> values;
  values.reserve(params.size());
  for (auto& p : params)
    values.push_back(p ? p->c_str() : nullptr);
  if (PQsendQueryParams(conn_, sql.c_str(), static_cast<int>(values.size()),
                        nullptr, values.data(), nullptr, nullptr, 0)
      != 1)
    return checked(result{nullptr});
  return answer();
}

bool connection::await_answer() {
  using clock = std::chrono::steady_clock;
  auto deadline = clock::now() + answer_timeout_;
  while (PQisBusy(conn_) == 1) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - clock::now());
    if (left.count() <= 0) {
      broken_ = true;
      return false;
    }
    pollfd fd{PQsocket(conn_), POLLIN, 0};
    auto ready = ::poll(&fd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno != EINTR)
      return true; // PQgetResult reports the broken socket.
    if (ready > 0 && PQconsumeInput(conn_) != 1)
      return true;
  }
  return true;
}

caf::expected<result> connection::answer() {
  if (!await_answer())
    return no_answer(answer_timeout_);
  result res{PQgetResult(conn_)};
  // A statement's results end with a NULL.
  for (;;) {
    if (!await_answer())
      return no_answer(answer_timeout_);
    auto* extra = PQgetResult(conn_);
    if (extra == nullptr)
      break;
    PQclear(extra);
  }
  return checked(std::move(res));
}

caf::expected<result>
connection::exec_binary(const std::string& sql,
                        const std::vector<std::string_view>& params) {
  if (!ok())
    return caf::make_error(ec::storage_io,
                           "connection lost: " + last_error(conn_));
  binary_params p{params};
  auto name = prepared_name(sql);
  auto sent = !name.empty()
                ? PQsendQueryPrepared(conn_, name.c_str(), p.size(),
                                      p.values.data(), p.lengths.data(),
                                      p.formats.data(), 1)
                : PQsendQueryParams(conn_, sql.c_str(), p.size(), nullptr,
                                    p.values.data(), p.lengths.data(),
                                    p.formats.data(), 1);
  if (sent != 1)
    return checked(result{nullptr});
  return answer();
}

std::string connection::prepared_name(const std::string& sql) {
  if (auto i = prepared_.find(sql); i != prepared_.end())
    return i->second;
  if (prepared_.size() >= max_prepared)
    return {};
  auto name = "keel_" + std::to_string(prepared_.size());
  if (PQsendPrepare(conn_, name.c_str(), sql.c_str(), 0, nullptr) != 1
      || !answer())
    return {};
  prepared_.emplace(sql, name);
  return name;
}

caf::expected<result> connection::checked(result res) {
  auto status = res.res_ ? PQresultStatus(res.res_.get()) : PGRES_FATAL_ERROR;
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK)
    return res;
  if (!ok() || !res.res_)
    return caf::make_error(ec::storage_io,
                           "connection lost: " + last_error(conn_));
  if (ends_session(res.res_.get())) {
    broken_ = true;
    return caf::make_error(ec::storage_io, "connection lost: "
                                             + result_message(res.res_.get()));
  }
  return caf::make_error(ec::storage_io, describe(res.res_.get()));
}

bool connection::send_step(const statement& step) {
  binary_params p{step.params};
  return PQsendQueryParams(conn_, step.sql.c_str(), p.size(), nullptr,
                           p.values.data(), p.lengths.data(), p.formats.data(),
                           1)
         == 1;
}

caf::expected<result> connection::next_result() {
  if (!await_answer())
    return no_answer(answer_timeout_);
  result res{PQgetResult(conn_)};
  if (!res.res_)
    return checked(std::move(res));
  // Each statement's results end with a NULL.
  while (await_answer())
    if (auto* extra = PQgetResult(conn_))
      PQclear(extra);
    else
      break;
  if (PQresultStatus(res.res_.get()) == PGRES_PIPELINE_ABORTED)
    return caf::make_error(ec::storage_io, "skipped: an earlier statement of "
                                           "the pipeline failed");
  return checked(std::move(res));
}

caf::expected<std::vector<result>>
connection::pipeline(const std::vector<statement>& steps) {
  if (!ok() || PQenterPipelineMode(conn_) != 1)
    return caf::make_error(ec::storage_io,
                           "connection lost: " + last_error(conn_));
  bool sent = true;
  for (auto& step : steps)
    sent = sent && send_step(step);
  sent = sent && PQpipelineSync(conn_) == 1;
  std::vector<result> results;
  caf::error first_error;
  for (size_t i = 0; sent && i < steps.size(); ++i) {
    auto res = next_result();
    if (res)
      results.push_back(std::move(*res));
    else if (!first_error)
      first_error = std::move(res.error());
    if (!ok())
      break;
  }
  // The sync point's own result, then back to one statement at a time.
  if (sent && ok() && await_answer())
    if (auto* sync = PQgetResult(conn_))
      PQclear(sync);
  if (!sent || !ok() || PQexitPipelineMode(conn_) != 1) {
    broken_ = true;
    return caf::make_error(ec::storage_io,
                           "connection lost: "
                             + (first_error ? error_message(first_error)
                                            : last_error(conn_)));
  }
  if (first_error)
    return first_error;
  return results;
}

bool connection::idle() const {
  return conn_ != nullptr && PQtransactionStatus(conn_) == PQTRANS_IDLE;
}

int connection::backend_pid() const {
  return conn_ != nullptr ? PQbackendPID(conn_) : 0;
}

std::string sqlstate_of(const caf::error& err) {
  auto msg = error_message(err);
  const std::string prefix = "SQLSTATE ";
  if (msg.compare(0, prefix.size(), prefix) != 0 || msg.size() < 14)
    return {};
  return msg.substr(prefix.size(), 5);
}

} // namespace keel::pg
