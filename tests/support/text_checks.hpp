#pragma once

// Checks on texts that print the text when they fail.

#include <string>

#include <caf/test/unit_test.hpp>

/// Checks that `text` contains `part`; on failure, prints what was looked
/// for and the whole text.
#define KEEL_CHECK_CONTAINS(text, part)                                        \
  do {                                                                         \
    const std::string keel_text_ = (text);                                     \
    const std::string keel_part_ = (part);                                     \
    if (keel_text_.find(keel_part_) == std::string::npos)                      \
      CAF_MESSAGE("'" << keel_part_ << "' is not in: " << keel_text_);         \
    CAF_CHECK(keel_text_.find(keel_part_) != std::string::npos);               \
  } while (false)
