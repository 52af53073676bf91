#include "keel/turn_texts.hpp"

#include "keel/text.hpp"

namespace keel {

std::string with_owner_contact(const std::string& text,
                               const std::string& contact) {
  return replace_all(text, "{ownerContact}",
                     contact.empty() ? "our team" : contact);
}

std::string context_warning_text(uint64_t tokens, uint64_t window) {
  return "The conversation fills about " + std::to_string(tokens * 100 / window)
         + "% of the model's context window (" + std::to_string(tokens) + " of "
         + std::to_string(window)
         + " tokens, estimated); older messages will be summarized soon.";
}

std::string compacted_text(const compaction_result& result) {
  static constexpr const char* tiers[]
    = {"nothing to change", "large tool results stripped",
       "older messages summarized", "the oldest half summarized",
       "older messages replaced by a plain account"};
  return "Compacted the conversation (" + std::string{tiers[result.tier]}
         + "): about " + std::to_string(result.tokens_before) + " → "
         + std::to_string(result.tokens_after) + " tokens.";
}

} // namespace keel
