// cuda_kernels_test.cc: every kernels/cuda kernel against its CPU twin
// (kernels/*.h) on random shapes; the paged gather/scatter against a naive
// loop. GPU cases GTEST_SKIP() when no CUDA device is present; the argument
// validation cases run everywhere (they fail before touching the device).
//
// Tolerances (|gpu - cpu| <= atol + rtol * |cpu|), with inputs ~ N(0, 1):
//   re-rotation  f32: 1e-5 + 1e-5|x|; f16: 1e-3 + 1e-3|x| (1 ulp of half);
//                bf16: 1e-2 + 8e-3|x| (1 ulp of bf16) -- both sides round once.
//   deviation    relative 1e-4 (f32 sums in a different order).
//   top-k        exact.  paged gather/scatter: exact (bytes).
//   attention    SIMT path (f32 math, output rounded once): f16 1e-3 + 2e-3|x|,
//                bf16 8e-3 + 1e-2|x|, f32 2e-5 + 1e-4|x|; tensor-core path (P
//                rounded to the input type before P.V): f16 2e-3 + 5e-3|x|,
//                bf16 1.5e-2 + 2e-2|x|; LSE: 2e-3 absolute.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/attention.h"
#include "kernels/convert.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/deviation.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/paged_kv.h"
#include "kernels/cuda/rope.h"
#include "kernels/deviation.h"
#include "kernels/rope.h"
#include "kernels/tensor.h"

