// ttft_cli.h: the `ragkv bench ttft` and `ragkv plan` subcommands
// (services/bench_ttft.h, services/plan_cmd.h), registered on the CLI11 app
// by cli.cc. Private to the ragkv binary; not thread-safe (flag globals).
#ifndef RAGKV_SERVICES_TTFT_CLI_H_
#define RAGKV_SERVICES_TTFT_CLI_H_

namespace CLI {
class App;
}

namespace ragkv::services {

// RegisterTtftSubcommands: adds `bench ttft` (under a `bench` subcommand,
// created if absent) and `plan`.
void RegisterTtftSubcommands(CLI::App* app);
// RunTtftSubcommands: if one of them was parsed, runs it, stores the exit
// code in *rc and returns true; false otherwise.
bool RunTtftSubcommands(int* rc);

}  // namespace ragkv::services

#endif  // RAGKV_SERVICES_TTFT_CLI_H_
