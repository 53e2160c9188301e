// Snapshots and backups over real HTTP: a running train job writes a snapshot when asked and
// goes on; a new job restored from it resumes at its step; a backup exported from one service
// (a real .tar.gz, read back with tar) is imported by another, where the job resumes, also when
// its checkpoint is a folder of parts (a pipeline's); a damaged or forged backup is refused with
// a 4xx naming the problem.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "serve/service.h"
#include "support/support.h"

namespace ddpx {
namespace {

using namespace serve_testing;
using test::run_command;
using test::shell_quote;

// One worker, two epochs of 1500 steps on Fashion-MNIST: about three seconds each, time enough
// for a snapshot asked for once epoch 0's line is in the log to land inside epoch 1.
constexpr int kStepsPerEpoch = 1500;
const json kTrain = {"train",
                     "--model",
                     "mlp",
                     "--batch_size",
                     "16",
                     "--num_epochs",
                     "2",
                     "--threads",
                     "1",
                     "--limit_train_batches",
                     std::to_string(kStepsPerEpoch),
                     "--limit_test_batches",
                     "1"};

std::string path_of(const json& job, const std::string& tail = "") {
  return "/api/v1/jobs/" + std::to_string(job["id"].get<int64_t>()) + tail;
}

std::string log_of(Service& s, const std::string& token, const json& job) {
  auto r = s.client().Get(path_of(job, "/logs"), auth(token));
  return r && r->status == 200 ? r->body : "";
}

bool wait_for_log(Service& s, const std::string& token, const json& job, const std::string& text,
                  int seconds = 120) {
  for (int i = 0; i < seconds * 10; ++i) {
    if (log_of(s, token, job).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// `ddpx restore ARCHIVE` into `s` as the holder of `token`: the new job's id (-1 if refused).
int64_t restore(Service& s, const std::string& token, const std::string& archive) {
  auto imported =
      run_command("DDPX_TOKEN=" + token + " " +
                  test::ddpx_command("restore " + shell_quote(archive) +
                                     " --server http://127.0.0.1:" + std::to_string(s.port())));
  EXPECT_EQ(imported.exit_code, 0) << imported.output;
  return imported.exit_code == 0 ? std::stoll(imported.output) : -1;
}

json snapshots(Service& s, const std::string& token, const json& job) {
  auto r = s.client().Get(path_of(job, "/snapshots"), auth(token));
  EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
  return r ? json::parse(r->body, nullptr, false) : json::array();
}

// Runs the train job to its end with one snapshot asked for in epoch 1; returns the job and
// the snapshot's entry.
std::pair<json, json> job_with_snapshot(Service& s, const std::string& token) {
  json job = submit(s, token, {{"command", kTrain}, {"workers", 1}});
  EXPECT_TRUE(wait_for_log(s, token, job, "Epoch - 0/2")) << log_of(s, token, job);
  auto asked = s.client().Post(path_of(job, "/snapshots"), auth(token));
  EXPECT_TRUE(asked && asked->status == 202) << (asked ? asked->body : "no answer");
  json ended = wait_ended(s, token, job["id"]);
  EXPECT_EQ(ended["exit_code"], 0) << log_of(s, token, job);
  json snapshot;
  for (const json& f : snapshots(s, token, job))
    if (f["kind"] == "snapshot") snapshot = f;
  return {job, snapshot};
}

TEST(ServeSnapshotTest, ARunningJobSnapshotsAndARestoredJobResumesAtItsStep) {
  test::TempDir dir;
  Service s(dir);
  std::string alice = s.token("alice"), bob = s.token("bob");
  auto [job, snapshot] = job_with_snapshot(s, alice);
  ASSERT_TRUE(snapshot.is_object()) << snapshots(s, alice, job).dump();
  EXPECT_EQ(snapshot["epoch"], 1);
  EXPECT_GT(snapshot["step"].get<int>(), 0);
  EXPECT_LT(snapshot["step"].get<int>(), kStepsPerEpoch);
  EXPECT_GT(snapshot["bytes"].get<int64_t>(), 1000);
  std::string log = log_of(s, alice, job);
  EXPECT_NE(log.find("Snapshot - epoch 1 step " + std::to_string(snapshot["step"].get<int>())),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("Epoch - 1/2"), std::string::npos) << "it went on after the snapshot\n" << log;
  // The per-epoch checkpoints are listed too, newest first.
  json all = snapshots(s, alice, job);
  ASSERT_GE(all.size(), 3u) << all.dump();
  EXPECT_EQ(all[0]["name"], "checkpoint_epoch0002.ddpx");

  std::string name = snapshot["name"];
  auto other = s.client().Post(path_of(job, "/snapshots/" + name + "/restore"), auth(bob));
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404) << "bob may not restore alice's snapshot: " << other->body;
  auto bad = s.client().Post(path_of(job, "/snapshots/serve.log/restore"), auth(alice));
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  auto escape =
      s.client().Post(path_of(job, "/snapshots/..%2F..%2Fserve.log/restore"), auth(alice));
  ASSERT_TRUE(escape);
  EXPECT_GE(escape->status, 400) << escape->body;
  EXPECT_LT(escape->status, 500) << escape->body;
  auto ended_snapshot = s.client().Post(path_of(job, "/snapshots"), auth(alice));
  ASSERT_TRUE(ended_snapshot);
  EXPECT_EQ(ended_snapshot->status, 409) << ended_snapshot->body;

  auto restored = s.client().Post(path_of(job, "/snapshots/" + name + "/restore"), auth(alice));
  ASSERT_TRUE(restored && restored->status == 201) << (restored ? restored->body : "no answer");
  json again = json::parse(restored->body);
  EXPECT_EQ(again["restored_from"]["snapshot"], name);
  json done = wait_ended(s, alice, again["id"]);
  std::string resumed = log_of(s, alice, again);
  EXPECT_EQ(done["exit_code"], 0) << resumed;
  EXPECT_NE(resumed.find("at epoch 1 step " + std::to_string(snapshot["step"].get<int>())),
            std::string::npos)
      << resumed;
  EXPECT_EQ(resumed.find("Epoch - 0/2"), std::string::npos) << resumed;
  EXPECT_NE(resumed.find("Epoch - 1/2"), std::string::npos) << resumed;
}

TEST(ServeSnapshotTest, SnapshotRequestsTheServiceCannotHonourGetA4xx) {
  test::TempDir dir;
  Service s(dir);
  std::string alice = s.token("alice");
  json save_dir = kTrain;
  save_dir.push_back("--save_dir");
  save_dir.push_back("/tmp");
  auto r = s.client().Post("/api/v1/jobs", auth(alice), json({{"command", save_dir}}).dump(),
                           "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("--save_dir"), std::string::npos) << r->body;
  json resume = kTrain;
  resume.push_back("--resume=/etc/passwd");
  r = s.client().Post("/api/v1/jobs", auth(alice), json({{"command", resume}}).dump(),
                      "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("--resume /etc/passwd"), std::string::npos) << r->body;
  // Not a train job: it has nothing to snapshot.
  json sleeper = submit(s, alice, {{"command", {"sleep", "30"}}});
  for (int i = 0; i < 50 && get_job(s, alice, sleeper["id"])["state"] != "running"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  r = s.client().Post(path_of(sleeper, "/snapshots"), auth(alice));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 409);
  // The reason `ddpx snapshot` gives for a local job that cannot write one.
  EXPECT_NE(r->body.find("runs `sleep`, not `ddpx train`: only `ddpx train --save_dir DIR` writes "
                         "snapshots"),
            std::string::npos)
      << r->body;
  s.client().Post(path_of(sleeper, "/stop"), auth(alice));
  wait_ended(s, alice, sleeper["id"]);
}

// Unpacks a backup with tar; returns the folder.
std::string untar(const test::TempDir& dir, const std::string& archive, const std::string& name) {
  std::string out = dir.file(name);
  std::filesystem::create_directories(out);
  auto r = run_command("tar -xzf " + shell_quote(archive) + " -C " + shell_quote(out));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return out;
}

// Packs a folder (manifest first) with tar; returns the archive's bytes.
std::string retar(const test::TempDir& dir, const std::string& folder, const std::string& name) {
  std::string archive = dir.file(name);
  auto r = run_command("cd " + shell_quote(folder) + " && tar -czf " + shell_quote(archive) +
                       " manifest.json checkpoints logs metrics.json");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return test::run_command("cat " + shell_quote(archive)).output;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ServeBackupTest, ABackupMovesAJobToAnotherServiceWhereItResumes) {
  test::TempDir dir, other_dir;
  Service a(dir);
  std::string alice = a.token("alice"), bob = a.token("bob");
  auto [job, snapshot] = job_with_snapshot(a, alice);
  ASSERT_TRUE(snapshot.is_object());
  std::string name = snapshot["name"];
  std::string id = std::to_string(job["id"].get<int64_t>());
  std::string server = "--server http://127.0.0.1:" + std::to_string(a.port());

  auto denied = a.client().Get(path_of(job, "/backup"), auth(bob));
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 404) << denied->body;

  // Exported with the shell client, read back with tar.
  std::string archive = dir.file("job.tar.gz");
  auto exported = run_command("DDPX_TOKEN=" + alice + " " +
                              test::ddpx_command("backup " + id + " " + server + " --snapshots " +
                                                 name + " -o " + shell_quote(archive)));
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  auto listing = run_command("tar -tzf " + shell_quote(archive));
  ASSERT_EQ(listing.exit_code, 0) << listing.output;
  EXPECT_EQ(listing.output.rfind("manifest.json\n", 0), 0u) << listing.output;
  EXPECT_NE(listing.output.find("checkpoints/" + name + "\n"), std::string::npos);
  EXPECT_NE(listing.output.find("logs/rank0.log\n"), std::string::npos);
  EXPECT_NE(listing.output.find("metrics.json\n"), std::string::npos);
  std::string unpacked = untar(dir, archive, "unpacked");
  json manifest = json::parse(read_all(unpacked + "/manifest.json"));
  EXPECT_EQ(manifest["format"], "ddpx-backup");
  EXPECT_EQ(manifest["job"]["command"], kTrain);
  for (const json& f : manifest["files"]) {
    auto sum =
        run_command("sha256sum " + shell_quote(unpacked + "/" + f["path"].get<std::string>()));
    EXPECT_EQ(sum.output.substr(0, 64), f["sha256"].get<std::string>()) << f.dump();
  }
  EXPECT_EQ(json::parse(read_all(unpacked + "/metrics.json")).size(), 2u);

  // Imported by another service: a new job of the importing user, resuming at the snapshot.
  Service b(other_dir);
  std::string carol = b.token("carol");
  const int64_t new_id = restore(b, carol, archive);
  ASSERT_GE(new_id, 0);
  json done = wait_ended(b, carol, new_id);
  json new_job = {{"id", new_id}};
  std::string resumed = log_of(b, carol, new_job);
  EXPECT_EQ(done["user"], "carol");
  EXPECT_EQ(done["exit_code"], 0) << resumed;
  EXPECT_NE(resumed.find("at epoch 1 step " + std::to_string(snapshot["step"].get<int>())),
            std::string::npos)
      << resumed;

  // Damaged in transit: one byte of the checkpoint changed.
  {
    std::string path = unpacked + "/checkpoints/" + name;
    std::string bytes = read_all(path);
    bytes[bytes.size() / 2] ^= 1;
    test::write_bytes(path, bytes);
  }
  std::string damaged = retar(dir, unpacked, "damaged.tar.gz");
  auto r = b.client().Post("/api/v1/backups", auth(carol), damaged, "application/gzip");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("SHA-256"), std::string::npos) << r->body;
  // A forged manifest naming a path out of the job's folder.
  manifest["files"][0]["path"] = "../../serve.log";
  test::write_bytes(unpacked + "/manifest.json", manifest.dump());
  r = b.client().Post("/api/v1/backups", auth(carol), retar(dir, unpacked, "forged.tar.gz"),
                      "application/gzip");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("../../serve.log"), std::string::npos) << r->body;
  r = b.client().Post("/api/v1/backups", auth(carol), "not an archive", "application/gzip");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  // Nothing of the refused imports was kept: carol has the one job.
  auto list = b.client().Get("/api/v1/jobs", auth(carol));
  ASSERT_TRUE(list && list->status == 200);
  EXPECT_EQ(json::parse(list->body).size(), 1u) << list->body;
}

// A checkpoint written by parts (a pipeline's, one part a stage) is listed once its index is
// there, carried by a backup as its folder's files, and resumed by the job the backup becomes.
TEST(ServeBackupTest, ACheckpointWrittenByPartsIsListedBackedUpAndResumed) {
  test::TempDir dir, other_dir;
  Service a(dir);
  std::string alice = a.token("alice");
  const json piped = {"train", "--model",
                      "mlp",   "--batch_size",
                      "16",    "--num_epochs",
                      "1",     "--threads",
                      "1",     "--limit_train_batches",
                      "20",    "--limit_test_batches",
                      "1",     "--pipeline_parallel",
                      "2"};
  json job = submit(a, alice, {{"command", piped}, {"workers", 2}});
  json ended = wait_ended(a, alice, job["id"]);
  ASSERT_EQ(ended["exit_code"], 0) << log_of(a, alice, job);
  json listed = snapshots(a, alice, job);
  ASSERT_EQ(listed.size(), 1u) << listed.dump();
  EXPECT_EQ(listed[0]["name"], "checkpoint_epoch0001.ddpx");
  EXPECT_EQ(listed[0]["format"], "parts");
  EXPECT_GT(listed[0]["bytes"].get<int64_t>(), 1000) << "the folder's files, counted";

  std::string archive = dir.file("job.tar.gz");
  auto exported =
      run_command("DDPX_TOKEN=" + alice + " " +
                  test::ddpx_command("backup " + std::to_string(job["id"].get<int64_t>()) +
                                     " --server http://127.0.0.1:" + std::to_string(a.port()) +
                                     " -o " + shell_quote(archive)));
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  auto listing = run_command("tar -tzf " + shell_quote(archive));
  for (const std::string file :
       {"index.ddpx", "rank00000-of-00002.ddpx", "rank00001-of-00002.ddpx"}) {
    EXPECT_NE(listing.output.find("checkpoints/checkpoint_epoch0001.ddpx/" + file + "\n"),
              std::string::npos)
        << listing.output;
  }

  Service b(other_dir);
  std::string carol = b.token("carol");
  const int64_t new_id = restore(b, carol, archive);
  ASSERT_GE(new_id, 0);
  json done = wait_ended(b, carol, new_id);
  std::string resumed = log_of(b, carol, json{{"id", new_id}});
  EXPECT_EQ(done["exit_code"], 0) << resumed;
  EXPECT_NE(resumed.find("checkpoint_epoch0001.ddpx after 1 epochs (20 steps)"), std::string::npos)
      << resumed;
}

}  // namespace
}  // namespace ddpx
