#include "retrieval/internal/text.h"

#include <algorithm>

#include <xxhash.h>

#include "absl/strings/str_cat.h"

namespace ragkv::retrieval::internal {

absl::Status ValidateUtf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("invalid UTF-8: bad lead byte at offset ", i));
    }
    if (i + len > n) {
      return absl::InvalidArgumentError(absl::StrCat("invalid UTF-8: truncated sequence at offset ", i));
    }
    for (size_t j = 1; j < len; ++j) {
      if ((s[i + j] & 0xC0) != 0x80) {
        return absl::InvalidArgumentError(
            absl::StrCat("invalid UTF-8: bad continuation byte at offset ", i + j));
      }
      cp = (cp << 6) | (s[i + j] & 0x3F);
    }
    const bool overlong = (len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) ||
                          (len == 4 && cp < 0x10000);
    if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid UTF-8: overlong or out-of-range code point at offset ", i));
    }
    i += len;
  }
  return absl::OkStatus();
}

bool LooksBinary(std::string_view text) {
  if (text.find('\0') != std::string_view::npos) return true;
  const size_t n = std::min<size_t>(text.size(), 64 * 1024);
  size_t ctrl = 0;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v') || c == 0x7F) {
      ++ctrl;
    }
  }
  return n > 0 && ctrl * 10 > n;
}

namespace {
// Lowercase ASCII spelling of U+00C0..U+017F (Latin-1 Supplement letters and
// Latin Extended-A), "" where none (the multiplication/division signs): the
// Unicode NFKD decomposition without combining marks, plus the usual
// transliterations for letters that do not decompose (ss, ae, oe, o, l, d,
// th, ng). Generated from Python's unicodedata.
constexpr const char* kLatinFold[0x180 - 0xC0] = {
    "a", "a", "a", "a", "a", "a", "ae", "c", "e", "e", "e", "e",
    "i", "i", "i", "i", "d", "n", "o", "o", "o", "o", "o", "",
    "o", "u", "u", "u", "u", "y", "th", "ss", "a", "a", "a", "a",
    "a", "a", "ae", "c", "e", "e", "e", "e", "i", "i", "i", "i",
    "d", "n", "o", "o", "o", "o", "o", "", "o", "u", "u", "u",
    "u", "y", "th", "y", "a", "a", "a", "a", "a", "a", "c", "c",
    "c", "c", "c", "c", "c", "c", "d", "d", "d", "d", "e", "e",
    "e", "e", "e", "e", "e", "e", "e", "e", "g", "g", "g", "g",
    "g", "g", "g", "g", "h", "h", "h", "h", "i", "i", "i", "i",
    "i", "i", "i", "i", "i", "i", "ij", "ij", "j", "j", "k", "k",
    "k", "l", "l", "l", "l", "l", "l", "l", "l", "l", "l", "n",
    "n", "n", "n", "n", "n", "n", "ng", "ng", "o", "o", "o", "o",
    "o", "o", "oe", "oe", "r", "r", "r", "r", "r", "r", "s", "s",
    "s", "s", "s", "s", "s", "s", "t", "t", "t", "t", "t", "t",
    "u", "u", "u", "u", "u", "u", "u", "u", "u", "u", "u", "u",
    "w", "w", "y", "y", "y", "z", "z", "z", "z", "z", "z", "s"};
}  // namespace

std::string_view FoldLatin(uint32_t code_point) {
  if (code_point < 0xC0 || code_point >= 0x180) return {};
  return kLatinFold[code_point - 0xC0];
}

namespace {
// ForEachWord: calls `emit(word)` for each AnalyzeWords word, in order. The
// word is a buffer reused between calls (valid only during the call).
template <typename Emit>
void ForEachWord(std::string_view text, Emit&& emit) {
  std::string cur;
  const size_t n = text.size();
  for (size_t i = 0; i < n; ++i) {
    const char ch = text[i];
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c >= 0xC3 && c <= 0xC5 && i + 1 < n &&
        (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80) {
      // A two-byte UTF-8 sequence in U+00C0..U+017F: fold accented Latin
      // letters to ASCII ("São" -> "sao"), keep anything else as bytes.
      const uint32_t cp = ((c & 0x1Fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3Fu);
      const std::string_view folded = FoldLatin(cp);
      if (!folded.empty()) {
        cur.append(folded);
      } else {
        cur.push_back(ch);
        cur.push_back(text[i + 1]);
      }
      ++i;
    } else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c >= 0x80) {
      cur.push_back(ch);
    } else if (c >= 'A' && c <= 'Z') {
      cur.push_back(static_cast<char>(c - 'A' + 'a'));
    } else if (!cur.empty()) {
      emit(cur);
      cur.clear();
    }
  }
  if (!cur.empty()) emit(cur);
}
}  // namespace

