#include "retrieval/internal/codec.h"

namespace ragkv::retrieval::internal {

std::string EncodeChunkId(int64_t id) {
  std::string key(8, '\0');
  const uint64_t u = static_cast<uint64_t>(id);
  for (int i = 0; i < 8; ++i) key[i] = static_cast<char>((u >> (56 - 8 * i)) & 0xFF);
  return key;
}

int64_t DecodeChunkId(std::string_view key) {
  uint64_t u = 0;
  for (size_t i = 0; i < 8 && i < key.size(); ++i) u = (u << 8) | static_cast<unsigned char>(key[i]);
  return static_cast<int64_t>(u);
}

}  // namespace ragkv::retrieval::internal
