// The `ddpx` subcommands. Each add_*_command registers a CLI11 subcommand on the app whose
// callback does the work and stores the process exit code in `exit_code`. Library errors
// (ddpx::Error) propagate out of the callback; main() turns them into one line and an exit
// code. This is the only folder that knows about exit codes.
#pragma once

namespace CLI {
class App;
}

namespace ddpx::cli {

// Every subcommand's name: the PROGRAM words after `ddpx run N --` that mean "this ddpx".
// The launcher (front.cpp) registers only `run`, so it cannot ask its CLI::App for them.
inline constexpr const char* kCommandNames[] = {
    "train", "run",    "data",     "models", "bench",   "export",    "tune",
    "jobs",  "logs",   "stop",     "shell",  "sbatch",  "container", "doctor",
    "serve", "submit", "snapshot", "backup", "restore", "plan",      "generate"};

// The commands the torch-free `ddpx` front runs itself (front.cpp); the rest go to ddpx-torch.
inline constexpr const char* kFrontCommandNames[] = {"run",    "jobs",     "logs",      "stop",
                                                     "shell",  "sbatch",   "container", "serve",
                                                     "submit", "snapshot", "backup",    "restore"};

void add_train_command(CLI::App& app, int& exit_code);     // train_command.cpp
void add_run_command(CLI::App& app, int& exit_code);       // run_command.cpp (the launcher)
void add_data_command(CLI::App& app, int& exit_code);      // data_command.cpp (download)
void add_models_command(CLI::App& app, int& exit_code);    // models_command.cpp
void add_bench_command(CLI::App& app, int& exit_code);     // bench_command.cpp
void add_export_command(CLI::App& app, int& exit_code);    // export_command.cpp
void add_generate_command(CLI::App& app, int& exit_code);  // generate_command.cpp
void add_tune_command(CLI::App& app, int& exit_code);      // tune_command.cpp (batch_size)
void add_plan_command(CLI::App& app, int& exit_code);      // plan_command.cpp (memory per shard)
// jobs_command.cpp: jobs, logs, stop, shell, submit
void add_job_commands(CLI::App& app, int& exit_code);
void add_sbatch_command(CLI::App& app, int& exit_code);     // sbatch_command.cpp (Slurm scripts)
void add_container_command(CLI::App& app, int& exit_code);  // container_command.cpp
void add_doctor_command(CLI::App& app, int& exit_code);     // doctor_command.cpp
void add_serve_command(CLI::App& app, int& exit_code);      // serve_command.cpp (job service)

}  // namespace ddpx::cli
