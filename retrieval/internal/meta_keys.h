// meta_keys.h: the keys of the retrieval catalogue's meta records (docs/
// retrieval.md "Persistence"): the settings a directory was built with and
// its counters. Private to retrieval/.
#ifndef RAGKV_RETRIEVAL_INTERNAL_META_KEYS_H_
#define RAGKV_RETRIEVAL_INTERNAL_META_KEYS_H_

namespace ragkv::retrieval::internal::meta {

inline constexpr char kFormatVersion[] = "1";
inline constexpr char kMetaFormat[] = "format_version";
inline constexpr char kMetaTokenizer[] = "tokenizer";
inline constexpr char kMetaEmbedder[] = "embedder";
inline constexpr char kMetaChunker[] = "chunker";
inline constexpr char kMetaIndex[] = "index";
inline constexpr char kMetaNextChunkId[] = "next_chunk_id";
inline constexpr char kMetaGeneration[] = "generation";
inline constexpr char kMetaIndexGeneration[] = "index_generation";
// The embedder a re-embed is writing vectors of ("" or absent: none under
// way): set with the first re-embedded batch, cleared with the last.
inline constexpr char kMetaReembedTarget[] = "reembed_target";

}  // namespace ragkv::retrieval::internal::meta

#endif  // RAGKV_RETRIEVAL_INTERNAL_META_KEYS_H_
