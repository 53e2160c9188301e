// Every example command of the README and docs/ that DocsCommandsTest's training test does not
// run (benchmarks, the planner, the tuner, data, export, jobs, logs, stop, snapshots, the
// interactive shell, containers, the doctor, the seed's run-ddp.sh line) runs here as printed, in
// a folder of its own, on a small fixture of what it needs: a checkpoint for `C`, a job of this
// host for `JOB`, CIFAR-10 for `data info`, a text, GPT-2's rank file and a BERT vocab.txt for
// `data tokenize`, a mirror on 127.0.0.1:8000 for the mirror download,
// `./my_trainer` for the launcher's any-program line. It must exit 0 and print what its row
// expects: the output its docs block shows where one shows output (the row names that file, and
// the text must be there too), else what the doc's comment promises. A command that cannot run on
// this machine (a GPU, Slurm, MPI, several nodes, the internet, an installed ddpx) has a row
// below saying why and where it is checked instead; docs/serve.md's quick start runs in order in
// DocsQuickStartTest. A new command in the docs fails until it gets a row with its expected
// output (or says where it is checked).
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "e2e/mnist_fixture.h"
#include "e2e/seed_fixture.h"
#include "launch/launch_helpers.h"
#include "serve/service.h"
#include "support/doc_commands.h"
#include "support/support.h"
#include "support/tiny_http_server.h"

