#include "store/sqlite_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <utility>

#include "common/log.h"

namespace knap::store {
namespace {

// 0 when a file can be created in `dir`, else the errno (EROFS: the disk is read-only).
int probeWritable(const std::string& dir) {
  std::string probe = dir + "/.knapd-write-test";
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return errno;
  ::close(fd);
  ::unlink(probe.c_str());
  return 0;
}

// Every SQLite result code becomes a Status here, and nowhere else.
Status sqliteError(sqlite3* db, int rc, const std::string& context) {
  std::string msg = context + ": " + (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc)) + " (sqlite code " +
                    std::to_string(rc) + ")";
  // The directory of the database: what an operator looks at when the disk is the problem.
  auto dataDir = [db] {
    const char* file = db ? sqlite3_db_filename(db, "main") : nullptr;
    std::string where = file && *file ? std::string(file) : std::string("the database");
    if (size_t slash = where.rfind('/'); slash != std::string::npos) where = where.substr(0, slash);
    return where;
  };
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
      return {Code::kUnavailable, msg};
    case SQLITE_FULL:
      // Not kResourceExhausted: that is 429, which clients take for throttling and retry.
      return {Code::kInternal,
              "disk full: no space left on the disk holding the data dir " + dataDir() + " (" + msg + ")"};
    case SQLITE_IOERR: {
      // "disk I/O error" alone hides the cause; the OS error names it (EROFS: the disk went read-only).
      // SQLite's own errno is often lost by then (it records errno after its clean-up calls), so a
      // failed write also asks the disk: can a file be created next to the database?
      int err = db ? sqlite3_system_errno(db) : 0;
      if (err != EROFS && db &&
          (rc == SQLITE_IOERR_WRITE || rc == SQLITE_IOERR_FSYNC || rc == SQLITE_IOERR_TRUNCATE ||
           rc == SQLITE_IOERR_DIR_FSYNC)) {
        if (probeWritable(dataDir()) == EROFS) err = EROFS;
      }
      if (err == EROFS) {
        return {Code::kInternal, "read-only disk: the disk holding the data dir " + dataDir() +
                                     " is read-only (" + msg + ": " + std::strerror(err) + ")"};
      }
      if (err != 0) msg += std::string(": ") + std::strerror(err);
      return {Code::kInternal, msg};
    }
    case SQLITE_NOMEM:
      return {Code::kResourceExhausted, msg};
    default:
      return {Code::kInternal, msg};
  }
}

// The JSON text of a stored body (opened with `cipher` when sealed).
StatusOr<std::string> decodeBody(BodyCipher* cipher, const Key& key, std::string text) {
  if (text.rfind(kSealedPrefix, 0) != 0) return text;
  if (!cipher)
    return internalError("stored body of " + key.toString() + " is encrypted and knapd has no key");
  return cipher->open(key, text);
}

StatusOr<nlohmann::json> parseStoredBody(BodyCipher* cipher, const Key& key, std::string stored) {
  KNAP_ASSIGN_OR_RETURN(std::string text, decodeBody(cipher, key, std::move(stored)));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return internalError("stored body of " + key.toString() + " is not valid JSON");
  return j;
}

// One migration step: `sql` takes the schema from version-1 to version.
struct Migration {
  int version;
  const char* description;
  const char* sql;
};

// Append only: never edit a step that has shipped, add a new one.
const Migration kMigrations[] = {
    {1, "objects table and the global resource-version counter",
     "CREATE TABLE objects ("
     "  kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,"
     "  uid TEXT NOT NULL, resource_version INTEGER NOT NULL, generation INTEGER NOT NULL,"
     "  body TEXT NOT NULL,"
     "  PRIMARY KEY (kind, namespace, name)) WITHOUT ROWID;"
     "CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
     "INSERT INTO meta(key, value) VALUES ('resource_version', 0);"},
    {2, "events table for watch replay",
     "CREATE TABLE events ("
     "  rv INTEGER PRIMARY KEY, type TEXT NOT NULL, kind TEXT NOT NULL,"
     "  namespace TEXT NOT NULL, name TEXT NOT NULL, body TEXT NOT NULL);"
     "CREATE INDEX events_kind_rv ON events(kind, rv);"
     // Changes made before this version have no events: history starts now.
     "INSERT INTO meta(key, value) SELECT 'compacted_rv', value FROM meta WHERE key = 'resource_version';"},
    {3, "index objects by uid (owner-reference lookups)", "CREATE INDEX objects_uid ON objects(uid);"},
    // The uids an object's metadata.ownerReferences name, so that a cascading
    // delete finds dependents without parsing every object. Bodies that are not
    // JSON (sealed) are indexed under '*' ("may name any owner"): callers check
    // the body, and the object's next write indexes it properly.
    {4, "index ownerReferences (cascading deletes)",
     "CREATE TABLE owner_refs ("
     "  owner_uid TEXT NOT NULL, kind TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,"
     "  PRIMARY KEY (owner_uid, namespace, kind, name)) WITHOUT ROWID;"
     "CREATE INDEX owner_refs_object ON owner_refs(kind, namespace, name);"
     "WITH v AS MATERIALIZED (SELECT kind, namespace, name, body FROM objects WHERE json_valid(body)),"
     "     refs AS MATERIALIZED ("
     "       SELECT v.kind, v.namespace, v.name, r.type AS type, r.value AS value"
     "       FROM v, json_each(v.body, '$.metadata.ownerReferences') r"
     "       WHERE json_type(v.body, '$.metadata.ownerReferences') = 'array'),"
     "     uids AS MATERIALIZED ("
     "       SELECT kind, namespace, name, CASE WHEN type = 'object' THEN json_extract(value, '$.uid') END "
     "AS uid"
     "       FROM refs)"
     "INSERT OR IGNORE INTO owner_refs(owner_uid, kind, namespace, name)"
     "  SELECT uid, kind, namespace, name FROM uids WHERE typeof(uid) = 'text';"
     "INSERT OR IGNORE INTO owner_refs(owner_uid, kind, namespace, name)"
     "  SELECT '*', kind, namespace, name FROM objects WHERE NOT json_valid(body);"},
    // metadata.labels (string values only: what a selector can match), so
    // that a label-selector list reads only the rows it may match. Bodies
    // that are not JSON (sealed) get one row with the empty key, "labels
    // unknown" (no label key is empty): every selector list reads them.
    {5, "index metadata.labels (label-selector lists)",
     "CREATE TABLE labels ("
     "  kind TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT "
     "NULL,"
     "  PRIMARY KEY (kind, key, value, namespace, name)) WITHOUT ROWID;"
     "CREATE INDEX labels_object ON labels(kind, namespace, name);"
     "WITH v AS MATERIALIZED (SELECT kind, namespace, name, body FROM objects WHERE json_valid(body)),"
     "     l AS MATERIALIZED ("
     "       SELECT v.kind, v.namespace, v.name, e.key AS key, e.value AS value, e.type AS type"
     "       FROM v, json_each(v.body, '$.metadata.labels') e"
     "       WHERE json_type(v.body, '$.metadata.labels') = 'object')"
     "INSERT OR IGNORE INTO labels(kind, key, value, namespace, name)"
     "  SELECT kind, key, value, namespace, name FROM l WHERE type = 'text' AND key <> '';"
     "INSERT OR IGNORE INTO labels(kind, key, value, namespace, name)"
     "  SELECT kind, '', '', namespace, name FROM objects WHERE NOT json_valid(body);"},
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == SqliteStore::kLatestSchemaVersion);

