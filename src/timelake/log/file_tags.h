// The `tags` timelake puts on every `add` action, and how to read them back.
//
// Delta readers ignore tags; timelake uses them to plan scans, deduplicate, apply retention and
// keep the last-value index exact without opening data files. Files written by other engines
// have none of them, and every reader falls back to a safe default.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>

#include "timelake/log/actions.h"

namespace timelake {

inline constexpr const char* kSeqTag = "timelake.seq";          // commit version of the rows
inline constexpr const char* kOrderTag = "timelake.order";      // write order within the commit
inline constexpr const char* kChunkTag = "timelake.chunk";      // chunk label
inline constexpr const char* kMinTimeTag = "timelake.minTime";  // exact microseconds
inline constexpr const char* kMaxTimeTag = "timelake.maxTime";
// On a compaction output whose rows filled the rewrite's memory budget (RewriteGroup): a file
// that size is as large as compaction makes them, so it is not taken as small again.
inline constexpr const char* kFullTag = "timelake.full";
// Range of a series key that is one string or integer column (integers in decimal). Strings are
// cut like the string stats (at most 32 characters; a cut max ends in U+10FFFF): bounds, not
// values, so compare them only to decide that two files' key ranges cannot meet.
inline constexpr const char* kMinKeyTag = "timelake.minKey";
inline constexpr const char* kMaxKeyTag = "timelake.maxKey";

// Tags on the `remove` actions timelake writes: why the file went (the last-value index tells
// removals that keep rows from those that do not), and for retention the file's minTime tag.
inline constexpr const char* kRemovedByTag = "timelake.removedBy";
inline constexpr const char* kRemovedByCompaction = "compaction";
inline constexpr const char* kRemovedByRetention = "retention";
inline constexpr const char* kRemovedByRewrite = "rewrite";  // AppendOptions::replace

/// A decimal integer, or nullopt for anything else (never throws).
inline std::optional<int64_t> ParseInt64(const std::string& text) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

/// The integer tag `key` of `add`, or `fallback` if it is missing or malformed.
inline int64_t TagInt(const AddFile& add, const char* key, int64_t fallback) {
  auto it = add.tags.find(key);
  if (it == add.tags.end()) return fallback;
  return ParseInt64(it->second).value_or(fallback);
}

}  // namespace timelake
