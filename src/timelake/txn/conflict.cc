#include "timelake/txn/conflict.h"

#include <cstdint>
#include <vector>

#include <arrow/type.h>

#include "timelake/log/features.h"
#include "timelake/log/schema.h"
#include "timelake/util/time.h"

namespace timelake {

namespace {

bool SameFeatures(const std::optional<std::vector<std::string>>& a,
                  const std::optional<std::vector<std::string>>& b) {
  auto set = [](const std::optional<std::vector<std::string>>& v) {
    return v ? std::set<std::string>(v->begin(), v->end()) : std::set<std::string>{};
  };
  return set(a) == set(b);
}

// True if `now` differs from `before` only by nullable columns added after the old ones and old
// columns widened as Delta's typeWidening allows (what Table::AddColumns and WidenColumns
// commit): its schema, timelake's schema keys and the type widening switch, nothing else.
bool OnlyEvolvesSchema(const Metadata& before, const Metadata& now) {
  if (now.schema_string == before.schema_string || now.partition_columns != before.partition_columns) {
    return false;
  }
  auto other_keys = [](const Metadata& m) {
    auto config = m.configuration;
    config.erase("timelake.arrowSchema");
    config.erase("timelake.schemaVersion");
    config.erase("delta.enableTypeWidening");
    return config;
  };
  if (other_keys(now) != other_keys(before)) return false;
  auto old_schema = SchemaFromDelta(before.schema_string);
  auto new_schema = SchemaFromDelta(now.schema_string);
  if (!old_schema.ok() || !new_schema.ok()) return false;
  const auto& a = **old_schema;
  const auto& b = **new_schema;
  if (b.num_fields() < a.num_fields()) return false;
  for (int i = 0; i < a.num_fields(); ++i) {
    const auto& was = *a.field(i);
    const auto& is = *b.field(i);
    if (was.name() != is.name() || was.nullable() != is.nullable()) return false;
    if (!was.type()->Equals(*is.type()) && !DeltaAllowsWidening(*was.type(), *is.type())) return false;
  }
  for (int i = a.num_fields(); i < b.num_fields(); ++i) {
    if (!b.field(i)->nullable()) return false;
  }
  return true;
}

// True if protocol `now` only adds to `before` table features timelake reads and writes.
bool OnlyGainsFeatures(const Protocol& before, const Protocol& now) {
  if (!TimelakeWrites(now) || now.min_reader_version < before.min_reader_version ||
      now.min_writer_version < before.min_writer_version) {
    return false;
  }
  if (now.reader_features) {
    for (const auto& f : *now.reader_features) {
      if (!ReadableFeatures().count(f)) return false;
    }
  }
  for (const auto* list : {&before.reader_features, &before.writer_features}) {
    if (!*list) continue;
    const auto& gained = list == &before.reader_features ? now.reader_features : now.writer_features;
    for (const auto& f : **list) {
      if (!HasFeature(gained, f)) return false;
    }
  }
  return true;
}

std::vector<WinnerEffect> EffectsOf(const CommitIntent& pending, const Commit& winner,
                                    const Snapshot& before) {
  std::vector<WinnerEffect> effects;
  if (winner.metadata) {
    const Metadata& m = *winner.metadata;
    const Metadata& old = before.metadata;
    if (m.id != old.id) {
      effects.push_back(WinnerEffect::kReplacedTable);
    } else if (OnlyEvolvesSchema(old, m)) {
      effects.push_back(WinnerEffect::kEvolvedSchema);
    } else if (m.schema_string != old.schema_string ||
               m.partition_columns != old.partition_columns ||
               m.configuration != old.configuration) {
      effects.push_back(WinnerEffect::kChangedMetadata);
    }
  }
  if (winner.protocol) {
    const Protocol& p = *winner.protocol;
    const Protocol& old = before.protocol;
    if (p.min_reader_version != old.min_reader_version ||
        p.min_writer_version != old.min_writer_version ||
        !SameFeatures(p.reader_features, old.reader_features) ||
        !SameFeatures(p.writer_features, old.writer_features)) {
      effects.push_back(OnlyGainsFeatures(old, p) ? WinnerEffect::kGainedFeatures
                                                  : WinnerEffect::kChangedProtocol);
    }
  }
  for (const auto& txn : winner.txns) {
    auto asked = pending.txn_app_ids.find(txn.app_id);
    if (asked != pending.txn_app_ids.end() && txn.version >= asked->second) {
      effects.push_back(WinnerEffect::kRecordedSameTxn);
      break;
    }
  }
  bool removed_same = false, removed_other = false;
  for (const auto& remove : winner.removes) {
    (pending.removes.count(remove.path) ? removed_same : removed_other) = true;
  }
  if (removed_same) effects.push_back(WinnerEffect::kRemovedSameFile);
  if (!winner.adds.empty()) effects.push_back(WinnerEffect::kAddedFiles);
  if (removed_other) effects.push_back(WinnerEffect::kRemovedOtherFiles);
  return effects;
}

}  // namespace

Verdict Judge(const CommitIntent& pending, const Commit& winner, const Snapshot& before) {
  Verdict verdict;
  verdict.reason = "the concurrent commit does not touch this one";
  for (WinnerEffect effect : EffectsOf(pending, winner, before)) {
    for (const ConflictRule& rule : kConflictRules) {
      if (rule.effect != effect || (rule.kind && *rule.kind != pending.kind)) continue;
      if (static_cast<int>(rule.resolution) > static_cast<int>(verdict.resolution)) {
        verdict = {rule.resolution, effect, rule.reason};
      }
      break;
    }
  }
  return verdict;
}

arrow::Result<std::set<std::string>> RecordedTxns(const std::map<std::string, int64_t>& app_ids,
                                                  const Snapshot& table) {
  std::set<std::string> recorded;
  if (app_ids.empty()) return recorded;
  const std::string retention = table.Config("delta.setTransactionRetentionDuration");
  const int64_t oldest_ms =
      retention.empty() ? INT64_MIN : NowMillis() - DeltaIntervalMillis(retention, INT64_MAX / 2);
  for (const auto& [app_id, version] : app_ids) {
    // The checkpoint's history is read here the first time (snapshot.h); one that cannot be
    // read is an error, never "not recorded".
    ARROW_ASSIGN_OR_RAISE(const Txn* txn, table.FindTxn(app_id));
    if (txn == nullptr || txn->version < version) continue;
    // Batch ids older than the dedup window are forgotten, as Delta readers forget the txn.
    if (!txn->last_updated || *txn->last_updated >= oldest_ms) recorded.insert(app_id);
  }
  return recorded;
}

const char* CommitKindName(CommitKind kind) {
  switch (kind) {
    case CommitKind::kCreate: return "create";
    case CommitKind::kAppend: return "append";
    case CommitKind::kRetention: return "retention";
    case CommitKind::kCompaction: return "compaction";
    case CommitKind::kSchemaChange: return "schema change";
  }
  return "commit";
}

}  // namespace timelake