std::string newUuidV4() {
  static std::mutex mu;
  static std::mt19937_64 rng = [] {
    std::random_device rd;  // /dev/urandom (or RDRAND) on Linux
    std::seed_seq seq{rd(), rd(), rd(), rd(), rd(), rd(), rd(), rd()};
    return std::mt19937_64(seq);
  }();
  uint64_t hi, lo;
  {
    std::lock_guard<std::mutex> lock(mu);
    hi = rng();
    lo = rng();
  }
  hi = (hi & 0xffffffffffff0fffULL) | 0x0000000000004000ULL;  // version 4
  lo = (lo & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;  // variant 10xx
  char buf[37];
  std::snprintf(buf, sizeof buf, "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(hi >> 32),
                static_cast<unsigned>((hi >> 16) & 0xffff), static_cast<unsigned>(hi & 0xffff),
                static_cast<unsigned>(lo >> 48), static_cast<unsigned long long>(lo & 0xffffffffffffULL));
  return buf;
}

// "services.serving.knative.dev" for the Knative kinds, else the lower-case plural.
std::string resourceName(const std::string& kind) {
  std::string plural;
  for (char c : kind) plural += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  plural += "s";
  static const char* const kServing[] = {"Service", "Configuration", "Revision", "Route", "DomainMapping"};
  for (const char* k : kServing) {
    if (kind == k) return plural + ".serving.knative.dev";
  }
  return plural;
}

Status checkKey(const Key& key) {
  if (key.kind.empty()) return invalidArgument("object key has an empty kind");
  if (key.name.empty()) return invalidArgument("object key " + key.toString() + " has an empty name");
  return Status::ok();
}

std::string dumpJson(const nlohmann::json& j) {
  // Replace invalid UTF-8 instead of throwing; the API layer rejects it earlier.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

const char* typeText(EventType t) {
  return eventTypeName(t);
}

StatusOr<EventType> parseType(const std::string& s) {
  if (s == "ADDED") return EventType::kAdded;
  if (s == "MODIFIED") return EventType::kModified;
  if (s == "DELETED") return EventType::kDeleted;
  return internalError("events table holds unknown event type \"" + s + "\"");
}

}  // namespace

// ---------------------------------------------------------------------------
// Conn: the connection, a statement cache and small typed helpers.

class SqliteStore::Conn {
 public:
  // A cached prepared statement, reset on destruction so it can be reused.
  class Stmt {
   public:
    Stmt(Conn& conn, sqlite3_stmt* stmt) : conn_(conn), stmt_(stmt) {}
    ~Stmt() {
      sqlite3_reset(stmt_);
      sqlite3_clear_bindings(stmt_);
    }
    Stmt(const Stmt&) = delete;
    Stmt& operator=(const Stmt&) = delete;
    Stmt& bind(int i, int64_t v) {
      sqlite3_bind_int64(stmt_, i, v);
      return *this;
    }
    Stmt& bind(int i, const std::string& v) {
      sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
      return *this;
    }
    // true: a row is available; false: done.
    StatusOr<bool> step() {
      int rc = sqlite3_step(stmt_);
      if (rc == SQLITE_ROW) return true;
      if (rc == SQLITE_DONE) return false;
      return sqliteError(conn_.db(), rc, std::string("executing \"") + sqlite3_sql(stmt_) + "\"");
    }
    Status run() {
      StatusOr<bool> r = step();
      return r.isOk() ? Status::ok() : r.status();
    }
    // Ready to run again with new bindings.
    void reset() {
      sqlite3_reset(stmt_);
      sqlite3_clear_bindings(stmt_);
    }
    int64_t i64(int col) { return sqlite3_column_int64(stmt_, col); }
    std::string text(int col) {
      const unsigned char* p = sqlite3_column_text(stmt_, col);
      return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(stmt_, col)) : "";
    }

   private:
    Conn& conn_;
    sqlite3_stmt* stmt_;
  };

  explicit Conn(sqlite3* db) : db_(db) {}

  // Encryption at rest of some kinds' bodies (set once by SqliteStore::setCipher).
  std::shared_ptr<BodyCipher> cipher;
  // The text stored for `key`'s body: sealed when the cipher seals its kind.
  StatusOr<std::string> encode(const Key& key, std::string text) {
    if (!cipher || !cipher->seals(key.kind)) return text;
    return cipher->seal(key, text);
  }
  // The JSON text of a stored body (opened when sealed).
  StatusOr<std::string> decode(const Key& key, std::string text) {
    return decodeBody(cipher.get(), key, std::move(text));
  }
  ~Conn() {
    for (auto& [sql, stmt] : cache_) sqlite3_finalize(stmt);
    sqlite3_close_v2(db_);
  }
  sqlite3* db() { return db_; }

  StatusOr<std::unique_ptr<Stmt>> prepare(const std::string& sql) {
    auto it = cache_.find(sql);
    if (it == cache_.end()) {
      sqlite3_stmt* stmt = nullptr;
      int rc = sqlite3_prepare_v3(db_, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
      if (rc != SQLITE_OK) return sqliteError(db_, rc, "preparing \"" + sql + "\"");
      it = cache_.emplace(sql, stmt).first;
    }
    return std::make_unique<Stmt>(*this, it->second);
  }

  Status exec(const std::string& sql) {
    char* err = nullptr;
    int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
    if (err) sqlite3_free(err);
    if (rc != SQLITE_OK) return sqliteError(db_, rc, "executing \"" + sql.substr(0, 80) + "\"");
    return Status::ok();
  }

  // Rolls back if a transaction is open (SQLite may already have rolled back on I/O errors).
  void rollbackIfOpen() {
    if (!sqlite3_get_autocommit(db_)) {
      Status s = exec("ROLLBACK");
      if (!s.isOk()) LOG(ERROR) << "store: rollback failed: " << s.toString();
    }
  }

  StatusOr<int64_t> metaValue(const std::string& key) {
    KNAP_ASSIGN_OR_RETURN(auto stmt, prepare("SELECT value FROM meta WHERE key = ?"));
    stmt->bind(1, key);
    KNAP_ASSIGN_OR_RETURN(bool row, stmt->step());
    if (!row) return internalError("meta key " + key + " missing");
    return stmt->i64(0);
  }

  // Removes `key`'s rows from the labels index.
  Status deleteLabels(const Key& key) {
    KNAP_ASSIGN_OR_RETURN(auto del,
                          prepare("DELETE FROM labels WHERE kind = ? AND namespace = ? AND name = ?"));
    del->bind(1, key.kind).bind(2, key.ns).bind(3, key.name);
    return del->run();
  }

  Status setMeta(const std::string& key, int64_t value) {
    KNAP_ASSIGN_OR_RETURN(auto stmt, prepare("UPDATE meta SET value = ? WHERE key = ?"));
    stmt->bind(1, value).bind(2, key);
    return stmt->run();
  }

  StatusOr<int> schemaVersion() {
    KNAP_ASSIGN_OR_RETURN(auto stmt, prepare("SELECT version FROM schema_version"));
    KNAP_ASSIGN_OR_RETURN(bool row, stmt->step());
    if (!row) return internalError("schema_version table is empty");
    return static_cast<int>(stmt->i64(0));
  }

  // Applies migration steps in order until `target`, each in its own transaction.
  Status migrate(int target) {
    KNAP_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
    Status s = exec(
        "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);"
        "INSERT INTO schema_version(version) SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM schema_version);");
    if (s.isOk()) s = exec("COMMIT");
    if (!s.isOk()) {
      rollbackIfOpen();
      return s.annotate("initialising schema_version");
    }
    KNAP_ASSIGN_OR_RETURN(int version, schemaVersion());
    if (version > kLatestSchemaVersion) {
      return failedPrecondition("database schema version " + std::to_string(version) +
                                " is newer than this knapd supports (" +
                                std::to_string(kLatestSchemaVersion) + "); use a newer knapd");
    }
    for (const Migration& m : kMigrations) {
      if (m.version <= version || m.version > target) continue;
      KNAP_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
      // Re-read under the write lock: another process opening the same file may have migrated meanwhile.
      StatusOr<int> now = schemaVersion();
      Status st = now.isOk() ? Status::ok() : now.status();
      if (st.isOk() && *now >= m.version) {
        st = exec("COMMIT");
        if (st.isOk()) continue;
      }
      if (st.isOk()) st = exec(m.sql);
      if (st.isOk()) st = exec("UPDATE schema_version SET version = " + std::to_string(m.version));
      if (st.isOk()) st = exec("COMMIT");
      if (!st.isOk()) {
        rollbackIfOpen();
        return st.annotate("schema migration to version " + std::to_string(m.version) + " (" + m.description +
                           ")");
      }
      LOG(INFO) << "store: migrated schema to version " << m.version << " (" << m.description << ")";
    }
    return Status::ok();
  }

 private:
  sqlite3* db_;
  std::map<std::string, sqlite3_stmt*> cache_;
};

// ---------------------------------------------------------------------------
// TxnImpl: the operations of one write transaction.

class SqliteStore::TxnImpl final : public Txn {
 public:
  TxnImpl(Conn& conn, TimeSource& clock, int64_t rv) : conn_(conn), clock_(clock), rv_(rv) {}

  StatusOr<Object> get(const Key& key) override {
    KNAP_RETURN_IF_ERROR(checkUsable());
    KNAP_RETURN_IF_ERROR(checkKey(key));
    KNAP_ASSIGN_OR_RETURN(std::optional<Stored> s, load(key));
    if (!s) return notFound(resourceName(key.kind) + " \"" + key.name + "\" not found");
    return std::move(s->object);
  }

  StatusOr<std::vector<Object>> list(const std::string& kind, const std::string& ns) override {
    KNAP_RETURN_IF_ERROR(checkUsable());
    return listObjects(conn_, kind, ns);
  }

  StatusOr<std::vector<Key>> dependentsOf(const std::string& ns, const std::string& owner_uid) override {
    KNAP_RETURN_IF_ERROR(checkUsable());
    std::string sql = "SELECT DISTINCT kind, namespace, name FROM owner_refs WHERE owner_uid IN (?, '*')";
    if (!ns.empty()) sql += " AND namespace = ?";
    sql += " ORDER BY namespace, kind, name";
    KNAP_ASSIGN_OR_RETURN(auto stmt, prepare(sql));
    stmt->bind(1, owner_uid);
    if (!ns.empty()) stmt->bind(2, ns);
    std::vector<Key> out;
    for (;;) {
      StatusOr<bool> row = stmt->step();
      KNAP_RETURN_IF_ERROR(track(row.isOk() ? Status::ok() : row.status()));
      if (!*row) break;
      out.push_back(Key{stmt->text(0), stmt->text(1), stmt->text(2)});
    }
    return out;
  }

  StatusOr<Object> create(const Key& key, nlohmann::json body) override {
    KNAP_RETURN_IF_ERROR(checkUsable());
    KNAP_RETURN_IF_ERROR(checkKey(key));
    if (!body.is_object()) return invalidArgument("object body must be a JSON object");
    if (body.contains("metadata") && !body["metadata"].is_object()) {
      return invalidArgument("metadata must be a JSON object");
    }
    KNAP_ASSIGN_OR_RETURN(std::optional<Stored> existing, load(key));
    if (existing) return alreadyExists(resourceName(key.kind) + " \"" + key.name + "\" already exists");
    int64_t rv = rv_ + 1;
    std::string uid = newUuidV4();
    nlohmann::json& meta = body["metadata"];
    meta["name"] = key.name;
    meta["namespace"] = key.ns;
    meta["uid"] = uid;
    meta["generation"] = 1;
    meta["creationTimestamp"] = formatRfc3339(clock_.now());
    meta["resourceVersion"] = std::to_string(rv);
    auto sealed = conn_.encode(key, dumpJson(body));
    KNAP_RETURN_IF_ERROR(track(sealed.status()));
    std::string text = std::move(*sealed);
    KNAP_ASSIGN_OR_RETURN(
        auto stmt,
        prepare("INSERT INTO objects(kind, namespace, name, uid, resource_version, generation, body) "
                "VALUES (?, ?, ?, ?, ?, 1, ?)"));
    stmt->bind(1, key.kind).bind(2, key.ns).bind(3, key.name).bind(4, uid).bind(5, rv).bind(6, text);
    KNAP_RETURN_IF_ERROR(track(stmt->run()));
    KNAP_RETURN_IF_ERROR(indexOwners(key, &body));
    KNAP_RETURN_IF_ERROR(indexLabels(key, &body));
    Object obj{key, std::move(body), rv};
    KNAP_RETURN_IF_ERROR(record(EventType::kAdded, obj, text));
    return obj;
  }

  StatusOr<Object> update(const Key& key, nlohmann::json body, int64_t expected_rv) override {
    KNAP_RETURN_IF_ERROR(checkUsable());
    KNAP_RETURN_IF_ERROR(checkKey(key));
    if (!body.is_object()) return invalidArgument("object body must be a JSON object");
    if (body.contains("metadata") && !body["metadata"].is_object()) {
      return invalidArgument("metadata must be a JSON object");
    }
    KNAP_ASSIGN_OR_RETURN(std::optional<Stored> old, load(key));
    if (!old) return notFound(resourceName(key.kind) + " \"" + key.name + "\" not found");
    if (expected_rv != 0 && expected_rv != old->object.resource_version) {
      return conflict("Operation cannot be fulfilled on " + resourceName(key.kind) + " \"" + key.name +
                      "\": the object has been modified; please apply your changes to the latest version "
                      "and try again");
    }
    const nlohmann::json& old_body = old->object.body;
    nlohmann::json old_spec = old_body.contains("spec") ? old_body["spec"] : nlohmann::json();
    nlohmann::json new_spec = body.contains("spec") ? body["spec"] : nlohmann::json();
    int64_t generation = old->generation + (old_spec == new_spec ? 0 : 1);
    int64_t rv = rv_ + 1;
    const nlohmann::json& old_meta = old_body.contains("metadata") ? old_body["metadata"] : nlohmann::json();
    nlohmann::json& meta = body["metadata"];
    meta["name"] = key.name;
    meta["namespace"] = key.ns;
    meta["uid"] = old->uid;
    if (old_meta.is_object() && old_meta.contains("creationTimestamp")) {
      meta["creationTimestamp"] = old_meta["creationTimestamp"];
    } else {
      meta.erase("creationTimestamp");
    }
    meta["generation"] = generation;
    meta["resourceVersion"] = std::to_string(rv);
    auto sealed = conn_.encode(key, dumpJson(body));
    KNAP_RETURN_IF_ERROR(track(sealed.status()));
    std::string text = std::move(*sealed);
    KNAP_ASSIGN_OR_RETURN(auto stmt,
                          prepare("UPDATE objects SET resource_version = ?, generation = ?, body = ? "
                                  "WHERE kind = ? AND namespace = ? AND name = ?"));
    stmt->bind(1, rv).bind(2, generation).bind(3, text).bind(4, key.kind).bind(5, key.ns).bind(6, key.name);
    KNAP_RETURN_IF_ERROR(track(stmt->run()));
    KNAP_RETURN_IF_ERROR(indexOwners(key, &body));
    KNAP_RETURN_IF_ERROR(indexLabels(key, &body));
    Object obj{key, std::move(body), rv};
    KNAP_RETURN_IF_ERROR(record(EventType::kModified, obj, text));
    return obj;
  }

  StatusOr<Object> remove(const Key& key) override {
    KNAP_RETURN_IF_ERROR(checkUsable());
    KNAP_RETURN_IF_ERROR(checkKey(key));
    KNAP_ASSIGN_OR_RETURN(std::optional<Stored> old, load(key));
    if (!old) return notFound(resourceName(key.kind) + " \"" + key.name + "\" not found");
    KNAP_ASSIGN_OR_RETURN(auto stmt,
                          prepare("DELETE FROM objects WHERE kind = ? AND namespace = ? AND name = ?"));
    stmt->bind(1, key.kind).bind(2, key.ns).bind(3, key.name);
    KNAP_RETURN_IF_ERROR(track(stmt->run()));
    KNAP_RETURN_IF_ERROR(indexOwners(key, nullptr));
    KNAP_RETURN_IF_ERROR(indexLabels(key, nullptr));
    int64_t rv = rv_ + 1;
    Object obj = std::move(old->object);
    if (!obj.body["metadata"].is_object()) obj.body["metadata"] = nlohmann::json::object();
    obj.body["metadata"]["resourceVersion"] = std::to_string(rv);
    obj.resource_version = rv;
    auto sealed = conn_.encode(key, dumpJson(obj.body));
    KNAP_RETURN_IF_ERROR(track(sealed.status()));
    KNAP_RETURN_IF_ERROR(record(EventType::kDeleted, obj, *sealed));
    return obj;
  }

  // A row as stored: the body still sealed/unparsed, so that Store::get/list
  // can decode and parse it after releasing the connection.
  struct Row {
    Key key;
    int64_t resource_version = 0;
    std::string stored;
  };

  // Static so Store::get/list share the code outside a write transaction.
  static StatusOr<std::vector<Row>> listRows(Conn& conn, const std::string& kind, const std::string& ns) {
    std::string sql = "SELECT namespace, name, resource_version, body FROM objects WHERE kind = ?";
    if (!ns.empty()) sql += " AND namespace = ?";
    sql += " ORDER BY namespace, name";
    KNAP_ASSIGN_OR_RETURN(auto stmt, conn.prepare(sql));
    stmt->bind(1, kind);
    if (!ns.empty()) stmt->bind(2, ns);
    std::vector<Row> out;
    for (;;) {
      KNAP_ASSIGN_OR_RETURN(bool row, stmt->step());
      if (!row) break;
      out.push_back(Row{{kind, stmt->text(0), stmt->text(1)}, stmt->i64(2), stmt->text(3)});
    }
    return out;
  }

  static StatusOr<std::vector<Object>> parseRows(BodyCipher* cipher, std::vector<Row> rows) {
    std::vector<Object> out;
    out.reserve(rows.size());
    for (Row& r : rows) {
      KNAP_ASSIGN_OR_RETURN(nlohmann::json body, parseStoredBody(cipher, r.key, std::move(r.stored)));
      out.push_back(Object{std::move(r.key), std::move(body), r.resource_version});
    }
    return out;
  }

  static StatusOr<std::vector<Object>> listObjects(Conn& conn, const std::string& kind,
                                                   const std::string& ns) {
    KNAP_ASSIGN_OR_RETURN(std::vector<Row> rows, listRows(conn, kind, ns));
    return parseRows(conn.cipher.get(), std::move(rows));
  }

  static StatusOr<std::optional<Row>> loadRow(Conn& conn, const Key& key) {
    KNAP_ASSIGN_OR_RETURN(auto stmt, conn.prepare("SELECT resource_version, body FROM objects "
                                                  "WHERE kind = ? AND namespace = ? AND name = ?"));
    stmt->bind(1, key.kind).bind(2, key.ns).bind(3, key.name);
    KNAP_ASSIGN_OR_RETURN(bool row, stmt->step());
    if (!row) return std::optional<Row>();
    return std::optional<Row>(Row{key, stmt->i64(0), stmt->text(1)});
  }

  struct Stored {
    Object object;
    std::string uid;
    int64_t generation = 0;
  };

  static StatusOr<std::optional<Stored>> loadFrom(Conn& conn, const Key& key) {
    KNAP_ASSIGN_OR_RETURN(auto stmt,
                          conn.prepare("SELECT uid, resource_version, generation, body FROM objects "
                                       "WHERE kind = ? AND namespace = ? AND name = ?"));
    stmt->bind(1, key.kind).bind(2, key.ns).bind(3, key.name);
    KNAP_ASSIGN_OR_RETURN(bool row, stmt->step());
    if (!row) return std::optional<Stored>();
    Stored s;
    s.uid = stmt->text(0);
    s.object.key = key;
    s.object.resource_version = stmt->i64(1);
    s.generation = stmt->i64(2);
    KNAP_ASSIGN_OR_RETURN(s.object.body, parseBody(conn, key, stmt->text(3)));
    return std::optional<Stored>(std::move(s));
  }

  static StatusOr<nlohmann::json> parseBody(Conn& conn, const Key& key, const std::string& stored) {
    return parseStoredBody(conn.cipher.get(), key, stored);
  }

  // After fn returned OK: persists the counter, prunes old events. Still inside the transaction.
  Status finish(int64_t history) {
    if (events_.empty()) return Status::ok();
    KNAP_RETURN_IF_ERROR(track(conn_.setMeta("resource_version", rv_)));
    int64_t keep_from = rv_ - history;  // events with rv <= keep_from go
    StatusOr<int64_t> compacted = conn_.metaValue("compacted_rv");
    KNAP_RETURN_IF_ERROR(track(compacted.isOk() ? Status::ok() : compacted.status()));
    if (keep_from > *compacted) {
      KNAP_ASSIGN_OR_RETURN(auto stmt, prepare("DELETE FROM events WHERE rv <= ?"));
      stmt->bind(1, keep_from);
      KNAP_RETURN_IF_ERROR(track(stmt->run()));
      KNAP_RETURN_IF_ERROR(track(conn_.setMeta("compacted_rv", keep_from)));
    }
    return Status::ok();
  }

  void close() { usable_ = false; }
  const Status& sqliteFailure() const { return failure_; }
  int64_t rv() const { return rv_; }
  std::vector<Event>& events() { return events_; }

 private:
  Status checkUsable() {
    if (!usable_) return failedPrecondition("transaction already finished");
    if (!failure_.isOk()) return failure_;
    return Status::ok();
  }
  // Remembers a database failure: the transaction cannot commit after one, whatever fn returns.
  Status track(Status s) {
    if (!s.isOk() && failure_.isOk()) failure_ = s;
    return s;
  }
  StatusOr<std::unique_ptr<Conn::Stmt>> prepare(const std::string& sql) {
    auto r = conn_.prepare(sql);
    if (!r.isOk()) (void)track(r.status());
    return r;
  }
  StatusOr<std::optional<Stored>> load(const Key& key) {
    auto r = loadFrom(conn_, key);
    if (!r.isOk()) (void)track(r.status());
    return r;
  }
  // Replaces the owner_refs rows of `key` with the uids `body`'s ownerReferences
  // name (none when body is null: the object is gone).
  Status indexOwners(const Key& key, const nlohmann::json* body) {
    KNAP_ASSIGN_OR_RETURN(auto del,
                          prepare("DELETE FROM owner_refs WHERE kind = ? AND namespace = ? AND name = ?"));
    del->bind(1, key.kind).bind(2, key.ns).bind(3, key.name);
    KNAP_RETURN_IF_ERROR(track(del->run()));
    if (!body) return Status::ok();
    auto meta = body->find("metadata");
    if (meta == body->end() || !meta->is_object()) return Status::ok();
    auto refs = meta->find("ownerReferences");
    if (refs == meta->end() || !refs->is_array()) return Status::ok();
    for (const nlohmann::json& ref : *refs) {
      if (!ref.is_object()) continue;
      auto uid = ref.find("uid");
      if (uid == ref.end() || !uid->is_string()) continue;
      KNAP_ASSIGN_OR_RETURN(auto ins,
                            prepare("INSERT OR IGNORE INTO owner_refs(owner_uid, kind, namespace, name) "
                                    "VALUES (?, ?, ?, ?)"));
      ins->bind(1, uid->get<std::string>()).bind(2, key.kind).bind(3, key.ns).bind(4, key.name);
      KNAP_RETURN_IF_ERROR(track(ins->run()));
    }
    return Status::ok();
  }

  // Replaces the labels rows of `key` with `body`'s string-valued
  // metadata.labels (none when body is null: the object is gone). A body the
  // cipher seals is indexed as "labels unknown" (the empty key): its labels
  // stay encrypted at rest, and selector lists read it.
  Status indexLabels(const Key& key, const nlohmann::json* body) {
    KNAP_RETURN_IF_ERROR(track(conn_.deleteLabels(key)));
    if (!body) return Status::ok();
    KNAP_ASSIGN_OR_RETURN(auto ins, prepare("INSERT OR IGNORE INTO labels(kind, key, value, namespace, name) "
                                            "VALUES (?, ?, ?, ?, ?)"));
    if (conn_.cipher && conn_.cipher->seals(key.kind)) {
      ins->bind(1, key.kind).bind(2, std::string()).bind(3, std::string()).bind(4, key.ns).bind(5, key.name);
      return track(ins->run());
    }
    auto meta = body->find("metadata");
    if (meta == body->end() || !meta->is_object()) return Status::ok();
    auto labels = meta->find("labels");
    if (labels == meta->end() || !labels->is_object()) return Status::ok();
    for (auto it = labels->begin(); it != labels->end(); ++it) {
      if (!it.value().is_string() || it.key().empty()) continue;
      ins->bind(1, key.kind)
          .bind(2, it.key())
          .bind(3, it.value().get<std::string>())
          .bind(4, key.ns)
          .bind(5, key.name);
      KNAP_RETURN_IF_ERROR(track(ins->run()));
      ins->reset();
    }
    return Status::ok();
  }

  Status record(EventType type, const Object& obj, const std::string& text) {
    KNAP_ASSIGN_OR_RETURN(auto stmt, prepare("INSERT INTO events(rv, type, kind, namespace, name, body) "
                                             "VALUES (?, ?, ?, ?, ?, ?)"));
    stmt->bind(1, obj.resource_version)
        .bind(2, std::string(typeText(type)))
        .bind(3, obj.key.kind)
        .bind(4, obj.key.ns)
        .bind(5, obj.key.name)
        .bind(6, text);
    KNAP_RETURN_IF_ERROR(track(stmt->run()));
    rv_ = obj.resource_version;
    events_.push_back(Event{type, obj.resource_version, obj});
    return Status::ok();
  }

  Conn& conn_;
  TimeSource& clock_;
  int64_t rv_;
  bool usable_ = true;
  Status failure_;
  std::vector<Event> events_;
};

// ---------------------------------------------------------------------------

StatusOr<std::unique_ptr<SqliteStore::Conn>> SqliteStore::openConn(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    Status s = sqliteError(db, rc, "opening database " + path);
    sqlite3_close_v2(db);
    return s;
  }
  auto conn = std::make_unique<SqliteStore::Conn>(db);
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, 5000);
  // WAL + synchronous=NORMAL: COMMIT writes the WAL without syncing it; the
  // store's group commit (awaitDurable) syncs it before a writer is answered.
  // Switching a fresh file to WAL needs an exclusive lock and SQLite does not
  // wait for it through the busy handler, so retry while another opener holds it.
  std::string mode;
  for (int attempt = 0;; ++attempt) {
    StatusOr<std::unique_ptr<Conn::Stmt>> stmt = conn->prepare("PRAGMA journal_mode = WAL");
    Status st = stmt.isOk() ? Status::ok() : stmt.status();
    if (st.isOk()) {
      StatusOr<bool> row = (*stmt)->step();
      if (row.isOk() && *row) mode = (*stmt)->text(0);
      if (!row.isOk()) st = row.status();
    }
    if (st.isOk()) break;
    if (st.code() != Code::kUnavailable || attempt >= 250) return st.annotate("opening database " + path);
    sqlite3_sleep(20);
  }
  if (path != ":memory:" && mode != "wal") {
    LOG(WARNING) << "store: " << path << " runs in journal mode " << mode << ", not WAL";
  }
  KNAP_RETURN_IF_ERROR(conn->exec("PRAGMA synchronous = NORMAL").annotate("opening database " + path));
  KNAP_RETURN_IF_ERROR(conn->exec("PRAGMA foreign_keys = ON").annotate("opening database " + path));
  // Deleted and overwritten content (a Secret resealed at start) is zeroed, not left in free pages.
  KNAP_RETURN_IF_ERROR(conn->exec("PRAGMA secure_delete = ON").annotate("opening database " + path));
  KNAP_RETURN_IF_ERROR(conn->exec("PRAGMA cache_size = -" + std::to_string(kPageCacheKiB))
                           .annotate("opening database " + path));
  return conn;
}

StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::open(const std::string& path, TimeSource& clock,
                                                         int64_t watch_history_events) {
  if (watch_history_events < 1) {
    return invalidArgument("watch_history_events must be at least 1, got " +
                           std::to_string(watch_history_events));
  }
  KNAP_ASSIGN_OR_RETURN(std::unique_ptr<Conn> conn, openConn(path));
  KNAP_RETURN_IF_ERROR(conn->migrate(kLatestSchemaVersion).annotate("opening database " + path));
  KNAP_ASSIGN_OR_RETURN(int64_t rv, conn->metaValue("resource_version"));
  KNAP_ASSIGN_OR_RETURN(int64_t compacted, conn->metaValue("compacted_rv"));
  std::unique_ptr<SqliteStore> store(new SqliteStore(std::move(conn), clock, watch_history_events));
  store->current_rv_ = rv;
  // Apply a smaller history limit right away.
  int64_t keep_from = rv - watch_history_events;
  if (keep_from > compacted) {
    Conn& c = *store->conn_;
    Status s = c.exec("BEGIN IMMEDIATE");
    if (s.isOk()) s = c.exec("DELETE FROM events WHERE rv <= " + std::to_string(keep_from));
    if (s.isOk()) s = c.setMeta("compacted_rv", keep_from);
    if (s.isOk()) s = c.exec("COMMIT");
    if (!s.isOk()) {
      c.rollbackIfOpen();
      return s.annotate("pruning watch history");
    }
  }
  if (path != ":memory:") {
    KNAP_RETURN_IF_ERROR(store->startCheckpointer(path).annotate("opening database " + path));
    store->wal_path_ = path + "-wal";
    // Migrations, pruning and the WAL file's own directory entry: on disk before anyone is answered.
    KNAP_RETURN_IF_ERROR(store->syncWal().annotate("opening database " + path));
    size_t slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
      ::fsync(fd);
      ::close(fd);
    }
  }
  LOG(INFO) << "store: opened " << path << " at resourceVersion " << rv;
  return store;
}

