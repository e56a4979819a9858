// command.h: one `ragkv` subcommand. A command owns its flags (plain
// members, no globals), registers them on the CLI11 subcommand it is given,
// and runs once parsing is done. main.cc builds the command tree from one
// table (kCommands there); `bench` holds a second table of its families.
#ifndef RAGKV_CLI_COMMAND_H_
#define RAGKV_CLI_COMMAND_H_

#include <memory>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace ragkv::cli {

class Command {
 public:
  virtual ~Command() = default;
  // Register: adds this command's flags (and sub-commands) to `cmd`.
  virtual void Register(CLI::App* cmd) = 0;
  // Run: called when `cmd` was parsed; returns the process exit code
  // (0 ok, 1 the work failed, 2 bad usage).
  virtual int Run() = 0;
};

// CommandEntry: a row of a command table.
struct CommandEntry {
  const char* name;
  const char* help;
  std::unique_ptr<Command> (*make)();
};

// The commands, one per file of cli/.
std::unique_ptr<Command> NewServeCommand();       // serve.cc
std::unique_ptr<Command> NewPrecomputeCommand();  // precompute.cc
std::unique_ptr<Command> NewQueryCommand();       // query.cc
std::unique_ptr<Command> NewGenerateCommand();    // generate.cc
std::unique_ptr<Command> NewPlanCommand();        // plan.cc
std::unique_ptr<Command> NewTokenizeCommand();    // tokenize.cc
std::unique_ptr<Command> NewRepairCommand();      // repair.cc
std::unique_ptr<Command> NewCalibrateCommand();   // calibrate.cc
// Commands that exec another binary with their arguments (forward.cc):
// `ragkv bench ...` runs ragkv-bench; `ragkv llama` and `ragkv bench engine`
// run ragkv-llama.
std::unique_ptr<Command> NewBenchForwardCommand();
std::unique_ptr<Command> NewLlamaForwardCommand();
std::unique_ptr<Command> NewBenchEngineForwardCommand();
// ragkv-llama's commands (llama_main.cc's table).
std::unique_ptr<Command> NewLlamaCommand();        // llama.cc
std::unique_ptr<Command> NewBenchEngineCommand();  // bench/cli/bench_engine.cc
// ragkv-bench's commands, the `bench` families (bench/cli/bench_main.cc's
// table; files in bench/cli/).
std::unique_ptr<Command> NewBenchPrefillCommand();    // bench.cc
std::unique_ptr<Command> NewBenchKvstoreCommand();    // bench.cc
std::unique_ptr<Command> NewBenchBlendCommand();      // bench.cc
std::unique_ptr<Command> NewBenchQualityCommand();    // bench.cc
std::unique_ptr<Command> NewBenchRetrievalCommand();  // bench_retrieval.cc
std::unique_ptr<Command> NewBenchTtftCommand();       // bench_ttft.cc
std::unique_ptr<Command> NewBenchLoadCommand();       // bench_load.cc
std::unique_ptr<Command> NewBenchServeCommand();      // bench_serve.cc

struct GlobalFlags;

// RunParsed: registers nothing; finds the entry of `table` whose
// subcommand of `app` was parsed and runs its command. 2 when none was.
// `commands[i]` is the command made for table row i.
int RunParsed(CLI::App* app, const CommandEntry* table, int n,
              const std::unique_ptr<Command>* commands);
// ParseAndRun: parses argv into `app` (--help exits 0; a usage error -- an
// unknown flag, a value out of range -- prints CLI11's message and exits
// 2, as the commands' own usage checks do), scrubs --auth-token values
// from argv, applies `globals`, then RunParsed. Every binary's main.
int ParseAndRun(CLI::App* app, int argc, char** argv, const GlobalFlags& globals,
                const CommandEntry* table, int n, const std::unique_ptr<Command>* commands);
// RegisterTable: adds one subcommand of `app` per row, makes its command
// into commands[i] and registers its flags.
void RegisterTable(CLI::App* app, const CommandEntry* table, int n,
                   std::unique_ptr<Command>* commands);

// GlobalFlags: the flags given before the command, which ragkv and
// ragkv-bench both take (ragkv forwards them to ragkv-bench).
struct GlobalFlags {
  std::string log_level = "info";  // --log-level debug|info|warning|error
  // --kernel-threads: OpenMP/BLAS threads per kernel call. Request-level
  // parallelism (executor workers, precompute workers) is the main axis, so
  // kernels default to 1 thread each and the two never multiply into
  // oversubscription (no nested pools). 0: one per hardware thread
  // (ragkv-llama's default: its sidecar blends while llama.cpp decodes on
  // --threads, and OMP_NUM_THREADS caps both).
  int kernel_threads = 1;
};
// kGlobalFlagNames: the names AddGlobalFlags registers.
inline constexpr const char* kGlobalFlagNames[] = {"--log-level", "--kernel-threads"};
// AddGlobalFlags: registers them on `app` (the binary's root).
void AddGlobalFlags(CLI::App* app, GlobalFlags* flags);
// ApplyGlobalFlags: sets the process-wide log level and kernel thread cap.
void ApplyGlobalFlags(const GlobalFlags& flags);
// AppendGlobalFlags: the global flags given to `root` (before the command),
// as arguments for a binary this command execs, so that `ragkv
// --kernel-threads 4 bench ...` means what it would in this process.
// Null root: nothing.
void AppendGlobalFlags(const CLI::App* root, std::vector<std::string>* args);

}  // namespace ragkv::cli

#endif  // RAGKV_CLI_COMMAND_H_
