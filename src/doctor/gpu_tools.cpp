#include "doctor/gpu_tools.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>

#include "core/subprocess.h"
#include "launch/host.h"

namespace ddpx::doctor {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

std::string trim(const std::string& s) {
  size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  size_t b = s.find_last_not_of(" \t");
  return s.substr(a, b - a + 1);
}

std::vector<std::string> words(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  std::string w;
  while (in >> w) out.push_back(w);
  return out;
}

}  // namespace

NvidiaSmi parse_nvidia_smi(const std::string& table) {
  // | NVIDIA-SMI 570.124.06   Driver Version: 570.124.06     CUDA Version: 12.8     |
  // |   0  NVIDIA H100 80GB HBM3          On  |   00000000:61:00.0 Off |          0 |
  // | N/A   34C    P0            145W /  700W |    5856MiB /  81559MiB |      0%      Default |
  // |    0   N/A  N/A           40006      C   /usr/local/bin/python                  1508MiB |
  static const std::regex driver(R"(Driver Version:\s*(\S+))");
  static const std::regex cuda(R"(CUDA Version:\s*(\S+))");
  static const std::regex gpu(R"(^\|\s+(\d+)\s+(.+?)\s+(On|Off)\s+\|)");
  static const std::regex usage(R"((\d+)MiB\s*/\s*(\d+)MiB\s*\|\s*(\d+)%)");
  static const std::regex process(
      R"(^\|\s+(\d+)\s+\S+\s+\S+\s+(\d+)\s+\S+\s+(.*?)\s+(\d+\s*MiB|N/A)\s*\|$)");
  NvidiaSmi out;
  bool in_processes = false;
  for (const std::string& line : lines_of(table)) {
    std::smatch m;
    if (out.driver.empty() && std::regex_search(line, m, driver)) out.driver = m[1];
    if (out.cuda.empty() && std::regex_search(line, m, cuda)) out.cuda = m[1];
    if (line.find("Processes:") != std::string::npos) in_processes = true;
    if (in_processes) {
      if (std::regex_match(line, m, process)) out.processes.push_back({m[1], m[2], m[3], m[4]});
    } else if (std::regex_search(line, m, gpu)) {
      GpuRow row;
      row.index = m[1];
      row.name = m[2];
      row.driver = out.driver;
      out.gpus.push_back(row);
    } else if (!out.gpus.empty() && out.gpus.back().memory_total_mib < 0 &&
               std::regex_search(line, m, usage)) {
      out.gpus.back().memory_used_mib = std::stod(m[1]);
      out.gpus.back().memory_total_mib = std::stod(m[2]);
      out.gpus.back().utilization_pct = std::stod(m[3]);
    }
  }
  return out;
}

std::string Topology::summary() const {
  if (gpus.size() < 2) return fmt::format("{} GPU(s), no peer links", gpus.size());
  std::map<std::string, int> kinds;
  for (const auto& [pair, kind] : links) ++kinds[kind];
  std::string out;
  for (const auto& [kind, count] : kinds) {
    out += fmt::format("{}{} x{}", out.empty() ? "" : ", ", kind, count);
  }
  return fmt::format("{} GPUs; GPU pairs by link: {}", gpus.size(), out);
}

bool Topology::all_nvlink() const {
  if (links.empty()) return false;
  for (const auto& [pair, kind] : links) {
    if (kind.rfind("NV", 0) != 0) return false;
  }
  return true;
}

std::string Topology::numa_summary() const {
  // Consecutive GPUs on one node print as a range: "GPU 0-3 on NUMA node 0".
  std::string out;
  auto it = numa_node.begin();
  while (it != numa_node.end()) {
    auto last = it;
    auto next = std::next(it);
    while (next != numa_node.end() && next->first == last->first + 1 &&
           next->second == it->second) {
      last = next++;
    }
    out += fmt::format("{}GPU {}{} on NUMA node {}", out.empty() ? "" : ", ", it->first,
                       last->first == it->first ? "" : fmt::format("-{}", last->first), it->second);
    it = next;
  }
  return out;
}

