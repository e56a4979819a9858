// repair.cc: `ragkv repair --data-dir DIR`, the offline repair path of a
// data dir that `ragkv serve` refuses to start on (docs/reliability.md).
// The catalogue (DIR/retrieval/catalogue) goes through RocksDB's RepairDB,
// which salvages every record it can read; the command reports the
// documents and chunks that remain (compare with your corpus and re-ingest
// what is missing) and removes the saved vector index so that the next
// start rebuilds it from the salvaged vectors. The KV store (DIR/kv) is a
// cache: a damaged one is moved aside to DIR/kv.corrupt-<time> and starts
// empty (serve does the same by itself at startup).
// Exit code: 0 repaired or nothing to do, 1 the repair failed.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <string>

#include "absl/status/status.h"
#include "cli/command.h"
#include "kvstore/ssd/ssd_tier.h"
#include "retrieval/catalogue.h"

namespace ragkv::cli {
namespace {

// Census: the documents and chunks a catalogue holds.
absl::Status Census(const std::string& path, size_t* docs, size_t* chunks) {
  auto cat = retrieval::Catalogue::Open({path, /*create_if_missing=*/false, true});
  if (!cat.ok()) return cat.status();
  *docs = *chunks = 0;
  absl::Status s = (*cat)->ForEachDocument([&](const retrieval::DocumentRecord&) {
    ++*docs;
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return (*cat)->ForEachChunk([&](const retrieval::ChunkRecord&) {
    ++*chunks;
    return absl::OkStatus();
  });
}

int RepairCatalogue(const std::string& dir) {
  const std::string path = dir + "/retrieval/catalogue";
  if (!std::filesystem::exists(path)) {
    std::printf("catalogue: none at %s\n", path.c_str());
    return 0;
  }
  size_t docs = 0, chunks = 0;
  absl::Status before = Census(path, &docs, &chunks);
  if (before.ok()) {
    std::printf("catalogue: ok (%zu documents, %zu chunks); nothing to repair\n", docs, chunks);
    return 0;
  }
  std::printf("catalogue: damaged: %s\ncatalogue: running RocksDB RepairDB on %s\n",
              before.ToString().c_str(), path.c_str());
  absl::Status r = retrieval::Catalogue::Repair(path);
  if (r.ok()) r = Census(path, &docs, &chunks);
  if (!r.ok()) {
    std::fprintf(stderr,
                 "ragkv repair: the catalogue could not be repaired: %s\n"
                 "  move %s aside and re-ingest the corpus\n",
                 r.ToString().c_str(), path.c_str());
    return 1;
  }
  std::error_code ec;
  std::filesystem::remove(dir + "/retrieval/index.rkvidx", ec);  // rebuilt from the vectors
  std::printf(
      "catalogue: repaired: %zu documents, %zu chunks salvaged; records RocksDB could not read "
      "are gone -- re-ingest any document of your corpus that is missing\n",
      docs, chunks);
  return 0;
}

int RepairKv(const std::string& dir) {
  const std::string path = dir + "/kv";
  if (!std::filesystem::exists(path)) {
    std::printf("kv: none at %s\n", path.c_str());
    return 0;
  }
  kvstore::SsdTierOptions o;
  o.path = path;
  auto tier = kvstore::CreateSsdTier(o);  // quarantines a damaged database itself
  if (!tier.ok()) {
    std::fprintf(stderr, "ragkv repair: kv store: %s\n", tier.status().ToString().c_str());
    return 1;
  }
  const kvstore::TierStats st = (*tier)->Stats();
  std::printf("kv: %s (%llu chunks)\n",
              st.quarantined > 0 ? "damaged: moved aside, started empty" : "ok",
              static_cast<unsigned long long>(st.entries));
  return 0;
}

class RepairCommand : public Command {
 public:
  void Register(CLI::App* cmd) override {
    cmd->add_option("--data-dir", dir_, "the data dir of `ragkv serve`")->required();
  }
  int Run() override {
    if (!std::filesystem::is_directory(dir_)) {
      std::fprintf(stderr, "ragkv repair: %s is not a directory\n", dir_.c_str());
      return 2;
    }
    const int a = RepairCatalogue(dir_);
    const int b = RepairKv(dir_);
    return a != 0 ? a : b;
  }

 private:
  std::string dir_;
};

}  // namespace

std::unique_ptr<Command> NewRepairCommand() { return std::make_unique<RepairCommand>(); }

}  // namespace ragkv::cli
