#include "launch/plan.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "core/error.h"

namespace ddpx::launch {
namespace {

std::vector<std::string> split_gpu_list(const std::string& text) {
  std::vector<std::string> ids;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = std::min(text.find(',', start), text.size());
    std::string id = text.substr(start, end - start);
    DDPX_CHECK(!id.empty(), ErrorKind::kUsage,
               "--gpus '{}': empty device id; give a comma-separated list like 0,1", text);
    ids.push_back(id);
    start = end + 1;
  }
  return ids;
}

// The device id for each local rank, or an empty list when workers get no GPU.
std::vector<std::string> assign_gpus(const LaunchOptions& o, const GpuInfo& gpus) {
  int n = o.nproc_per_node;
  if (o.gpus == "none") return {};
  if (o.gpus.empty()) {
    if (gpus.vendor == GpuVendor::kNone) return {};
    DDPX_CHECK(static_cast<int>(gpus.ids.size()) >= n, ErrorKind::kUsage,
               "ddpx run {}: only {} GPU(s) visible; start at most {} workers, share GPUs "
               "explicitly (e.g. --gpus 0,0,1,1) or run on CPU with --gpus none",
               n, gpus.ids.size(), gpus.ids.size());
    return std::vector<std::string>(gpus.ids.begin(), gpus.ids.begin() + n);
  }
  DDPX_CHECK(gpus.vendor != GpuVendor::kNone, ErrorKind::kUsage,
             "--gpus {}: this machine has no GPU (no /dev/nvidia*, nvidia-smi or /dev/kfd); "
             "drop --gpus to run on CPU",
             o.gpus);
  std::vector<std::string> ids = split_gpu_list(o.gpus);
  DDPX_CHECK(static_cast<int>(ids.size()) >= n, ErrorKind::kUsage,
             "--gpus {}: lists {} device(s) for {} workers; give one id per worker", o.gpus,
             ids.size(), n);
  ids.resize(static_cast<size_t>(n));
  return ids;
}

bool needs_quoting(const std::string& s) {
  if (s.empty()) return true;
  return std::any_of(s.begin(), s.end(), [](char c) {
    return !(std::isalnum(static_cast<unsigned char>(c)) ||
             std::string("-_./=:,@%+").find(c) != std::string::npos);
  });
}

}  // namespace

