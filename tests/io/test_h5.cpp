// RAII HDF5 handles, the HDF5 error check and the attribute helpers.
#include <gtest/gtest.h>

#include <type_traits>

#include "hpctrain/io/h5.hpp"
#include "io_test_support.hpp"

namespace io = hpctrain::io;
using io::test::TempDir;

static_assert(!std::is_copy_constructible_v<io::H5File>);
static_assert(!std::is_copy_assignable_v<io::H5Dataset>);
static_assert(std::is_nothrow_move_constructible_v<io::H5Attribute>);
static_assert(std::is_nothrow_move_assignable_v<io::H5Type>);
static_assert(std::is_nothrow_destructible_v<io::H5PropList>);

namespace {

// Number of open identifiers of all kinds in all files (leak check).
ssize_t open_objects() { return H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL); }

}  // namespace

TEST(H5Handle, MoveNullsSourceAndDestructorCloses) {
  TempDir dir;
  io::h5_quiet_errors();
  const ssize_t before = open_objects();
  {
    io::H5File a(H5Fcreate(dir.file("a.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    ASSERT_TRUE(a);
    hid_t id = a.get();
    EXPECT_EQ(open_objects(), before + 1);

    io::H5File b(std::move(a));
    EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): the moved-from state is specified
    EXPECT_EQ(a.get(), H5I_INVALID_HID);
    EXPECT_EQ(b.get(), id);

    io::H5File c;
    c = std::move(b);
    EXPECT_FALSE(b);  // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(c.get(), id);
    EXPECT_EQ(open_objects(), before + 1);

    // Move-assigning over a live handle closes the old identifier.
    io::H5File d(H5Fcreate(dir.file("d.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    EXPECT_EQ(open_objects(), before + 2);
    d = std::move(c);
    EXPECT_EQ(open_objects(), before + 1);
    EXPECT_EQ(d.get(), id);
  }
  EXPECT_EQ(open_objects(), before);
}

TEST(H5Handle, NegativeIdIsEmptyAndReleaseGivesUpOwnership) {
  io::H5Dataspace empty(-1);
  EXPECT_FALSE(empty);
  io::H5Dataspace s(H5Screate(H5S_SCALAR));
  ASSERT_TRUE(s);
  hid_t id = s.release();
  EXPECT_FALSE(s);
  EXPECT_GT(H5Iis_valid(id), 0);  // not closed by release()
  EXPECT_GE(H5Sclose(id), 0);
}

TEST(H5Check, FailureMessageNamesWhatAndHdf5Reason) {
  TempDir dir;
  const std::string missing = dir.file("missing.h5");
  try {
    HPCTRAIN_CHECK_H5(H5Fopen(missing.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT),
                      "open checkpoint '" + missing + "'");
    FAIL() << "no exception";
  } catch (const hpctrain::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("open checkpoint '" + missing + "'"), std::string::npos) << what;
    // HDF5's own reason from its error stack: the file could not be opened.
    EXPECT_NE(what.find("unable to open file"), std::string::npos) << what;
    EXPECT_NE(what.find("test_h5.cpp"), std::string::npos) << what;  // location of the check
  }
  // Not an HDF5 file: the root cause is the missing signature.
  const std::string text = dir.file("text.h5");
  io::test::write_file(text, {'h', 'e', 'l', 'l', 'o'}, false);
  try {
    HPCTRAIN_CHECK_H5(H5Fopen(text.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "open " + text);
    FAIL() << "no exception";
  } catch (const hpctrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find("file signature not found"), std::string::npos)
        << e.what();
  }
  // The error stack is cleared: a later successful call reports nothing stale.
  EXPECT_EQ(io::h5_error_stack_message(), "");
}

TEST(H5Check, ReturnsTheValueOnSuccess) {
  hid_t id = HPCTRAIN_CHECK_H5(H5Screate(H5S_SCALAR), "create");
  io::H5Dataspace s(id);
  EXPECT_GE(id, 0);
  bool evaluated = false;
  auto what = [&] {
    evaluated = true;
    return std::string("x");
  };
  HPCTRAIN_CHECK_H5(H5Sget_simple_extent_ndims(s.get()), what());
  EXPECT_FALSE(evaluated) << "the message must be built only on failure";
}

TEST(H5Helpers, ExistsWalksPathComponents) {
  TempDir dir;
  io::H5File f(H5Fcreate(dir.file("g.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  io::H5Group g(H5Gcreate2(f.get(), "/a", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  io::H5Group g2(H5Gcreate2(f.get(), "/a/b", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  EXPECT_TRUE(io::h5_exists(f.get(), "/a"));
  EXPECT_TRUE(io::h5_exists(f.get(), "/a/b"));
  EXPECT_FALSE(io::h5_exists(f.get(), "/a/c"));
  EXPECT_FALSE(io::h5_exists(f.get(), "/x/y/z"));  // missing parent: "no", not an error
}

TEST(H5Helpers, AttributesRoundTrip) {
  TempDir dir;
  io::H5File f(H5Fcreate(dir.file("a.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  const hid_t root = f.get();
  io::h5_write_attribute(root, "i", std::int64_t{-42});
  io::h5_write_attribute(root, "d", 0.25);
  io::h5_write_attribute(root, "v", std::vector<std::int64_t>{1, 28, 28});
  io::h5_write_attribute(root, "s", std::string("héllo"));
  io::h5_write_attribute(root, "sv", std::vector<std::string>{"a", "", "T-shirt/top"});
  io::h5_write_attribute(root, "i", std::int64_t{7});  // replaces

  EXPECT_EQ(io::h5_read_int_attribute(root, "i", "f"), 7);
  EXPECT_EQ(io::h5_read_double_attribute(root, "d", "f"), 0.25);
  EXPECT_EQ(io::h5_read_double_attribute(root, "i", "f"), 7.0);
  EXPECT_EQ(io::h5_read_int_array_attribute(root, "v", "f"), (std::vector<std::int64_t>{1, 28, 28}));
  EXPECT_EQ(io::h5_read_string_attribute(root, "s", "f"), "héllo");
  EXPECT_EQ(io::h5_read_string_array_attribute(root, "sv", "f"),
            (std::vector<std::string>{"a", "", "T-shirt/top"}));
  EXPECT_TRUE(io::h5_has_attribute(root, "sv"));
  EXPECT_FALSE(io::h5_has_attribute(root, "nope"));

  try {
    io::h5_read_int_attribute(root, "nope", "data set 'x.h5'");
    FAIL() << "no exception";
  } catch (const hpctrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find("data set 'x.h5': attribute 'nope' is missing"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(io::h5_read_int_attribute(root, "s", "f"), hpctrain::Error);  // a string
  EXPECT_THROW(io::h5_read_int_attribute(root, "v", "f"), hpctrain::Error);  // not one value
}
