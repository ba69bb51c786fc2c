// open_first_library (core/shared_library.h), which loads cuBLAS and
// cuBLASLt on first use: the first candidate that loads wins, and when none
// does the error names every candidate's reason (dlerror() gives each message
// once: reading it twice used to format a null pointer).
#include <gtest/gtest.h>

#include <string>

#include "core/shared_library.h"

namespace occ {
namespace {

TEST(SharedLibrary, NoCandidateLoadsAndEveryReasonIsKept) {
  const LoadedLibrary l = open_first_library({"libocc-absent-one.so.13", "/nonexistent/libocc-absent-two.so"});
  EXPECT_EQ(l.handle, nullptr);
  EXPECT_NE(l.why_not.find("libocc-absent-one.so.13"), std::string::npos) << l.why_not;
  EXPECT_NE(l.why_not.find("/nonexistent/libocc-absent-two.so"), std::string::npos) << l.why_not;
  EXPECT_NE(l.why_not.find("; "), std::string::npos) << l.why_not;
  EXPECT_EQ(open_first_library({}).why_not, "no library to load");
}

TEST(SharedLibrary, TheFirstThatLoadsWins) {
  const LoadedLibrary l = open_first_library({"libocc-absent.so", "libm.so.6", "libc.so.6"});
  ASSERT_NE(l.handle, nullptr) << l.why_not;
  EXPECT_TRUE(l.why_not.empty()) << l.why_not;
  EXPECT_NE(dlsym(l.handle, "cos"), nullptr);
  dlclose(l.handle);
}

}  // namespace
}  // namespace occ
