// SqliteStore: the Store (store/store.h) kept in one SQLite database file.
//
// Durability: a write whose transact()/create()/update()/remove() returned OK
// is on disk: it survives SIGKILL of knapd and (as far as SQLite and the file
// system allow) power loss, and listeners hear of it only then. The database
// runs in WAL mode with synchronous=NORMAL plus a group commit: COMMIT writes
// the transaction's WAL frames and releases the connection; the writer then
// waits for an fdatasync of the WAL that covers its commit. One fdatasync at a
// time runs, outside the connection's mutex, and covers every commit made
// before it started, so writers that commit while a sync runs share the next
// one, and readers and writers never wait for the disk behind another
// writer's sync. Another reader may see a change up to one fdatasync before its
// writer is told it is durable. A failed fdatasync fails the writes it covered
// (kUnavailable naming the file: committed, but maybe not on disk); their
// events are still delivered, because the database holds them.
//
// Checkpoints (copying the WAL back into the database file) run on a thread
// of the store's own, on a second connection, once the WAL holds
// checkpointPages() pages: SQLite's automatic checkpoint would run inside
// the COMMIT of whichever writer crossed the mark, with the connection held,
// and make that write (and every one queued behind it) wait for writing
// back a thousand pages and two fsyncs. A PASSIVE checkpoint does not block
// writers; SQLite restarts the WAL from its start at the next commit after a
// complete one, so the file stays about that size.
//
// Layout (schema version kLatestSchemaVersion, migrated forward on open):
//   schema_version(version)            one row: the applied migration step
//   meta(key, value)                   'resource_version' (the global RV counter),
//                                      'compacted_rv' (events up to here are pruned)
//   objects(kind, namespace, name, uid, resource_version, generation, body)
//                                      primary key (kind, namespace, name); body is JSON
//   events(rv, type, kind, namespace, name, body)
//                                      watch history, the newest watch_history_events kept
//   owner_refs(owner_uid, kind, namespace, name)
//                                      the uids each object's ownerReferences name
//   labels(kind, key, value, namespace, name)
//                                      each object's string-valued metadata.labels (a sealed
//                                      body: one row with key '', "labels unknown"); written
//                                      in the transaction that writes the object
// With a BodyCipher (setCipher), the body column of sealed kinds (Secrets)
// holds the sealed text (store/body_cipher.h) in both tables, never JSON.
//
// Threading: one SQLite connection guarded by a mutex; every method may be
// called from any thread. transact() holds the connection for the whole of fn,
// so fn must be short and must not call this store's own methods (use the Txn;
// calling the Store from inside fn returns kFailedPrecondition instead of
// deadlocking). Listeners get events in commit order, once the commit is on disk, with no
// store lock held; a listener may write to the store. Delivery happens on a
// writer's thread: when two writers commit at once, the second writer's events
// may be delivered by the first writer's thread (so order is kept), and a
// listener removed with removeListener() may still receive one batch that was
// already being delivered on another thread.
//
// Processes: a database file is meant to be owned by one SqliteStore (knapd).
// Others may open it too (tools, tests): resourceVersions are allocated under
// SQLite's write lock so writers never reuse one, but a store's
// currentResourceVersion() and its listeners reflect only its own writes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "store/body_cipher.h"
#include "store/store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace knap::store {

class SqliteStore final : public Store {
 public:
  static constexpr int kLatestSchemaVersion = 5;

  // Opens (creating if missing) the database at `path` (":memory:" for a
  // private in-memory database) and migrates it to kLatestSchemaVersion.
  // `clock` must outlive the store. Errors: kUnavailable when the file cannot
  // be opened or is locked, kFailedPrecondition when the file's schema is newer
  // than this build knows, kInvalidArgument for watch_history_events < 1,
  // kInternal for other SQLite failures.
  static StatusOr<std::unique_ptr<SqliteStore>> open(const std::string& path, TimeSource& clock,
                                                     int64_t watch_history_events = 10000);

  // For migration tests: creates (or migrates) the database at `path` up to
  // exactly schema `version` (0..kLatestSchemaVersion) and closes it.
  static Status createAtSchemaVersionForTest(const std::string& path, int version);

  ~SqliteStore() override;
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  StatusOr<Object> get(const Key& key) override;
  StatusOr<std::vector<RawObject>> listRaw(const std::string& kind, const std::string& ns,
                                           bool with_labels = true) override;
  StatusOr<std::vector<RawObject>> listRawWithLabel(const std::string& kind, const std::string& ns,
                                                    const std::string& label_key,
                                                    const std::vector<std::string>& values) override;
  StatusOr<std::vector<Object>> list(const std::string& kind, const std::string& ns) override;
  int64_t currentResourceVersion() override;
  Status transact(const std::function<Status(Txn&)>& fn) override;
  StatusOr<std::vector<Event>> eventsSince(int64_t since_rv, const std::string& kind) override;
  int addListener(std::function<void(const Event&)> fn) override;
  void removeListener(int id) override;

  // Encrypts the bodies of the kinds `cipher` seals (knapd: Secrets), in the
  // objects table and in the watch history, from now on; and reseals, in one
  // transaction, every stored body of those kinds that is plaintext or sealed
  // with a key other than the cipher's current one (key rotation). Call once,
  // right after open(), before other use. Reading a sealed body without a
  // cipher is kInternal.
  Status setCipher(std::shared_ptr<BodyCipher> cipher);