Status SqliteStore::createAtSchemaVersionForTest(const std::string& path, int version) {
  if (version < 0 || version > kLatestSchemaVersion) {
    return invalidArgument("schema version " + std::to_string(version) + " out of range");
  }
  KNAP_ASSIGN_OR_RETURN(std::unique_ptr<Conn> conn, openConn(path));
  return conn->migrate(version);
}

SqliteStore::SqliteStore(std::unique_ptr<Conn> conn, TimeSource& clock, int64_t watch_history_events)
    : clock_(clock), watch_history_events_(watch_history_events), conn_(std::move(conn)) {}

SqliteStore::~SqliteStore() {
  if (!checkpointer_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(checkpoint_mu_);
    checkpoint_stop_ = true;
  }
  checkpoint_cv_.notify_all();
  checkpointer_.join();
}

Status SqliteStore::startCheckpointer(const std::string& path) {
  KNAP_ASSIGN_OR_RETURN(std::unique_ptr<Conn> ckpt, openConn(path));
  // The writers' connection no longer checkpoints in COMMIT; it tells the checkpointer.
  sqlite3_wal_hook(conn_->db(), &SqliteStore::onWalCommit, this);
  checkpointer_ = std::thread([this, c = std::move(ckpt)]() mutable { checkpointLoop(std::move(c)); });
  return Status::ok();
}

