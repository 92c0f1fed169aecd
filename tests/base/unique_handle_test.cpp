// UniqueHandle: the shape every library handle takes (STYLE.md rule 4), checked with a fake
// library that counts what it frees and can be switched "down".
#include "hpctrain/base/unique_handle.hpp"

#include <gtest/gtest.h>

#include <type_traits>
#include <utility>
#include <vector>

namespace {

struct FakeLibrary {
  static inline bool up = true;
  static inline std::vector<int> freed;
};

struct FakeTraits {
  using handle_type = int;
  int owner = 0;  // state that moves with the handle (as the UCX context of a registration)
  static handle_type null() noexcept { return -1; }
  static bool is_null(handle_type h) noexcept { return h < 0; }
  static bool library_up() noexcept { return FakeLibrary::up; }
  void free(handle_type h) const noexcept { FakeLibrary::freed.push_back(h * 100 + owner); }
};
using FakeHandle = hpctrain::UniqueHandle<FakeTraits>;

static_assert(!std::is_copy_constructible_v<FakeHandle>);
static_assert(!std::is_copy_assignable_v<FakeHandle>);
static_assert(std::is_nothrow_move_constructible_v<FakeHandle>);
static_assert(std::is_nothrow_move_assignable_v<FakeHandle>);
static_assert(std::is_nothrow_destructible_v<FakeHandle>);

class UniqueHandleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeLibrary::up = true;
    FakeLibrary::freed.clear();
  }
  void TearDown() override { FakeLibrary::up = true; }
};

TEST_F(UniqueHandleTest, DestructorFreesOnceWithTheTraitsState) {
  { FakeHandle h(7, FakeTraits{3}); }
  EXPECT_EQ(FakeLibrary::freed, std::vector<int>{703});
}

TEST_F(UniqueHandleTest, MoveNullsTheSourceAndTheStateMovesAlong) {
  {
    FakeHandle a(5, FakeTraits{1});
    FakeHandle b(std::move(a));
    EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): the contract under test
    EXPECT_EQ(a.get(), -1);
    EXPECT_TRUE(b);
    EXPECT_EQ(b.get(), 5);
    FakeHandle c(9, FakeTraits{2});
    c = std::move(b);  // frees c's own handle first
    EXPECT_EQ(FakeLibrary::freed, std::vector<int>{902});
    EXPECT_FALSE(b);  // NOLINT(bugprone-use-after-move)
  }
  EXPECT_EQ(FakeLibrary::freed, (std::vector<int>{902, 501}));
}

TEST_F(UniqueHandleTest, NothingIsFreedWhileTheLibraryIsDown) {
  {
    FakeHandle h(4);
    FakeLibrary::up = false;
  }
  EXPECT_TRUE(FakeLibrary::freed.empty());
}

TEST_F(UniqueHandleTest, EmptyValuesAreNormalisedAndNeverFreed) {
  {
    FakeHandle empty(-42);
    EXPECT_FALSE(empty);
    EXPECT_EQ(empty.get(), -1);
    FakeHandle defaulted;
    EXPECT_FALSE(defaulted);
  }
  EXPECT_TRUE(FakeLibrary::freed.empty());
}

TEST_F(UniqueHandleTest, ReleaseGivesUpOwnershipAndResetFreesNow) {
  FakeHandle a(6);
  EXPECT_EQ(a.release(), 6);
  EXPECT_FALSE(a);
  FakeHandle b(8);
  b.reset();
  EXPECT_FALSE(b);
  EXPECT_EQ(FakeLibrary::freed, std::vector<int>{800});
}

}  // namespace
