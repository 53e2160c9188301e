// The names of an enum-valued option, written once beside the enum: cli/ parses flags with the
// table (cli/choices.h: add_choice) and every log line prints with it, so a name stands in one
// place. Torch-free.
//   enum class Amp { kOff, kBf16, kFp16 };
//   inline constexpr NameTable<Amp, 3> kAmpNames{{{Amp::kOff, "off"}, {Amp::kBf16, "bf16"},
//                                                 {Amp::kFp16, "fp16"}}};
//   inline const char* name(Amp amp) { return name_of(kAmpNames, amp); }
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace ddpx {

template <typename E>
struct Named {
  E value;
  const char* name;
};

template <typename E, size_t N>
using NameTable = std::array<Named<E>, N>;

// The value's name; "?" for a value the table lacks (a table missing an enumerator is a bug that
// the enum's test catches by printing every value).
template <typename E, size_t N>
constexpr const char* name_of(const NameTable<E, N>& table, E value) {
  for (const auto& entry : table)
    if (entry.value == value) return entry.name;
  return "?";
}

// The value named `name`, or nullopt.
template <typename E, size_t N>
std::optional<E> parse_name(const NameTable<E, N>& table, std::string_view name) {
  for (const auto& entry : table)
    if (name == entry.name) return entry.value;
  return std::nullopt;
}

// "a, b, c": what an error about an unknown name lists.
template <typename E, size_t N>
std::string list_names(const NameTable<E, N>& table) {
  std::string out;
  for (const auto& entry : table) {
    if (!out.empty()) out += ", ";
    out += entry.name;
  }
  return out;
}

}  // namespace ddpx
