// What keelctl writes to a terminal: message text from the node (replies,
// history entries, provider errors) passes through `keel::terminal_text`,
// so escape sequences in it cannot drive the reader's terminal.

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <string_view>

#include <unistd.h>

#include "keel/text.hpp"
#include "keelctl.hpp"

namespace keelctl {

namespace {

/// Writes `terminal_text` of everything put into it to `out`, a line at a
/// time (a newline never splits a UTF-8 sequence) and on every flush.
class terminal_streambuf final : public std::streambuf {
public:
  explicit terminal_streambuf(std::streambuf* out) : out_(out) {
    // nop
  }

protected:
  int_type overflow(int_type ch) override {
    if (traits_type::eq_int_type(ch, traits_type::eof()))
      return sync() == 0 ? traits_type::not_eof(ch) : traits_type::eof();
    pending_ += traits_type::to_char_type(ch);
    if (ch == '\n')
      write_lines();
    return ch;
  }

  std::streamsize xsputn(const char* s, std::streamsize n) override {
    pending_.append(s, static_cast<size_t>(n));
    if (std::memchr(s, '\n', static_cast<size_t>(n)) != nullptr)
      write_lines();
    return n;
  }

  int sync() override {
    write(pending_);
    pending_.clear();
    return out_->pubsync();
  }

private:
  void write_lines() {
    auto end = pending_.rfind('\n') + 1;
    write(std::string_view{pending_}.substr(0, end));
    pending_.erase(0, end);
  }

  void write(std::string_view text) {
    auto safe = keel::terminal_text(text);
    out_->sputn(safe.data(), static_cast<std::streamsize>(safe.size()));
  }

  std::streambuf* out_;
  std::string pending_;
};

/// Whether output to `fd` is escaped: KEEL_ESCAPE_CONTROL=1 always, =0
/// never, otherwise when `fd` is a terminal.
bool escapes(int fd) {
  auto env = std::getenv("KEEL_ESCAPE_CONTROL");
  if (env != nullptr && std::string_view{env} == "1")
    return true;
  if (env != nullptr && std::string_view{env} == "0")
    return false;
  return ::isatty(fd) == 1;
}

} // namespace

terminal_output::terminal_output() {
  if (escapes(STDOUT_FILENO)) {
    out_ = std::make_unique<terminal_streambuf>(std::cout.rdbuf());
    old_out_ = std::cout.rdbuf(out_.get());
  }
  if (escapes(STDERR_FILENO)) {
    err_ = std::make_unique<terminal_streambuf>(std::cerr.rdbuf());
    old_err_ = std::cerr.rdbuf(err_.get());
  }
}

terminal_output::~terminal_output() {
  if (out_) {
    std::cout.flush();
    std::cout.rdbuf(old_out_);
  }
  if (err_) {
    std::cerr.flush();
    std::cerr.rdbuf(old_err_);
  }
}

} // namespace keelctl
