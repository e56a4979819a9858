// internal/text.h: text utilities shared by the chunker, embedders and BM25.
// Pure functions, thread-safe.
#ifndef RAGKV_RETRIEVAL_INTERNAL_TEXT_H_
#define RAGKV_RETRIEVAL_INTERNAL_TEXT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace ragkv::retrieval::internal {

// ValidateUtf8: OK when `text` is well-formed UTF-8 (no overlongs, no
// surrogates, <= U+10FFFF); InvalidArgument naming the first bad byte offset.
absl::Status ValidateUtf8(std::string_view text);

// LooksBinary: true when `text` holds a NUL byte or more than 10% (of the
// first 64 KiB) control bytes other than \t \n \r \f \v.
bool LooksBinary(std::string_view text);

// FoldLatin: the lowercase ASCII spelling of an accented Latin letter in
// U+00C0..U+017F ("a" for U+00E3, "ss" for U+00DF); empty for any other code
// point or one without a letter spelling (U+00D7, U+00F7).
std::string_view FoldLatin(uint32_t code_point);

// AnalyzeWords: the lowercase ASCII-alphanumeric words of `text` (every other
// ASCII byte is a separator; non-ASCII bytes stay inside words). Accented
// Latin letters (U+00C0..U+017F, two-byte UTF-8) are folded by FoldLatin, so
// "São José" and "sao jose" give the same words. This is the one word
// analyzer of BM25 and the hashed embedder, so their terms agree.
std::vector<std::string> AnalyzeWords(std::string_view text);

// WordShingles: the sorted, distinct 64-bit hashes (xxh3) of every run of
// `n` consecutive AnalyzeWords words of `text` (w-shingling, Broder 1997);
// a text with fewer than n words (but at least one) gives one shingle of all
// its words; no words gives none. n must be >= 1.
std::vector<uint64_t> WordShingles(std::string_view text, int n);

// ShingleContainment: |a ∩ b| / min(|a|, |b|) for sorted distinct shingle
// sets, in [0, 1]; 0 when either is empty. 1 means one text's shingles are
// all in the other (e.g. a chunk that is a window of another).
double ShingleContainment(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b);

// ContainmentExceeds: ShingleContainment(a, b) > threshold, leaving the
// merge as soon as the answer is known (enough shared shingles found, or too
// few left to find). Distinct texts, the common case, exit early.
bool ContainmentExceeds(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b,
                        double threshold);

// WordSpan: a whitespace-delimited word [begin, end) in bytes, plus flags the
// chunker uses to prefer good cut points after it.
struct WordSpan {
  size_t begin = 0;
  size_t end = 0;
  bool ends_sentence = false;   // word ends with . ! ? (optionally quoted)
  bool ends_paragraph = false;  // followed by a blank line or end of text
};

// SplitWords: the whitespace-delimited words of `text` in order.
std::vector<WordSpan> SplitWords(std::string_view text);

// Utf8PrefixLength: the longest prefix of `s` no longer than `max_bytes`
// that does not end inside a UTF-8 sequence (at least 1 byte when s is non-empty).
size_t Utf8PrefixLength(std::string_view s, size_t max_bytes);

}  // namespace ragkv::retrieval::internal

#endif  // RAGKV_RETRIEVAL_INTERNAL_TEXT_H_
