// What `ddpx doctor` reports: findings, each with a verdict and, when it is not ok, the fix.
// The report prints as an aligned table or as JSON (`--json`), and its exit code is 1 when any
// finding fails.
#pragma once

#include <string>
#include <vector>

namespace ddpx::doctor {

enum class Verdict { kOk, kWarn, kFail };
const char* verdict_name(Verdict verdict);  // "ok", "warn", "fail"

struct Finding {
  std::string area;   // "ddpx", "torch", "gpu", "nccl", "cpu", "memory", "jobs", "data"
  std::string name;   // what was checked, e.g. "GPU 0", "/dev/shm"
  std::string value;  // what was found
  Verdict verdict = Verdict::kOk;
  std::string fix;  // what to do when not ok
};

struct Report {
  std::vector<Finding> findings;
  void add(std::string area, std::string name, std::string value, Verdict verdict = Verdict::kOk,
           std::string fix = "");
  int exit_code() const;  // 1 when a finding fails, else 0
};

std::string format_report(const Report& report);
std::string report_json(const Report& report);

}  // namespace ddpx::doctor
