// `ddpx serve` over real HTTP: the service runs as its own process on a free loopback port with
// a fresh state folder, and the tests talk to it with an HTTP client, as users would.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "serve/service.h"
#include "support/support.h"

namespace ddpx {
namespace {

using nlohmann::json;
using test::run_command;
using test::shell_quote;
using namespace serve_testing;

TEST(ServeTest, RunsARealTrainingJobSubmittedOverHttp) {
  test::TempDir dir;
  Service s(dir);
  std::string alice = s.token("alice");
  json job = submit(s, alice,
                    {{"command",
                      {"train", "--dataset", "synthetic", "--model", "mlp", "--num_epochs", "1",
                       "--synthetic_size", "256", "--batch_size", "32"}},
                     {"workers", 2},
                     {"ports", 1}});
  ASSERT_TRUE(job.is_object());
  EXPECT_EQ(job["user"], "alice");
  EXPECT_EQ(job["ports"].size(), 2u) << "the rendezvous port and one extra port";
  json ended = wait_ended(s, alice, job["id"]);
  EXPECT_EQ(ended["exit_code"], 0) << ended.dump();
  EXPECT_EQ(ended["devices"], json({0, 1}));
  auto log =
      s.client().Get("/api/v1/jobs/" + std::to_string(job["id"].get<int>()) + "/logs", auth(alice));
  ASSERT_TRUE(log && log->status == 200);
  EXPECT_NE(log->body.find("Accuracy on test dataset - "), std::string::npos) << log->body;
  EXPECT_NE(log->body.find("joined 2 ranks"), std::string::npos) << log->body;
  // The same log as Server-Sent Events, as a browser's EventSource reads it.
  httplib::Headers sse = auth(alice);
  sse.emplace("Accept", "text/event-stream");
  auto events = s.client().Get(
      "/api/v1/jobs/" + std::to_string(job["id"].get<int>()) + "/logs?follow=true", sse);
  ASSERT_TRUE(events && events->status == 200);
  EXPECT_EQ(events->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_NE(events->body.find("data: Accuracy on test dataset - "), std::string::npos)
      << events->body;
  EXPECT_NE(events->body.find("event: end\ndata: {\"exit_code\":0}\n\n"), std::string::npos)
      << events->body;
  auto epochs = s.client().Get("/api/v1/jobs/" + std::to_string(job["id"].get<int>()) + "/metrics",
                               auth(alice));
  ASSERT_TRUE(epochs && epochs->status == 200);
  json m = json::parse(epochs->body);
  ASSERT_EQ(m["epochs"].size(), 1u) << epochs->body;
  EXPECT_EQ(m["epochs"][0]["epoch"], 0);
  EXPECT_GT(m["epochs"][0]["images_per_sec"].get<double>(), 0) << epochs->body;
  EXPECT_TRUE(m["epochs"][0].contains("accuracy_test")) << epochs->body;
  auto metrics = s.client().Get("/metrics");
  ASSERT_TRUE(metrics && metrics->status == 200);
  EXPECT_NE(metrics->body.find("ddpx_jobs{state=\"ended\"} 1"), std::string::npos) << metrics->body;
  EXPECT_NE(metrics->body.find("ddpx_slots{kind=\"total\"} 2"), std::string::npos);
  EXPECT_NE(metrics->body.find("ddpx_host_cpu_percent"), std::string::npos);
  // The job's launcher, a child of the service, was waited for: no zombie is left behind.
  int zombies = s.zombie_children();
  for (int i = 0; i < 50 && zombies > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    zombies = s.zombie_children();
  }
  EXPECT_EQ(zombies, 0) << "the service left its ended job's launcher a zombie";
}

TEST(ServeTest, BadRequestsGetA4xxNamingTheProblem) {
  test::TempDir dir;
  Service s(dir);
  std::string alice = s.token("alice"), bob = s.token("bob"), root = s.token("root", true);
  auto c = s.client();
  auto status_error = [](const httplib::Result& r) {
    return r ? std::to_string(r->status) + " " + r->body : std::string("no answer");
  };
  auto none = c.Get("/api/v1/jobs");
  EXPECT_EQ(status_error(none).substr(0, 3), "401") << status_error(none);
  EXPECT_NE(none->body.find("missing token"), std::string::npos);
  auto wrong = c.Get("/api/v1/jobs", auth("nope"));
  EXPECT_EQ(wrong->status, 401);
  auto bad_json = c.Post("/api/v1/jobs", auth(alice), "{\"command\": [", "application/json");
  EXPECT_EQ(bad_json->status, 400);
  EXPECT_NE(bad_json->body.find("not valid JSON"), std::string::npos);
  auto unknown =
      c.Post("/api/v1/jobs", auth(alice), R"({"command": ["true"], "gpu": 1})", "application/json");
  EXPECT_EQ(unknown->status, 400);
  EXPECT_NE(unknown->body.find("unknown field 'gpu'"), std::string::npos) << unknown->body;
  auto too_many = c.Post("/api/v1/jobs", auth(alice), R"({"command": ["true"], "workers": 9})",
                         "application/json");
  EXPECT_EQ(too_many->status, 400);
  EXPECT_NE(too_many->body.find("workers: 9 cannot run on this host"), std::string::npos);
  auto two_nodes = c.Post("/api/v1/jobs", auth(alice),
                          R"({"command": ["true"], "workers": 2, "nodes": 2})", "application/json");
  EXPECT_EQ(two_nodes->status, 400);
  EXPECT_NE(two_nodes->body.find("nodes: 2: this service runs each job on this node"),
            std::string::npos)
      << two_nodes->body;
  auto text = c.Post("/api/v1/jobs", auth(alice), "command=true", "text/plain");
  EXPECT_EQ(text->status, 415);
  auto huge = c.Post("/api/v1/jobs", auth(alice), std::string(2 << 20, ' '), "application/json");
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->status, 413);
  auto bad_id = c.Get("/api/v1/jobs/abc", auth(alice));
  EXPECT_EQ(bad_id->status, 400);
  auto escape = c.Get("/api/v1/jobs/..%2F..%2Fetc/logs", auth(alice));
  EXPECT_GE(escape->status, 400);
  EXPECT_LT(escape->status, 500);

  json job = submit(s, alice, {{"command", {"true"}}});
  int64_t id = job["id"];
  EXPECT_EQ(c.Get("/api/v1/jobs/" + std::to_string(id), auth(bob))->status, 404)
      << "another user's job does not exist to bob";
  EXPECT_EQ(c.Post("/api/v1/jobs/" + std::to_string(id) + "/stop", auth(bob))->status, 404);
  auto all = json::parse(c.Get("/api/v1/jobs", auth(root))->body);
  EXPECT_EQ(all.size(), 1u) << "the admin sees alice's job";
  EXPECT_EQ(json::parse(c.Get("/api/v1/jobs", auth(bob))->body).size(), 0u);
  wait_ended(s, alice, id);
  EXPECT_EQ(c.Delete("/api/v1/jobs/" + std::to_string(id), auth(alice))->status, 200);
  EXPECT_EQ(c.Get("/api/v1/jobs/" + std::to_string(id), auth(alice))->status, 404);

  auto doc = c.Get("/api/v1/openapi.json");
  ASSERT_TRUE(doc && doc->status == 200);
  json openapi = json::parse(doc->body);
  for (const char* path :
       {"/api/v1/jobs", "/api/v1/jobs/{id}", "/api/v1/jobs/{id}/stop", "/api/v1/jobs/{id}/restart",
        "/api/v1/jobs/{id}/logs", "/api/v1/jobs/{id}/snapshots",
        "/api/v1/jobs/{id}/snapshots/{name}/restore", "/api/v1/jobs/{id}/backup", "/api/v1/backups",
        "/metrics"})
    EXPECT_TRUE(openapi["paths"].contains(path)) << path;
}

// 20 jobs at once on 2 slots: every one runs, never more than 2 at a time, in submission order.
TEST(ServeTest, TheQueueRunsEveryJobWithoutSharingASlotInOrder) {
  test::TempDir dir;
  Service s(dir);
  std::string alice = s.token("alice");
  std::string marks = dir.file("marks");
  std::vector<int64_t> ids;
  std::vector<std::thread> clients;
  std::mutex mutex;
  for (int i = 0; i < 20; ++i) {
    std::string script = "echo start $(date +%s.%N) >> " + shell_quote(marks) +
                         "; sleep 0.2; echo end $(date +%s.%N) >> " + shell_quote(marks);
    json j = submit(s, alice, {{"command", {"sh", "-c", script}}});
    ids.push_back(j["id"]);
  }
  std::vector<json> ended;
  for (int64_t id : ids) ended.push_back(wait_ended(s, alice, id, 180));
  for (size_t i = 0; i < ended.size(); ++i) {
    EXPECT_EQ(ended[i]["exit_code"], 0) << ended[i].dump();
    if (i > 0) EXPECT_LE(ended[i - 1]["started"], ended[i]["started"]) << "first come first served";
  }
  // Never more than 2 running: replay the start/end marks.
  auto lines = run_command("sort -k2 -n " + shell_quote(marks), 10).output;
  int running = 0, most = 0, starts = 0;
  std::istringstream in(lines);
  std::string what, when;
  while (in >> what >> when) {
    running += what == "start" ? 1 : -1;
    starts += what == "start";
    most = std::max(most, running);
  }
  EXPECT_EQ(starts, 20);
  EXPECT_LE(most, 2) << lines;
}

TEST(ServeTest, AKilledServiceReadoptsItsJobsAndKeepsEveryRecord) {
  test::TempDir dir;
  Service s(dir);
  std::string alice = s.token("alice");
  json running = submit(s, alice, {{"command", {"sh", "-c", "sleep 4; exit 3"}}});
  json quick = submit(s, alice, {{"command", {"sh", "-c", "sleep 1"}}});
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  s.kill(SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // `quick` ends meanwhile
  s.start();
  json q = wait_ended(s, alice, quick["id"]);
  EXPECT_EQ(q["exit_code"], 0) << "ended while the service was down: " << q.dump();
  json r = get_job(s, alice, running["id"]);
  EXPECT_EQ(r["state"], "running") << "re-adopted: " << r.dump();
  json done = wait_ended(s, alice, running["id"]);
  EXPECT_EQ(done["exit_code"], 3) << done.dump();
}

TEST(ServeTest, StopEndsARunningJobAndFreesItsSlots) {
  test::TempDir dir;
  Service s(dir, "--slots 1");
  std::string alice = s.token("alice");
  json first = submit(s, alice, {{"command", {"sleep", "60"}}});
  json second = submit(s, alice, {{"command", {"true"}}});
  EXPECT_EQ(get_job(s, alice, second["id"])["state"], "queued") << "one slot, taken";
  auto stop = s.client().Post("/api/v1/jobs/" + std::to_string(first["id"].get<int>()) + "/stop",
                              auth(alice));
  ASSERT_TRUE(stop && stop->status == 200) << (stop ? stop->body : "");
  json ended = wait_ended(s, alice, first["id"], 30);
  EXPECT_EQ(ended["exit_code"], 143);
  EXPECT_EQ(wait_ended(s, alice, second["id"], 30)["exit_code"], 0) << "ran once the slot was free";
}

TEST(ServeTest, TheShellVerbsDriveTheService) {
  test::TempDir dir;
  Service s(dir);
  std::string env = "DDPX_TOKEN=" + s.token("alice") + " ";
  std::string server = " --server http://127.0.0.1:" + std::to_string(s.port());
  auto submit = run_command(
      env + test::ddpx_command("submit" + server + " -n 1 -- sh -c 'echo hello from the job'"), 30);
  ASSERT_EQ(submit.exit_code, 0) << submit.output;
  std::string id = submit.output.substr(0, submit.output.find('\n'));
  auto logs = run_command(env + test::ddpx_command("logs " + id + " -f" + server), 60);
  EXPECT_EQ(logs.exit_code, 0) << logs.output;
  EXPECT_NE(logs.output.find("hello from the job"), std::string::npos) << logs.output;
  auto jobs = run_command(env + test::ddpx_command("jobs" + server), 30);
  EXPECT_NE(jobs.output.find("alice"), std::string::npos) << jobs.output;
  EXPECT_NE(jobs.output.find("ended"), std::string::npos) << jobs.output;
  auto missing = run_command(env + test::ddpx_command("stop 999" + server), 30);
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("answered 404: no job 999 of user alice"), std::string::npos)
      << missing.output;
  auto no_token = run_command("env -u DDPX_TOKEN " + test::ddpx_command("jobs" + server), 30);
  EXPECT_EQ(no_token.exit_code, 2) << no_token.output;
  EXPECT_NE(no_token.output.find("no token"), std::string::npos) << no_token.output;
}

// schemathesis (PyPI) generates requests from the OpenAPI document, valid and not: the service
// must never answer 5xx. The service's PATH is empty, so the generated commands it accepts and
// runs cannot start any program by name.
TEST(ServeTest, FuzzingTheApiFromItsOpenApiDocumentGetsNo5xx) {
  std::string schemathesis =
      test::python_binary().substr(0, test::python_binary().rfind('/') + 1) + "schemathesis";
  DDPX_SKIP_WITHOUT_TOOL(run_command("test -x " + shell_quote(schemathesis), 10).exit_code == 0)
      << "schemathesis is not installed beside DDPX_PYTHON (scripts/python-env --tests)";
  test::TempDir dir;
  Service s(dir, "--slots 2", "PATH=" + dir.file("empty-path"));
  std::string token = s.token("fuzz");
  auto r = run_command("cd " + shell_quote(dir.path()) + " && " + shell_quote(schemathesis) +
                           " run http://127.0.0.1:" + std::to_string(s.port()) +
                           "/api/v1/openapi.json --checks not_a_server_error --max-examples 25 "
                           "--seed 1 -H 'Authorization: Bearer " +
                           token + "' 2>&1",
                       600);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("passed"), std::string::npos) << r.output;
}

TEST(ServeTest, ListeningBeyondLoopbackNeedsTlsOrInsecure) {
  test::TempDir dir;
  auto r = run_command(test::ddpx_command("serve --state " + shell_quote(dir.file("s")) +
                                          " --listen 0.0.0.0:" + std::to_string(test::free_port())),
                       30);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("give --tls_cert and --tls_key, or --insecure"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace ddpx
