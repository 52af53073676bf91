#pragma once

// What a turn tells the thread and the model in words: the errors a failed
// turn posts, the result of a tool call a restart interrupted, and the
// status texts of the context's compaction.

#include <cstdint>
#include <string>

#include "keel/compactor.hpp"

namespace keel {

/// Descriptive messages posted to a thread when a turn fails.
namespace turn_errors {

// The texts with `{ownerContact}` name whom to contact (see
// `with_owner_contact`).

/// Every provider of the pool failed (code `provider_failed`).
constexpr const char* provider_failed
  = "I'm having some technical difficulties right now. Please try again in a "
    "few minutes, or contact {ownerContact} directly.";
/// Every provider refused the credentials (code `provider_unauthorized`).
constexpr const char* provider_unauthorized
  = "I'm not fully set up yet. My team has been notified and will get me "
    "running soon.";
/// Every provider's credit is used up (code `credits_exhausted`).
constexpr const char* credits_exhausted
  = "I've used up my thinking budget for today. I'll be back with more "
    "capacity soon! If this is urgent, please contact {ownerContact}.";
constexpr const char* provider_timeout
  = "My AI provider took too long to answer. Try again in a moment.";
constexpr const char* context_overflow
  = "Our conversation has grown too long for my AI provider. Start a new "
    "thread to continue.";
constexpr const char* provider_rejected
  = "My AI provider could not process this message. Try rephrasing it.";
constexpr const char* cancelled
  = "This thread was cancelled before the message was answered.";
/// Published (status `history_reset`) when the thread's unreadable records
/// were moved to quarantine and it starts fresh.
constexpr const char* history_reset
  = "I had trouble loading our conversation history. Starting fresh for this "
    "thread.";
/// Answers (code `history_reset`) the message whose turn's steps were
/// unreadable and went to quarantine: running it again could repeat a tool
/// call that had effects.
constexpr const char* steps_lost
  = "I lost track of the steps I had already taken on this message while "
    "restarting, so I stopped rather than repeat them. Send it again if you "
    "want me to start over.";
/// Answers (code `agent_paused`) each message of a thread an operator
/// paused.
constexpr const char* agent_offline
  = "I'm currently offline. Please try again later or contact "
    "{ownerContact}.";
constexpr const char* agent_paused_code = "agent_paused";
/// Answers (code `guard_stopped`) the message whose turn loop the guard
/// stopped; its report ("Forced stop: ...", which limit) goes to the
/// history's `detail` and the owner's notice.
constexpr const char* guard_stopped_code = "guard_stopped";
/// Answers (code `turn_timeout`) the message whose turn ran past
/// `threads.turn_timeout`, tool runs included; the limit goes to `detail`.
constexpr const char* turn_timeout_code = "turn_timeout";
constexpr const char* turn_timeout
  = "This took longer than I may spend on one message, so I stopped. Send it "
    "again if you want me to keep going.";
constexpr const char* stuck
  = "I seem to be having trouble with this. Let me connect you with someone "
    "who can help.";
/// Followed by the error, then `unknown_suffix`.
constexpr const char* unknown_prefix = "Something went wrong: ";
constexpr const char* unknown_suffix = ". Try sending your message again.";

} // namespace turn_errors

/// What the model gets as a tool's result when the call did not run to its
/// end.
namespace tool_texts {

/// A call that was durable but has no result after a restart. It is not run
/// again: a tool may have side effects (a file written, a message sent),
/// and only the model, told what happened, can judge whether to repeat it.
constexpr const char* interrupted
  = "[the tool call was interrupted by a restart before its result was "
    "stored; it was not run again, because it may have had effects. Check "
    "before calling it again.]";

} // namespace tool_texts

/// `text` with `{ownerContact}` replaced by `contact`, or by "our team"
/// when `contact` is empty.
std::string with_owner_contact(const std::string& text,
                               const std::string& contact);

/// Published (status `context_warning`) once a turn when the context
/// passes `warn_at` of the window.
std::string context_warning_text(uint64_t tokens, uint64_t window);

/// Published (status `compacted`) when a compaction is stored.
std::string compacted_text(const compaction_result& result);

} // namespace keel
