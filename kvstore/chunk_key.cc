#include "kvstore/chunk_key.h"

#include <bit>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "xxhash.h"

namespace ragkv::kvstore {
namespace {

constexpr char kHexDigits[] = "0123456789abcdef";
constexpr std::string_view kPrefixRootTag = "ragkv/prefix/v1";
constexpr uint8_t kPrefixBlockTag = 'P';
constexpr std::string_view kSaltTag = "ragkv/salt/v1";
constexpr std::string_view kNeighbourTag = "ragkv/neighbours/v1";

std::string BytesToHex(const uint8_t* b, size_t n) {
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHexDigits[b[i] >> 4];
    out[2 * i + 1] = kHexDigits[b[i] & 15];
  }
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

absl::Status HexTo16(std::string_view hex, uint8_t* out, std::string_view what) {
  if (hex.size() != 32) {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(what), ": expected 32 hex digits, got ", hex.size(), " characters"));
  }
  for (size_t i = 0; i < 16; ++i) {
    int hi = HexValue(hex[2 * i]);
    int lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError(absl::StrCat(std::string(what), ": non-hex character in '", std::string(hex), "'"));
    }
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return absl::OkStatus();
}

// UpdateTokens: feeds token ids as little-endian int32 into the hash state.
void UpdateTokens(XXH3_state_t* state, absl::Span<const int32_t> tokens) {
  if constexpr (std::endian::native == std::endian::little) {
    XXH3_128bits_update(state, tokens.data(), tokens.size() * sizeof(int32_t));
  } else {
    uint8_t buf[4096];
    size_t n = 0;
    for (int32_t t : tokens) {
      uint32_t u = static_cast<uint32_t>(t);
      for (int i = 0; i < 4; ++i) buf[n++] = static_cast<uint8_t>(u >> (8 * i));
      if (n == sizeof(buf)) {
        XXH3_128bits_update(state, buf, n);
        n = 0;
      }
    }
    XXH3_128bits_update(state, buf, n);
  }
}

ChunkKey Finish(XXH3_state_t* state) {
  XXH128_hash_t h = XXH3_128bits_digest(state);
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  ChunkKey k;
  std::memcpy(k.bytes.data(), c.digest, 16);
  return k;
}

struct StateDeleter {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};
using StatePtr = std::unique_ptr<XXH3_state_t, StateDeleter>;

StatePtr NewState() {
  StatePtr s(XXH3_createState());
  XXH3_128bits_reset(s.get());
  return s;
}

uint64_t LoadBe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = v << 8 | p[i];
  return v;
}

}  // namespace

std::string FingerprintToHex(const Fingerprint& fp) { return BytesToHex(fp.data(), fp.size()); }

absl::StatusOr<Fingerprint> FingerprintFromHex(std::string_view hex) {
  Fingerprint fp{};
  absl::Status s = HexTo16(hex, fp.data(), "fingerprint");
  if (!s.ok()) return s;
  return fp;
}

ChunkKey ChunkKey::Of(const Fingerprint& fp, absl::Span<const int32_t> tokens) {
  StatePtr s = NewState();
  XXH3_128bits_update(s.get(), fp.data(), fp.size());
  UpdateTokens(s.get(), tokens);
  return Finish(s.get());
}

absl::StatusOr<ChunkKey> ChunkKey::FromHex(std::string_view hex) {
  ChunkKey k;
  absl::Status s = HexTo16(hex, k.bytes.data(), "chunk key");
  if (!s.ok()) return s;
  return k;
}

absl::StatusOr<ChunkKey> ChunkKey::FromBytes(std::string_view raw) {
  if (raw.size() != 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk key: expected 16 bytes, got ", raw.size()));
  }
  ChunkKey k;
  std::memcpy(k.bytes.data(), raw.data(), 16);
  return k;
}

std::string ChunkKey::ToHex() const { return BytesToHex(bytes.data(), bytes.size()); }
uint64_t ChunkKey::Hi64() const { return LoadBe64(bytes.data()); }
uint64_t ChunkKey::Lo64() const { return LoadBe64(bytes.data() + 8); }

Fingerprint SaltedFingerprint(const Fingerprint& fp, std::string_view salt) {
  if (salt.empty()) return fp;
  StatePtr s = NewState();
  XXH3_128bits_update(s.get(), kSaltTag.data(), kSaltTag.size());
  XXH3_128bits_update(s.get(), fp.data(), fp.size());
  XXH3_128bits_update(s.get(), salt.data(), salt.size());
  return Finish(s.get()).bytes;
}

ChunkKey NeighbourChunkKey(const Fingerprint& fp, absl::Span<const int32_t> lead,
                           absl::Span<const ChunkKey> neighbour_keys,
                           absl::Span<const int32_t> tokens) {
  StatePtr s = NewState();
  XXH3_128bits_update(s.get(), kNeighbourTag.data(), kNeighbourTag.size());
  XXH3_128bits_update(s.get(), fp.data(), fp.size());
  const int32_t lead_n = static_cast<int32_t>(lead.size());  // counts: u32 LE, as a token
  UpdateTokens(s.get(), absl::MakeConstSpan(&lead_n, 1));
  UpdateTokens(s.get(), lead);
  const int32_t n = static_cast<int32_t>(neighbour_keys.size());
  UpdateTokens(s.get(), absl::MakeConstSpan(&n, 1));
  for (const ChunkKey& k : neighbour_keys) XXH3_128bits_update(s.get(), k.bytes.data(), 16);
  UpdateTokens(s.get(), tokens);
  return Finish(s.get());
}

ChunkKey PrefixRootKey(const Fingerprint& fp) {
  StatePtr s = NewState();
  XXH3_128bits_update(s.get(), kPrefixRootTag.data(), kPrefixRootTag.size());
  XXH3_128bits_update(s.get(), fp.data(), fp.size());
  return Finish(s.get());
}

ChunkKey PrefixBlockKey(const ChunkKey& parent, absl::Span<const int32_t> block_tokens) {
  StatePtr s = NewState();
  XXH3_128bits_update(s.get(), &kPrefixBlockTag, 1);
  XXH3_128bits_update(s.get(), parent.bytes.data(), parent.bytes.size());
  UpdateTokens(s.get(), block_tokens);
  return Finish(s.get());
}

std::vector<ChunkKey> PrefixBlockKeys(const Fingerprint& fp, absl::Span<const int32_t> tokens,
                                      int block_tokens) {
  std::vector<ChunkKey> keys;
  if (block_tokens < 1) return keys;
  const size_t n = static_cast<size_t>(block_tokens);
  ChunkKey parent = PrefixRootKey(fp);
  for (size_t b = 0; (b + 1) * n <= tokens.size(); ++b) {
    parent = PrefixBlockKey(parent, tokens.subspan(b * n, n));
    keys.push_back(parent);
  }
  return keys;
}

}  // namespace ragkv::kvstore
