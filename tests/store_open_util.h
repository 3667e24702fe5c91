// store_open_util.h: opening a Store in a test's own process, asserting
// that it opened (Catch2). store_test_util.h holds what forked children use
// too, and asserts nothing.
#ifndef OPT4STORE_TESTS_STORE_OPEN_UTIL_H_
#define OPT4STORE_TESTS_STORE_OPEN_UTIL_H_

#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "opt4store/status.h"
#include "opt4store/store.h"
#include "opt4store/store_options.h"

namespace opt4store_test {

// Store::Open, or the test stops with the status.
inline std::unique_ptr<opt4store::Store> OpenStore(const opt4store::StoreOptions& options,
                                                   const std::string& path) {
  std::unique_ptr<opt4store::Store> store;
  const opt4store::Status s = opt4store::Store::Open(options, path, &store);
  INFO("Store::Open(" << path << "): " << s.ToString());
  REQUIRE(s.ok());
  REQUIRE(store != nullptr);
  return store;
}

}  // namespace opt4store_test

#endif  // OPT4STORE_TESTS_STORE_OPEN_UTIL_H_