Topology parse_nvidia_topology(const std::string& matrix) {
  //         GPU0    GPU1    NIC0    CPU Affinity    NUMA Affinity   GPU NUMA ID
  // GPU0     X      NV18    SYS     0-51,104-155    0               N/A
  Topology t;
  std::vector<std::string> columns;
  size_t numa_at = 0;  // the NUMA Affinity field's index in a GPU row; 0: none
  for (const std::string& line : lines_of(matrix)) {
    std::vector<std::string> w = words(line);
    if (w.empty()) continue;
    if (columns.empty()) {
      if (w[0] == "GPU0") {
        for (const std::string& c : w) {
          if (c.rfind("GPU", 0) == 0 && c.size() > 3 &&
              std::isdigit(static_cast<unsigned char>(c[3])))
            columns.push_back(c);
        }
        t.gpus = columns;
        // Device columns (GPUs, then NICs) come before "CPU Affinity", a single field in rows.
        auto cpu = std::find(w.begin(), w.end(), "CPU");
        if (cpu != w.end() && std::next(cpu) != w.end() && *std::next(cpu) == "Affinity" &&
            std::find(cpu, w.end(), "NUMA") != w.end()) {
          numa_at = static_cast<size_t>(cpu - w.begin()) + 2;  // name, devices, CPU Affinity
        }
      }
      continue;
    }
    if (w[0].rfind("GPU", 0) != 0 || w.size() < columns.size() + 1) continue;
    int i = std::stoi(w[0].substr(3));
    for (size_t j = 0; j < columns.size(); ++j) {
      int jj = std::stoi(columns[j].substr(3));
      if (jj > i) t.links[{i, jj}] = w[j + 1];
    }
    if (numa_at > 0 && numa_at < w.size()) t.numa_node[i] = w[numa_at];
  }
  return t;
}

Topology parse_rocm_smi_numa(const std::string& text) {
  // GPU[0]\t\t: (Topology) Numa Node: 0
  static const std::regex node(R"(^\s*GPU\[(\d+)\]\s*:\s*\(Topology\) Numa Node:\s*(\S+))");
  Topology t;
  for (const std::string& line : lines_of(text)) {
    std::smatch m;
    if (!std::regex_search(line, m, node)) continue;
    int gpu = std::stoi(m[1]);
    if (t.numa_node.emplace(gpu, m[2]).second) t.gpus.push_back(fmt::format("GPU{}", gpu));
  }
  return t;
}

std::vector<GpuRow> parse_rocm_smi(const std::string& table) {
  // 0       [0x74a1 : 0x00]       45.0°C      173.0W    NPS1, SPX       132Mhz  900Mhz  0%   auto
  //   750.0W    0%   0%
  //         AMD Instinct MI300X
  static const std::regex partitions(R"((NPS\d|N/A),\s*(SPX|DPX|TPX|QPX|CPX|N/A))");
  static const std::regex percent(R"((\d+(?:\.\d+)?)%)");
  std::vector<GpuRow> rows;
  bool in_table = false;
  for (const std::string& line : lines_of(table)) {
    if (line.find("Device") == 0 && line.find("Partitions") != std::string::npos) in_table = true;
    if (!in_table || line.empty()) continue;
    if (std::isdigit(static_cast<unsigned char>(line[0]))) {
      GpuRow row;
      row.index = words(line)[0];
      std::smatch m;
      if (std::regex_search(line, m, partitions)) {
        row.memory_partition = m[1];
        row.compute_partition = m[2];
      }
      std::vector<double> pcts;
      for (auto it = std::sregex_iterator(line.begin(), line.end(), percent);
           it != std::sregex_iterator(); ++it) {
        pcts.push_back(std::stod((*it)[1]));
      }
      if (pcts.size() >= 2) row.utilization_pct = pcts.back();  // VRAM%, GPU% end the row
      rows.push_back(row);
    } else if (!rows.empty() && rows.back().name.empty() && line[0] == ' ' &&
               trim(line).find("===") == std::string::npos) {
      rows.back().name = trim(line);  // the row's second line: the model name
    }
  }
  return rows;
}

std::vector<GpuRow> parse_amd_smi_partitions(const std::string& text) {
  static const std::regex gpu(R"(^\s*GPU:\s*(\d+))");
  static const std::regex compute(R"((?:COMPUTE_PARTITION|compute_partition)\s*:\s*([A-Z/]+))");
  static const std::regex memory(R"((?:MEMORY_PARTITION|memory_partition)\s*:\s*([A-Z0-9/]+))");
  std::vector<GpuRow> rows;
  for (const std::string& line : lines_of(text)) {
    std::smatch m;
    if (std::regex_search(line, m, gpu)) {
      rows.push_back(GpuRow{});
      rows.back().index = m[1];
    } else if (!rows.empty() && std::regex_search(line, m, compute)) {
      rows.back().compute_partition = m[1];
    } else if (!rows.empty() && std::regex_search(line, m, memory)) {
      rows.back().memory_partition = m[1];
    }
  }
  return rows;
}

std::optional<std::string> run_tool(const std::string& program,
                                    const std::vector<std::string>& args) {
  std::string path;
  try {
    path = launch::find_program(program);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  std::vector<std::string> argv = {path};
  argv.insert(argv.end(), args.begin(), args.end());
  ProgramOutput run = run_program(argv, 30, ProgramStderr::kDropped);
  if (run.exit_code != 0 && run.output.empty()) return std::nullopt;
  return run.output;
}

}  // namespace ddpx::doctor