namespace ddpx {
namespace {

namespace fs = std::filesystem;
using namespace docs_testing;
using launch::testing::slurp;
using launch::testing::start_in_background;
using launch::testing::wait_exit_code;
using test::run_command;
using test::shell_quote;

enum class Fixture {
  kFolder,        // an empty folder, the command's working directory
  kMyTrainer,     // ./my_trainer: prints its rank, the world size and its arguments
  kCheckpoint,    // C: a ResNet-18 checkpoint one step in
  kPretrained,    // resnet18.pth: torchvision's ResNet-18 saved by torch.save(state_dict())
  kRunningJob,    // JOB, 5b3d9c: a `ddpx run` of `ddpx train --save_dir` on this host
  kCifar10,       // ./data/cifar10: CIFAR-10's python version, written by pickle
  kMnistMirror,   // http://127.0.0.1:8000/ serving a small MNIST, its MD5SUMS in the folder
  kSeedFolder,    // the seed's working folder: CIFAR-100 in ./data (e2e/seed_fixture.h)
  kService,       // a `ddpx serve` on 127.0.0.1 and alice's token in DDPX_TOKEN
  kText,          // ./data/tinyshakespeare/input.txt (Debian's GPL text standing in) and
                  // ./data/gpt2-vocab/r50k_base.tiktoken (scripts/test-vocab's GPT-2 rank file)
  kPhotos,        // ./photos: an image folder of real photographs (make_image_fixture.py)
  kPhotoShards,   // ./photos and ./shards, the photos packed by `ddpx data pack`
  kServedShards,  // kPhotoShards, and http://127.0.0.1:8000/shards/ serving ./shards
  kElsewhere,     // cannot run on this machine: `why` says where it is checked
};

struct Rule {
  std::string pattern;  // std::regex_search on the command as printed (with its launcher)
  Fixture fixture;
  std::string expect;  // what its output must hold when it runs here (every command has one)
  std::string why;     // kElsewhere: why not here, and where instead
  // The doc whose block shows `expect` as the command's output (checked: the text is there);
  // "" where no doc shows its output and `expect` is what the doc's comment promises.
  std::string shown_in = "";
};

// Before every command and fixture run: the thread count `ddpx run N` gives each worker here.
const std::string kOneThread = "DDPX_THREADS=1 ";

// The first row whose pattern the command matches decides; the last matches every command.
const std::vector<Rule>& rules() {
  static const std::vector<Rule> table = {
      {R"(^srun )", Fixture::kElsewhere, "",
       "Slurm's srun starts the ranks (tests/cluster/slurm_srun_test.sh runs `srun ... ddpx "
       "train` on real daemons)"},
      {R"(^mpirun )", Fixture::kElsewhere, "",
       "Open MPI's mpirun starts the ranks (tests/cluster/mpi_test.sh runs `mpirun -np 2 ddpx "
       "train`)"},
      {R"(^~/\.local/bin/ddpx run 2 -- build-examples/)", Fixture::kElsewhere, "",
       "an installed ddpx and an example built against it outside the tree "
       "(tests/install/find_package_test.sh runs this job)"},
      {R"(^ddpx data download .*--mirror http://127\.0\.0\.1:8000/)", Fixture::kMnistMirror,
       "mnist is ready in ./data/mnist", ""},
      {R"(^ddpx data download )", Fixture::kElsewhere, "",
       "downloads from the internet or the user's mirror (DataCliTest downloads from one on "
       "127.0.0.1; data.md's 127.0.0.1 mirror command runs here)"},
      {R"(^ddpx data info cifar10 )", Fixture::kCifar10, "cifar10: train 16 test 8 images", ""},
      {R"(^ddpx data tokenize )", Fixture::kText, "/val.bin", ""},
      {R"(--data_dir photos)", Fixture::kPhotos, "Training took", ""},
      {R"(--data_dir shards)", Fixture::kPhotoShards, "Training took", ""},
      {R"(--data_url http://127\.0\.0\.1:8000/shards/)", Fixture::kServedShards, "Training took",
       ""},
      {R"(^ddpx data pack photos )", Fixture::kPhotos, "packed 24 images of 4 classes", ""},
      {R"(^ddpx data info photos)", Fixture::kPhotos, "formats: ", ""},
      {R"(--data_dir /data/imagenet)", Fixture::kElsewhere, "",
       "ImageNet (150 GB) on GPUs, neither of which is here: docs/recipes.md says the recipe is "
       "untested at full scale; RecipeFirstStepsTest runs its first steps and PrintedCommandsTest "
       "its printed command at a tiny size"},
      {R"(--device cuda)", Fixture::kElsewhere, "", "needs a GPU (bench/gpu_check.sh runs it)"},
      {R"(^ddpx generate )", Fixture::kElsewhere, "",
       "needs a trained GPT and its vocab.json, or GPT-2 weights; LanguageModelTest."
       "GeneratesFromItsCheckpoint runs it on one, with and without the cache, and HfCliTest."
       "GreedyGenerationFromTransformersWeightsEqualsTransformersGenerate on transformers' "
       "weights"},
      {R"(^ddpx tune .*--amp bf16)", Fixture::kElsewhere, "",
       "a GPU's search: bf16 ResNet-50 at 224 px takes minutes a batch size on a CPU (the tune "
       "command of docs/cli.md runs here)"},
      {R"(^ddpx sbatch |--scheduler slurm)", Fixture::kElsewhere, "",
       "needs Slurm's daemons (tests/cluster/ runs sbatch and the service's Slurm hand-off on "
       "real ones)"},
      {R"(--nnodes)", Fixture::kElsewhere, "",
       "several nodes (tests/cluster/netns_multinode_test.sh runs them in network namespaces)"},
      {R"(^ddpx serve )", Fixture::kElsewhere, "",
       "a service that runs until it is stopped (docs/serve.md's quick start starts one: "
       "DocsQuickStartTest)"},
      {R"(^ddpx submit --server http://127\.0\.0\.1:8470 -n 2 )", Fixture::kService, "", ""},
      {R"(^ddpx submit )", Fixture::kElsewhere, "",
       "submits to the Slurm hand-off service printed above it (tests/cluster/"
       "serve_slurm_test.sh submits to one on real daemons)"},
      {R"(--server URL)", Fixture::kElsewhere, "",
       "a client of the user's service (docs/serve.md's quick start runs backup and restore)"},
      {R"(^ddpx train --pretrained resnet18\.pth)", Fixture::kPretrained,
       "limits from the environment", ""},
      {R"( \.\.\.)", Fixture::kElsewhere, "",
       "more of the user's own flags (`...`; the parse test checks the flags shown)"},
      {R"(^ddpx run 4 --tee all -- \./my_trainer )", Fixture::kMyTrainer,
       "my_trainer rank 3 of 4: --lr 0.1", ""},
      {R"(^ddpx export )", Fixture::kCheckpoint, "wrote W.pt (resnet18 10 classes)", ""},
      {R"(^ddpx logs )", Fixture::kRunningJob, "Epoch - ", ""},
      {R"(^ddpx stop )", Fixture::kRunningJob, "ended (exit code 143)", "", "docs/launcher.md"},
      {R"(^ddpx snapshot )", Fixture::kRunningJob, "ddpx snapshot: asked job ", ""},
      // The seed's own line less `--optimizer sgd --num_epochs 10`, which change nothing here
      // (SGD is the default, DDPX_EPOCHS caps the epochs): the same run as SeedCommandsTest's,
      // whose ResNet-101 at 224 x 224 on 2 ranks was this test's costliest command.
      {R"(^\./run-ddp\.sh 2 script_single_node "--model resnet101 --learning_rate 0\.002 )"
       R"(--batch_size 1024"$)",
       Fixture::kElsewhere, "",
       "the seed's line (this one with --optimizer sgd --num_epochs 10, the same run under the "
       "test's limits): SeedCommandsTest.ResNet101CommandTrainsCifar100At224FromData runs it "
       "through run-ddp.sh on the same CIFAR-100 folder and checks its header, both ranks and "
       "the epoch"},
      {R"(^\./run-ddp\.sh 2 script_single_node )", Fixture::kSeedFolder,
       "Training resnet101 on cifar100 dataset", ""},
      {R"(^ddpx shell )", Fixture::kFolder, "ddpx shell: job", ""},
      {R"(^ddpx run 2 --dry_run )", Fixture::kFolder, "[rank 1] RANK=1 ", ""},
      {R"(^taskset -c 0 ddpx run 2 -- true$)", Fixture::kFolder,
       "2 workers on 1 usable core(s) and no GPU: they take turns", "", "docs/launcher.md"},
      {R"(^ddpx train --help$)", Fixture::kFolder, "--learning_rate", ""},
      {R"(^ddpx run 2 -- bench allreduce$)", Fixture::kFolder, "# ddpx bench allreduce: 2 ranks",
       "", "docs/performance-log.md"},
      {R"(^ddpx run 2 -- bench memory --shard full --json$)", Fixture::kFolder,
       "{\"rank\": 1, \"world_size\": 2, \"shard\": \"full\"", ""},
      {R"(^ddpx plan --model gpt2-xl --gpus 8 --gpu_memory 80G --seq_len 1024$)",
       Fixture::kElsewhere, "",
       "PlanCliTest.Gpt2XlOnEightGpusGetsALayoutThatFitsAndItsFlagsParseInTrain runs it as "
       "printed (38 s of CPU) and parses its recommendation in ddpx train"},
      {R"(^ddpx plan )", Fixture::kFolder, "recommendation: ", ""},
      {R"(^ddpx jobs$)", Fixture::kFolder, "STARTED", "", "docs/launcher.md"},
      {R"(^ddpx jobs --all --json$)", Fixture::kFolder, "\"state\"", ""},
      {R"(^ddpx doctor$)", Fixture::kFolder, "ok    ddpx    version        ddpx ", "",
       "docs/clusters.md"},
      {R"(^ddpx container --cuda$)", Fixture::kFolder, "wrote container/cuda/Dockerfile", "",
       "docs/clusters.md"},
      {R"(^ddpx tune batch_size --model resnet18 --image_size 28 )", Fixture::kFolder,
       "recommendation: --batch_size ", "", "docs/cli.md"},
      {R"(^ddpx bench gemm --device cpu --size 512 --iterations 5$)", Fixture::kFolder,
       "Successful iterations: 5/5 (product within 0.0001 relative error", "", "docs/cli.md"},
      {R"(^ddpx models resnet50 --num_classes 10 --stem cifar$)", Fixture::kFolder,
       "# 1 model; parameters at 10 classes, cifar stem", ""},
      // A command with no row above runs in an empty folder and fails for want of an expectation.
      {R"(.)", Fixture::kFolder, "", ""},
  };
  return table;
}

