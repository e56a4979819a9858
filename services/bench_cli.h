// bench_cli.h: the `ragkv bench prefill|kvstore|blend|quality` subcommands,
// thin CLI wrappers over the modules' benchmark functions
// (model/bench_prefill.h, kvstore/bench_kvstore.h + bench_redis.h,
// blend/bench_blend.h, blend/bench_quality.h). Flags parsed only here.
#ifndef RAGKV_SERVICES_BENCH_CLI_H_
#define RAGKV_SERVICES_BENCH_CLI_H_

namespace CLI {
class App;
}

namespace ragkv::services {

// RegisterBenchSubcommands: adds the four subcommands under `bench`
// (creating `bench` if absent).
void RegisterBenchSubcommands(CLI::App* app);
// RunBenchSubcommands: runs the parsed one; false if none was parsed.
bool RunBenchSubcommands(int* rc);

}  // namespace ragkv::services

#endif  // RAGKV_SERVICES_BENCH_CLI_H_
