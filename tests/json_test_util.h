// The CLI's --json output in tests: parsed with nlohmann's ordered_json, so
// that the keys keep the order the command wrote them in.
#ifndef OPT4STORE_TESTS_JSON_TEST_UTIL_H_
#define OPT4STORE_TESTS_JSON_TEST_UTIL_H_

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace opt4store_test {

using Json = nlohmann::ordered_json;

// A command's --json output: one JSON object on one line.
inline Json ParseJson(const std::string& text) {
  INFO(text);
  REQUIRE(!text.empty());
  REQUIRE(text.back() == '\n');
  REQUIRE(text.find('\n') == text.size() - 1);
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  REQUIRE_FALSE(json.is_discarded());
  REQUIRE(json.is_object());
  return json;
}

// The keys of a JSON object, in order.
inline std::vector<std::string> KeysOf(const Json& object) {
  std::vector<std::string> keys;
  for (const auto& item : object.items()) keys.push_back(item.key());
  return keys;
}

}  // namespace opt4store_test

#endif  // OPT4STORE_TESTS_JSON_TEST_UTIL_H_
