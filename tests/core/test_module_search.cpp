// Finding the functions of a loaded module (util/module_search.h), on this program itself:
// dlopen(nullptr) is its handle, and libc's functions are found through it.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <string>

#include "util/module_search.h"

namespace ddp_embed {
namespace {

TEST(ModuleSearch, ResolvesATableOfSymbolsAndNamesTheMissingOne) {
  void* self = dlopen(nullptr, RTLD_NOW);
  ASSERT_NE(self, nullptr);
  size_t (*length)(const char*) = nullptr;
  int (*pid)() = nullptr;
  EXPECT_EQ(resolve_symbols(self, "this program", {{"strlen", length}, {"getpid", pid}}), "");
  ASSERT_NE(length, nullptr);
  EXPECT_EQ(length("abc"), 3u);
  EXPECT_EQ(pid(), getpid());

  int (*missing)() = nullptr;
  EXPECT_EQ(resolve_symbols(self, "this program", {{"strlen", length}, {"ddp_embed_no_such_function", missing}}),
            "this program has no symbol ddp_embed_no_such_function");
  EXPECT_EQ(missing, nullptr);
}

TEST(ModuleSearch, ChecksTheApiVersionFirst) {
  void* self = dlopen(nullptr, RTLD_NOW);
  ASSERT_NE(self, nullptr);
  const int version = getpid();  // an int function that this program exports: getpid
  EXPECT_EQ(check_api_version(self, "this program", "getpid", version), "");
  EXPECT_EQ(check_api_version(self, "this program", "getpid", version + 1),
            "this program has API version " + std::to_string(version) + ", expected " + std::to_string(version + 1) +
                " (a stale build?)");
  EXPECT_EQ(check_api_version(self, "this program", "ddp_embed_no_api_version", 1),
            "this program has no symbol ddp_embed_no_api_version");
}

}  // namespace
}  // namespace ddp_embed