namespace ragkv::kernels::cuda {
namespace {

#define CUDA_OK(expr)                                                         \
  do {                                                                        \
    const cudaError_t e_ = (expr);                                            \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_);    \
  } while (0)

// DeviceBuffer: owning cudaMalloc'd bytes (test-only RAII).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes > 0 && cudaMalloc(&ptr_, bytes) != cudaSuccess) ptr_ = nullptr;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

template <typename T>
void Upload(DeviceBuffer& d, const std::vector<T>& h) {
  ASSERT_NE(d.get(), nullptr);
  CUDA_OK(cudaMemcpy(d.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
}
template <typename T>
void Download(const DeviceBuffer& d, std::vector<T>& h) {
  CUDA_OK(cudaMemcpy(h.data(), d.get(), h.size() * sizeof(T), cudaMemcpyDeviceToHost));
}

// Host storage of one dtype as raw bytes, with f32 access.
struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<uint8_t> bytes;
  HostTensor() = default;
  HostTensor(DType t, size_t n) : dtype(t), bytes(n * DTypeSize(t)) {}
  size_t size() const { return bytes.size() / DTypeSize(dtype); }
  void Set(size_t i, float x) {
    switch (dtype) {
      case DType::kF32: std::memcpy(&bytes[i * 4], &x, 4); break;
      case DType::kF16: { uint16_t h = FloatToHalf(x); std::memcpy(&bytes[i * 2], &h, 2); break; }
      default: { uint16_t b = FloatToBf16(x); std::memcpy(&bytes[i * 2], &b, 2); break; }
    }
  }
  float Get(size_t i) const {
    switch (dtype) {
      case DType::kF32: { float x; std::memcpy(&x, &bytes[i * 4], 4); return x; }
      case DType::kF16: { uint16_t h; std::memcpy(&h, &bytes[i * 2], 2); return HalfToFloat(h); }
      default: { uint16_t b; std::memcpy(&b, &bytes[i * 2], 2); return Bf16ToFloat(b); }
    }
  }
  std::vector<float> ToF32() const {
    std::vector<float> out(size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = Get(i);
    return out;
  }
  void* data() { return bytes.data(); }
};

void FillRandom(HostTensor& t, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> nd(0.0f, scale);
  for (size_t i = 0; i < t.size(); ++i) t.Set(i, nd(rng));
}

TensorView View3(void* data, DType t, int64_t d0, int64_t d1, int64_t d2) {
  return TensorView::Contiguous(data, t, {d0, d1, d2});
}

const char* Name(DType t) { return DTypeName(t); }

class CudaKernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::Status s = CudaAvailable();
    if (!s.ok()) GTEST_SKIP() << s.message();
    ASSERT_EQ(cudaStreamCreate(&stream_), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  void Sync() { ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess); }
  cudaStream_t stream_ = nullptr;
};

// ------------------------------------------------------------------ RoPE ----

struct RopeCase {
  DType dtype;
  RopeLayout layout;
  int heads, tokens, head_dim;
  int64_t token_stride_pad;  // extra elements per token row (strided view)
};

TEST_F(CudaKernelsTest, RerotateMatchesCpuTwin) {
  std::mt19937 rng(1234);
  std::vector<RopeCase> cases;
  for (DType t : {DType::kF16, DType::kBF16, DType::kF32}) {
    for (RopeLayout l : {RopeLayout::kInterleaved, RopeLayout::kHalfSplit}) {
      cases.push_back({t, l, 8, 333, 128, 0});
      cases.push_back({t, l, 3, 97, 64, 0});
      cases.push_back({t, l, 2, 50, 12, 0});   // not a multiple of 16 bytes: pairwise path
      cases.push_back({t, l, 4, 70, 64, 8});   // padded token stride, still 16-byte aligned
      cases.push_back({t, l, 2, 40, 64, 2});   // padded token stride, pairwise path
    }
  }
  for (const RopeCase& c : cases) {
    SCOPED_TRACE(absl::StrCat(Name(c.dtype), " layout=", static_cast<int>(c.layout), " heads=",
                              c.heads, " tokens=", c.tokens, " hd=", c.head_dim, " pad=",
                              c.token_stride_pad));
    const int64_t st = c.head_dim + c.token_stride_pad;
    const int64_t sh = st * c.tokens;
    HostTensor host(c.dtype, static_cast<size_t>(sh * c.heads));
    FillRandom(host, rng);
    // Chunks: an untouched prefix, then 1..5 chunks, then an untouched tail.
    std::uniform_int_distribution<int> nchunk(1, 5), dd(-3000, 3000);
    const int nc = nchunk(rng);
    std::vector<int32_t> cuts;
    std::uniform_int_distribution<int> cut(0, c.tokens);
    for (int i = 0; i < nc + 1; ++i) cuts.push_back(cut(rng));
    std::sort(cuts.begin(), cuts.end());
    std::vector<int32_t> deltas(nc);
    for (int& d : deltas) d = dd(rng);

    DeviceBuffer dk(host.bytes.size()), doff(cuts.size() * 4), ddel(deltas.size() * 4);
    Upload(dk, host.bytes);
    Upload(doff, cuts);
    Upload(ddel, deltas);
    RopeParams p;
    p.head_dim = c.head_dim;
    p.theta = 10000.0f;
    p.layout = c.layout;
    TensorView kv = View3(dk.get(), c.dtype, c.heads, c.tokens, c.head_dim);
    kv.stride[0] = sh;
    kv.stride[1] = st;
    ASSERT_TRUE(RerotateKeysByChunk(kv, doff.as<int32_t>(), ddel.as<int32_t>(), nc, p, stream_).ok());
    Sync();
    HostTensor gpu = host;
    Download(dk, gpu.bytes);

    // CPU twin, chunk by chunk, on a host copy.
    HostTensor cpu = host;
    for (int ch = 0; ch < nc; ++ch) {
      const int64_t t0 = cuts[ch], t1 = cuts[ch + 1];
      if (t1 == t0) continue;
      TensorView hv = View3(cpu.bytes.data() + t0 * st * DTypeSize(c.dtype), c.dtype, c.heads,
                            t1 - t0, c.head_dim);
      hv.stride[0] = sh;
      hv.stride[1] = st;
      ASSERT_TRUE(RerotateKeys(hv, deltas[ch], p).ok());
    }
    const float atol = c.dtype == DType::kF32 ? 1e-5f : c.dtype == DType::kF16 ? 1e-3f : 1e-2f;
    const float rtol = c.dtype == DType::kF32 ? 1e-5f : c.dtype == DType::kF16 ? 1e-3f : 8e-3f;
    int bad = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
      const float a = gpu.Get(i), b = cpu.Get(i);
      if (!(std::fabs(a - b) <= atol + rtol * std::fabs(b))) {
        if (++bad < 5) ADD_FAILURE() << "element " << i << ": gpu " << a << " cpu " << b;
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

// ------------------------------------------------------------- Deviation ----

TEST_F(CudaKernelsTest, KvDeviationMatchesCpuTwin) {
  std::mt19937 rng(99);
  struct Case { DType t; int heads, tokens, hd; int64_t pad; };
  for (const Case& c : std::vector<Case>{{DType::kF16, 8, 517, 128, 0},
                                         {DType::kBF16, 4, 100, 64, 0},
                                         {DType::kF32, 2, 77, 64, 4},
                                         {DType::kF16, 3, 33, 10, 0},
                                         {DType::kBF16, 2, 60, 64, 3}}) {
    SCOPED_TRACE(absl::StrCat(Name(c.t), " ", c.heads, "x", c.tokens, "x", c.hd, " pad ", c.pad));
    const int64_t st = c.hd + c.pad, sh = st * c.tokens;
    const size_t n = static_cast<size_t>(sh * c.heads);
    HostTensor a(c.t, n), b(c.t, n), va(c.t, n), vb(c.t, n);
    FillRandom(a, rng);
    FillRandom(b, rng);
    FillRandom(va, rng);
    FillRandom(vb, rng);
    DeviceBuffer da(a.bytes.size()), db(b.bytes.size()), dva(a.bytes.size()), dvb(a.bytes.size()),
        dout(c.tokens * 4);
    Upload(da, a.bytes);
    Upload(db, b.bytes);
    Upload(dva, va.bytes);
    Upload(dvb, vb.bytes);
    auto view = [&](void* p, DType t) {
      TensorView v = View3(p, t, c.heads, c.tokens, c.hd);
      v.stride[0] = sh;
      v.stride[1] = st;
      return v;
    };
    ASSERT_TRUE(KvDeviation(view(da.get(), c.t), view(db.get(), c.t), dout.as<float>(), false, stream_).ok());
    ASSERT_TRUE(KvDeviation(view(dva.get(), c.t), view(dvb.get(), c.t), dout.as<float>(), true, stream_).ok());
    Sync();
    std::vector<float> gpu(c.tokens);
    Download(dout, gpu);

    std::vector<float> fa = a.ToF32(), fb = b.ToF32(), fva = va.ToF32(), fvb = vb.ToF32();
    std::vector<float> cpu(c.tokens);
    ASSERT_TRUE(kernels::KvDeviation(view(fa.data(), DType::kF32), view(fb.data(), DType::kF32),
                                     cpu.data(), false).ok());
    ASSERT_TRUE(kernels::KvDeviation(view(fva.data(), DType::kF32), view(fvb.data(), DType::kF32),
                                     cpu.data(), true).ok());
    for (int t = 0; t < c.tokens; ++t) {
      EXPECT_NEAR(gpu[t], cpu[t], 1e-4f * std::fabs(cpu[t]) + 1e-5f) << "token " << t;
    }
  }
}

TEST_F(CudaKernelsTest, TopKMatchesCpuTwinWithTiesNanAndInf) {
  std::mt19937 rng(7);
  for (int n : {1, 5, 64, 1000, 20011}) {
    std::vector<float> scores(n);
    std::uniform_int_distribution<int> bucket(0, 40), special(0, 30);
    for (float& s : scores) {
      s = static_cast<float>(bucket(rng)) * 0.25f - 3.0f;  // many ties
      const int sp = special(rng);
      if (sp == 0) s = std::numeric_limits<float>::quiet_NaN();
      if (sp == 1) s = std::numeric_limits<float>::infinity();
      if (sp == 2) s = -std::numeric_limits<float>::infinity();
      if (sp == 3) s = -0.0f;
      if (sp == 4) s = 0.0f;
    }
    absl::StatusOr<size_t> ws = TopKWorkspaceBytes(n);
    ASSERT_TRUE(ws.ok()) << ws.status();
    DeviceBuffer dscores(n * 4), dout(n * 4), dws(*ws);
    Upload(dscores, scores);
    for (int k : {0, 1, n / 3, n}) {
      SCOPED_TRACE(absl::StrCat("n=", n, " k=", k));
      std::vector<int32_t> gpu(n, -7), cpu(k);
      Upload(dout, gpu);
      ASSERT_TRUE(TopK(dscores.as<float>(), n, k, dout.as<int32_t>(), dws.get(), *ws, stream_).ok());
      Sync();
      Download(dout, gpu);
      ASSERT_TRUE(kernels::TopK(scores.data(), n, k, cpu.data()).ok());
      for (int i = 0; i < k; ++i) {
        ASSERT_EQ(gpu[i], cpu[i]) << "rank " << i;
      }
      if (k < n) {
        EXPECT_EQ(gpu[k], -7) << "wrote past k";
      }
    }
  }
}

// -------------------------------------------------------------- Paged KV ----

TEST_F(CudaKernelsTest, PagedScatterGatherMatchNaive) {
  std::mt19937 rng(4242);
  struct Case { DType t; int kv_heads, hd, block_size; bool hnd; };  // hnd: [blocks, heads, slots, d]
  for (const Case& c : std::vector<Case>{{DType::kF16, 8, 128, 16, false},
                                         {DType::kBF16, 2, 64, 16, true},
                                         {DType::kF32, 3, 12, 16, false},
                                         {DType::kF16, 1, 6, 8, true}}) {
    SCOPED_TRACE(absl::StrCat(Name(c.t), " kvh=", c.kv_heads, " hd=", c.hd, " bs=", c.block_size,
                              " hnd=", c.hnd));
    const int num_seqs = 3, max_blocks = 6, num_blocks = 24, tokens = 120;
    const size_t es = DTypeSize(c.t);
    // Block table: a random permutation of physical blocks, one unmapped entry.
    std::vector<int32_t> perm(num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> table(num_seqs * max_blocks);
    for (size_t i = 0; i < table.size(); ++i) table[i] = perm[i % num_blocks];
    table[2 * max_blocks + 5] = -1;
    // Rows: distinct (seq, pos) slots and distinct flat rows, plus invalid rows.
    std::vector<std::pair<int, int>> slots;
    for (int s = 0; s < num_seqs; ++s)
      for (int p = 0; p < max_blocks * c.block_size; ++p) slots.push_back({s, p});
    std::shuffle(slots.begin(), slots.end(), rng);
    std::vector<int32_t> flat_rows(tokens);
    std::iota(flat_rows.begin(), flat_rows.end(), 0);
    std::shuffle(flat_rows.begin(), flat_rows.end(), rng);
    const int n = 90;
    std::vector<int32_t> rows(n), seqs(n), pos(n);
    int expected_invalid = 0;
    for (int i = 0; i < n; ++i) {
      rows[i] = flat_rows[i];
      seqs[i] = slots[i].first;
      pos[i] = slots[i].second;
      if (seqs[i] == 2 && pos[i] / c.block_size == 5) ++expected_invalid;  // unmapped block
    }
    pos[n - 1] = max_blocks * c.block_size + 3;  // beyond the table
    rows[n - 2] = tokens + 5;                    // beyond the flat tensor
    seqs[n - 3] = num_seqs;                      // no such sequence
    expected_invalid = 0;
    auto valid = [&](int i) {
      return rows[i] >= 0 && rows[i] < tokens && seqs[i] >= 0 && seqs[i] < num_seqs &&
             pos[i] >= 0 && pos[i] / c.block_size < max_blocks &&
             table[seqs[i] * max_blocks + pos[i] / c.block_size] >= 0;
    };
    for (int i = 0; i < n; ++i) expected_invalid += valid(i) ? 0 : 1;

    const size_t flat_n = static_cast<size_t>(c.kv_heads) * tokens * c.hd;
    const size_t cache_n = static_cast<size_t>(num_blocks) * c.block_size * c.kv_heads * c.hd;
    HostTensor k(c.t, flat_n), v(c.t, flat_n);
    FillRandom(k, rng);
    FillRandom(v, rng);
    std::vector<uint8_t> kc(cache_n * es, 0xA5), vc(cache_n * es, 0x5A);
    PagedKvCache cache;
    cache.dtype = c.t;
    cache.num_blocks = num_blocks;
    cache.block_size = c.block_size;
    cache.num_kv_heads = c.kv_heads;
    cache.head_dim = c.hd;
    int64_t sb, ss, sh;
    if (c.hnd) {
      sh = static_cast<int64_t>(c.block_size) * c.hd;
      ss = c.hd;
      sb = sh * c.kv_heads;
      cache.stride_block = sb;
      cache.stride_slot = ss;
      cache.stride_head = sh;
    } else {
      sh = c.hd;
      ss = static_cast<int64_t>(c.kv_heads) * c.hd;
      sb = ss * c.block_size;
    }
    // Naive reference scatter.
    std::vector<uint8_t> kc_ref = kc, vc_ref = vc;
    for (int i = 0; i < n; ++i) {
      if (!valid(i)) continue;
      const int64_t blk = table[seqs[i] * max_blocks + pos[i] / c.block_size];
      const int64_t slot = pos[i] % c.block_size;
      for (int h = 0; h < c.kv_heads; ++h) {
        const size_t src = (static_cast<size_t>(h) * tokens + rows[i]) * c.hd * es;
        const size_t dst = (blk * sb + slot * ss + h * sh) * es;
        std::memcpy(&kc_ref[dst], &k.bytes[src], c.hd * es);
        std::memcpy(&vc_ref[dst], &v.bytes[src], c.hd * es);
      }
    }
    DeviceBuffer dk(k.bytes.size()), dv(v.bytes.size()), dkc(kc.size()), dvc(vc.size()),
        dtable(table.size() * 4), drows(n * 4), dseqs(n * 4), dpos(n * 4), dinv(4);
    Upload(dk, k.bytes);
    Upload(dv, v.bytes);
    Upload(dkc, kc);
    Upload(dvc, vc);
    Upload(dtable, table);
    Upload(drows, rows);
    Upload(dseqs, seqs);
    Upload(dpos, pos);
    std::vector<int32_t> zero(1, 0);
    Upload(dinv, zero);
    cache.k_cache = dkc.get();
    cache.v_cache = dvc.get();
    BlockTable bt{dtable.as<int32_t>(), num_seqs, max_blocks};
    PagedRows pr{drows.as<int32_t>(), dseqs.as<int32_t>(), dpos.as<int32_t>(), n, dinv.as<int32_t>()};
    const TensorView kvw = View3(dk.get(), c.t, c.kv_heads, tokens, c.hd);
    const TensorView vvw = View3(dv.get(), c.t, c.kv_heads, tokens, c.hd);
    ASSERT_TRUE(ScatterRowsToPaged(kvw, vvw, pr, cache, bt, stream_).ok());
    Sync();
    std::vector<uint8_t> kc_gpu(kc.size()), vc_gpu(vc.size());
    Download(dkc, kc_gpu);
    Download(dvc, vc_gpu);
    EXPECT_TRUE(kc_gpu == kc_ref) << "K cache differs from the naive scatter";
    EXPECT_TRUE(vc_gpu == vc_ref) << "V cache differs from the naive scatter";
    std::vector<int32_t> inv(1);
    Download(dinv, inv);
    EXPECT_EQ(inv[0], expected_invalid);

    // Gather back into poisoned flat tensors: valid rows equal the originals,
    // all other bytes untouched.
    std::vector<uint8_t> poison(k.bytes.size(), 0xEE);
    Upload(dk, poison);
    Upload(dv, poison);
    ASSERT_TRUE(GatherRowsFromPaged(cache, bt, pr, kvw, vvw, stream_).ok());
    Sync();
    std::vector<uint8_t> kg(k.bytes.size()), vg(v.bytes.size());
    Download(dk, kg);
    Download(dv, vg);
    std::vector<uint8_t> kg_ref = poison, vg_ref = poison;
    for (int i = 0; i < n; ++i) {
      if (!valid(i)) continue;
      for (int h = 0; h < c.kv_heads; ++h) {
        const size_t off = (static_cast<size_t>(h) * tokens + rows[i]) * c.hd * es;
        std::memcpy(&kg_ref[off], &k.bytes[off], c.hd * es);
        std::memcpy(&vg_ref[off], &v.bytes[off], c.hd * es);
      }
    }
    EXPECT_TRUE(kg == kg_ref) << "gathered K differs";
    EXPECT_TRUE(vg == vg_ref) << "gathered V differs";
  }
}

// ------------------------------------------------------------- Attention ----

struct AttnCase {
  DType dtype;
  int num_heads, num_kv_heads, head_dim;
  AttentionAlgo algo;
  CausalMode causal;
  float q_scale;  // larger -> sharper softmax, more row-max updates
};

std::string CaseName(const AttnCase& c) {
  return absl::StrCat(Name(c.dtype), " H=", c.num_heads, " KVH=", c.num_kv_heads, " hd=",
                      c.head_dim, " algo=", static_cast<int>(c.algo), " causal=",
                      static_cast<int>(c.causal), " qs=", c.q_scale);
}

void RunAttentionCase(const AttnCase& c, std::mt19937& rng, cudaStream_t stream,
                      int tile_vectors = 0) {
  SCOPED_TRACE(CaseName(c) + " tile_vectors=" + std::to_string(tile_vectors));
  // A varlen batch: a scattered-rows request, a full prefill, a decode row.
  std::uniform_int_distribution<int> kvlen(40, 300);
  std::vector<int32_t> kv_lens = {kvlen(rng), kvlen(rng) / 3 + 1, kvlen(rng)};
  std::vector<std::vector<int32_t>> req_pos(3);
  {
    // scattered rows: a random subset of positions, always including the last
    std::vector<int32_t> all(kv_lens[0]);
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    const int r = std::uniform_int_distribution<int>(1, std::min(90, kv_lens[0]))(rng);
    req_pos[0].assign(all.begin(), all.begin() + r);
    if (std::find(req_pos[0].begin(), req_pos[0].end(), kv_lens[0] - 1) == req_pos[0].end())
      req_pos[0].push_back(kv_lens[0] - 1);
    std::sort(req_pos[0].begin(), req_pos[0].end());
    req_pos[1].resize(kv_lens[1]);
    std::iota(req_pos[1].begin(), req_pos[1].end(), 0);
    req_pos[2] = {kv_lens[2] - 1};
  }
  std::vector<int32_t> q_indptr = {0}, kv_indptr = {0}, positions;
  for (int b = 0; b < 3; ++b) {
    q_indptr.push_back(q_indptr.back() + static_cast<int32_t>(req_pos[b].size()));
    kv_indptr.push_back(kv_indptr.back() + kv_lens[b]);
    positions.insert(positions.end(), req_pos[b].begin(), req_pos[b].end());
  }
  const int64_t rows = q_indptr.back(), total_kv = kv_indptr.back();
  const int H = c.num_heads, KVH = c.num_kv_heads, D = c.head_dim;

  HostTensor q(c.dtype, rows * H * D), k(c.dtype, KVH * total_kv * D), v(c.dtype, KVH * total_kv * D);
  FillRandom(q, rng, c.q_scale);
  FillRandom(k, rng);
  FillRandom(v, rng);

  AttentionConfig cfg;
  cfg.num_heads = H;
  cfg.num_kv_heads = KVH;
  cfg.head_dim = D;
  cfg.dtype = c.dtype;
  cfg.causal = c.causal;
  cfg.algo = c.algo;
  cfg.tile_vectors = tile_vectors;
  absl::StatusOr<SelectiveAttentionPlan> plan = SelectiveAttentionPlan::Create(cfg, q_indptr, kv_indptr);
  ASSERT_TRUE(plan.ok()) << plan.status();

  DeviceBuffer dq(q.bytes.size()), dk(k.bytes.size()), dv(v.bytes.size()), dout(q.bytes.size()),
      dpos(positions.size() * 4), dlse(rows * H * 4), dws(std::max<size_t>(plan->workspace_bytes(), 16));
  Upload(dq, q.bytes);
  Upload(dk, k.bytes);
  Upload(dv, v.bytes);
  Upload(dpos, positions);
  std::vector<uint8_t> poison(q.bytes.size(), 0xFF);  // NaN in every float type
  Upload(dout, poison);
  ASSERT_TRUE(plan->Upload(dws.get(), dws.bytes(), stream).ok());
  SelectiveAttentionArgs args;
  args.q = View3(dq.get(), c.dtype, rows, H, D);
  args.k = View3(dk.get(), c.dtype, KVH, total_kv, D);
  args.v = View3(dv.get(), c.dtype, KVH, total_kv, D);
  args.out = View3(dout.get(), c.dtype, rows, H, D);
  args.positions = dpos.as<int32_t>();
  args.lse = dlse.as<float>();
  absl::Status st = plan->Run(args, dws.get(), dws.bytes(), stream);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  HostTensor out(c.dtype, q.size());
  Download(dout, out.bytes);
  std::vector<float> lse(rows * H);
  Download(dlse, lse);

  // CPU twin per request on the f32 values of the same (rounded) inputs.
  std::vector<float> fq = q.ToF32(), fk = k.ToF32(), fv = v.ToF32();
  std::vector<float> ref(rows * H * D);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int b = 0; b < 3; ++b) {
    const int64_t r0 = q_indptr[b], nr = q_indptr[b + 1] - r0;
    const int64_t k0 = kv_indptr[b], nk = kv_indptr[b + 1] - k0;
    std::vector<float> kb(KVH * nk * D), vb(KVH * nk * D);
    for (int h = 0; h < KVH; ++h)
      for (int64_t t = 0; t < nk; ++t)
        for (int d = 0; d < D; ++d) {
          kb[(h * nk + t) * D + d] = fk[(h * total_kv + k0 + t) * D + d];
          vb[(h * nk + t) * D + d] = fv[(h * total_kv + k0 + t) * D + d];
        }
    AttentionParams p;
    p.num_heads = H;
    p.num_kv_heads = KVH;
    p.head_dim = D;
    p.scale = scale;
    p.causal = c.causal;
    ASSERT_TRUE(kernels::SelectiveAttention(
                    TensorView::Contiguous(fq.data() + r0 * H * D, DType::kF32, {nr, H, D}),
                    positions.data() + r0,
                    TensorView::Contiguous(kb.data(), DType::kF32, {KVH, nk, D}),
                    TensorView::Contiguous(vb.data(), DType::kF32, {KVH, nk, D}),
                    TensorView::Contiguous(ref.data() + r0 * H * D, DType::kF32, {nr, H, D}), p)
                    .ok());
    // Naive double-precision LSE.
    const int g = H / KVH;
    for (int64_t r = 0; r < nr; ++r) {
      const int64_t limit = c.causal == CausalMode::kExact ? positions[r0 + r] : nk - nr + r;
      for (int h = 0; h < H; ++h) {
        const float gl = lse[(r0 + r) * H + h];
        if (limit < 0) {
          EXPECT_TRUE(std::isinf(gl) && gl < 0) << "row " << r0 + r;
          continue;
        }
        double mx = -1e300;
        std::vector<double> s(limit + 1);
        for (int64_t j = 0; j <= limit; ++j) {
          double dot = 0;
          for (int d = 0; d < D; ++d)
            dot += double(fq[((r0 + r) * H + h) * D + d]) * kb[((h / g) * nk + j) * D + d];
          s[j] = dot * scale;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (double x : s) sum += std::exp(x - mx);
        EXPECT_NEAR(gl, mx + std::log(sum), 2e-3) << "lse row " << r0 + r << " head " << h;
      }
    }
  }
  const bool tc = c.algo != AttentionAlgo::kSimt && c.dtype != DType::kF32 && (D == 64 || D == 128);
  float atol, rtol;
  if (c.dtype == DType::kF32) {
    atol = 2e-5f;
    rtol = 1e-4f;
  } else if (c.dtype == DType::kF16) {
    atol = tc ? 2e-3f : 1e-3f;
    rtol = tc ? 5e-3f : 2e-3f;
  } else {
    atol = tc ? 1.5e-2f : 8e-3f;
    rtol = tc ? 2e-2f : 1e-2f;
  }
  int bad = 0;
  double max_err = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const float a = out.Get(i), b = ref[i];
    const float err = std::fabs(a - b);
    if (!(err <= atol + rtol * std::fabs(b))) {
      if (++bad < 6) ADD_FAILURE() << "out[" << i << "] (row " << i / (H * D) << ", head "
                                   << (i / D) % H << ", d " << i % D << "): gpu " << a << " cpu " << b;
    }
    if (std::isfinite(err)) max_err = std::max<double>(max_err, err);
  }
  EXPECT_EQ(bad, 0) << "max abs err " << max_err;
}

TEST_F(CudaKernelsTest, SelectiveAttentionTensorCoreMatchesCpuTwin) {
  std::mt19937 rng(2024);
  for (int tv : {64, 128})  // both tensor-core kernel shapes (the plan's auto pick is 64 here)
    for (DType t : {DType::kF16, DType::kBF16})
      for (int hd : {64, 128})
        for (CausalMode m : {CausalMode::kExact, CausalMode::kBottomRight}) {
          RunAttentionCase({t, 8, 2, hd, AttentionAlgo::kTensorCore, m, 1.0f}, rng, stream_, tv);
          RunAttentionCase({t, 4, 4, hd, AttentionAlgo::kTensorCore, m, 3.0f}, rng, stream_, tv);
        }
  RunAttentionCase({DType::kF16, 32, 8, 128, AttentionAlgo::kTensorCore, CausalMode::kExact, 2.0f},
                   rng, stream_, 128);
  RunAttentionCase({DType::kF16, 32, 8, 128, AttentionAlgo::kTensorCore, CausalMode::kExact, 2.0f},
                   rng, stream_);
  RunAttentionCase({DType::kBF16, 6, 1, 64, AttentionAlgo::kAuto, CausalMode::kExact, 1.0f}, rng,
                   stream_);
}

TEST_F(CudaKernelsTest, SelectiveAttentionSimtMatchesCpuTwin) {
  std::mt19937 rng(77);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16})
    for (CausalMode m : {CausalMode::kExact, CausalMode::kBottomRight}) {
      RunAttentionCase({t, 8, 2, 64, AttentionAlgo::kSimt, m, 1.0f}, rng, stream_);
      RunAttentionCase({t, 3, 1, 40, AttentionAlgo::kAuto, m, 2.0f}, rng, stream_);
    }
  RunAttentionCase({DType::kF16, 4, 2, 256, AttentionAlgo::kSimt, CausalMode::kExact, 1.0f}, rng,
                   stream_);
}

// ------------------------------------------- Validation (no device needed) ----

TEST(CudaKernelsValidation, PlanRejectsBadConfigAndIndptr) {
  AttentionConfig cfg;
  cfg.num_heads = 8;
  cfg.num_kv_heads = 3;
  cfg.head_dim = 64;
  const std::vector<int32_t> qi = {0, 4}, ki = {0, 10};
  EXPECT_EQ(SelectiveAttentionPlan::Create(cfg, qi, ki).status().code(),
            absl::StatusCode::kInvalidArgument);
  cfg.num_kv_heads = 2;
  cfg.head_dim = 96;
  cfg.algo = AttentionAlgo::kTensorCore;
  EXPECT_EQ(SelectiveAttentionPlan::Create(cfg, qi, ki).status().code(),
            absl::StatusCode::kInvalidArgument);
  cfg.algo = AttentionAlgo::kAuto;
  EXPECT_TRUE(SelectiveAttentionPlan::Create(cfg, qi, ki).ok());
  const std::vector<int32_t> bad = {0, 5, 3};
  EXPECT_FALSE(SelectiveAttentionPlan::Create(cfg, bad, std::vector<int32_t>{0, 1, 2}).ok());
  EXPECT_FALSE(SelectiveAttentionPlan::Create(cfg, std::vector<int32_t>{0, 2},
                                              std::vector<int32_t>{0, 0}).ok());  // rows, no keys
}

TEST(CudaKernelsValidation, PlanWorkItemsAndWorkspace) {
  AttentionConfig cfg;
  cfg.num_heads = 32;
  cfg.num_kv_heads = 8;
  cfg.head_dim = 128;
  // 3 requests: 100 rows (400 vectors -> 7 tiles), 0 rows, 16 rows (64 vectors -> 1 tile).
  const std::vector<int32_t> qi = {0, 100, 100, 116}, ki = {0, 500, 600, 2600};
  absl::StatusOr<SelectiveAttentionPlan> plan = SelectiveAttentionPlan::Create(cfg, qi, ki);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->tile_vectors(), 64);  // 5 large tiles x 8 kv heads: too few CTAs for 128
  EXPECT_EQ(plan->num_work_items(), 8);
  EXPECT_EQ(plan->workspace_bytes(), 8u * 32u);
  EXPECT_EQ(plan->total_rows(), 116);
  EXPECT_EQ(plan->total_kv(), 2600);
  EXPECT_FLOAT_EQ(plan->config().scale, 1.0f / std::sqrt(128.0f));
  cfg.tile_vectors = 128;  // forced: 400 vectors -> 4 tiles, 64 -> 1
  plan = SelectiveAttentionPlan::Create(cfg, qi, ki);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->tile_vectors(), 128);
  EXPECT_EQ(plan->num_work_items(), 5);
  cfg.tile_vectors = 96;
  EXPECT_EQ(SelectiveAttentionPlan::Create(cfg, qi, ki).status().code(),
            absl::StatusCode::kInvalidArgument);
  // 1536 rows x 4 heads per kv head -> 48 large tiles x 8 kv heads = 384 CTAs: 128.
  cfg.tile_vectors = 0;
  plan = SelectiveAttentionPlan::Create(cfg, std::vector<int32_t>{0, 1536},
                                        std::vector<int32_t>{0, 4096});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->tile_vectors(), 128);
  EXPECT_EQ(plan->num_work_items(), 48);
}