int SqliteStore::onWalCommit(void* self, sqlite3*, const char*, int pages) {
  auto* store = static_cast<SqliteStore*>(self);
  store->wal_pages_ = pages;
  if (pages < store->checkpoint_pages_.load()) return SQLITE_OK;
  {
    std::lock_guard<std::mutex> lock(store->checkpoint_mu_);
    store->checkpoint_due_ = true;
  }
  store->checkpoint_cv_.notify_one();
  return SQLITE_OK;
}

void SqliteStore::checkpointLoop(std::unique_ptr<Conn> conn) {
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(checkpoint_mu_);
      checkpoint_cv_.wait(lock, [this] { return checkpoint_due_ || checkpoint_stop_; });
      if (checkpoint_stop_) return;
      checkpoint_due_ = false;
    }
    int log_pages = 0, done_pages = 0;
    int rc =
        sqlite3_wal_checkpoint_v2(conn->db(), nullptr, SQLITE_CHECKPOINT_PASSIVE, &log_pages, &done_pages);
    // Writers that never pause keep a passive checkpoint from ever finishing,
    // and the WAL restarts only after one that did. Past four marks, a
    // RESTART checkpoint makes the writers wait (what SQLite's own
    // checkpoint always did) so that the WAL starts over.
    if (rc == SQLITE_OK && log_pages >= 4 * checkpoint_pages_.load()) {
      rc = sqlite3_wal_checkpoint_v2(conn->db(), nullptr, SQLITE_CHECKPOINT_RESTART, &log_pages, &done_pages);
    }
    if (rc != SQLITE_OK && rc != SQLITE_BUSY) {
      LOG(WARNING) << "store: " << sqliteError(conn->db(), rc, "checkpointing the WAL").toString();
    }
    std::lock_guard<std::mutex> lock(sync_mu_);
    ++sync_stats_.checkpoints;
  }
}

