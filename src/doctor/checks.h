// `ddpx doctor`'s checks, grouped by what they look at. Each appends findings to the report;
// none throws for what it finds (a missing tool or file is itself a finding).
#pragma once

#include "doctor/finding.h"

namespace ddpx::doctor {

void check_build(Report& report);  // build_checks.cpp: ddpx, libtorch, CUDA/ROCm build
void check_gpus(Report& report);   // gpu_checks.cpp: devices, driver, topology, NUMA, NCCL, MI300X
void check_host(Report& report);   // host_checks.cpp: CPU, NUMA, /dev/shm, variables
void check_jobs_and_data(Report& report);  // host_checks.cpp: other jobs' reservations, datasets

Report run_doctor();  // every check, in that order

}  // namespace ddpx::doctor
