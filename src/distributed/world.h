// Where this process sits in the job: rank, local rank, world size, and the rendezvous
// address. Read from torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT), else Slurm's (SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, first
// host of SLURM_JOB_NODELIST), else Open MPI's (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK).
// With none of them the process runs alone: rank 0 of world size 1.
#pragma once

#include <string>

namespace ddpx::dist {

struct WorldInfo {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source = "none";  // "ddpx" (`ddpx run`), "torchrun", "slurm", "mpi" or "none"
};

// Throws ddpx::Error(kUsage) naming the variable when the contract is inconsistent.
WorldInfo detect_world();

// First host of a Slurm node list: "node[01-04,07],gpu5" -> "node01".
std::string first_slurm_host(const std::string& nodelist);

}  // namespace ddpx::dist
