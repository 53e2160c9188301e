#include "serve/gpu_readings.h"

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/subprocess.h"

namespace ddpx::serve {
namespace {

using nlohmann::json;

// A number from a JSON value the AMD tools print: 42, 42.5, "42.5", {"value": 42, "unit": "W"};
// "N/A" and anything else is no number.
bool number_of(const json& v, double& into) {
  if (v.is_object()) return v.contains("value") && number_of(v["value"], into);
  if (v.is_number()) {
    into = v.get<double>();
    return true;
  }
  if (!v.is_string()) return false;
  const std::string& s = v.get_ref<const std::string&>();
  char* end = nullptr;
  double parsed = std::strtod(s.c_str(), &end);
  if (end == s.c_str()) return false;
  into = parsed;
  return true;
}

const json* field(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

json parse_or_null(const std::string& text) {
  return json::parse(text, /*cb=*/nullptr, /*allow_exceptions=*/false);
}

}  // namespace

std::vector<GpuReading> parse_nvidia_smi_gpus(const std::string& csv) {
  std::vector<GpuReading> out;
  std::istringstream lines(csv);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::vector<std::string> values;
    for (std::string f; std::getline(fields, f, ',');) values.push_back(f);
    auto number = [&](size_t i, double& into) {
      if (i >= values.size()) return false;
      char* end = nullptr;
      double v = std::strtod(values[i].c_str(), &end);
      if (end == values[i].c_str()) return false;  // [N/A], [Not Supported]
      into = v;
      return true;
    };
    GpuReading g;
    g.vendor = "nvidia";
    double index = 0;
    if (!(number(0, index) && number(1, g.utilization_pct) && number(2, g.memory_used_mib) &&
          number(3, g.memory_total_mib)))
      continue;
    g.index = static_cast<int>(index);
    number(4, g.temperature_c);
    number(5, g.power_w);
    out.push_back(g);
  }
  return out;
}

std::vector<GpuReading> parse_amd_smi_metric(const std::string& text) {
  json doc = parse_or_null(text);
  if (const json* data = field(doc, "gpu_data")) doc = *data;
  std::vector<GpuReading> out;
  if (!doc.is_array()) return out;
  for (const json& gpu : doc) {
    GpuReading g;
    g.vendor = "amd";
    double index = 0;
    const json* id = field(gpu, "gpu");
    if (!id || !number_of(*id, index)) continue;
    g.index = static_cast<int>(index);
    if (const json* usage = field(gpu, "usage"))
      if (const json* gfx = field(*usage, "gfx_activity")) number_of(*gfx, g.utilization_pct);
    // amd-smi's "MB" is 2^20 bytes: an MI300X's 192 GiB read 196592 MB (rocm-smi: 205822885888 B).
    if (const json* mem = field(gpu, "mem_usage")) {
      if (const json* used = field(*mem, "used_vram")) number_of(*used, g.memory_used_mib);
      if (const json* total = field(*mem, "total_vram")) number_of(*total, g.memory_total_mib);
    }
    if (const json* power = field(gpu, "power")) {
      // socket_power on MI300X; older amd-smi named the average power.
      for (const char* key : {"socket_power", "average_socket_power"})
        if (const json* p = field(*power, key); p && number_of(*p, g.power_w)) break;
    }
    if (const json* temp = field(gpu, "temperature")) {
      for (const char* key : {"hotspot", "edge"})
        if (const json* t = field(*temp, key); t && number_of(*t, g.temperature_c)) break;
    }
    out.push_back(g);
  }
  return out;
}

void add_amd_smi_partitions(const std::string& text, std::vector<GpuReading>& gpus) {
  json doc = parse_or_null(text);
  if (const json* data = field(doc, "gpu_data")) doc = *data;
  if (!doc.is_array()) return;
  for (const json& gpu : doc) {
    double index = -1;
    const json* id = field(gpu, "gpu");
    const json* partition = field(gpu, "partition");
    if (!id || !number_of(*id, index) || !partition) continue;
    for (GpuReading& g : gpus) {
      if (g.index != static_cast<int>(index)) continue;
      if (const json* c = field(*partition, "compute_partition"); c && c->is_string())
        g.compute_partition = c->get<std::string>();
      if (const json* m = field(*partition, "memory_partition"); m && m->is_string())
        g.memory_partition = m->get<std::string>();
    }
  }
}

std::vector<GpuReading> parse_rocm_smi_json(const std::string& text) {
  json doc = parse_or_null(text);
  std::vector<GpuReading> out;
  if (!doc.is_object()) return out;
  for (const auto& [name, card] : doc.items()) {
    if (name.rfind("card", 0) != 0 || !card.is_object()) continue;  // "system": the driver's
    GpuReading g;
    g.vendor = "amd";
    char* end = nullptr;
    long index = std::strtol(name.c_str() + 4, &end, 10);
    if (end == name.c_str() + 4) continue;
    g.index = static_cast<int>(index);
    auto get = [&](const char* key, double& into) {
      const json* v = field(card, key);
      return v && number_of(*v, into);
    };
    get("GPU use (%)", g.utilization_pct);
    double used_b = 0, total_b = 0;
    if (get("VRAM Total Used Memory (B)", used_b)) g.memory_used_mib = used_b / (1 << 20);
    if (get("VRAM Total Memory (B)", total_b)) g.memory_total_mib = total_b / (1 << 20);
    get("Current Socket Graphics Package Power (W)", g.power_w) ||
        get("Average Graphics Package Power (W)", g.power_w);
    get("Temperature (Sensor junction) (C)", g.temperature_c) ||
        get("Temperature (Sensor edge) (C)", g.temperature_c);
    if (const json* c = field(card, "Compute Partition"); c && c->is_string())
      g.compute_partition = c->get<std::string>();
    if (const json* m = field(card, "Memory Partition"); m && m->is_string())
      g.memory_partition = m->get<std::string>();
    out.push_back(g);
  }
  return out;
}

std::vector<GpuReading> read_gpus() {
  ProgramOutput nvidia = run_program(
      {"nvidia-smi",
       "--query-gpu=index,utilization.gpu,memory.used,memory.total,temperature.gpu,power.draw",
       "--format=csv,noheader,nounits"},
      10);
  if (nvidia.exit_code == 0) return parse_nvidia_smi_gpus(nvidia.output);
  ProgramOutput amd = run_program(
      {"amd-smi", "metric", "--usage", "--mem-usage", "--power", "--temperature", "--json"}, 10);
  if (amd.exit_code == 0) {
    std::vector<GpuReading> gpus = parse_amd_smi_metric(amd.output);
    ProgramOutput partitions = run_program({"amd-smi", "static", "--partition", "--json"}, 10);
    if (partitions.exit_code == 0) add_amd_smi_partitions(partitions.output, gpus);
    return gpus;
  }
  ProgramOutput rocm =
      run_program({"rocm-smi", "--showuse", "--showmeminfo", "vram", "--showpower", "--showtemp",
                   "--showcomputepartition", "--showmemorypartition", "--json"},
                  10);
  if (rocm.exit_code == 0) return parse_rocm_smi_json(rocm.output);
  return {};  // no GPU tool answered (no GPU, or no driver): no GPU figures
}

}  // namespace ddpx::serve
