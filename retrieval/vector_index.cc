#include "retrieval/vector_index.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include <faiss/IVFlib.h>
#include <faiss/IndexFlatCodes.h>
#include <faiss/IndexHNSW.h>
#include <faiss/IndexIDMap.h>
#include <faiss/IndexIVF.h>
#include <faiss/IndexRefine.h>
#include <faiss/impl/AuxIndexStructures.h>
#include <faiss/impl/FaissException.h>
#include <faiss/impl/IDSelector.h>
#include <faiss/impl/io.h>
#include <faiss/index_factory.h>
#include <faiss/index_io.h>
#include <xxhash.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "retrieval/internal/check_finite.h"
#include "retrieval/internal/codec.h"

namespace ragkv::retrieval {
namespace {

constexpr char kMagic[8] = {'R', 'K', 'V', 'V', 'I', 'D', 'X', '1'};
constexpr uint32_t kFormatVersion = 1;
using idx_t = faiss::Index::idx_t;

// The one place FAISS exceptions are translated.
template <typename F>
absl::Status FaissCall(absl::string_view what, absl::StatusCode code, F&& f) {
  try {
    f();
    return absl::OkStatus();
  } catch (const std::exception& e) {
    return absl::Status(code, absl::StrCat(what, ": ", e.what()));
  }
}

using internal::CheckFinite;

faiss::MetricType ToFaiss(Metric m) {
  return m == Metric::kL2 ? faiss::METRIC_L2 : faiss::METRIC_INNER_PRODUCT;
}

absl::StatusOr<faiss::Index*> NewSubIndex(const VectorIndexOptions& o) {
  faiss::Index* sub = nullptr;
  RETURN_IF_ERROR(FaissCall(absl::StrCat("unknown or invalid FAISS factory string '", o.factory, "'"),
                            absl::StatusCode::kInvalidArgument, [&] {
                              sub = faiss::index_factory(o.dim, o.factory.c_str(), ToFaiss(o.metric));
                            }));
  return sub;
}

}  // namespace

VectorIndex::VectorIndex(VectorIndexOptions options, std::unique_ptr<IdMap> index)
    : options_(std::move(options)), index_(std::move(index)) {
  absl::MutexLock lock(&mu_);
  ApplyRuntimeParams();
}

VectorIndex::~VectorIndex() = default;

void VectorIndex::ApplyRuntimeParams() {
  faiss::Index* sub = index_->index;
  if (auto* hnsw = dynamic_cast<faiss::IndexHNSW*>(sub)) hnsw->hnsw.efSearch = options_.hnsw_ef_search;
  if (auto* refine = dynamic_cast<faiss::IndexRefine*>(sub)) {
    refine->k_factor = static_cast<float>(options_.refine_k_factor);
    sub = refine->base_index;
  }
  if (auto* ivf = faiss::ivflib::try_extract_index_ivf(sub)) ivf->nprobe = options_.ivf_nprobe;
}

bool VectorIndex::SupportsRemove() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Only flat code storage keeps IDMap's positional labels consistent after
  // remove_ids; IVF relabels nothing and HNSW cannot remove (see header).
  return dynamic_cast<const faiss::IndexFlatCodes*>(index_->index) != nullptr;
}

absl::StatusOr<std::unique_ptr<VectorIndex>> VectorIndex::Create(VectorIndexOptions options) {
  if (options.dim <= 0) return absl::InvalidArgumentError("VectorIndex: dim must be > 0");
  if (options.omp_threads < 1) return absl::InvalidArgumentError("VectorIndex: omp_threads must be >= 1");
  if (options.hnsw_ef_search < 1 || options.ivf_nprobe < 1 || options.refine_k_factor < 1) {
    return absl::InvalidArgumentError(
        "VectorIndex: hnsw_ef_search, ivf_nprobe and refine_k_factor must be >= 1");
  }
  if (options.factory.empty() || absl::StrContains(options.factory, "IDMap")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "VectorIndex: factory string must be non-empty and must not contain IDMap (added here): '",
        options.factory, "'"));
  }
  omp_set_num_threads(options.omp_threads);
  ASSIGN_OR_RETURN(faiss::Index * sub, NewSubIndex(options));
  auto idmap = std::make_unique<IdMap>(sub);
  idmap->own_fields = true;
  return std::unique_ptr<VectorIndex>(new VectorIndex(std::move(options), std::move(idmap)));
}