void SqliteStore::setCheckpointPagesForTest(int pages) {
  checkpoint_pages_ = pages;
}

SqliteStore::MemoryUse SqliteStore::memoryUse() {
  MemoryUse m;
  m.sqlite_bytes = sqlite3_memory_used();
  std::lock_guard<std::mutex> lock(mu_);
  int current = 0, highwater = 0;
  if (sqlite3_db_status(conn_->db(), SQLITE_DBSTATUS_CACHE_USED, &current, &highwater, 0) == SQLITE_OK) {
    m.page_cache_bytes = current;
  }
  return m;
}

Status SqliteStore::withConnection(const std::function<Status(Conn&)>& fn) {
  if (owner_.load() == std::this_thread::get_id()) {
    return failedPrecondition("store called from inside its own transaction; use the Txn passed to fn");
  }
  std::lock_guard<std::mutex> lock(mu_);
  owner_ = std::this_thread::get_id();
  struct Reset {
    std::atomic<std::thread::id>& owner;
    ~Reset() { owner = std::thread::id(); }
  } reset{owner_};
  return fn(*conn_);
}

// get and list read under the connection's mutex and decode/parse after
// releasing it, so that readers and writers wait only for SQLite, not for JSON.
StatusOr<Object> SqliteStore::get(const Key& key) {
  KNAP_RETURN_IF_ERROR(checkKey(key));
  std::optional<TxnImpl::Row> found;
  std::shared_ptr<BodyCipher> cipher;
  KNAP_RETURN_IF_ERROR(withConnection([&](Conn& conn) -> Status {
    KNAP_ASSIGN_OR_RETURN(found, TxnImpl::loadRow(conn, key));
    cipher = conn.cipher;
    return Status::ok();
  }));
  if (!found) return notFound(resourceName(key.kind) + " \"" + key.name + "\" not found");
  KNAP_ASSIGN_OR_RETURN(nlohmann::json body, parseStoredBody(cipher.get(), key, std::move(found->stored)));
  return Object{key, std::move(body), found->resource_version};
}

StatusOr<std::vector<Object>> SqliteStore::list(const std::string& kind, const std::string& ns) {
  std::vector<TxnImpl::Row> rows;
  std::shared_ptr<BodyCipher> cipher;
  KNAP_RETURN_IF_ERROR(withConnection([&](Conn& conn) -> Status {
    KNAP_ASSIGN_OR_RETURN(rows, TxnImpl::listRows(conn, kind, ns));
    cipher = conn.cipher;
    return Status::ok();
  }));
  return TxnImpl::parseRows(cipher.get(), std::move(rows));
}

StatusOr<std::vector<Store::RawObject>> SqliteStore::listRaw(const std::string& kind, const std::string& ns,
                                                             bool with_labels) {
  return listRawWhere(kind, ns, nullptr, {}, with_labels);
}

StatusOr<std::vector<Store::RawObject>> SqliteStore::listRawWithLabel(
    const std::string& kind, const std::string& ns, const std::string& label_key,
    const std::vector<std::string>& values) {
  return listRawWhere(kind, ns, &label_key, values, /*with_labels=*/true);
}

