#pragma once

// A configured tool's command line from the model's arguments, and what the
// model is told of the run. No shell is involved: each argument stays one
// argv element, whatever it contains.

#include <string>
#include <vector>

#include "keel/error.hpp"
#include "keel/run_process.hpp"

namespace keel {

/// Expands a tool's argv template with the model's arguments (a JSON
/// object, as the provider sent it): each `{name}` in an element becomes
/// argument `name` (a string as it is; a number, boolean or null as its
/// JSON text; an object or array as compact JSON), `{{` and `}}` are
/// literal braces. Fails with `ec::provider_bad_answer` naming what is
/// wrong: arguments that are not a JSON object, an argument the template
/// names but the call lacks, an argument holding a NUL character (which
/// would cut the argv element short), an unclosed `{`.
caf::expected<std::vector<std::string>>
expand_command(const std::vector<std::string>& argv_template,
               const std::string& arguments);

/// Checks the model's arguments (a JSON object) against the tool's
/// `parameters` schema (JSON text): every `required` name present, and
/// each argument of a declared property of its declared `type` (a name or
/// a list of names; "integer" takes 3 and 3.0). Other schema keywords are
/// not checked. Fails with `ec::provider_bad_answer` naming the argument.
caf::error check_arguments(const std::string& parameters,
                           const std::string& arguments);

/// What the model gets as the result of a run of tool `tool`: its stdout,
/// then its stderr (marked), then a line for each of: output cut at the
/// cap (with the bytes dropped), a nonzero exit status, a timeout or a
/// cancel. Never empty.
std::string tool_result_text(const std::string& tool,
                             const process_result& run);

} // namespace keel