bool VectorIndex::is_trained() const {
  absl::ReaderMutexLock lock(&mu_);
  return index_->is_trained;
}

absl::Status VectorIndex::Train(absl::Span<const float> vectors) {
  const size_t dim = static_cast<size_t>(options_.dim);
  if (vectors.empty() || vectors.size() % dim != 0) {
    return absl::InvalidArgumentError(absl::StrCat("VectorIndex::Train: ", vectors.size(),
                                                   " floats is not a positive multiple of dim ", dim));
  }
  RETURN_IF_ERROR(CheckFinite(vectors, "VectorIndex::Train"));
  absl::MutexLock lock(&mu_);
  omp_set_num_threads(options_.omp_threads);
  return FaissCall("VectorIndex::Train", absl::StatusCode::kInvalidArgument,
                   [&] { index_->train(static_cast<idx_t>(vectors.size() / dim), vectors.data()); });
}

absl::Status VectorIndex::Add(absl::Span<const int64_t> ids, absl::Span<const float> vectors) {
  const size_t dim = static_cast<size_t>(options_.dim);
  if (vectors.size() != ids.size() * dim) {
    return absl::InvalidArgumentError(absl::StrCat("VectorIndex::Add: ", vectors.size(), " floats for ",
                                                   ids.size(), " ids of dim ", dim));
  }
  RETURN_IF_ERROR(CheckFinite(vectors, "VectorIndex::Add"));
  absl::flat_hash_set<int64_t> batch;
  for (int64_t id : ids) {
    if (id < 0) return absl::InvalidArgumentError(absl::StrCat("VectorIndex::Add: negative id ", id));
    if (!batch.insert(id).second) {
      return absl::AlreadyExistsError(absl::StrCat("VectorIndex::Add: id ", id, " repeated in batch"));
    }
  }
  if (ids.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (!index_->is_trained) {
    return absl::FailedPreconditionError("VectorIndex::Add: index is not trained (call Train first)");
  }
  for (int64_t id : ids) {
    if (index_->rev_map.count(id) != 0) {
      return absl::AlreadyExistsError(absl::StrCat("VectorIndex::Add: id ", id, " already present"));
    }
  }
  omp_set_num_threads(options_.omp_threads);
  return FaissCall("VectorIndex::Add", absl::StatusCode::kInternal, [&] {
    index_->add_with_ids(static_cast<idx_t>(ids.size()), vectors.data(),
                         reinterpret_cast<const idx_t*>(ids.data()));
  });
}

void VectorIndex::Reserve(int64_t more) {
  if (more <= 0) return;
  absl::MutexLock lock(&mu_);
  const size_t need = static_cast<size_t>(index_->ntotal + more);
  auto grow = [need](auto& v, size_t per) {
    if (need * per > v.capacity()) v.reserve(std::max(need * per, 2 * v.capacity()));
  };
  if (auto* flat = dynamic_cast<faiss::IndexFlatCodes*>(index_->index)) grow(flat->codes, flat->code_size);
  grow(index_->id_map, 1);
}

absl::StatusOr<int64_t> VectorIndex::Remove(absl::Span<const int64_t> ids) {
  absl::MutexLock lock(&mu_);
  std::vector<idx_t> present;
  for (int64_t id : ids) {
    if (index_->rev_map.count(id) != 0 && !tombstones_.contains(id)) present.push_back(id);
  }
  if (present.empty()) return 0;
  if (!SupportsRemove()) {
    for (idx_t id : present) tombstones_.insert(id);
    return static_cast<int64_t>(present.size());
  }
  omp_set_num_threads(options_.omp_threads);
  size_t removed = 0;
  RETURN_IF_ERROR(FaissCall("VectorIndex::Remove", absl::StatusCode::kInternal, [&] {
    faiss::IDSelectorBatch sel(present.size(), present.data());
    removed = index_->remove_ids(sel);
  }));
  // FAISS compacts the codes but keeps the capacity: a deleted large
  // document would otherwise stay resident.
  ReleaseSpareLocked();
  return static_cast<int64_t>(removed);
}

void VectorIndex::ReleaseSpare() {
  absl::MutexLock lock(&mu_);
  ReleaseSpareLocked();
}

void VectorIndex::ReleaseSpareLocked() {
  auto shrink = [](auto& v) {
    if (v.capacity() > 4 * v.size()) v.shrink_to_fit();
  };
  if (auto* flat = dynamic_cast<faiss::IndexFlatCodes*>(index_->index)) shrink(flat->codes);
  shrink(index_->id_map);
}

absl::StatusOr<std::vector<std::vector<SearchHit>>> VectorIndex::Search(
    absl::Span<const float> queries, int k, const absl::flat_hash_set<int64_t>* allowed) const {
  const size_t dim = static_cast<size_t>(options_.dim);
  if (k <= 0 || k > kMaxK) {
    return absl::InvalidArgumentError(absl::StrCat("VectorIndex::Search: k must be in [1, ", kMaxK,
                                                   "], got ", k));
  }
  if (queries.empty() || queries.size() % dim != 0) {
    return absl::InvalidArgumentError(absl::StrCat("VectorIndex::Search: ", queries.size(),
                                                   " floats is not a positive multiple of dim ", dim));
  }
  RETURN_IF_ERROR(CheckFinite(queries, "VectorIndex::Search"));
  const idx_t n = static_cast<idx_t>(queries.size() / dim);
  std::vector<std::vector<SearchHit>> results(n);

  absl::ReaderMutexLock lock(&mu_);
  const idx_t ntotal = index_->ntotal;
  if (ntotal == 0 || (allowed != nullptr && allowed->empty())) return results;
  if (!index_->is_trained) return absl::FailedPreconditionError("VectorIndex::Search: index not trained");
  omp_set_num_threads(options_.omp_threads);

  const faiss::Index* sub = index_->index;
  const auto* hnsw = dynamic_cast<const faiss::IndexHNSW*>(sub);
  const auto* ivf = dynamic_cast<const faiss::IndexIVF*>(sub);
  const bool is_ip = options_.metric == Metric::kInnerProduct;

  idx_t fetch = std::min<idx_t>(ntotal, k + static_cast<idx_t>(tombstones_.size()));
  if (allowed != nullptr) fetch = std::min<idx_t>(ntotal, std::max<idx_t>(fetch, 4 * k + tombstones_.size()));
  std::vector<float> dist;
  std::vector<idx_t> labels;
  while (true) {
    // FAISS writes every slot (-1 labels where it has fewer hits): no fill.
    dist.resize(n * fetch);
    labels.resize(n * fetch);
    faiss::SearchParametersHNSW hp;
    faiss::SearchParametersIVF ip;
    const faiss::SearchParameters* params = nullptr;
    if (hnsw != nullptr) {
      hp.efSearch = std::max<int>(options_.hnsw_ef_search, static_cast<int>(fetch));
      params = &hp;
    } else if (ivf != nullptr) {
      ip.nprobe = options_.ivf_nprobe;
      params = &ip;
    }
    RETURN_IF_ERROR(FaissCall("VectorIndex::Search", absl::StatusCode::kInternal, [&] {
      sub->search(n, queries.data(), fetch, dist.data(), labels.data(), params);
    }));
    bool short_of_k = false;
    bool skipped_any = false;  // only skipping (tombstones/filter) justifies a deeper fetch
    for (idx_t q = 0; q < n; ++q) {
      std::vector<SearchHit>& out = results[q];
      out.clear();
      out.reserve(k);
      for (idx_t j = 0; j < fetch && static_cast<int>(out.size()) < k; ++j) {
        const idx_t label = labels[q * fetch + j];
        if (label < 0 || label >= static_cast<idx_t>(index_->id_map.size())) continue;
        const int64_t id = index_->id_map[label];
        if (tombstones_.contains(id) || (allowed != nullptr && !allowed->contains(id))) {
          skipped_any = true;
          continue;
        }
        const float d = dist[q * fetch + j];
        out.push_back(SearchHit{id, is_ip ? d : -d});
      }
      if (static_cast<int>(out.size()) < k) short_of_k = true;
    }
    if (!short_of_k || !skipped_any || fetch >= ntotal) break;
    fetch = std::min<idx_t>(ntotal, fetch * 4);
  }
  return results;
}

absl::Status VectorIndex::Save(const std::string& path) const {
  internal::Encoder enc;
  enc.Raw(kMagic, sizeof(kMagic));
  enc.U32(kFormatVersion);
  enc.U32(static_cast<uint32_t>(options_.metric));
  enc.U32(static_cast<uint32_t>(options_.dim));
  enc.Bytes(options_.factory);
  {
    absl::ReaderMutexLock lock(&mu_);
    std::vector<int64_t> tomb(tombstones_.begin(), tombstones_.end());
    std::sort(tomb.begin(), tomb.end());
    enc.I64Array(tomb);
    faiss::VectorIOWriter writer;
    RETURN_IF_ERROR(FaissCall("VectorIndex::Save", absl::StatusCode::kInternal,
                              [&] { faiss::write_index(index_.get(), &writer); }));
    enc.U64(writer.data.size());
    enc.Raw(writer.data.data(), writer.data.size());
  }
  const uint64_t checksum = XXH64(enc.str().data(), enc.str().size(), 0);
  enc.U64(checksum);

  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) return absl::InternalError(absl::StrCat("VectorIndex::Save: cannot create ", tmp));
  const std::string& bytes = enc.str();
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size() && std::fflush(f) == 0 &&
                  ::fsync(fileno(f)) == 0;
  std::fclose(f);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("VectorIndex::Save: write/rename failed for ", path));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<VectorIndex>> VectorIndex::Load(const std::string& path,
                                                               VectorIndexOptions runtime) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("VectorIndex::Load: cannot open ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  auto corrupt = [&](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("VectorIndex::Load: ", path, " is corrupt: ", why));
  };
  if (data.size() < sizeof(kMagic) + 8 || data.compare(0, sizeof(kMagic), kMagic, sizeof(kMagic)) != 0) {
    return corrupt("bad magic");
  }
  uint64_t stored_sum;
  std::memcpy(&stored_sum, data.data() + data.size() - 8, 8);
  if (XXH64(data.data(), data.size() - 8, 0) != stored_sum) return corrupt("checksum mismatch");
  internal::Decoder dec(std::string_view(data).substr(sizeof(kMagic), data.size() - 8 - sizeof(kMagic)));
  uint32_t version, metric, dim;
  std::string factory;
  std::vector<int64_t> tomb;
  uint64_t payload_size;
  if (!dec.U32(&version) || !dec.U32(&metric) || !dec.U32(&dim) || !dec.Bytes(&factory) ||
      !dec.I64Array(&tomb) || !dec.U64(&payload_size)) {
    return corrupt("truncated header");
  }
  if (version != kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat("VectorIndex::Load: unsupported format version ", version));
  }
  faiss::VectorIOReader reader;
  reader.data.resize(payload_size);
  if (!dec.Raw(reader.data.data(), payload_size) || !dec.done()) return corrupt("truncated payload");
  if ((!runtime.factory.empty() && runtime.factory != factory) ||
      (runtime.dim > 0 && static_cast<uint32_t>(runtime.dim) != dim) ||
      static_cast<uint32_t>(runtime.metric) != metric) {
    return absl::FailedPreconditionError(absl::StrCat(
        "VectorIndex::Load: file holds factory '", factory, "' dim ", dim, " metric ", metric,
        ", caller expects '", runtime.factory, "' dim ", runtime.dim, " metric ",
        static_cast<int>(runtime.metric)));
  }
  faiss::Index* raw = nullptr;
  RETURN_IF_ERROR(FaissCall(absl::StrCat("VectorIndex::Load: ", path, " FAISS payload is corrupt"),
                            absl::StatusCode::kDataLoss, [&] { raw = faiss::read_index(&reader); }));
  auto* idmap = dynamic_cast<IdMap*>(raw);
  if (idmap == nullptr || idmap->d != static_cast<int>(dim)) {
    delete raw;
    return corrupt("payload is not an IndexIDMap2 of the recorded dim");
  }
  idmap->own_fields = true;
  runtime.factory = factory;
  runtime.dim = static_cast<int>(dim);
  runtime.metric = static_cast<Metric>(metric);
  if (runtime.omp_threads < 1) runtime.omp_threads = 1;
  auto index = std::unique_ptr<VectorIndex>(new VectorIndex(std::move(runtime), std::unique_ptr<IdMap>(idmap)));
  {
    absl::MutexLock lock(&index->mu_);
    index->tombstones_.insert(tomb.begin(), tomb.end());
  }
  return index;
}

int64_t VectorIndex::size() const {
  absl::ReaderMutexLock lock(&mu_);
  return index_->ntotal - static_cast<int64_t>(tombstones_.size());
}

int64_t VectorIndex::tombstones() const {
  absl::ReaderMutexLock lock(&mu_);
  return static_cast<int64_t>(tombstones_.size());
}

bool VectorIndex::Contains(int64_t id) const {
  absl::ReaderMutexLock lock(&mu_);
  return index_->rev_map.count(id) != 0 && !tombstones_.contains(id);
}

}  // namespace ragkv::retrieval