StatusOr<std::vector<Store::RawObject>> SqliteStore::listRawWhere(const std::string& kind,
                                                                  const std::string& ns,
                                                                  const std::string* label_key,
                                                                  const std::vector<std::string>& values,
                                                                  bool with_labels) {
  // SQLite's JSON reader extracts the labels (sealed bodies are opened and
  // parsed here instead): no JSON tree per object. ?1 kind, ?2 namespace,
  // ?3 label key, ?4... label values.
  const std::string sealed = "substr(o.body, 1, " + std::to_string(kSealedPrefix.size()) + ") = '" +
                             std::string(kSealedPrefix) + "'";
  // Without labels, column 4 is NULL: json_extract parses the whole body.
  std::string sql =
      "SELECT o.namespace, o.name, o.resource_version, o.body, " +
      (with_labels ? "CASE WHEN " + sealed + " THEN NULL ELSE json_extract(o.body, '$.metadata.labels') END"
                   : std::string("NULL")) +
      ", CASE WHEN " + sealed + " THEN 1 ELSE 0 END FROM ";
  // More values than this read the key's rows, any value (a superset): the
  // statement cache keeps one statement per shape.
  constexpr size_t kMaxIndexedValues = 16;
  bool by_value = label_key && !values.empty() && values.size() <= kMaxIndexedValues;
  if (label_key) {
    // The objects with the label, and those whose labels are unknown (sealed).
    // (Every term on the primary key (kind, key, value, namespace, name): with
    // no value, "+namespace" keeps SQLite from scanning the kind's namespace
    // in labels_object instead.)
    std::string in_ns = ns.empty() ? "" : by_value ? " AND namespace = ?2" : " AND +namespace = ?2";
    std::string value_in;
    if (by_value) {
      value_in = " AND value IN (";
      for (size_t i = 0; i < values.size(); ++i) value_in += (i ? ", ?" : "?") + std::to_string(4 + i);
      value_in += ")";
    }
    sql += "(SELECT namespace, name FROM labels WHERE kind = ?1 AND key = ?3" + value_in + in_ns +
           " UNION SELECT namespace, name FROM labels WHERE kind = ?1 AND key = '' AND value = ''" +
           (ns.empty() ? "" : " AND namespace = ?2") +
           ") c JOIN objects o ON o.kind = ?1 AND o.namespace = c.namespace AND o.name = c.name";
  } else {
    sql += "objects o WHERE o.kind = ?1";
    if (!ns.empty()) sql += " AND o.namespace = ?2";
  }
  sql += " ORDER BY o.namespace, o.name";
  std::vector<RawObject> out;
  std::vector<size_t> sealed_rows;
  std::shared_ptr<BodyCipher> cipher;
  KNAP_RETURN_IF_ERROR(withConnection([&](Conn& conn) -> Status {
    KNAP_ASSIGN_OR_RETURN(auto stmt, conn.prepare(sql));
    stmt->bind(1, kind);
    if (!ns.empty()) stmt->bind(2, ns);
    if (label_key) stmt->bind(3, *label_key);
    for (size_t i = 0; by_value && i < values.size(); ++i) stmt->bind(static_cast<int>(4 + i), values[i]);
    for (;;) {
      KNAP_ASSIGN_OR_RETURN(bool row, stmt->step());
      if (!row) break;
      if (stmt->i64(5)) sealed_rows.push_back(out.size());
      out.push_back(
          RawObject{{kind, stmt->text(0), stmt->text(1)}, stmt->i64(2), stmt->text(3), stmt->text(4)});
    }
    cipher = conn.cipher;
    return Status::ok();
  }));
  for (size_t i : sealed_rows) {
    RawObject& r = out[i];
    KNAP_ASSIGN_OR_RETURN(nlohmann::json body, parseStoredBody(cipher.get(), r.key, std::move(r.json)));
    r.json = dumpJson(body);
    const nlohmann::json* meta = body.contains("metadata") ? &body["metadata"] : nullptr;
    r.labels = with_labels && meta && meta->is_object() && meta->contains("labels")
                   ? dumpJson((*meta)["labels"])
                   : "";
  }
  return out;
}

int64_t SqliteStore::currentResourceVersion() {
  return current_rv_.load();
}

StatusOr<int> SqliteStore::schemaVersion() {
  int version = 0;
  KNAP_RETURN_IF_ERROR(withConnection([&](Conn& conn) -> Status {
    KNAP_ASSIGN_OR_RETURN(version, conn.schemaVersion());
    return Status::ok();
  }));
  return version;
}

Status SqliteStore::transact(const std::function<Status(Txn&)>& fn) {
  std::shared_ptr<SyncRound> round;  // set when the transaction committed changes
  Status result = withConnection([&](Conn& conn) -> Status {
    KNAP_RETURN_IF_ERROR(conn.exec("BEGIN IMMEDIATE"));
    // Read the counter under SQLite's write lock, so writers in other processes cannot reuse an RV.
    StatusOr<int64_t> base_rv = conn.metaValue("resource_version");
    if (!base_rv.isOk()) {
      conn.rollbackIfOpen();
      return base_rv.status();
    }
    TxnImpl txn(conn, clock_, *base_rv);
    Status st;
    try {
      st = fn(txn);
    } catch (const std::exception& e) {
      st = internalError(std::string("exception in transaction: ") + e.what());
    } catch (...) {
      st = internalError("unknown exception in transaction");
    }
    if (st.isOk() && !txn.sqliteFailure().isOk()) st = txn.sqliteFailure();
    if (st.isOk()) st = txn.finish(watch_history_events_);
    if (st.isOk()) st = conn.exec("COMMIT");
    txn.close();
    if (!st.isOk()) {
      conn.rollbackIfOpen();
      return st;
    }
    if (txn.events().empty()) return Status::ok();
    current_rv_ = txn.rv();
    round = joinRound();
    // Queue while still holding the connection so batches are queued in commit order.
    std::lock_guard<std::mutex> lock(delivery_mu_);
    pending_.push_back(PendingBatch{round, std::move(txn.events())});
    return Status::ok();
  });
  if (!round) return result;
  result = awaitDurable(round);
  deliver();
  return result;
}

std::shared_ptr<SqliteStore::SyncRound> SqliteStore::joinRound() {
  std::lock_guard<std::mutex> lock(sync_mu_);
  ++sync_stats_.commits;
  return open_round_;
}

Status SqliteStore::awaitDurable(const std::shared_ptr<SyncRound>& round) {
  std::unique_lock<std::mutex> lock(sync_mu_);
  while (!round->done) {
    if (syncing_) {
      sync_cv_.wait(lock);
      continue;
    }
    // Lead: close the open round (ours, or a later one that also holds ours' successors) and sync it.
    std::shared_ptr<SyncRound> closing = std::move(open_round_);
    open_round_ = std::make_shared<SyncRound>();
    syncing_ = true;
    ++sync_stats_.syncs;
    std::function<Status()> sync = sync_for_test_;
    lock.unlock();
    Status st = sync ? sync() : syncWal();
    if (!st.isOk()) LOG(ERROR) << "store: " << st.toString();
    lock.lock();
    closing->status = std::move(st);
    closing->done = true;
    syncing_ = false;
    sync_cv_.notify_all();
  }
  return round->status;
}