std::vector<std::string> AnalyzeWords(std::string_view text) {
  std::vector<std::string> words;
  ForEachWord(text, [&](std::string& w) { words.push_back(std::move(w)); });
  return words;
}

std::vector<uint64_t> WordShingles(std::string_view text, int n) {
  // Hash each word once; a shingle is the xxh3 of its n word hashes.
  std::vector<uint64_t> word_hashes;
  ForEachWord(text, [&](const std::string& w) { word_hashes.push_back(XXH3_64bits(w.data(), w.size())); });
  std::vector<uint64_t> out;
  if (word_hashes.empty() || n < 1) return out;
  const size_t w = std::min<size_t>(static_cast<size_t>(n), word_hashes.size());
  out.reserve(word_hashes.size() - w + 1);
  for (size_t i = 0; i + w <= word_hashes.size(); ++i) {
    out.push_back(XXH3_64bits(word_hashes.data() + i, w * sizeof(uint64_t)));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

double ShingleContainment(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  if (a.empty() || b.empty()) return 0;
  size_t i = 0, j = 0, common = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] < b[j]) {
      ++i;
    } else if (b[j] < a[i]) {
      ++j;
    } else {
      ++common;
      ++i;
      ++j;
    }
  }
  return static_cast<double>(common) / static_cast<double>(std::min(a.size(), b.size()));
}

bool ContainmentExceeds(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b,
                        double threshold) {
  if (threshold < 0) return true;     // c / m >= 0 (0 for an empty set)
  if (!(threshold < 1)) return false;  // c / m <= 1 (NaN: never exceeded)
  if (a.empty() || b.empty()) return false;
  // need: the fewest shared shingles c with c / m > threshold, evaluated as
  // ShingleContainment evaluates it (c / m is monotone in c).
  const size_t m = std::min(a.size(), b.size());
  auto exceeds = [&](size_t c) { return static_cast<double>(c) / static_cast<double>(m) > threshold; };
  size_t need = static_cast<size_t>(threshold * static_cast<double>(m));
  while (need > 0 && exceeds(need - 1)) --need;
  while (!exceeds(need)) ++need;  // ends by m at the latest (threshold < 1)
  size_t i = 0, j = 0, common = 0;
  while (i < a.size() && j < b.size()) {
    if (common >= need) return true;
    if (common + std::min(a.size() - i, b.size() - j) < need) return false;
    if (a[i] < b[j]) {
      ++i;
    } else if (b[j] < a[i]) {
      ++j;
    } else {
      ++common, ++i, ++j;
    }
  }
  return common >= need;
}

namespace {
bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
}  // namespace

std::vector<WordSpan> SplitWords(std::string_view text) {
  std::vector<WordSpan> words;
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    while (i < n && IsSpace(text[i])) ++i;
    if (i >= n) break;
    WordSpan w;
    w.begin = i;
    while (i < n && !IsSpace(text[i])) ++i;
    w.end = i;
    // Sentence end: last non-quote char is . ! ?
    size_t e = w.end;
    while (e > w.begin && (text[e - 1] == '"' || text[e - 1] == '\'' || text[e - 1] == ')')) --e;
    w.ends_sentence = e > w.begin && (text[e - 1] == '.' || text[e - 1] == '!' || text[e - 1] == '?');
    // Paragraph end: two newlines before the next word, or end of text.
    size_t j = i;
    int newlines = 0;
    while (j < n && IsSpace(text[j])) {
      if (text[j] == '\n') ++newlines;
      ++j;
    }
    w.ends_paragraph = (j >= n) || newlines >= 2;
    words.push_back(w);
  }
  return words;
}

size_t Utf8PrefixLength(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return s.size();
  size_t len = max_bytes;
  while (len > 0 && (static_cast<unsigned char>(s[len]) & 0xC0) == 0x80) --len;
  if (len == 0) {
    // A single code point longer than max_bytes: take it whole.
    len = 1;
    while (len < s.size() && (static_cast<unsigned char>(s[len]) & 0xC0) == 0x80) ++len;
  }
  return len;
}

}  // namespace ragkv::retrieval::internal
