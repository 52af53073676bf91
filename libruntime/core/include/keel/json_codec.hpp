#pragma once

// JSON encoding of the data model: the form records take on the wire and in
// the API (and took in the store before its binary form, keel/stored_form.hpp),
// derived from each record's `inspect` overload (its `field` annotations):
// keys are the field names; enums are stored by name; a record that lacks a
// required field, has a field of the wrong type or an unknown enum name does
// not decode, and the error says which.

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "keel/error.hpp"
#include "keel/types.hpp"

namespace keel {

nlohmann::json to_json(const session_record& x);
nlohmann::json to_json(const inbox_entry& x);
nlohmann::json to_json(const log_entry& x);
nlohmann::json to_json(const context_entry& x);
nlohmann::json to_json(const provider_health_record& x);
nlohmann::json to_json(const tree_link& x);
nlohmann::json to_json(const outbox_entry& x);
/// The outbox entry's fields plus `reason` and `at`.
nlohmann::json to_json(const dead_letter& x);
nlohmann::json to_json(const reply_delivery& x);
nlohmann::json to_json(const owner_notice& x);
nlohmann::json to_json(const recovery_step& x);
/// Stored in `meta` under `last_recovery`, served at GET /api/v1/recovery.
nlohmann::json to_json(const recovery_report& x);
/// One element of GET /api/v1/agents' `agents`.
nlohmann::json to_json(const agent_info& x);

/// Bytes `str` takes as a JSON string, quotes included, as the wire writes
/// it (nlohmann's dump, UTF-8 kept): `"` and `\\` and the control
/// characters with a short escape take 2 bytes, the other control
/// characters 6 (`\u0001`). An ill-formed `str` is counted 3 bytes per
/// byte at or above 0x80 (each may become U+FFFD), an upper bound.
size_t json_string_size(std::string_view str);

/// Bytes of `to_json(x)` as the wire writes it (`history` pages are cut
/// by this, not by the texts' bytes, which a control character multiplies
/// by six).
size_t json_size(const log_entry& x);

caf::expected<session_record> session_record_from_json(const nlohmann::json& j);
caf::expected<inbox_entry> inbox_entry_from_json(const nlohmann::json& j);
caf::expected<log_entry> log_entry_from_json(const nlohmann::json& j);
caf::expected<context_entry> context_entry_from_json(const nlohmann::json& j);
caf::expected<provider_health_record>
provider_health_record_from_json(const nlohmann::json& j);
caf::expected<tree_link> tree_link_from_json(const nlohmann::json& j);
caf::expected<outbox_entry> outbox_entry_from_json(const nlohmann::json& j);
caf::expected<dead_letter> dead_letter_from_json(const nlohmann::json& j);
caf::expected<reply_delivery> reply_delivery_from_json(const nlohmann::json& j);
caf::expected<owner_notice> owner_notice_from_json(const nlohmann::json& j);
/// Missing counters read as 0 (a report of an older build); the times and
/// `steps` are required.
caf::expected<recovery_report>
recovery_report_from_json(const nlohmann::json& j);
caf::expected<agent_info> agent_info_from_json(const nlohmann::json& j);

/// `{"agents":[{"thread","parent","state","pool","model","provider",
/// "created_at","children":[...]}]}`, the body of GET /api/v1/agents.
nlohmann::json agents_to_json(const std::vector<agent_info>& agents);

/// Parses the body of GET /api/v1/agents; fails with
/// `ec::protocol_violation` naming the bad element and field.
caf::expected<std::vector<agent_info>>
agents_from_json(const nlohmann::json& j);

} // namespace keel