const Rule& rule_for(const std::string& text) {
  for (const auto& rule : rules())
    if (std::regex_search(text, std::regex(rule.pattern))) return rule;
  throw std::logic_error("the last rule matches every command");
}

// docs/serve.md's first block: DocsQuickStartTest runs it, in order.
bool in_quick_start(const DocCommand& c) { return c.file == "docs/serve.md" && c.block == 0; }

// A `ddpx run 1 -- train --save_dir ck` that trains until it is stopped (DDPX_EPOCHS), on this
// test's job folder; started when a command needs one and none runs, stopped at the end.
class RunningJob {
 public:
  explicit RunningJob(const std::string& folder) : folder_(folder) {}
  ~RunningJob() {
    if (pid_ <= 0) return;
    run_command(test::ddpx_command("stop " + id_), 60);
    wait_exit_code(pid_, 30);
  }
  // A running job's id, started and training (its first epoch logged) when none runs.
  std::string id() {
    if (pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0) return id_;
    fs::create_directories(folder_);
    pid_ = start_in_background(
        "cd " + shell_quote(folder_) + " && DDPX_EPOCHS=100000 exec " +
            test::ddpx_command("run 1 -- train --model mlp --dataset synthetic --save_dir ck"),
        folder_ + "/console." + std::to_string(++started_));
    for (int i = 0; i < 300 && id_from_table().empty(); ++i) ::usleep(100 * 1000);
    id_ = id_from_table();
    EXPECT_FALSE(id_.empty()) << "the job did not appear in `ddpx jobs`";
    for (int i = 0; i < 300; ++i) {
      if (test::has(run_command(test::ddpx_command("logs " + id_), 30).output, "Epoch - ")) break;
      ::usleep(100 * 1000);
    }
    return id_;
  }

