// Adds an enum-valued flag parsed through its enum's name table (core/names.h: the table stands
// beside the enum, and log lines print with the same table), so a name is written once and a
// library below cli/ only ever sees the enum. An unknown name is refused by CLI11 with the flag
// and the valid names.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <string>
#include <vector>

#include "core/names.h"

namespace ddpx::cli {

// Adds `flag` to `app`, parsed into `value` through `names`; --help shows the names (sorted, as
// CLI11 lists a set) and the current value as the default.
template <typename E, size_t N>
CLI::Option* add_choice(CLI::App* app, const std::string& flag, E& value,
                        const NameTable<E, N>& names, const std::string& help) {
  std::vector<std::string> valid;
  for (const auto& entry : names) valid.push_back(entry.name);
  std::sort(valid.begin(), valid.end());
  return app
      ->add_option_function<std::string>(
          flag,
          [&value, &names, flag](const std::string& name) {
            // IsMember below refuses an unknown name first; this guards a value set unchecked.
            const auto parsed = parse_name(names, name);
            if (!parsed) throw CLI::ValidationError(flag, name + " not in " + list_names(names));
            value = *parsed;
          },
          help)
      ->check(CLI::IsMember(valid))
      ->default_str(name_of(names, value));
}

}  // namespace ddpx::cli
