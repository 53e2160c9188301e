// detect_world(): torchrun's variables first, then Slurm's, then Open MPI's, else a lone
// process. Every inconsistency is a usage error naming the variable, never a silent default.
#include "distributed/world.h"

#include <cctype>
#include <optional>

#include "core/env.h"
#include "core/error.h"

namespace ddpx::dist {
namespace {

// This node's entry of a Slurm tasks-per-node list such as "4", "4(x2),3" or "2,1": counts in
// node order, "(xK)" repeating one K times. Throws naming the variable when it is malformed.
int tasks_on_node(const char* name, const std::string& value, int node) {
  auto bad = [&] {
    fail(ErrorKind::kUsage,
         "environment variable {}='{}' is not a Slurm task layout; expected e.g. '4', '4(x2),3'; "
         "unset it or run under srun",
         name, value);
  };
  int index = 0;
  size_t pos = 0;
  while (pos < value.size()) {
    size_t digits = pos;
    while (digits < value.size() && std::isdigit(static_cast<unsigned char>(value[digits])))
      ++digits;
    if (digits == pos) bad();
    int count = std::stoi(value.substr(pos, digits - pos));
    int repeat = 1;
    pos = digits;
    if (value.compare(pos, 2, "(x") == 0) {
      size_t close = value.find(')', pos);
      if (close == std::string::npos || close == pos + 2) bad();
      std::string times = value.substr(pos + 2, close - pos - 2);
      for (char c : times)
        if (!std::isdigit(static_cast<unsigned char>(c))) bad();
      repeat = std::stoi(times);
      pos = close + 1;
    }
    if (node < index + repeat) return count;
    index += repeat;
    if (pos < value.size() && value[pos] != ',') bad();
    if (pos < value.size()) ++pos;
  }
  fail(ErrorKind::kUsage,
       "environment variable {}='{}' lists {} node(s) but SLURM_NODEID is {}; run under srun", name,
       value, index, node);
}

// The local world size of this node: the step's layout (SLURM_STEP_TASKS_PER_NODE, what srun
// actually started), else the job's (SLURM_TASKS_PER_NODE), else the request
// (SLURM_NTASKS_PER_NODE, the same on every node and wrong for a step smaller than the job).
std::optional<int> slurm_tasks_per_node() {
  int node = static_cast<int>(env::get_int_or("SLURM_NODEID", 0));
  for (const char* name :
       {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"}) {
    auto value = env::get(name);
    if (value) return tasks_on_node(name, *value, node);
  }
  return std::nullopt;
}

int read_int(const char* name) {
  auto value = env::get_int(name);
  DDPX_CHECK(value.has_value(), ErrorKind::kUsage,
             "environment variable {} is not set but the launcher's other variables are; set it "
             "or unset them all to run on one process",
             name);
  return static_cast<int>(*value);
}

void validate(const WorldInfo& w, const char* rank_var, const char* world_var,
              const char* local_rank_var) {
  DDPX_CHECK(w.world_size >= 1, ErrorKind::kUsage, "{}={} must be at least 1", world_var,
             w.world_size);
  DDPX_CHECK(w.rank >= 0 && w.rank < w.world_size, ErrorKind::kUsage,
             "{}={} is outside [0, {}={}); each process needs a distinct rank below the world "
             "size",
             rank_var, w.rank, world_var, w.world_size);
  DDPX_CHECK(w.local_world_size >= 1 && w.local_world_size <= w.world_size, ErrorKind::kUsage,
             "the local world size {} must be in [1, {}={}]", w.local_world_size, world_var,
             w.world_size);
  DDPX_CHECK(w.local_rank >= 0 && w.local_rank < w.local_world_size, ErrorKind::kUsage,
             "{}={} is outside [0, local world size {})", local_rank_var, w.local_rank,
             w.local_world_size);
  DDPX_CHECK(w.master_port > 0 && w.master_port < 65536, ErrorKind::kUsage,
             "MASTER_PORT={} is not a TCP port; give a free port in 1..65535", w.master_port);
  DDPX_CHECK(!w.master_addr.empty(), ErrorKind::kUsage,
             "MASTER_ADDR is empty; set it to the host of rank 0");
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry ends at a comma outside brackets: "node[01-04,07],gpu5" -> "node[01-04,07]".
  std::string entry;
  int depth = 0;
  for (char c : nodelist) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    DDPX_CHECK(depth >= 0 && depth <= 1, ErrorKind::kUsage,
               "SLURM_JOB_NODELIST='{}' has unbalanced brackets; expected e.g. 'node[01-04],gpu5'",
               nodelist);
    if (c == ',' && depth == 0) break;
    entry.push_back(c);
  }
  DDPX_CHECK(depth == 0 && !entry.empty(), ErrorKind::kUsage,
             "SLURM_JOB_NODELIST='{}' is not a node list; expected e.g. 'node[01-04],gpu5'",
             nodelist);
  const size_t open = entry.find('[');
  if (open == std::string::npos) return entry;
  // The first number of the range keeps its zero padding: "node[01-04]" -> "node01".
  const std::string prefix = entry.substr(0, open);
  const size_t close = entry.find(']', open);
  std::string first = entry.substr(open + 1, close - open - 1);
  first = first.substr(0, first.find_first_of(",-"));
  DDPX_CHECK(!first.empty() && first.find_first_not_of("0123456789") == std::string::npos,
             ErrorKind::kUsage,
             "SLURM_JOB_NODELIST='{}' has a bracket range without a number; expected e.g. "
             "'node[01-04]'",
             nodelist);
  return prefix + first + entry.substr(close + 1);
}

WorldInfo detect_world() {
  WorldInfo w;
  w.master_addr = env::get_or("MASTER_ADDR", "127.0.0.1");
  w.master_port = static_cast<int>(env::get_int_or("MASTER_PORT", 29500));

  if (env::get("RANK") || env::get("WORLD_SIZE")) {
    // `ddpx run` sets torchrun's variables too, and DDPX_RESTART_COUNT beside them.
    w.source = env::get("DDPX_RESTART_COUNT") ? "ddpx" : "torchrun";
    w.rank = read_int("RANK");
    w.world_size = read_int("WORLD_SIZE");
    w.local_rank = static_cast<int>(env::get_int_or("LOCAL_RANK", w.rank));
    w.local_world_size = static_cast<int>(env::get_int_or("LOCAL_WORLD_SIZE", w.world_size));
    validate(w, "RANK", "WORLD_SIZE", "LOCAL_RANK");
    return w;
  }
  if (env::get("SLURM_PROCID") && env::get("SLURM_NTASKS")) {
    w.source = "slurm";
    w.rank = read_int("SLURM_PROCID");
    w.world_size = read_int("SLURM_NTASKS");
    w.local_rank = static_cast<int>(env::get_int_or("SLURM_LOCALID", 0));
    w.local_world_size = slurm_tasks_per_node().value_or(w.world_size);
    if (!env::get("MASTER_ADDR")) {
      if (auto nodes = env::get("SLURM_JOB_NODELIST")) w.master_addr = first_slurm_host(*nodes);
    }
    validate(w, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID");
    return w;
  }
  if (env::get("OMPI_COMM_WORLD_RANK")) {
    w.source = "mpi";
    w.rank = read_int("OMPI_COMM_WORLD_RANK");
    w.world_size = read_int("OMPI_COMM_WORLD_SIZE");
    w.local_rank = static_cast<int>(env::get_int_or("OMPI_COMM_WORLD_LOCAL_RANK", 0));
    w.local_world_size =
        static_cast<int>(env::get_int_or("OMPI_COMM_WORLD_LOCAL_SIZE", w.world_size));
    validate(w, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK");
    return w;
  }
  validate(w, "RANK", "WORLD_SIZE", "LOCAL_RANK");  // still checks MASTER_PORT if given
  return w;
}

}  // namespace ddpx::dist
