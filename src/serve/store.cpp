#include "serve/store.h"

#include <sqlite3.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace ddpx::serve {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS users (
  name TEXT PRIMARY KEY,
  token_hash TEXT NOT NULL UNIQUE,
  admin INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS jobs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  user TEXT NOT NULL,
  command TEXT NOT NULL,
  workers INTEGER NOT NULL,
  extra_ports INTEGER NOT NULL,
  state TEXT NOT NULL,
  slots TEXT NOT NULL,
  ports TEXT NOT NULL,
  pid INTEGER NOT NULL,
  log_dir TEXT NOT NULL,
  exit_code INTEGER NOT NULL,
  stop_requested INTEGER NOT NULL,
  submitted INTEGER NOT NULL,
  started INTEGER NOT NULL,
  ended INTEGER NOT NULL,
  slurm_id TEXT NOT NULL DEFAULT '',
  slurm_state TEXT NOT NULL DEFAULT '',
  nodes INTEGER NOT NULL DEFAULT 1
);
)sql";

// One prepared statement, finalized on scope exit.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) {
    DDPX_CHECK(sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) == SQLITE_OK, ErrorKind::kIo,
               "service database: {}", sqlite3_errmsg(db));
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  Statement& bind(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.c_str(), -1, SQLITE_TRANSIENT);
    return *this;
  }
  Statement& bind(int i, int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  bool step() {
    int rc = sqlite3_step(stmt_);
    DDPX_CHECK(rc == SQLITE_ROW || rc == SQLITE_DONE, ErrorKind::kIo, "service database: {}",
               sqlite3_errmsg(sqlite3_db_handle(stmt_)));
    return rc == SQLITE_ROW;
  }
  std::string text(int i) const {
    const unsigned char* t = sqlite3_column_text(stmt_, i);
    return t ? reinterpret_cast<const char*>(t) : "";
  }
  int64_t integer(int i) const { return sqlite3_column_int64(stmt_, i); }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

constexpr const char* kColumns =
    "id, user, command, workers, extra_ports, state, slots, ports, pid, log_dir, exit_code, "
    "stop_requested, submitted, started, ended, slurm_id, slurm_state, nodes";

Job read_job(const Statement& s) {
  Job j;
  j.id = s.integer(0);
  j.user = s.text(1);
  j.command = nlohmann::json::parse(s.text(2)).get<std::vector<std::string>>();
  j.workers = static_cast<int>(s.integer(3));
  j.extra_ports = static_cast<int>(s.integer(4));
  j.state = parse_job_state(s.text(5));
  j.slots = nlohmann::json::parse(s.text(6)).get<std::vector<int>>();
  j.ports = nlohmann::json::parse(s.text(7)).get<std::vector<int>>();
  j.pid = static_cast<int>(s.integer(8));
  j.log_dir = s.text(9);
  j.exit_code = static_cast<int>(s.integer(10));
  j.stop_requested = s.integer(11) != 0;
  j.submitted = s.integer(12);
  j.started = s.integer(13);
  j.ended = s.integer(14);
  j.slurm_id = s.text(15);
  j.slurm_state = s.text(16);
  j.nodes = static_cast<int>(s.integer(17));
  return j;
}

}  // namespace

const char* job_state_name(JobState state) {
  switch (state) {
    case JobState::kQueued:
      return "queued";
    case JobState::kRunning:
      return "running";
    case JobState::kStopping:
      return "stopping";
    case JobState::kEnded:
      return "ended";
  }
  return "?";
}

JobState parse_job_state(const std::string& name) {
  if (name == "queued") return JobState::kQueued;
  if (name == "running") return JobState::kRunning;
  if (name == "stopping") return JobState::kStopping;
  return JobState::kEnded;
}

Store::Store(const std::string& path) {
  int rc =
      sqlite3_open_v2(path.c_str(), &db_,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
    sqlite3_close(db_);
    db_ = nullptr;
    fail(ErrorKind::kIo, "cannot open the service database {}: {}; check --state", path, why);
  }
  sqlite3_busy_timeout(db_, 5000);
  exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
  exec(kSchema);
  add_missing_columns();
}

