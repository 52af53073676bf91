#define CAF_SUITE tool_command

// A tool's command line from the model's arguments (no shell: an argument
// stays one argv element, whatever it holds), and the text the model gets
// for a run: output, stderr, the cap, exit status, timeout and cancel.

#include <caf/test/unit_test.hpp>

#include "keel/tool_command.hpp"

using namespace keel;
using namespace std::chrono_literals;

namespace {

using strings = std::vector<std::string>;

std::string outcome(const caf::expected<strings>& x) {
  if (!x)
    return error_message(x.error());
  std::string result;
  for (auto& arg : *x)
    result += "<" + arg + ">";
  return result;
}

} // namespace

CAF_TEST(arguments fill the template one element each) {
  strings tmpl{"grep", "-n", "{pattern}", "--max-count={max}", "{path}"};
  CAF_CHECK_EQUAL(
    outcome(expand_command(tmpl, R"({"pattern":"a b; rm -rf /","max":3,)"
                                 R"("path":"src/x.cpp"})")),
    "<grep><-n><a b; rm -rf /><--max-count=3><src/x.cpp>");
  CAF_CHECK_EQUAL(outcome(expand_command({"echo", "{{literal}}", "{flag}"},
                                         R"({"flag":true})")),
                  "<echo><{literal}><true>");
  CAF_CHECK_EQUAL(
    outcome(expand_command({"jq", "{filter}"}, R"({"filter":{"a":[1,2]}})")),
    R"(<jq><{"a":[1,2]}>)");
  CAF_CHECK_EQUAL(outcome(expand_command({"date"}, "")), "<date>");
}

CAF_TEST(a call that does not fit the template is an error naming why) {
  CAF_CHECK_EQUAL(outcome(expand_command({"cat", "{path}"}, R"({"file":1})")),
                  "tool call: missing argument 'path'");
  CAF_CHECK_EQUAL(outcome(expand_command({"cat", "{path}"}, "[1]")),
                  "tool call: the arguments are not a JSON object");
  CAF_CHECK_EQUAL(outcome(expand_command({"cat", "{path}"}, "{not json")),
                  "tool call: the arguments are not a JSON object");
  CAF_CHECK_EQUAL(outcome(expand_command({"cat", "{path"}, R"({"path":1})")),
                  "tool call: the command template '{path' has a '{' "
                  "without its '}'");
  CAF_CHECK_EQUAL(expand_command({"cat", "{path}"}, "[]").error(),
                  ec::provider_bad_answer);
}

CAF_TEST(the result text says what the model needs to know) {
  process_result run;
  run.exit_code = 0;
  run.out = "found 3\n";
  CAF_CHECK_EQUAL(tool_result_text("grep", run), "found 3\n");
  run.err = "warning: binary file";
  run.exit_code = 2;
  CAF_CHECK_EQUAL(tool_result_text("grep", run),
                  "found 3\n[stderr]\nwarning: binary file\n"
                  "[grep exited with status 2]\n");
  process_result cut;
  cut.exit_code = 0;
  cut.out = "xxxx";
  cut.out_dropped = 96;
  CAF_CHECK_EQUAL(tool_result_text("cat", cut),
                  "xxxx\n[output cut: 96 more bytes were dropped]\n");
  process_result late;
  late.exit_code = 143;
  late.timed_out = true;
  late.took = 120'400ms;
  CAF_CHECK_EQUAL(tool_result_text("build", late),
                  "[build timed out after 120 s and was stopped, with "
                  "everything it started]\n");
  process_result quiet;
  quiet.exit_code = 0;
  CAF_CHECK_EQUAL(tool_result_text("touch", quiet),
                  "[touch finished with no output]\n");
}

CAF_TEST(an argument holding a NUL character is refused) {
  // "a\u0000b" would reach the program as "a": refused, not cut short.
  CAF_CHECK_EQUAL(
    outcome(expand_command({"rm", "--", "{path}"}, R"({"path":"a\u0000b"})")),
    "tool call: argument 'path' contains a NUL character, which no "
    "command-line argument can hold");
  // Inside an object or list it is written as JSON escapes it: \u0000.
  CAF_CHECK_EQUAL(
    outcome(expand_command({"echo", "{x}"}, R"({"x":{"k":"a\u0000"}})")),
    R"(<echo><{"k":"a\u0000"}>)");
}

CAF_TEST(arguments are checked against the declared types) {
  auto schema = std::string{R"({"type":"object","properties":{
    "path": {"type": "string"}, "max": {"type": "integer"},
    "ratio": {"type": "number"}, "exact": {"type": "boolean"},
    "tags": {"type": "array"}, "opts": {"type": "object"},
    "either": {"type": ["string", "null"]}, "any": {}},
    "required": ["path"]})"};
  auto check = [&](const std::string& args) {
    auto err = check_arguments(schema, args);
    return err ? error_message(err) : std::string{"ok"};
  };
  CAF_CHECK_EQUAL(check(R"({"path":"a","max":3,"ratio":0.5,"exact":true,)"
                        R"("tags":[1],"opts":{},"either":null,"any":[{}],)"
                        R"("extra":1})"),
                  "ok");
  CAF_CHECK_EQUAL(check(R"({"path":"a","max":3.0,"ratio":2})"), "ok");
  CAF_CHECK_EQUAL(check(R"({"max":3})"),
                  "tool call: missing required argument 'path'");
  CAF_CHECK_EQUAL(check(R"({"path":["-rf","/"]})"),
                  "tool call: argument 'path' must be of type string (the "
                  "tool's parameters say so), got [\"-rf\",\"/\"]");
  CAF_CHECK_EQUAL(check(R"({"path":"a","max":"3"})"),
                  "tool call: argument 'max' must be of type integer (the "
                  "tool's parameters say so), got \"3\"");
  CAF_CHECK_EQUAL(check(R"({"path":"a","max":2.5})"),
                  "tool call: argument 'max' must be of type integer (the "
                  "tool's parameters say so), got 2.5");
  CAF_CHECK_EQUAL(check(R"({"path":"a","either":1})"),
                  "tool call: argument 'either' must be of type string or "
                  "null (the tool's parameters say so), got 1");
  CAF_CHECK_EQUAL(
    check(R"({"path":"a","exact":"yes"})")
      .rfind("tool call: argument 'exact' must be of type boolean", 0),
    0u);
  CAF_CHECK_EQUAL(check("[1]"), "tool call: the arguments are not a JSON "
                                "object");
  CAF_CHECK_EQUAL(check_arguments(schema, "{}"), ec::provider_bad_answer);
  // No schema to speak of: anything that is an object.
  CAF_CHECK(!check_arguments(R"({"type":"object"})", R"({"a":1})"));
}
