#pragma once

// One PostgreSQL connection through libpq, owned (closed on destruction),
// with statements that take text parameters ($1, $2, ...) and answer a
// result or an error naming the server's SQLSTATE. Blocking; one thread at
// a time per connection.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "keel/error.hpp"

// libpq's handles, kept out of this header.
struct pg_conn;
struct pg_result;

namespace keel::pg {

/// The rows a statement returned, in text format.
class result {
public:
  result() = default;

  size_t rows() const;
  size_t columns() const;

  bool is_null(size_t row, size_t column) const;

  /// The value at (row, column); empty for NULL.
  std::string_view value(size_t row, size_t column) const;

  /// Rows an INSERT, UPDATE or DELETE touched.
  uint64_t affected() const;

private:
  friend class connection;
  explicit result(pg_result* res);

  std::shared_ptr<pg_result> res_;
};

/// A statement parameter: text, or NULL.
using param = std::optional<std::string>;

/// A statement of a pipeline: its parameters go in binary format (see
/// `connection::exec_binary`), text ones as their bytes.
struct statement {
  std::string sql;
  std::vector<std::string_view> params;
};

class connection {
public:
  /// Connects to `url` (a libpq URI or conninfo string) and waits at most
  /// `timeout`. Fails with `ec::storage_io` and "cannot connect to
  /// PostgreSQL: REASON"; the message never contains the URL (it may hold a
  /// password).
  static caf::expected<connection>
  open(const std::string& url,
       std::chrono::milliseconds timeout = std::chrono::seconds{10});

  connection(connection&& other) noexcept;
  connection& operator=(connection&& other) noexcept;
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;
  ~connection();

  /// Runs `sql` with `params` and returns its rows. Fails with
  /// `ec::storage_io` and "SQLSTATE CODE: MESSAGE" when the server refuses
  /// it, or "connection lost: REASON" when the connection broke or the
  /// server ended the session (SQLSTATE class 08, 57P01..03); `ok()` is
  /// then false.
  caf::expected<result> exec(const std::string& sql,
                             const std::vector<param>& params = {});

  /// Like `exec`, but the parameters go as raw bytes (binary format: a
  /// `bytea` parameter is the bytes as they are, no escaping) and the rows
  /// come in binary format (a `bytea` value is its bytes). The first 64
  /// distinct statements are prepared on the server once per connection
  /// (parsed and planned once, not on every call).
  caf::expected<result>
  exec_binary(const std::string& sql,
              const std::vector<std::string_view>& params);

  /// Sends every statement at once (libpq's pipeline mode: one round trip
  /// for all of them) and returns their results in order. The server runs
  /// them in order and skips the rest after one fails: the error is that
  /// statement's ("SQLSTATE CODE: MESSAGE"), or "connection lost: ..." as
  /// for `exec`, in which case which statements ran is unknown.
  caf::expected<std::vector<result>>
  pipeline(const std::vector<statement>& steps);

  /// The process id of the server process serving this connection.
  int backend_pid() const;

  /// Whether no transaction is open (none begun, or it ended).
  bool idle() const;

  /// Whether the connection is open and usable.
  bool ok() const;

  /// The server's version as a number (150008 for 15.8).
  int server_version() const;

  /// How long any statement (or a pipeline's next result) may wait for the
  /// server's answer before the connection is given up as lost (the
  /// server's statement_timeout cannot end a wait for a server or link
  /// that went silent). Default: `default_answer_timeout`.
  void answer_timeout(std::chrono::milliseconds timeout) {
    answer_timeout_ = timeout;
  }

  static constexpr std::chrono::milliseconds default_answer_timeout{30000};

private:
  explicit connection(pg_conn* conn) noexcept;

  // Turns what libpq answered into a result or an error (see `exec`).
  caf::expected<result> checked(result res);

  // The name of `sql` prepared on this connection, preparing it now; empty
  // when no more are kept or the server refused it (the caller then runs
  // it unprepared, and the server's refusal is reported from there).
  std::string prepared_name(const std::string& sql);

  // Queues `step` in pipeline mode.
  bool send_step(const statement& step);

  // Reads the result of one queued statement (and the NULL after it).
  caf::expected<result> next_result();

  // Waits until libpq holds a whole result (or an error to report);
  // false when `answer_timeout_` passed first: the connection is then
  // broken (what the server did with the statement is unknown).
  bool await_answer();

  // The one result of a statement sent with a PQsend* call.
  caf::expected<result> answer();

  pg_conn* conn_ = nullptr;
  /// The server ended the session (a shutdown or connection error came as
  /// a statement's error): the connection is not used again.
  bool broken_ = false;
  /// Statements prepared on this connection, by their text.
  std::map<std::string, std::string, std::less<>> prepared_;
  std::chrono::milliseconds answer_timeout_ = default_answer_timeout;
};

/// The SQLSTATE of an error from `connection::exec` ("23505", ...), or ""
/// when it did not come from the server.
std::string sqlstate_of(const caf::error& err);

} // namespace keel::pg