void Store::add_missing_columns() {
  std::set<std::string> have;
  {
    Statement s(db_, "SELECT name FROM pragma_table_info('jobs')");
    while (s.step()) have.insert(s.text(0));
  }
  for (const char* column :
       {"slurm_id TEXT NOT NULL DEFAULT ''", "slurm_state TEXT NOT NULL DEFAULT ''",
        "nodes INTEGER NOT NULL DEFAULT 1"}) {
    std::string name(column, std::strchr(column, ' '));
    if (!have.count(name)) exec(std::string("ALTER TABLE jobs ADD COLUMN ") + column);
  }
}

Store::~Store() { sqlite3_close(db_); }

void Store::exec(const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    std::string why = error ? error : "?";
    sqlite3_free(error);
    fail(ErrorKind::kIo, "service database: {}", why);
  }
}

void Store::add_user(const std::string& name, const std::string& token_hash, bool admin) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_,
              "INSERT INTO users (name, token_hash, admin) VALUES (?1, ?2, ?3) "
              "ON CONFLICT(name) DO UPDATE SET token_hash = ?2, admin = ?3");
  s.bind(1, name).bind(2, token_hash).bind(3, static_cast<int64_t>(admin)).step();
}

std::optional<User> Store::user_by_token_hash(const std::string& token_hash) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, "SELECT name, admin FROM users WHERE token_hash = ?1");
  s.bind(1, token_hash);
  if (!s.step()) return std::nullopt;
  return User{s.text(0), s.integer(1) != 0};
}

int64_t Store::insert_job(const Job& j) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_,
              "INSERT INTO jobs (user, command, workers, extra_ports, state, slots, ports, pid, "
              "log_dir, exit_code, stop_requested, submitted, started, ended, nodes) VALUES "
              "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)");
  s.bind(1, j.user)
      .bind(2, nlohmann::json(j.command).dump())
      .bind(3, static_cast<int64_t>(j.workers))
      .bind(4, static_cast<int64_t>(j.extra_ports))
      .bind(5, job_state_name(j.state))
      .bind(6, nlohmann::json(j.slots).dump())
      .bind(7, nlohmann::json(j.ports).dump())
      .bind(8, static_cast<int64_t>(j.pid))
      .bind(9, j.log_dir)
      .bind(10, static_cast<int64_t>(j.exit_code))
      .bind(11, static_cast<int64_t>(j.stop_requested))
      .bind(12, j.submitted)
      .bind(13, j.started)
      .bind(14, j.ended)
      .bind(15, static_cast<int64_t>(j.nodes))
      .step();
  return sqlite3_last_insert_rowid(db_);
}

void Store::update_job(const Job& j) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_,
              "UPDATE jobs SET state = ?2, slots = ?3, ports = ?4, pid = ?5, log_dir = ?6, "
              "exit_code = ?7, stop_requested = ?8, started = ?9, ended = ?10, slurm_id = ?11, "
              "slurm_state = ?12 WHERE id = ?1");
  s.bind(1, j.id)
      .bind(2, job_state_name(j.state))
      .bind(3, nlohmann::json(j.slots).dump())
      .bind(4, nlohmann::json(j.ports).dump())
      .bind(5, static_cast<int64_t>(j.pid))
      .bind(6, j.log_dir)
      .bind(7, static_cast<int64_t>(j.exit_code))
      .bind(8, static_cast<int64_t>(j.stop_requested))
      .bind(9, j.started)
      .bind(10, j.ended)
      .bind(11, j.slurm_id)
      .bind(12, j.slurm_state)
      .step();
}

std::optional<Job> Store::job(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, (std::string("SELECT ") + kColumns + " FROM jobs WHERE id = ?1").c_str());
  s.bind(1, id);
  if (!s.step()) return std::nullopt;
  return read_job(s);
}

std::vector<Job> Store::jobs(const std::string& user) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(
      db_, (std::string("SELECT ") + kColumns + " FROM jobs WHERE ?1 = '' OR user = ?1 ORDER BY id")
               .c_str());
  s.bind(1, user);
  std::vector<Job> out;
  while (s.step()) out.push_back(read_job(s));
  return out;
}

std::vector<Job> Store::jobs_in(JobState state) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(
      db_, (std::string("SELECT ") + kColumns + " FROM jobs WHERE state = ?1 ORDER BY id").c_str());
  s.bind(1, job_state_name(state));
  std::vector<Job> out;
  while (s.step()) out.push_back(read_job(s));
  return out;
}

void Store::delete_job(int64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Statement s(db_, "DELETE FROM jobs WHERE id = ?1");
  s.bind(1, id).step();
}

}  // namespace ddpx::serve
