// xchunk_task.h: evaluation prompts of the cross-chunk binding task that the
// xchunk instrument checkpoint was trained on (docs/xchunk.md; the trainer
// and its Python generator are tools/xchunk/).
//
// Grammar: BOS, then `pairs` key/value pairs "k v" (distinct keys out of 64
// key tokens, values uniform over 16 value tokens), then the query "? k".
// The pairs are split into `chunks` passages; every boundary falls between a
// key and its value (2*round(pairs*j/chunks)+1 tokens into the pairs), and the
// question asks for a key whose value opens a passage. Precomputed alone,
// that value's KV cannot tell which key it belongs to: full KV reuse answers
// at chance, full prefill knows.
#ifndef RAGKV_BLEND_XCHUNK_TASK_H_
#define RAGKV_BLEND_XCHUNK_TASK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace ragkv::blend {

// Token ids of the instrument's vocabulary (tools/xchunk/xchunk_task.py).
inline constexpr int32_t kXchunkBos = 1;
inline constexpr int32_t kXchunkQuery = 259;
inline constexpr int32_t kXchunkKey0 = 260;
inline constexpr int kXchunkKeys = 64;
inline constexpr int32_t kXchunkValue0 = kXchunkKey0 + kXchunkKeys;
inline constexpr int kXchunkValues = 16;
inline constexpr int kXchunkVocab = kXchunkValue0 + kXchunkValues;  // 340

struct XchunkPrompt {
  std::vector<int32_t> prefix;               // {BOS}
  std::vector<std::vector<int32_t>> chunks;  // the passages
  std::vector<int32_t> query;                // {?, key}
  int32_t answer = 0;                        // the value token
};

// XchunkModelPath: the instrument checkpoint: $RAGKV_XCHUNK_MODEL, else
// models/xchunk.gguf in the source tree this binary was built from.
std::string XchunkModelPath();

// The dev/test split of the generator (docs/quality_gate.md "The dev/test
// split"): odd seeds are dev, even seeds are test; every prompt of a seed
// is in the seed's split. Settings are chosen on dev seeds and reported on
// test seeds. The seeds of the figures before the split (the bench's 1 and
// 7, the calibration canaries' 101) are odd: dev.
inline bool XchunkSeedIsDev(uint64_t seed) { return seed % 2 == 1; }
// The calibration canaries (`ragkv calibrate --task xchunk`): chosen on
// kXchunkCanaryDevSeed, reported on kXchunkCanaryTestSeed.
inline constexpr uint64_t kXchunkCanaryDevSeed = 101;
inline constexpr uint64_t kXchunkCanaryTestSeed = 102;

// MakeXchunkPrompt: prompt `index` of seed `seed` (deterministic).
// InvalidArgument unless 2 <= chunks <= pairs <= kXchunkKeys.
absl::StatusOr<XchunkPrompt> MakeXchunkPrompt(uint64_t seed, int index, int pairs, int chunks);

}  // namespace ragkv::blend

#endif  // RAGKV_BLEND_XCHUNK_TASK_H_
