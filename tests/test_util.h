// test_util.h: small helpers shared by the engine's Catch2 tests: a scratch
// directory that cleans up after itself, byte-exact file writers, and a
// matcher for "this error message names line 7 / offset 28".
//
// Header-only; nothing here depends on the engine's implementation.
#ifndef OPT4STORE_TESTS_TEST_UTIL_H_
#define OPT4STORE_TESTS_TEST_UTIL_H_

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

namespace opt4store_test {

// A fresh directory under /tmp, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = "/tmp/opt4store_test_XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

  // Names of the entries in the directory, sorted.
  std::vector<std::string> List() const {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(path_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  std::string path_;
};

inline void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline bool FileExists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::exists(path, ec);
}

// Little- and big-endian encodings, byte by byte.
inline std::string LE(uint64_t v, int width) {
  std::string s;
  for (int i = 0; i < width; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  return s;
}
inline std::string BE(uint64_t v, int width) {
  std::string s;
  for (int i = width - 1; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  return s;
}

// True when `text`, after every occurrence of each string in `strip` is
// removed (e.g. a temp path that may contain digits), contains `n` as a whole
// decimal number (not as part of a longer run of digits).
inline bool NamesNumber(std::string text, uint64_t n, const std::vector<std::string>& strip = {}) {
  for (const std::string& s : strip) {
    if (s.empty()) continue;
    for (size_t at; (at = text.find(s)) != std::string::npos;) text.erase(at, s.size());
  }
  const std::string needle = std::to_string(n);
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    const bool digit_before = at > 0 && std::isdigit(static_cast<unsigned char>(text[at - 1]));
    const size_t end = at + needle.size();
    const bool digit_after =
        end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]));
    if (!digit_before && !digit_after) return true;
  }
  return false;
}

inline std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// True when the lower-cased text contains any of the (lower-case) words.
inline bool MentionsAny(const std::string& text, const std::vector<std::string>& words) {
  const std::string low = Lower(text);
  for (const std::string& w : words) {
    if (low.find(w) != std::string::npos) return true;
  }
  return false;
}

}  // namespace opt4store_test

#endif  // OPT4STORE_TESTS_TEST_UTIL_H_
