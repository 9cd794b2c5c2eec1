// TableHead: one small object per table in an object store, from which a reader opens the table
// and answers latest() and info() with one request.
//
// Opening a table in an object store otherwise reads `_last_checkpoint`, lists the log, reads the
// checkpoint and the commits after it, and latest() lists and reads the last-value index: about
// ten requests one after another. The head holds what those yield at one version: the snapshot's
// live state (protocol, metaData, the live files with their stats and tags; not the checkpoint's
// history of batch ids and tombstones, which only writers need) and the newest row of every
// series (what latest() returns at that version).
//
// The head is derived data, like the last-value index: written after a commit by the committing
// writer's upkeep (WriteHead), never needed for correctness, and kept where Delta readers do not
// look, at `<table>/_timelake/head` (HeadPath). Readers trust it only within the freshness rule
// (docs/object-stores.md, "The table head"); anything they cannot trust or decode (damaged bytes,
// another table's head, a version the log no longer holds) sends them to the normal open.
//
// Layout (EncodeHead): the line "TLHEAD1", a JSON header line ({"version", "tableId",
// "fingerprint", "checkpointVersion", "stateBytes", "latestBytes"}), the state as Delta actions
// (newline-delimited JSON: protocol, metaData, one add per live file), the latest rows as an Arrow
// IPC stream (absent for a plain table), and the SHA-256 (64 hex digits) of everything before it.
// A head larger than kMaxHeadBytes is not written (and an older one is deleted): such a table
// opens the normal way.
//
// Own commits: the process keeps, per table, the newest version it committed or read from the log
// (NoteVersionSeen), so that a reader that may skip the version check still sees what its own
// process wrote at once, and no handle of the process opens or stays older than one it read.
//
// Thread safety: every function may be called from any thread; none touches a handle's state.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <arrow/result.h>
#include <arrow/table.h>

#include "timelake/log/delta_log.h"
#include "timelake/log/snapshot.h"
#include "timelake/store/object_store.h"

