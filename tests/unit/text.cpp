#define CAF_SUITE text

#include "keel/text.hpp"

#include <caf/test/unit_test.hpp>

#include <nlohmann/json.hpp>

using namespace keel;

CAF_TEST(times render as rfc 3339 in utc with milliseconds) {
  CAF_CHECK_EQUAL(rfc3339_utc(0), "1970-01-01T00:00:00.000Z");
  CAF_CHECK_EQUAL(rfc3339_utc(1733340682042), "2024-12-04T19:31:22.042Z");
  CAF_CHECK_EQUAL(rfc3339_utc(-1), "1969-12-31T23:59:59.999Z");
}

CAF_TEST(terminal text escapes c0 and c1 controls but newline and tab) {
  CAF_CHECK_EQUAL(terminal_text("plain\ttext\nnext line"),
                  "plain\ttext\nnext line");
  CAF_CHECK_EQUAL(terminal_text("\x1b[2J\x1b]0;title\x07"),
                  "\\u001b[2J\\u001b]0;title\\u0007");
  CAF_CHECK_EQUAL(terminal_text("over\rwrite\b\x7f"),
                  "over\\u000dwrite\\u0008\\u007f");
  CAF_CHECK_EQUAL(terminal_text(std::string{"nul\0end", 7}), "nul\\u0000end");
  // U+009B (CSI) and U+0085 (NEL) as UTF-8; U+00A0 and beyond are kept.
  CAF_CHECK_EQUAL(terminal_text("\xc2\x9b"
                                "31m \xc2\x85 \xc2\xa0 \xc3\xa9 \xe2\x82\xac"),
                  "\\u009b31m \\u0085 \xc2\xa0 \xc3\xa9 \xe2\x82\xac");
}

CAF_TEST(terminal text escapes bytes that are not utf - 8) {
  // A lone C1 byte is CSI to an 8-bit terminal.
  CAF_CHECK_EQUAL(terminal_text("\x9b"
                                "2J \xff \xc2"),
                  "\\x9b2J \\xff \\xc2");
}

CAF_TEST(terminal text keeps json valid) {
  nlohmann::json j{{"text", "\x1b[31m\xc2\x9b \\ \" \xc3\xa9"}};
  auto shown = terminal_text(j.dump());
  auto back = nlohmann::json::parse(shown, nullptr, false);
  CAF_REQUIRE(!back.is_discarded());
  CAF_CHECK_EQUAL(back, j);
  CAF_CHECK_EQUAL(shown.find('\x1b'), std::string::npos);
  CAF_CHECK_EQUAL(shown.find("\xc2\x9b"), std::string::npos);
}
