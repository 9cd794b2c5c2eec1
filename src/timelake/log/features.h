// Delta table features: which ones timelake reads, which it honours as a writer, and the
// protocol a table needs when timelake adds one.
#pragma once

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "timelake/log/actions.h"

namespace timelake {

inline constexpr const char* kTypeWideningFeature = "typeWidening";

/// Reader features timelake reads (column mapping and deletion vectors read-only).
inline const std::set<std::string>& ReadableFeatures() {
  static const std::set<std::string> features = {
      "timestampNtz", "vacuumProtocolCheck", "appendOnly",   "invariants",
      "columnMapping", "deletionVectors",    "typeWidening", "typeWidening-preview"};
  return features;
}

/// Writer features whose rules timelake's commits follow.
inline const std::set<std::string>& WritableFeatures() {
  static const std::set<std::string> features = {"appendOnly", "invariants", "timestampNtz",
                                                 kTypeWideningFeature};
  return features;
}

inline bool HasFeature(const std::vector<std::string>& features, const std::string& f) {
  return std::find(features.begin(), features.end(), f) != features.end();
}

inline bool HasFeature(const std::optional<std::vector<std::string>>& features, const std::string& f) {
  return features && HasFeature(*features, f);
}

/// True if a table with protocol `p` lets timelake write (legacy versions up to 2, or table
/// features timelake implements).
inline bool TimelakeWrites(const Protocol& p) {
  if (p.min_writer_version > 7 || (p.min_writer_version >= 3 && p.min_writer_version <= 6)) return false;
  if (p.writer_features) {
    for (const auto& f : *p.writer_features) {
      if (!WritableFeatures().count(f)) return false;
    }
  }
  return true;
}

/// `p` with the reader-and-writer feature `feature` added: table features (reader 3, writer 7),
/// keeping what the old versions implied (writer 2: appendOnly and invariants).
inline Protocol WithFeature(const Protocol& p, const std::string& feature) {
  Protocol out;
  out.min_reader_version = 3;
  out.min_writer_version = 7;
  std::vector<std::string> readers = p.min_reader_version >= 3 && p.reader_features ? *p.reader_features
                                                                                    : std::vector<std::string>{};
  std::vector<std::string> writers;
  if (p.min_writer_version >= 7) {
    if (p.writer_features) writers = *p.writer_features;
  } else if (p.min_writer_version >= 2) {
    writers = {"appendOnly", "invariants"};
  }
  if (!HasFeature(readers, feature)) readers.push_back(feature);
  if (!HasFeature(writers, feature)) writers.push_back(feature);
  out.reader_features = std::move(readers);
  out.writer_features = std::move(writers);
  return out;
}

}  // namespace timelake