std::string shell_quote(const std::string& s) {
  if (!needs_quoting(s)) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

HostInfo probe_host() {
  HostInfo host;
  host.cpu_count = usable_cpu_count();
  if (const char* omp = std::getenv("OMP_NUM_THREADS")) {
    char* end = nullptr;
    long n = std::strtol(omp, &end, 10);  // an OpenMP list ("4,2"): its first level counts
    if (end != omp && (*end == '\0' || *end == ',') && n >= 1) host.inherited_threads = int(n);
  }
  host.gpus = detect_gpus();
  host.self_exe = self_executable();
  return host;
}

JobPlan make_plan(const LaunchOptions& o, const HostInfo& host, int master_port) {
  validate(o);
  const std::string& program = o.command.front();
  bool is_self = std::find(o.self_subcommands.begin(), o.self_subcommands.end(), program) !=
                 o.self_subcommands.end();
  std::string path = is_self ? host.self_exe : find_program(program);
  std::vector<std::string> argv = o.command;
  if (is_self) argv.insert(argv.begin(), host.self_exe);

  JobPlan plan;
  plan.master_addr = o.master_addr.empty() ? "127.0.0.1" : o.master_addr;
  plan.master_port = master_port;
  // Before the rendezvous (a dry run) an unassigned node rank shows as node 0, and --nnodes
  // auto as two nodes.
  const int node_rank = std::max(0, o.node_rank);
  plan.world_size = std::max(1, o.nnodes == 0 ? 2 : o.nnodes) * o.nproc_per_node;
  plan.threads_per_worker = o.threads_per_worker > 0 ? o.threads_per_worker
                            : host.inherited_threads > 0
                                ? host.inherited_threads
                                : std::max(1, host.cpu_count / o.nproc_per_node);
  std::vector<std::string> gpu_ids = assign_gpus(o, host.gpus);
  for (const std::string& id : gpu_ids) {
    if (std::find(plan.gpu_ids.begin(), plan.gpu_ids.end(), id) == plan.gpu_ids.end())
      plan.gpu_ids.push_back(id);
  }
  for (int local = 0; local < o.nproc_per_node; ++local) {
    WorkerSpec w;
    w.local_rank = local;
    w.global_rank = node_rank * o.nproc_per_node + local;
    w.path = path;
    w.argv = argv;
    w.holds_snapshot_signals_at_start = is_self && program == "train";
    w.env = {
        {"RANK", std::to_string(w.global_rank)},
        {"LOCAL_RANK", std::to_string(local)},
        {"WORLD_SIZE", std::to_string(plan.world_size)},
        {"LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node)},
        {"GROUP_RANK", std::to_string(node_rank)},
        {"MASTER_ADDR", plan.master_addr},
        {"MASTER_PORT", std::to_string(master_port)},
        {"OMP_NUM_THREADS", std::to_string(plan.threads_per_worker)},
        {"DDPX_THREADS", std::to_string(plan.threads_per_worker)},
        {"DDPX_RESTART_COUNT", "0"},
    };
    if (!gpu_ids.empty()) {
      w.env.emplace_back(visible_devices_variable(host.gpus.vendor),
                         gpu_ids[static_cast<size_t>(local)]);
    }
    plan.workers.push_back(std::move(w));
  }
  // Workers that share a GPU cannot form an NCCL group ("Duplicate GPU detected"): every worker
  // learns it, so all choose the same backend (distributed/context.h, choose_backend).
  if (plan.gpu_ids.size() < gpu_ids.size()) set_env(plan, "DDPX_SHARED_GPUS", "1");
  return plan;
}

std::string oversubscription_note(const JobPlan& plan, const HostInfo& host) {
  const int workers = static_cast<int>(plan.workers.size());
  const int threads = workers * plan.threads_per_worker;
  if (!plan.gpu_ids.empty() || workers == 0 || threads <= host.cpu_count) return "";
  if (workers > host.cpu_count) {
    return fmt::format(
        "{} workers on {} usable core(s) and no GPU: they take turns on the cores and every "
        "step waits for the slowest; start at most {} (`ddpx run {} ...`), or give the job more "
        "cores",
        workers, host.cpu_count, host.cpu_count, host.cpu_count);
  }
  return fmt::format(
      "{} workers x {} threads on {} usable core(s) and no GPU: the threads take turns on the "
      "cores; use --threads_per_worker {} (cores / workers) or leave it out",
      workers, plan.threads_per_worker, host.cpu_count, std::max(1, host.cpu_count / workers));
}

void set_store_file(JobPlan& plan, const std::string& path) {
  set_env(plan, "DDPX_STORE_FILE", path);
}

void set_env(JobPlan& plan, const std::string& name, const std::string& value) {
  for (WorkerSpec& w : plan.workers) {
    bool found = false;
    for (auto& [key, current] : w.env) {
      if (key == name) current = value, found = true;
    }
    if (!found) w.env.emplace_back(name, value);
  }
}

void set_trace_dir(JobPlan& plan, const std::string& dir) {
  set_env(plan, "DDPX_TRACE_DIR", dir);
  set_env(plan, "DDPX_TRACE_TABLE", "0");  // the launcher prints the table, once
}

void set_restart_count(JobPlan& plan, int restart_count) {
  for (WorkerSpec& w : plan.workers) {
    for (auto& [name, value] : w.env) {
      if (name == "DDPX_RESTART_COUNT") value = std::to_string(restart_count);
    }
  }
}

std::string describe(const JobPlan& plan) {
  std::string out;
  for (const WorkerSpec& w : plan.workers) {
    out += "[rank " + std::to_string(w.global_rank) + "]";
    for (const auto& [name, value] : w.env) out += " " + name + "=" + shell_quote(value);
    for (const std::string& arg : w.argv) out += " " + shell_quote(arg);
    out += "\n";
  }
  return out;
}

}  // namespace ddpx::launch
