// probe_util.h: helpers of the outside-probe regression tests (issue 16):
// a chunk in the served model's layout, a tmpfs in a private mount
// namespace (disk-full), running the ragkv binary to completion, byte flips
// in files, and reading a log. Header-only.
#ifndef RAGKV_TESTS_INTEGRATION_PROBE_UTIL_H_
#define RAGKV_TESTS_INTEGRATION_PROBE_UTIL_H_

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "connector/client.h"
#include "connector/wire.h"
#include "kvstore/chunk_key.h"
#include "model/model.h"

namespace ragkv::testing {

// ServedChunk: a chunk of `tokens` token ids in `m`'s KV layout (f16,
// finite values seeded by `seed`), keyed ChunkKey::Of(m's fingerprint).
inline StoredChunk ServedChunk(const model::Model& m, const std::vector<int32_t>& tokens,
                               uint32_t seed) {
  const model::ModelConfig& c = m.config();
  StoredChunk ch;
  const kvstore::Fingerprint& fp = m.fingerprint();
  ch.header.set_key(std::string(kvstore::ChunkKey::Of(fp, tokens).AsBytes()));
  ch.header.mutable_token_ids()->Assign(tokens.begin(), tokens.end());
  v1::KVLayout* l = ch.header.mutable_layout();
  l->set_num_layers(c.n_layers);
  l->set_num_kv_heads(c.n_kv_heads);
  l->set_head_dim(c.head_dim);
  l->set_num_tokens(static_cast<uint32_t>(tokens.size()));
  l->set_dtype(v1::DTYPE_F16);
  l->set_model_fingerprint(std::string(fp.begin(), fp.end()));
  std::mt19937 rng(seed);
  const size_t bytes = size_t{2} * c.n_kv_heads * tokens.size() * c.head_dim;
  for (int i = 0; i < c.n_layers; ++i) {
    v1::LayerKV kv;
    kv.set_layer(i);
    std::string k(bytes, '\0'), v(bytes, '\0');
    for (char& b : k) b = static_cast<char>(rng() & 0xBF);  // f16, never inf/NaN
    for (char& b : v) b = static_cast<char>(rng() & 0xBF);
    kv.set_checksum(wire::LayerChecksum(k, v));
    kv.set_k(std::move(k));
    kv.set_v(std::move(v));
    ch.layers.push_back(std::move(kv));
  }
  return ch;
}

// PrivateTmpfs: mounts a tmpfs of `bytes` at `dir` inside a private mount
// namespace of this process (children inherit it; the host sees nothing).
// Empty string on success, else why not (then the caller skips).
inline std::string PrivateTmpfs(const std::string& dir, uint64_t bytes) {
  static bool unshared = false;
  if (!unshared) {
    if (::unshare(CLONE_NEWNS) != 0) return std::string("unshare: ") + std::strerror(errno);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      return std::string("make / private: ") + std::strerror(errno);
    }
    unshared = true;
  }
  std::filesystem::create_directories(dir);
  const std::string opts = absl::StrFormat("size=%d", bytes);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
    return std::string("mount tmpfs: ") + std::strerror(errno);
  }
  return "";
}

// FillDisk: writes `path` until the file system of `path` has at most
// `leave` bytes free.
inline void FillDisk(const std::string& path, uint64_t leave) {
  struct statvfs st;
  if (::statvfs(std::filesystem::path(path).parent_path().c_str(), &st) != 0) return;
  const uint64_t free_bytes = uint64_t{st.f_bavail} * st.f_frsize;
  if (free_bytes <= leave) return;
  std::ofstream out(path, std::ios::binary);
  const std::string block(1 << 16, 'x');
  for (uint64_t left = free_bytes - leave; left > 0 && out;) {
    const size_t n = std::min<uint64_t>(left, block.size());
    out.write(block.data(), static_cast<std::streamsize>(n));
    left -= n;
  }
}

// RunRagkv: runs `ragkv args...` to completion with stdout+stderr to `log`;
// returns its exit code (-signal when killed), or 127 when it cannot start.
inline int RunRagkv(std::vector<std::string> args, const std::string& log) {
  args.insert(args.begin(), RAGKV_BINARY);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return 127;
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execv(RAGKV_BINARY, argv.data());
    ::_exit(127);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

// ReadText: the whole file at `path` (a log, /proc/<pid>/status); empty
// when it cannot be read.
inline std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// LogEvidence: what a failed test shows of a server's log at `path`: a
// sanitizer report from its start when there is one (the tail would cut
// its access and free stacks), else the log's last `tail` bytes.
inline std::string LogEvidence(const std::string& path, size_t tail = 4000) {
  const std::string text = ReadText(path);
  for (const char* mark : {"ERROR: AddressSanitizer", "WARNING: ThreadSanitizer", "runtime error:"}) {
    const size_t at = text.find(mark);
    if (at != std::string::npos) return text.substr(at, 12000);
  }
  return text.substr(text.size() > tail ? text.size() - tail : 0);
}

// FlipBytes: XORs 0xFF into `n` bytes of `path` starting at `offset`.
inline bool FlipBytes(const std::string& path, uint64_t offset, int n) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  if (!f) return false;
  for (int i = 0; i < n; ++i) {
    f.seekg(static_cast<std::streamoff>(offset + i));
    char c = 0;
    if (!f.get(c)) return false;
    f.seekp(static_cast<std::streamoff>(offset + i));
    f.put(static_cast<char>(c ^ 0xFF));
  }
  return static_cast<bool>(f);
}

// FilesWithExtension: regular files under `dir` (not recursive) ending in `ext`.
inline std::vector<std::string> FilesWithExtension(const std::string& dir, const std::string& ext) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string p = e.path().string();
    if (e.is_regular_file() && p.size() >= ext.size() &&
        p.compare(p.size() - ext.size(), ext.size(), ext) == 0) {
      out.push_back(p);
    }
  }
  return out;
}

// TextDoc: a document of about `bytes` bytes of words (deterministic in id).
inline v1::Document TextDoc(const std::string& id, size_t bytes) {
  static const char* kWords[] = {"the", "little", "girl", "saw", "a", "big", "red", "ball",
                                 "and", "she", "was", "happy", "dog", "ran", "to", "park"};
  std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>()(id)));
  v1::Document d;
  d.set_doc_id(id);
  std::string text;
  while (text.size() < bytes) {
    text += kWords[rng() % 16];
    text += (rng() % 9 == 0) ? ". " : " ";
  }
  d.set_text(text);
  return d;
}

}  // namespace ragkv::testing

#endif  // RAGKV_TESTS_INTEGRATION_PROBE_UTIL_H_