  // The schema version recorded in the open database (kLatestSchemaVersion after open()).
  StatusOr<int> schemaVersion();

  // SQLite's page cache per connection is capped at this many KiB (PRAGMA
  // cache_size = -kPageCacheKiB, set on open; SQLite's default is the same
  // 2,000 KiB, now stated so the bound is ours): it fills as the database
  // grows and then stays, so knapd's heap holds at most this much of it.
  static constexpr int kPageCacheKiB = 2000;

  // Memory SQLite holds: all of this process's SQLite allocations
  // (sqlite3_memory_used) and this store's connection's page cache
  // (SQLITE_DBSTATUS_CACHE_USED), for knapd's memory metrics.
  struct MemoryUse {
    int64_t sqlite_bytes = 0;
    int64_t page_cache_bytes = 0;
  };
  MemoryUse memoryUse();

  // Group commit counters: write transactions committed, and fdatasyncs of the
  // WAL that made them durable (syncs <= commits; fewer when writers overlap).
  struct SyncStats {
    int64_t commits = 0;
    int64_t syncs = 0;
    int64_t checkpoints = 0;  // background checkpoints run
    int64_t wal_pages = 0;    // pages in the WAL after the last commit
  };
  SyncStats syncStats();

  // Tests: replaces the fdatasync of the WAL (it still runs one at a time,
  // outside the connection's mutex), to block it or make it fail.
  void setSyncForTest(std::function<Status()> sync);

  // WAL pages that start a background checkpoint (SQLite's own default mark).
  static constexpr int kCheckpointPages = 1000;
  // Tests: a smaller mark, to see checkpoints without writing megabytes.
  void setCheckpointPagesForTest(int pages);

 private:
  class Conn;     // the SQLite connection plus its prepared statements
  class TxnImpl;  // Txn bound to one open write transaction

  SqliteStore(std::unique_ptr<Conn> conn, TimeSource& clock, int64_t watch_history_events);
  // Runs fn with the connection locked; kFailedPrecondition on re-entry from the same thread.
  Status withConnection(const std::function<Status(Conn&)>& fn);
  // Delivers queued event batches to listeners unless another thread already is.
  void deliver();
  static StatusOr<std::unique_ptr<Conn>> openConn(const std::string& path);
  // listRaw, and listRawWithLabel when `label_key` is set (labels always read then).
  StatusOr<std::vector<RawObject>> listRawWhere(const std::string& kind, const std::string& ns,
                                                const std::string* label_key,
                                                const std::vector<std::string>& values, bool with_labels);
  static Status readEventsSince(Conn& conn, int64_t since_rv, const std::string& kind,
                                std::vector<Event>* out);

  // The commits one fdatasync covers: every commit made while it was open.
  struct SyncRound {
    std::atomic<bool> done{false};
    Status status;  // written before done is set
  };
  // The round that will cover a commit made now (call after COMMIT, before releasing the connection).
  std::shared_ptr<SyncRound> joinRound();
  // Returns once `round` is synced (leading the fdatasync when none runs): its status.
  Status awaitDurable(const std::shared_ptr<SyncRound>& round);
  // fdatasync of the WAL file (a no-op for ":memory:").
  Status syncWal();
  // Starts the checkpointer thread on its own connection to `path`.
  Status startCheckpointer(const std::string& path);
  void checkpointLoop(std::unique_ptr<Conn> conn);
  // sqlite3_wal_hook: called in a committing writer, with the WAL's size in pages.
  static int onWalCommit(void* self, sqlite3* db, const char* name, int pages);

  TimeSource& clock_;
  const int64_t watch_history_events_;

  std::mutex mu_;  // guards conn_ and every use of the connection
  std::unique_ptr<Conn> conn_;
  std::atomic<std::thread::id> owner_{};  // thread holding mu_, to detect re-entry
  std::atomic<int64_t> current_rv_{0};

  std::mutex listeners_mu_;  // guards listeners_, next_listener_id_
  std::map<int, std::shared_ptr<std::function<void(const Event&)>>> listeners_;
  int next_listener_id_ = 1;

  std::string wal_path_;  // "" for ":memory:"

  std::mutex checkpoint_mu_;  // guards checkpoint_due_, checkpoint_stop_
  std::condition_variable checkpoint_cv_;
  bool checkpoint_due_ = false;
  bool checkpoint_stop_ = false;
  std::atomic<int> checkpoint_pages_{kCheckpointPages};
  std::atomic<int> wal_pages_{0};
  std::thread checkpointer_;

  std::mutex sync_mu_;  // guards open_round_, syncing_, sync_for_test_, sync_stats_
  std::condition_variable sync_cv_;
  std::shared_ptr<SyncRound> open_round_ = std::make_shared<SyncRound>();
  bool syncing_ = false;
  std::function<Status()> sync_for_test_;
  SyncStats sync_stats_;

  // Committed batches in commit order, each delivered once its round is synced.
  struct PendingBatch {
    std::shared_ptr<SyncRound> round;
    std::vector<Event> events;
  };
  std::mutex delivery_mu_;  // guards pending_, delivering_
  std::deque<PendingBatch> pending_;
  bool delivering_ = false;
};

}  // namespace knap::store
