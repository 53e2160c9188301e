// The shell's side of the job service: `ddpx submit|jobs|logs|stop --server URL --token T`
// (the token may come from $DDPX_TOKEN). Each call prints what the service answered and turns
// its 4xx into one line naming the problem.
#pragma once

#include <string>
#include <vector>

namespace ddpx::serve {

struct ClientOptions {
  std::string server;  // http://host:port or https://host:port
  std::string token;   // empty: $DDPX_TOKEN
};

// Prints the job's id; returns it.
long long client_submit(const ClientOptions& o, const std::vector<std::string>& command,
                        int workers, int ports, int nodes = 1);
std::string client_jobs(const ClientOptions& o);                                // an aligned table
void client_logs(const ClientOptions& o, long long id, int rank, bool follow);  // to stdout
std::string client_stop(const ClientOptions& o, long long id);       // the job's state afterwards
void client_snapshot(const ClientOptions& o, long long id);          // asks for one (202)
std::string client_snapshots(const ClientOptions& o, long long id);  // an aligned table
long long client_restore_snapshot(const ClientOptions& o, long long id, const std::string& name);
// Writes the job's backup to `path` atomically; `snapshots`: latest, all, none or NAME,NAME.
void client_backup(const ClientOptions& o, long long id, const std::string& snapshots,
                   const std::string& path);
long long client_import(const ClientOptions& o, const std::string& path);  // the new job's id

}  // namespace ddpx::serve