namespace timelake {

/// A head larger than this (encoded) is not written: a table with that many live files (about
/// 4,000 at ~500 bytes of add action each) opens from its log.
inline constexpr int64_t kMaxHeadBytes = int64_t{2} << 20;

/// Appends between table heads on a local disk, where opening from the log costs no round trips
/// but a file read per commit since the checkpoint: a reader opens from the head and reads the
/// few commits after it (and latest() their files), and a small append seldom pays for a head.
inline constexpr int64_t kLocalHeadInterval = 8;

/// The default of the `version_check_interval` storage option on object stores.
inline constexpr int64_t kDefaultCheckIntervalMs = 1000;

/// `<table_path>/_timelake/head`.
std::string HeadPath(const std::string& table_path);

struct HeadContents {
  /// The snapshot at the head's version: version, protocol, metadata, files, checkpoint_version,
  /// head_fingerprint; no checkpoint history (txns, tombstones) and oldest_version -1.
  Snapshot snapshot;
  /// The newest row of every series at that version, with the sequence column; null for a plain
  /// table.
  std::shared_ptr<arrow::Table> latest;
  /// The entity tag of the version's JSON commit as its writer saw it ("" when unknown): a
  /// reader checks the head against one listing of the log (HeadStillNewest) instead of reading
  /// the commit and the version after it.
  std::string commit_etag;
};

/// The head of `snapshot` with `latest` (null for a plain table) and the commit's tag.
arrow::Result<std::string> EncodeHead(const Snapshot& snapshot,
                                      const std::shared_ptr<arrow::Table>& latest,
                                      const std::string& commit_etag = "");

/// Whether the head's version is still the newest of the table, from one listing of its log
/// that starts at the head's version: true when the head's JSON commit is listed with the tag
/// the head names and no newer version follows it; false otherwise (a newer commit, another tag,
/// no tag, a store that cannot say: the caller then checks the way a refresh does).
bool HeadStillNewest(ObjectStore& store, const std::string& table_path, int64_t version,
                     const std::string& commit_etag);
/// Decodes a head; IOError naming `origin` when the bytes are damaged (bad checksum, truncated,
/// malformed parts) or the state does not match the header (no metaData, another table id).
arrow::Result<HeadContents> DecodeHead(std::string_view bytes, const std::string& origin);

/// What a reader got from the head object: its contents and its age by the service's clock.
struct HeadRead {
  HeadContents contents;
  /// Milliseconds the head had existed when the service answered, counted up to the next whole
  /// second (HTTP dates have whole seconds); -1 when the store does not say.
  int64_t age_ms = -1;
};
/// Reads the head of the table at `table_path` with one request; nullopt when there is none or
/// it cannot be decoded (the caller opens the normal way), an error only for a failing store.
arrow::Result<std::optional<HeadRead>> ReadHead(ObjectStore& store, const std::string& table_path);

/// Given the head already in the store (nullopt: none or unreadable) and the snapshot being
/// written, the latest rows at that snapshot (null for a plain table).
using LatestAtHead = std::function<arrow::Result<std::shared_ptr<arrow::Table>>(
    const std::optional<HeadContents>& previous, const Snapshot& at)>;

/// Post-commit hook: writes the head of `snapshot` (the version a writer just committed), or of
/// the newest version when commits followed it (read from the log first: their writers may not
/// write heads, being other engines or dead), with the checkpoint `_last_checkpoint` names, unless the head in the store is of this table and
/// at least as new. The put follows the check that no newer commit exists (the read of the next
/// version found nothing) and is conditional on the head read (PutIfMatch / PutIfAbsent, retried
/// on a lost race), so heads only move forward and a head never claims a version that was not
/// the newest when its writer checked. After the put, a head whose commit is gone (the table was
/// dropped meanwhile) is deleted. `log` is the table's.
arrow::Status WriteHead(ObjectStore& store, DeltaLog& log, Snapshot snapshot,
                        const LatestAtHead& latest);

/// Notes that this process committed or read `version` of the table at `location` (its URL) with
/// id `table_id`.
void NoteVersionSeen(const std::string& location, const std::string& table_id, int64_t version);
/// The newest version of that table this process committed or read (-1: none).
int64_t NewestVersionSeen(const std::string& location, const std::string& table_id);
/// Notes that a check of the log that started at `checked_ms` (steady clock) found `version` the
/// newest of that table.
void NoteVersionChecked(const std::string& location, const std::string& table_id, int64_t version,
                        int64_t checked_ms, uint64_t changes);
/// When a check of the log last found `version` the newest version of that table, if it still is
/// the newest this process has seen and no table was created or dropped by the process since
/// (-1 otherwise): a handle opened from a head of that version counts as checked then, as the
/// handle that checked does (so a query's handle, opened after `Lake.table()`, asks nothing).
int64_t CheckedAsNewest(const std::string& location, const std::string& table_id, int64_t version);

/// Tables whose state RememberHead keeps (the least recently opened goes first).
inline constexpr size_t kRecentHeads = 16;
/// Keeps the state a handle of the table at `location` opened from a head with (brought up to
/// date with the log when it was older than the interval): the snapshot without checkpoint
/// history, and its newest rows when known at that version (else null). Another handle opened
/// within the version check interval of the check that found that version the newest
/// (CheckedAsNewest) starts from it without a request, as the handle itself would answer.
void RememberHead(const std::string& location, HeadContents contents);
/// The state RememberHead kept for `location` (a copy), if any.
std::optional<HeadContents> RecentHead(const std::string& location);

/// How many table creations and drops any Lake of this process has finished (whatever their
/// outcome). A read that may skip the version check skips it only while this is unchanged since
/// its last check: a table this process dropped and created again is seen at once, as its own
/// commits are.
uint64_t CatalogChanges();
/// Counts one creation or drop; called when it ends.
void NoteCatalogChange();

}  // namespace timelake