TEST(CudaKernelsValidation, RunRejectsMismatchedTensorsBeforeTouchingTheDevice) {
  AttentionConfig cfg;
  cfg.num_heads = 4;
  cfg.num_kv_heads = 2;
  cfg.head_dim = 64;
  const std::vector<int32_t> qi = {0, 3}, ki = {0, 9};
  absl::StatusOr<SelectiveAttentionPlan> plan = SelectiveAttentionPlan::Create(cfg, qi, ki);
  ASSERT_TRUE(plan.ok());
  alignas(16) static char fake[16];
  SelectiveAttentionArgs a;
  a.q = View3(fake, DType::kF16, 3, 4, 64);
  a.k = View3(fake, DType::kF16, 2, 9, 64);
  a.v = View3(fake, DType::kF16, 2, 9, 64);
  a.out = View3(fake, DType::kF16, 3, 4, 32);  // wrong head_dim
  EXPECT_EQ(plan->Run(a, fake, sizeof(fake), nullptr).code(), absl::StatusCode::kInvalidArgument);
  a.out = View3(fake, DType::kBF16, 3, 4, 64);  // wrong dtype
  EXPECT_EQ(plan->Run(a, fake, sizeof(fake), nullptr).code(), absl::StatusCode::kInvalidArgument);
  a.out = View3(fake, DType::kF16, 3, 4, 64);
  a.positions = nullptr;  // kExact needs positions
  EXPECT_EQ(plan->Run(a, fake, 1024, nullptr).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaKernelsValidation, OtherEntryPointsRejectBadArguments) {
  alignas(16) static char fake[64];
  RopeParams p;
  p.head_dim = 64;
  const int32_t* ip = reinterpret_cast<const int32_t*>(fake);
  EXPECT_EQ(RerotateKeysByChunk(View3(fake, DType::kF16, 2, 3, 32), ip, ip, 1, p, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // head_dim mismatch
  EXPECT_EQ(RerotateKeysByChunk(View3(fake, DType::kI8, 2, 3, 64), ip, ip, 1, p, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // dtype
  EXPECT_EQ(RerotateKeysByChunk(View3(fake, DType::kF16, 2, 3, 64), ip, ip, 0, p, nullptr).code(),
            absl::StatusCode::kInvalidArgument);  // no chunks
  EXPECT_EQ(KvDeviation(View3(fake, DType::kF16, 2, 3, 64), View3(fake, DType::kBF16, 2, 3, 64),
                        reinterpret_cast<float*>(fake), false, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TopK(reinterpret_cast<const float*>(fake), 4, 5, nullptr, fake, 64, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  PagedKvCache cache;
  cache.num_kv_heads = 2;
  cache.head_dim = 64;
  cache.num_blocks = 4;
  cache.block_size = 0;  // bad
  PagedRows rows;
  rows.count = 1;
  EXPECT_EQ(ScatterRowsToPaged(View3(fake, DType::kF16, 2, 3, 64), View3(fake, DType::kF16, 2, 3, 64),
                               rows, cache, BlockTable{}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ragkv::kernels::cuda