Status SqliteStore::syncWal() {
  if (wal_path_.empty()) return Status::ok();
  auto failed = [this](const char* what) {
    return Status(Code::kUnavailable, std::string(what) + " " + wal_path_ + ": " + std::strerror(errno) +
                                          " (the change is committed but may not be on disk)");
  };
  int fd = ::open(wal_path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return failed("opening");
  Status st = ::fdatasync(fd) == 0 ? Status::ok() : failed("fdatasync of");
  ::close(fd);
  return st;
}

SqliteStore::SyncStats SqliteStore::syncStats() {
  std::lock_guard<std::mutex> lock(sync_mu_);
  SyncStats s = sync_stats_;
  s.wal_pages = wal_pages_.load();
  return s;
}

void SqliteStore::setSyncForTest(std::function<Status()> sync) {
  std::lock_guard<std::mutex> lock(sync_mu_);
  sync_for_test_ = std::move(sync);
}

void SqliteStore::deliver() {
  {
    std::lock_guard<std::mutex> lock(delivery_mu_);
    if (delivering_) return;  // the thread already delivering will pick our batch up, in order
    delivering_ = true;
  }
  for (;;) {
    std::vector<Event> batch;
    {
      std::lock_guard<std::mutex> lock(delivery_mu_);
      // Rounds finish in commit order, so the synced batches are a prefix; the writer
      // of the first unsynced one delivers it (and what follows) after its sync.
      if (pending_.empty() || !pending_.front().round->done) {
        delivering_ = false;
        return;
      }
      batch = std::move(pending_.front().events);
      pending_.pop_front();
    }
    std::vector<std::shared_ptr<std::function<void(const Event&)>>> listeners;
    {
      std::lock_guard<std::mutex> lock(listeners_mu_);
      for (auto& [id, fn] : listeners_) listeners.push_back(fn);
    }
    for (const Event& e : batch) {
      for (auto& fn : listeners) {
        try {
          (*fn)(e);
        } catch (const std::exception& ex) {
          LOG(ERROR) << "store: listener threw: " << ex.what();
        } catch (...) {
          LOG(ERROR) << "store: listener threw an unknown exception";
        }
      }
    }
  }
}

StatusOr<std::vector<Event>> SqliteStore::eventsSince(int64_t since_rv, const std::string& kind) {
  if (since_rv < 0) return invalidArgument("resourceVersion must not be negative");
  std::vector<Event> out;
  KNAP_RETURN_IF_ERROR(withConnection([&](Conn& conn) -> Status {
    // One read transaction, so the compaction mark and the events are one snapshot.
    KNAP_RETURN_IF_ERROR(conn.exec("BEGIN"));
    Status st = readEventsSince(conn, since_rv, kind, &out);
    if (st.isOk()) st = conn.exec("COMMIT");
    if (!st.isOk()) conn.rollbackIfOpen();
    return st;
  }));
  return out;
}

Status SqliteStore::readEventsSince(Conn& conn, int64_t since_rv, const std::string& kind,
                                    std::vector<Event>* out) {
  KNAP_ASSIGN_OR_RETURN(int64_t compacted, conn.metaValue("compacted_rv"));
  if (since_rv < compacted) {
    return Status(Code::kGone, "too old resource version: " + std::to_string(since_rv) + " (" +
                                   std::to_string(compacted) + ")");
  }
  std::string sql = "SELECT rv, type, kind, namespace, name, body FROM events WHERE rv > ?";
  if (!kind.empty()) sql += " AND kind = ?";
  sql += " ORDER BY rv";
  KNAP_ASSIGN_OR_RETURN(auto stmt, conn.prepare(sql));
  stmt->bind(1, since_rv);
  if (!kind.empty()) stmt->bind(2, kind);
  for (;;) {
    KNAP_ASSIGN_OR_RETURN(bool row, stmt->step());
    if (!row) break;
    Event e;
    e.resource_version = stmt->i64(0);
    KNAP_ASSIGN_OR_RETURN(e.type, parseType(stmt->text(1)));
    e.object.key = {stmt->text(2), stmt->text(3), stmt->text(4)};
    e.object.resource_version = e.resource_version;
    KNAP_ASSIGN_OR_RETURN(e.object.body, TxnImpl::parseBody(conn, e.object.key, stmt->text(5)));
    out->push_back(std::move(e));
  }
  return Status::ok();
}

Status SqliteStore::setCipher(std::shared_ptr<BodyCipher> cipher) {
  return withConnection([&](Conn& conn) -> Status {
    conn.cipher = std::move(cipher);
    if (!conn.cipher) return Status::ok();
    // Reseal every row of a sealed kind that is plaintext (written before
    // encryption was on) or sealed with an older key, in objects and in the
    // watch history: one transaction, resourceVersions unchanged.
    KNAP_RETURN_IF_ERROR(conn.exec("BEGIN IMMEDIATE"));
    int resealed = 0;
    Status st = [&]() -> Status {
      for (const char* table : {"objects", "events"}) {
        // resource_version is unique per row (one global counter).
        std::string id = std::string(table) == "objects" ? "resource_version" : "rv";
        struct Update {
          int64_t rowid;
          Key key;
          std::string sealed;
        };
        std::vector<Update> updates;
        {
          KNAP_ASSIGN_OR_RETURN(auto stmt,
                                conn.prepare("SELECT " + id + ", kind, namespace, name, body FROM " + table));
          for (;;) {
            KNAP_ASSIGN_OR_RETURN(bool row, stmt->step());
            if (!row) break;
            Key key{stmt->text(1), stmt->text(2), stmt->text(3)};
            std::string stored = stmt->text(4);
            if (!conn.cipher->seals(key.kind) || conn.cipher->isCurrent(stored)) continue;
            KNAP_ASSIGN_OR_RETURN(std::string plain, conn.decode(key, stored));
            KNAP_ASSIGN_OR_RETURN(std::string sealed, conn.cipher->seal(key, plain));
            updates.push_back(Update{stmt->i64(0), std::move(key), std::move(sealed)});
          }
        }
        for (const Update& u : updates) {
          KNAP_ASSIGN_OR_RETURN(
              auto up, conn.prepare("UPDATE " + std::string(table) + " SET body = ? WHERE " + id + " = ?"));
          up->bind(1, u.sealed).bind(2, u.rowid);
          KNAP_RETURN_IF_ERROR(up->run());
          ++resealed;
          if (std::string(table) != "objects") continue;
          // Its labels are encrypted now: the index says "labels unknown" instead.
          KNAP_RETURN_IF_ERROR(conn.deleteLabels(u.key));
          KNAP_ASSIGN_OR_RETURN(auto mark,
                                conn.prepare("INSERT OR IGNORE INTO labels(kind, key, value, namespace, "
                                             "name) VALUES (?, '', '', ?, ?)"));
          mark->bind(1, u.key.kind).bind(2, u.key.ns).bind(3, u.key.name);
          KNAP_RETURN_IF_ERROR(mark->run());
        }
      }
      return conn.exec("COMMIT");
    }();
    if (!st.isOk()) {
      conn.rollbackIfOpen();
      return st.annotate("sealing stored bodies");
    }
    if (resealed == 0) return Status::ok();
    // On disk before the store is used, like any acknowledged write (the group commit is for transact()).
    KNAP_RETURN_IF_ERROR(syncWal().annotate("sealing stored bodies"));
    LOG(INFO) << "store: sealed " << resealed << " stored bodies with the current key";
    return Status::ok();
  });
}

int SqliteStore::addListener(std::function<void(const Event&)> fn) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  int id = next_listener_id_++;
  listeners_[id] = std::make_shared<std::function<void(const Event&)>>(std::move(fn));
  return id;
}

void SqliteStore::removeListener(int id) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  listeners_.erase(id);
}

}  // namespace knap::store
