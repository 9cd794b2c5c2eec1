// Conflict rules: what a commit that a concurrent writer won means to a pending commit.
//
// Writers never lock a table. Each prepares its commit against the version it read and tries to
// put it as the next version; when another writer got there first, the loser reads each winning
// commit and asks kConflictRules (below, the whole policy in one table) whether its own commit
// still holds on top of it: rebase (commit at the next version), abandon (the operation has
// nothing left to do, or must plan again), or conflict (fail with a CommitConflict). Appends are
// blind (they read no files), so two appends always rebase; a compaction or retention that lost
// its inputs stops instead of resurrecting or double-removing them.
//
// Batch ids are judged here too, and only here: RecordedTxns says which of a commit's Delta txn
// appIds (an append's batch id each) a snapshot already records. An append asks it of its
// handle's snapshot before writing files (table/append.h); the committer asks it of the snapshot
// it commits on, before every attempt, so that ids recorded by the time the commit was built or by
// any winner it rebased over leave the commit (txn/committer.h: PendingCommit::withdraw).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>

#include "timelake/log/actions.h"
#include "timelake/log/snapshot.h"

namespace timelake {

/// What kind of commit is pending, for choosing the rules that apply to it.
enum class CommitKind { kCreate, kAppend, kRetention, kCompaction, kSchemaChange };

/// What a pending commit depends on: the files it removes and the batch ids it records.
struct CommitIntent {
  CommitKind kind = CommitKind::kAppend;
  std::set<std::string> removes;      // paths of the files the commit removes
  /// Delta txn appIds the commit records, each with the txn version it records: the appId counts
  /// as recorded by the table when the table holds it at this version or a later one (batch ids
  /// record 0; a rollup refresh records the source version it reflects, see RecordedTxns).
  std::map<std::string, int64_t> txn_app_ids;
};

/// What a winning commit did, as far as the rules care. Listed from the most to the least
/// consequential; a winner may have done several.
enum class WinnerEffect {
  kReplacedTable,     // a metaData action with another table id
  kChangedMetadata,   // a metaData action changing schema, partitioning or configuration
  kEvolvedSchema,     // a metaData action that only added nullable columns or widened types
  kChangedProtocol,   // a protocol action changing what readers or writers must support
  kGainedFeatures,    // a protocol action adding table features timelake reads and writes
  kRecordedSameTxn,   // a txn with one of the pending commit's appIds (see RecordedTxns)
  kRemovedSameFile,   // a remove of a file the pending commit also removes
  kAddedFiles,
  kRemovedOtherFiles,
};

enum class Resolution {
  kRebase,    // commit on top of the winner
  kAbandon,   // do not commit; the operation has nothing left to do (or must plan again). A
              // commit that can withdraw the parts a recorded txn made redundant
              // (PendingCommit::withdraw) abandons only those parts and rebases.
  kConflict,  // fail the operation with a CommitConflict
};

struct ConflictRule {
  std::optional<CommitKind> kind;  // unset: every kind of pending commit
  WinnerEffect effect;
  Resolution resolution;
  const char* reason;
};

/// The policy. For each effect of a winner the first rule that matches the pending commit's kind
/// applies; an effect without a matching rule rebases.
inline constexpr ConflictRule kConflictRules[] = {
    {std::nullopt, WinnerEffect::kReplacedTable, Resolution::kConflict,
     "the table was dropped and created again"},
    {std::nullopt, WinnerEffect::kChangedMetadata, Resolution::kConflict,
     "its schema, partitioning or properties changed"},
    {CommitKind::kSchemaChange, WinnerEffect::kEvolvedSchema, Resolution::kConflict,
     "another add_columns or widen_columns changed the schema"},
    {std::nullopt, WinnerEffect::kEvolvedSchema, Resolution::kRebase,
     "columns added concurrently are null in this commit's files, and columns widened "
     "concurrently hold the older type, as in every older file"},
    {std::nullopt, WinnerEffect::kChangedProtocol, Resolution::kConflict,
     "its Delta protocol changed"},
    {CommitKind::kSchemaChange, WinnerEffect::kGainedFeatures, Resolution::kConflict,
     "another schema change changed the Delta protocol"},
    {std::nullopt, WinnerEffect::kGainedFeatures, Resolution::kRebase,
     "the Delta protocol gained features whose rules this commit already follows"},
    {CommitKind::kAppend, WinnerEffect::kRecordedSameTxn, Resolution::kAbandon,
     "another append recorded the same batch_id"},
    {CommitKind::kCompaction, WinnerEffect::kRemovedSameFile, Resolution::kAbandon,
     "another commit removed files this compaction rewrites"},
    {CommitKind::kRetention, WinnerEffect::kRemovedSameFile, Resolution::kAbandon,
     "another commit removed files this retention removes"},
    {std::nullopt, WinnerEffect::kAddedFiles, Resolution::kRebase,
     "files added concurrently do not touch this commit"},
    {std::nullopt, WinnerEffect::kRemovedOtherFiles, Resolution::kRebase,
     "files removed concurrently are not read by this commit"},
};

/// The rules' answer for one winning commit.
struct Verdict {
  Resolution resolution = Resolution::kRebase;
  WinnerEffect effect = WinnerEffect::kAddedFiles;
  std::string reason;  // from the rule, for messages
};

/// Judges `winner` (the commit that took a version `pending` wanted) against `pending`, given
/// `before`, the snapshot the pending commit was prepared on (before the winner is applied).
/// Of all the winner's effects the strictest resolution wins (conflict over abandon over rebase).
Verdict Judge(const CommitIntent& pending, const Commit& winner, const Snapshot& before);

/// The one judgement of batch ids: the appIds of `app_ids` that `table` records at the version
/// asked for or a later one (Delta's idempotent-writer rule: a writer skips a txn version the
/// table already holds, or a lower one), as Delta readers see it (a txn whose lastUpdated is
/// older than the table's delta.setTransactionRetentionDuration is forgotten). Pure: safe from any thread. An IOError
/// when the checkpoint history holding the answer cannot be read (log/snapshot.h).
arrow::Result<std::set<std::string>> RecordedTxns(const std::map<std::string, int64_t>& app_ids,
                                                  const Snapshot& table);

const char* CommitKindName(CommitKind kind);

}  // namespace timelake
