#include "doctor/finding.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

namespace ddpx::doctor {

const char* verdict_name(Verdict verdict) {
  switch (verdict) {
    case Verdict::kOk:
      return "ok";
    case Verdict::kWarn:
      return "warn";
    case Verdict::kFail:
      return "fail";
  }
  return "?";
}

void Report::add(std::string area, std::string name, std::string value, Verdict verdict,
                 std::string fix) {
  findings.push_back(
      Finding{std::move(area), std::move(name), std::move(value), verdict, std::move(fix)});
}

int Report::exit_code() const {
  return std::any_of(findings.begin(), findings.end(),
                     [](const Finding& f) { return f.verdict == Verdict::kFail; })
             ? 1
             : 0;
}

std::string format_report(const Report& report) {
  size_t area = 4, name = 4;
  for (const Finding& f : report.findings) {
    area = std::max(area, f.area.size());
    name = std::max(name, f.name.size());
  }
  std::string out;
  int warn = 0, fail = 0;
  for (const Finding& f : report.findings) {
    out += fmt::format("{:<4}  {:<{}}  {:<{}}  {}\n", verdict_name(f.verdict), f.area, area, f.name,
                       name, f.value);
    if (f.verdict != Verdict::kOk && !f.fix.empty())
      out += fmt::format("{:<4}  {:<{}}  {:<{}}  fix: {}\n", "", "", area, "", name, f.fix);
    warn += f.verdict == Verdict::kWarn;
    fail += f.verdict == Verdict::kFail;
  }
  out += fmt::format("doctor: {} finding(s), {} warning(s), {} failure(s)\n",
                     report.findings.size(), warn, fail);
  return out;
}

std::string report_json(const Report& report) {
  nlohmann::json findings = nlohmann::json::array();
  for (const Finding& f : report.findings) {
    findings.push_back({{"area", f.area},
                        {"name", f.name},
                        {"value", f.value},
                        {"verdict", verdict_name(f.verdict)},
                        {"fix", f.fix}});
  }
  nlohmann::json j = {{"findings", findings}, {"exit_code", report.exit_code()}};
  return j.dump(2) + "\n";
}

}  // namespace ddpx::doctor
