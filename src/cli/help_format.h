// What `--help` shows for ddpx's commands: CLI11's layout, with switches (`--flip` / `--no_flip`)
// shown with their real default. CLI11 marks an off switch with the value it sets
// ("--flip,--no_flip{false}"), which reads as the default and is wrong for every switch that is on
// by default; add_switch writes "(default: on)" or "(default: off)" instead.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

namespace ddpx::cli {

class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override {
    std::string name = CLI::Formatter::make_option_name(opt, is_positional);
    for (const std::string mark : {"{false}", "{true}"}) {
      for (size_t at = name.find(mark); at != std::string::npos; at = name.find(mark))
        name.erase(at, mark.size());
    }
    return name;
  }
};

// `--NAME` and `--no_NAME` for `value`; the help line says its default, read from `value` when the
// flag is added (the options struct's default).
inline CLI::Option* add_switch(CLI::App* app, const std::string& name, bool& value,
                               const std::string& help) {
  return app->add_flag("--" + name + ",!--no_" + name, value, help)
      ->option_text(value ? "(default: on)" : "(default: off)");
}

// Gives `app` and every subcommand under it the formatter (CLI11 copies a parent's formatter
// into a subcommand only when the subcommand is made).
inline void use_help_formatter(
    CLI::App& app, std::shared_ptr<HelpFormatter> f = std::make_shared<HelpFormatter>()) {
  app.formatter(f);
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    use_help_formatter(*sub, f);
}

}  // namespace ddpx::cli