 private:
  static std::string id_from_table() {
    auto r = run_command(test::ddpx_command("jobs --json"), 30);
    auto jobs = nlohmann::json::parse(r.output, nullptr, false);
    if (!jobs.is_array()) return "";
    for (const auto& job : jobs)
      if (job.value("state", "") == "running") return job.value("id", "");
    return "";
  }
  std::string folder_;
  pid_t pid_ = 0;
  std::string id_;
  int started_ = 0;
};

// Whether a TCP port on 127.0.0.1 can be bound right now.
bool port_is_free(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return free;
}

// Runs the docs' commands that `wanted` selects, each on its fixture; the counts of those that
// ran and of those checked elsewhere.
std::pair<int, int> run_doc_commands(const std::function<bool(const std::string&)>& wanted) {
  test::TempDir dir;
  RunningJob job(dir.file("job"));
  int ran = 0, elsewhere = 0, number = 0;
  std::set<std::string> ran_once;  // the launcher and the command, as printed
  for (const auto& c : all_doc_commands()) {
    if (trains_here(c) || c.printed == "ddpx models" || in_quick_start(c) || !wanted(c.text))
      continue;
    SCOPED_TRACE(c.file + ":" + std::to_string(c.line) + ": " + c.printed);
    const Rule& rule = rule_for(c.printed);
    if (rule.fixture == Fixture::kElsewhere) {
      std::printf("not here: %s:%d `%s`: %s\n", c.file.c_str(), c.line, c.text.c_str(),
                  rule.why.c_str());
      ++elsewhere;
      continue;
    }
    // The same command on the same fixture, printed on two pages, gives the same output: once
    // is enough. A job's and the service's commands see what the ones before them did, and run
    // every time.
    if (rule.fixture != Fixture::kRunningJob && rule.fixture != Fixture::kService &&
        !ran_once.insert(launcher_here(c) + c.text).second) {
      std::printf("ran above: %s:%d `%s`\n", c.file.c_str(), c.line, c.text.c_str());
      continue;
    }
    const auto start = std::chrono::steady_clock::now();  // the fixture's seconds counted too
    auto seconds = [&start] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    const std::string folder = dir.file(std::to_string(++number));
    fs::create_directories(folder);
    std::string text = filled(c.text);
    std::string env;
    std::unique_ptr<test::TinyHttpServer> mirror;
    std::unique_ptr<serve_testing::Service> service;
    std::string server;  // the service's URL (kService)
    int timeout_s = 300;
    switch (rule.fixture) {
      case Fixture::kMyTrainer:
        test::write_bytes(folder + "/my_trainer",
                          "#!/bin/sh\necho \"my_trainer rank $RANK of $WORLD_SIZE: $*\"\n");
        fs::permissions(folder + "/my_trainer", fs::perms::owner_all);
        break;
      case Fixture::kCheckpoint: {
        auto r = run_command("cd " + shell_quote(folder) + " && " + kOneThread + test::kSeedLimits +
                                 " " + test::ddpx_command("train --model resnet18 --save_dir ck"),
                             300);
        EXPECT_EQ(r.exit_code, 0) << r.output;
        text = std::regex_replace(text, std::regex(R"(--checkpoint C\b)"),
                                  "--checkpoint ck/checkpoint_epoch0001.ddpx");
        break;
      }
      case Fixture::kPretrained: {
        auto r = test::run_python(
            "import torch, torchvision\ntorch.manual_seed(0)\n"
            "torch.save(torchvision.models.resnet18().state_dict(), '" +
            folder + "/resnet18.pth')\n");
        EXPECT_EQ(r.exit_code, 0) << r.output;
        env = test::kSeedLimits;
        break;
      }
      case Fixture::kRunningJob: {
        const std::string id = job.id();
        text = std::regex_replace(text, std::regex(R"(\b(job1|5b3d9c)\b)"), id);
        // `logs -f` follows the log until the job ends: the user's Ctrl-C after a few seconds.
        if (text.find(" -f") != std::string::npos) env = "timeout -s INT 4";
        break;
      }
      case Fixture::kCifar10:
        test::write_seed_data(folder + "/seed", test::SeedData::kCifar10);
        fs::create_directories(folder + "/data");
        fs::rename(folder + "/seed/data", folder + "/data/cifar10");
        break;
      case Fixture::kMnistMirror: {
        const std::string served = folder + "/served";
        fs::create_directories(served);
        test::write_small_mnist(served);
        std::map<std::string, std::string> files;
        for (const char* name : test::kMnistFiles)
          files["/" + std::string(name)] = slurp(served + "/" + name);
        fs::copy_file(served + "/MD5SUMS", folder + "/MD5SUMS");
        // Port 8000 as printed; another when something else holds it.
        mirror = std::make_unique<test::TinyHttpServer>(files, std::set<std::string>{}, false,
                                                        port_is_free(8000) ? 8000 : 0);
        text = std::regex_replace(text, std::regex("127\\.0\\.0\\.1:8000"),
                                  "127.0.0.1:" + std::to_string(mirror->port()));
        break;
      }
      case Fixture::kSeedFolder: {
        test::write_seed_data(folder, test::SeedData::kCifar100);
        auto r = test::run_seed_command(folder, text, 300);
        EXPECT_EQ(r.exit_code, 0) << r.output;
        EXPECT_TRUE(test::has(r.output, rule.expect)) << rule.expect << "\n" << r.output;
        // Where this test's seconds go, for whoever makes it cheaper.
        std::printf("%.1f s: ran here: %s:%d `%s` (exit %d)\n", seconds(), c.file.c_str(), c.line,
                    text.c_str(), r.exit_code);
        ++ran;
        continue;
      }
      case Fixture::kService:
        // The service listens where the test finds a free port; the command is sent there.
        service = std::make_unique<serve_testing::Service>(dir);
        env = "DDPX_TOKEN=" + service->token("alice");
        server = "http://127.0.0.1:" + std::to_string(service->port());
        text = std::regex_replace(text, std::regex("http://127\\.0\\.0\\.1:8470"), server);
        break;
      case Fixture::kText:
        fs::create_directories(folder + "/data/tinyshakespeare");
        fs::create_directories(folder + "/data/gpt2-vocab");
        fs::copy_file("/usr/share/common-licenses/GPL-3",
                      folder + "/data/tinyshakespeare/input.txt");
        fs::copy_file(test::gpt2_rank_file(), folder + "/data/gpt2-vocab/r50k_base.tiktoken");
        // A BERT vocab.txt: the specials, and every letter, digit and punctuation mark alone
        // and as a "##" continuation (any word of the text can be spelled).
        fs::create_directories(folder + "/data/bert-base-uncased");
        {
          std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
          for (int c = 33; c < 127; ++c)
            if (!(c >= 'A' && c <= 'Z'))
              vocab += std::string(1, static_cast<char>(c)) + "\n##" +
                       std::string(1, static_cast<char>(c)) + "\n";
          test::write_bytes(folder + "/data/bert-base-uncased/vocab.txt", vocab);
        }
      case Fixture::kPhotos:
      case Fixture::kPhotoShards:
      case Fixture::kServedShards: {
        test::make_image_fixture(folder, "--only folder --per_class 6");
        fs::rename(folder + "/folder", folder + "/photos");
        env = test::kSeedLimits;
        if (rule.fixture != Fixture::kPhotoShards && rule.fixture != Fixture::kServedShards) break;
        auto packed =
            run_command(test::ddpx_command("data pack " + shell_quote(folder + "/photos") +
                                           " --out " + shell_quote(folder + "/shards")),
                        120);
        EXPECT_EQ(packed.exit_code, 0) << packed.output;
        if (rule.fixture == Fixture::kPhotoShards) break;
        std::map<std::string, std::string> files;
        for (const auto& e : fs::directory_iterator(folder + "/shards"))
          files["/shards/" + e.path().filename().string()] = slurp(e.path().string());
        // Port 8000 as printed; another when something else holds it.
        mirror = std::make_unique<test::TinyHttpServer>(files, std::set<std::string>{}, false,
                                                        port_is_free(8000) ? 8000 : 0);
        text = std::regex_replace(text, std::regex("127\\.0\\.0\\.1:8000"),
                                  "127.0.0.1:" + std::to_string(mirror->port()));
        break;
      }
      case Fixture::kFolder:
      case Fixture::kElsewhere:
        break;
    }
    if (text.rfind("ddpx plan ", 0) == 0) timeout_s = 540;
    // One intra-op thread a process (DocsCommandsTest's training commands say why: under
    // `ctest -j2` a second thread waits at OpenMP barriers for a core the other test holds).
    auto r = run_command("cd " + shell_quote(folder) + " && " + kOneThread + env + " " +
                             launcher_here(c) + test::ddpx_command(text.substr(5)) + " < /dev/null",
                         timeout_s);
    const bool followed = env.rfind("timeout", 0) == 0 && r.exit_code == 124;
    EXPECT_TRUE(r.exit_code == 0 || followed)
        << c.file << ":" << c.line << ": `" << c.text << "` does not run as printed (exit "
        << r.exit_code << "):\n"
        << r.output;
    if (followed)
      EXPECT_TRUE(test::has(r.output, "Epoch - ")) << "the log it followed\n" << r.output;
    // A submission prints the new job's id alone, checked below.
    EXPECT_TRUE(!rule.expect.empty() || rule.fixture == Fixture::kService)
        << c.file << ":" << c.line << ": `" << c.printed
        << "` has no expected output: add a row with the output its docs block shows (or what "
           "its comment promises)";
    // What the docs block shows. (Mutation run: `data info`'s "formats: " line reworded fails it.)
    EXPECT_TRUE(test::has(r.output, rule.expect)) << "expected: " << rule.expect << "\n"
                                                  << r.output;
    if (!rule.shown_in.empty())
      EXPECT_TRUE(test::has(slurp(test::source_dir() + "/" + rule.shown_in), rule.expect))
          << rule.shown_in << " no longer shows `" << rule.expect << "`: update the row";
    if (rule.fixture == Fixture::kCheckpoint) EXPECT_TRUE(fs::is_regular_file(folder + "/W.pt"));
    std::printf("%.1f s: ran here: %s:%d `%s` (exit %d)\n", seconds(), c.file.c_str(), c.line,
                text.c_str(), r.exit_code);
    if (rule.fixture == Fixture::kService) {  // the id it printed is a job the service stops
      const std::string id = r.output.substr(0, r.output.find('\n'));
      EXPECT_TRUE(std::regex_match(id, std::regex("[0-9]+"))) << r.output;
      auto stop =
          run_command(env + " " + test::ddpx_command("stop " + id + " --server " + server), 60);
      EXPECT_EQ(stop.exit_code, 0) << stop.output;
    }
    ++ran;
  }
  return {ran, elsewhere};
}

bool is_plan(const std::string& text) { return text.rfind("ddpx plan ", 0) == 0; }

TEST(DocsFixturesTest, EveryOtherCommandRunsHereOnAFixtureOrSaysWhereItIsChecked) {
  auto [ran, elsewhere] = run_doc_commands([](const std::string& t) { return !is_plan(t); });
  EXPECT_GE(ran, 25) << "the extraction found too few commands";
  // 25 today: the srun, mpirun and installed-ddpx lines the extraction finds among them, and the
  // README's seed line that SeedCommandsTest runs.
  EXPECT_LE(elsewhere, 25) << "most commands run here; a new one for another machine is a row";
}

// Apart: the README's plan of ViT-B/16 on 8 GPUs probes the real model (the longest command of
// the docs), so ctest runs it beside the other commands.
TEST(DocsFixturesTest, EveryPlanCommandRunsAsPrinted) {
  auto [ran, elsewhere] = run_doc_commands(is_plan);
  EXPECT_GE(ran, 1);
  EXPECT_LE(elsewhere, 1);  // gpt2-xl's, which PlanCliTest runs
}

}  // namespace
}  // namespace ddpx
